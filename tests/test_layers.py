"""The layers as docs/explanation/architecture.md draws them, checked on the imports themselves."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "simplefeed"
#: The database's libraries: only simplefeed.store imports them. (The consumer keeps its own
#: state in a SQLite file of its own, simplefeed/client/state.py: not the service's store.)
DATABASE_LIBRARIES = ("sqlalchemy", "psycopg", "sqlite3")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_store_touches_the_database() -> None:
    outside = [
        p
        for p in PACKAGE.rglob("*.py")
        if not p.is_relative_to(PACKAGE / "store") and not p.is_relative_to(PACKAGE / "client")
    ]
    assert len(outside) > 10
    found = {
        str(p.relative_to(ROOT)): sorted(
            name for name in imported(p) if name.split(".")[0] in DATABASE_LIBRARIES
        )
        for p in outside
    }
    assert {path: names for path, names in found.items() if names} == {}
    # ... and from the store, only its interface and its factory: no table, no backend.
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
    """bench/ and tests/ share their server helpers through bench/servers.py."""
    found = {
        str(p.relative_to(ROOT)): sorted(n for n in imported(p) if n.split(".")[0] == "tests")
        for p in (ROOT / "bench").glob("*.py")
    }
    assert len(found) > 3
    assert {path: names for path, names in found.items() if names} == {}
