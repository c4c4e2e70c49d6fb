"""Reading the docs' Markdown in tests: a page's text, its tables and its code blocks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def doc_text(path: str) -> str:
    """Return the text of ``path``, relative to the checkout (``README.md``, ``docs/...``)."""
    return (ROOT / path).read_text(encoding="utf-8")


def table_after(text: str, marker: str) -> list[list[str]]:
    """Return the rows of the first table after ``marker``, each a list of its stripped cells.

    The header row and the ``|---|`` line are left out.
    """
    lines = text[text.index(marker) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def code_blocks(text: str, language: str) -> list[str]:
    """Return the fenced code blocks of ``language`` in ``text``, at any indentation, dedented."""
    blocks = []
    for indent, body in re.findall(
        rf"^( *)```{re.escape(language)}\n(.*?)^\1```", text, re.DOTALL | re.MULTILINE
    ):
        blocks.append("".join(line[len(indent) :] for line in body.splitlines(keepends=True)))
    return blocks
