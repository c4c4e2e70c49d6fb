"""The README's settings table names every ``SIMPLEFEED_*`` variable the service reads, and
nothing else: ``SIMPLEFEED_UWSGI_SOCKET`` (read by ``uwsgi.ini``, declared in
:mod:`simplefeed.settings`) was missing from it, found only in the nginx notes (a newcomer's
trial)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from simplefeed.settings import UWSGI_VARIABLES, Settings

ROOT = Path(__file__).resolve().parent.parent


class _Recording(Mapping[str, str]):
    """An empty environment that notes every name looked up in it."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        raise KeyError(name)

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(name)
        return default

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.asked.add(name)
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def read_by_settings() -> set[str]:
    """What :meth:`Settings.from_env` looks up, with the variables ``uwsgi.ini`` reads that the
    settings module declares (:data:`UWSGI_VARIABLES`)."""
    environ = _Recording()
    Settings.from_env(environ)
    return environ.asked | set(UWSGI_VARIABLES)


def readme_table() -> set[str]:
    """The variables the first column of the README's "Configuration (environment)" table
    names."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Configuration (environment)") :]
    lines = section.splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:  # after the header and the |---| line
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    names: set[str] = set()
    for first in rows:
        cells = re.findall(r"`([^`]*)`", first)
        assert cells and all(re.fullmatch(r"SIMPLEFEED_[A-Z_]+", c) for c in cells), first
        names.update(cells)
    return names


def test_the_readme_table_names_every_variable_the_settings_read_and_no_other() -> None:
    read = read_by_settings()
    assert read >= {"SIMPLEFEED_DATABASE_URL", "SIMPLEFEED_PAGE_SIZE"}  # the recording works
    table = readme_table()
    assert sorted(read - table) == [], "read by simplefeed/settings.py, not in the README table"
    assert sorted(table - read) == [], "in the README table, read by nothing"


def test_the_settings_name_every_variable_uwsgi_ini_reads() -> None:
    """uwsgi.ini's own variables are the settings module's to declare (the misspelling check
    and the table above rely on that list)."""
    ini = (ROOT / "uwsgi.ini").read_text(encoding="utf-8")
    used = set(re.findall(r"^if-(?:not-)?env = (SIMPLEFEED_[A-Z_]+)$", ini, re.MULTILINE))
    assert used and used <= read_by_settings(), sorted(used - read_by_settings())
