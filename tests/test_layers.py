"""The package's shape, checked on its source: layers, import cycles, sizes, dialects.

The layers, bottom to top, are listed below. An import points down, or sideways within its own
package. The modules at the top of the package count as one package per layer.

1. errors, model, settings, codings, jsontext, lines, locks, logs, metrics
2. rules, door, atom
3. store, archive
4. service
5. app, client, producer, outbox (the client imports nothing of layers 3 to 5)
6. runtime
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "simplefeed"
#: The database's libraries. Only simplefeed.store imports them. The consumer keeps its state
#: in a SQLite file of its own (simplefeed/client/state.py), not in the service's store. The
#: outbox (simplefeed/outbox.py) lives in the producer app's database, not the service's.
DATABASE_LIBRARIES = ("sqlalchemy", "psycopg", "sqlite3")
#: Each part of the package by its first name under ``simplefeed``, and its layer.
LAYERS = {
    "": 1,  # The version, in simplefeed/__init__.py.
    "errors": 1,
    "model": 1,
    "settings": 1,
    "codings": 1,
    "jsontext": 1,
    "lines": 1,
    "locks": 1,
    "logs": 1,
    "metrics": 1,
    "rules": 2,
    "door": 2,
    "atom": 2,
    "store": 3,
    "archive": 3,
    "service": 4,
    "app": 5,
    "client": 5,
    "producer": 5,
    "outbox": 5,
    "runtime": 6,
}
#: The most modules at the top of the package, its __init__.py included.
MAX_TOP_MODULES = 12
MAX_FUNCTION_LINES = 60
MOST_FUNCTION_LINES = 100
MAX_LONG_FUNCTIONS = 5
MAX_CLASS_LINES = 500
MAX_MODULE_LINES = 800
#: The only modules that know a database dialect: the store's, and the outbox (the producer
#: app's database, whose one door it is).
DIALECT_MODULES = (
    "simplefeed/store/sqlite.py",
    "simplefeed/store/postgres.py",
    "simplefeed/outbox.py",
)
#: The modules that use a database other than the service's store.
OTHER_DATABASES = (PACKAGE / "client", PACKAGE / "outbox.py")
#: A database dialect's name, or a database URL's scheme.
DIALECT = re.compile(r"(sqlite|postgres|postgresql|psycopg)(\+\w+)?(:.*)?\Z", re.IGNORECASE | re.S)


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules() -> dict[str, Path]:
    """Return every module of the package by its dotted name, and a package by its own."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_edges(known: dict[str, Path]) -> dict[str, set[str]]:
    """Return which of the package's modules each module imports, anywhere in it.

    ``from simplefeed.door import xml`` imports the module ``simplefeed.door.xml``. Imports
    inside functions and under ``TYPE_CHECKING`` count.
    """
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.split(".")[0] == "simplefeed")
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] != "simplefeed":
                    continue
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    out.add(sub if sub in known else node.module)
        edges[name] = {target for target in out if target != name}
    return edges


def part(module: str) -> str:
    """Return the part of the package a module belongs to, its first name under ``simplefeed``."""
    names = module.split(".")
    return names[1] if len(names) > 1 else ""


def top_level(module: str) -> bool:
    return (PACKAGE / f"{part(module)}.py").exists() or module == "simplefeed"


def layer_problem(source: str, target: str) -> str | None:
    """Return why ``source`` may not import ``target``, or None."""
    low, high = LAYERS[part(target)], LAYERS[part(source)]
    if part(source) == "client" and part(target) != "client" and low >= 3:
        return f"{source} imports {target}: the client imports nothing of layers 3 to 5"
    if low < high or part(source) == part(target):
        return None
    if low == high and top_level(source) and top_level(target):
        return None
    where = "above it" if low > high else "beside it, in another package"
    return f"{source} (layer {high}) imports {target} (layer {low}), {where}"


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {part(m) for m in modules()} - LAYERS.keys() == set()


def test_imports_point_down_the_layers() -> None:
    known = modules()
    edges = import_edges(known)
    assert len(edges) > 50
    problems = [
        problem
        for source, targets in sorted(edges.items())
        for target in sorted(targets)
        if (problem := layer_problem(source, target)) is not None
    ]
    assert problems == []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Return the import cycles of ``edges``: its strongly connected parts of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm. The package is shallow enough.
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    edges = import_edges(modules())
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles(edges) == []


def test_at_most_a_dozen_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def definitions(kind: type[ast.AST] | tuple[type[ast.AST], ...]) -> Iterator[tuple[str, int]]:
    """Yield each definition of ``kind`` in the package: where it is, and its length in lines."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, kind):
                assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                yield where, (node.end_lineno or node.lineno) - node.lineno + 1


def test_functions_are_short() -> None:
    lengths = dict(definitions((ast.FunctionDef, ast.AsyncFunctionDef)))
    assert len(lengths) > 500
    long = {where: n for where, n in lengths.items() if n > MAX_FUNCTION_LINES}
    assert len(long) <= MAX_LONG_FUNCTIONS, long
    assert {where: n for where, n in long.items() if n > MOST_FUNCTION_LINES} == {}


def test_publish_reads_in_a_minute() -> None:
    """Every guarantee of an append lives in publish, so it stays short."""
    lengths = dict(definitions((ast.FunctionDef,)))
    publish = {
        where: n
        for where, n in lengths.items()
        if where.startswith("simplefeed/service/") and where.endswith(" publish")
    }
    assert publish
    assert {where: n for where, n in publish.items() if n > MAX_FUNCTION_LINES} == {}


def test_classes_and_modules_are_short() -> None:
    classes = dict(definitions(ast.ClassDef))
    assert {where: n for where, n in classes.items() if n > MAX_CLASS_LINES} == {}
    lines = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")
    }
    assert {path: n for path, n in lines.items() if n > MAX_MODULE_LINES} == {}


def dialect_knowledge(path: Path) -> list[str]:
    """Return where a module compares database dialects.

    That is where it compares or matches a dialect's name or a database URL's scheme. It is
    also where it asks SQLAlchemy for a dialect's name, or imports a driver.
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        named: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            named = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get_backend_name", "get_dialect", "get_driver_name"):
                found.append(f"{node.lineno}: {node.func.attr}()")
            named = list(node.args)
        elif isinstance(node, ast.Attribute) and node.attr == "drivername":
            found.append(f"{node.lineno}: .drivername")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names.append(node.module)
            found += [f"{node.lineno}: imports {n}" for n in names if n.split(".")[0] in DRIVERS]
        for expr in named:
            for constant in ast.walk(expr):
                value = constant.value if isinstance(constant, ast.Constant) else None
                if isinstance(value, str) and DIALECT.match(value):
                    found.append(f"{node.lineno}: {value!r}")
    return found


#: The database drivers: a module that imports one knows its dialect.
DRIVERS = ("sqlite3", "psycopg", "psycopg2")


def test_only_the_dialect_modules_know_a_dialect() -> None:
    """Only the dialect modules know a dialect.

    The consumer's state file is a SQLite file of its own, not the service's database.
    """
    assert dialect_knowledge(ROOT / DIALECT_MODULES[1])  # The check sees them.
    found = {
        str(p.relative_to(ROOT)): dialect_knowledge(p)
        for p in PACKAGE.rglob("*.py")
        if str(p.relative_to(ROOT)) not in DIALECT_MODULES
        and not p.is_relative_to(PACKAGE / "client")
    }
    assert {path: where for path, where in found.items() if where} == {}


def test_only_the_store_touches_the_database() -> None:
    outside = [
        p
        for p in PACKAGE.rglob("*.py")
        if not p.is_relative_to(PACKAGE / "store")
        and not any(p.is_relative_to(other) for other in OTHER_DATABASES)
    ]
    assert len(outside) > 10
    found = {
        str(p.relative_to(ROOT)): sorted(
            name for name in imported(p) if name.split(".")[0] in DATABASE_LIBRARIES
        )
        for p in outside
    }
    assert {path: names for path, names in found.items() if names} == {}
    # ... and from the store, only its interface and its factory, no table and no backend.
    store_internals = {
        str(p.relative_to(ROOT)): sorted(
            name
            for name in imported(p)
            if name.startswith("simplefeed.store.") and name != "simplefeed.store.interface"
        )
        for p in outside
    }
    assert {path: names for path, names in store_internals.items() if names} == {}


def test_benchmarks_do_not_import_the_tests() -> None:
    """The benchmarks do not import the tests.

    bench/ and tests/ share their server code through bench/servers.py.
    """
    found = {
        str(p.relative_to(ROOT)): sorted(n for n in imported(p) if n.split(".")[0] == "tests")
        for p in (ROOT / "bench").glob("*.py")
    }
    assert len(found) > 3
    assert {path: names for path, names in found.items() if names} == {}
