"""The settings reference names every ``SIMPLEFEED_*`` variable the service reads, and no other.

The reference is docs/reference/settings.md. A variable that ``uwsgi.ini`` reads counts too.
It is declared in :mod:`simplefeed.settings`, as ``SIMPLEFEED_UWSGI_SOCKET`` is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from simplefeed.settings import UWSGI_VARIABLES, Settings
from tests.markdown import ROOT, doc_text, table_after

SETTINGS = "docs/reference/settings.md"


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
    """Return what :meth:`Settings.from_env` looks up, with the variables of ``uwsgi.ini``.

    Those are the variables ``uwsgi.ini`` reads that the settings module declares
    (:data:`UWSGI_VARIABLES`).
    """
    environ = _Recording()
    Settings.from_env(environ)
    return environ.asked | set(UWSGI_VARIABLES)


def reference_table() -> set[str]:
    """Return the variables that the first column of the settings reference's table names."""
    names: set[str] = set()
    for first, *_ in table_after(doc_text(SETTINGS), "## The settings"):
        cells = re.findall(r"`([^`]*)`", first)
        assert cells and all(re.fullmatch(r"SIMPLEFEED_[A-Z_]+", c) for c in cells), first
        names.update(cells)
    return names


def test_the_reference_names_every_variable_the_settings_read_and_no_other() -> None:
    read = read_by_settings()
    assert read >= {"SIMPLEFEED_DATABASE_URL", "SIMPLEFEED_PAGE_SIZE"}  # The recording works.
    table = reference_table()
    assert sorted(read - table) == [], f"read by simplefeed/settings.py, not in {SETTINGS}"
    assert sorted(table - read) == [], f"in {SETTINGS}, read by nothing"


def test_the_settings_name_every_variable_uwsgi_ini_reads() -> None:
    """The settings name every variable that uwsgi.ini reads.

    uwsgi.ini's own variables are the settings module's to declare. The misspelling check and
    the table above rely on that list.
    """
    ini = (ROOT / "uwsgi.ini").read_text(encoding="utf-8")
    used = set(re.findall(r"^if-(?:not-)?env = (SIMPLEFEED_[A-Z_]+)$", ini, re.MULTILINE))
    assert used and used <= read_by_settings(), sorted(used - read_by_settings())
