"""The README and the docs stay short and plain.

Sentences are counted as ``prose_measure.py`` counts them, so the figures here are the ones
the docs report. A sentence ends at ``.``, ``!`` or ``?`` before a capital or a parenthesis.
Inline code counts as one word. Fenced code and table rows are not prose. A docs directory's
Python files count by their comments and docstrings.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from bench.servers import UwsgiServer, ensure_debian_binary, simplefeed_command
from tests.markdown import ROOT, code_blocks, doc_text

README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The most lines README.md may have. More belongs in the docs.
README_LINES = 150
#: The most words a sentence may have on average, and the share of sentences over 35 words.
AVERAGE_WORDS = 20
LONG_WORDS = 35
LONG_SHARE = 0.10
#: Words about how the project was made, not about the project.
PROCESS = re.compile(
    r"\bsessions?\b|\btrials?\b|\bworktrees?\b|\bissue #\d+|\bhelper agents?\b", re.IGNORECASE
)


def _markdown_prose(text: str) -> list[str]:
    """Return the prose of a Markdown page as one text, without fenced code or table rows."""
    kept, fenced = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        if fenced or stripped.startswith("|"):
            continue
        kept.append(stripped)
    return [" ".join(kept)]


def _python_prose(text: str) -> list[str]:
    """Return the comments and docstrings of a Python file, with a run of comments as one text."""
    out: list[str] = []
    run: list[str] = []
    skipped = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            run.append(token.string.lstrip("#").strip())
        elif token.type == tokenize.STRING and token.string.startswith(('"""', 'r"""')):
            out.append(token.string.strip("r").strip('"'))
        elif token.type not in skipped and run:
            out.append(" ".join(run))
            run = []
    if run:
        out.append(" ".join(run))
    return out


def sentence_lengths(text: str) -> list[int]:
    """Return the number of words of each sentence of three words or more."""
    text = re.sub(r"\s+", " ", re.sub(r"`[^`]*`", "X", text))
    lengths = (len(s.split()) for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text))
    return [n for n in lengths if n >= 3]


def prose_files() -> list[Path]:
    """Return README.md and every Markdown and Python file under docs/."""
    return [README, *sorted([*DOCS.rglob("*.md"), *DOCS.rglob("*.py")])]


def prose(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return _markdown_prose(text) if path.suffix == ".md" else _python_prose(text)


def test_the_readme_is_at_most_150_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines: move the detail into docs/"


def test_the_readme_and_the_docs_are_written_in_short_sentences() -> None:
    lengths = [n for path in prose_files() for text in prose(path) for n in sentence_lengths(text)]
    assert len(lengths) > 100  # The pages were read.
    average = sum(lengths) / len(lengths)
    long = sum(n > LONG_WORDS for n in lengths) / len(lengths)
    worst = sorted(
        (
            (sum(ns) / len(ns), path.relative_to(ROOT))
            for path in prose_files()
            if (ns := [n for text in prose(path) for n in sentence_lengths(text)])
        ),
        reverse=True,
    )[:3]
    summary = f"{len(lengths)} sentences, {average:.1f} words on average, {long:.0%} over 35"
    assert average <= AVERAGE_WORDS, f"{summary}; the longest on average: {worst}"
    assert long <= LONG_SHARE, f"{summary}; the longest on average: {worst}"


def test_the_readme_and_the_docs_speak_of_the_project_only() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in prose_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PROCESS.search(line)
    ]
    assert found == [], "words about how the project was made:\n" + "\n".join(found[:20])


def test_the_measure_splits_sentences_as_the_docs_report_them() -> None:
    """The measure splits sentences as the docs report them.

    Inline code is one word, and fenced code and tables are no prose. A sentence ends before a
    capital or a parenthesis.
    """
    page = "One `two three` four five.\n```sh\nnot prose at all\n```\n| a | b |\n(Six seven eight.)"
    assert [n for text in _markdown_prose(page) for n in sentence_lengths(text)] == [4, 3]
    code = '"""A docstring of five words."""\n# One comment\n# of two lines.\nx = 1\n'
    assert [n for text in _python_prose(code) for n in sentence_lengths(text)] == [5, 5]


def run_example(argv: list[str], server: UwsgiServer, cwd: Path, **env: str) -> str:
    """Run an example as a reader of the docs would, against ``server``.

    The server's URL stands in place of localhost:8080, and its settings are in the
    environment. Return the example's standard output, once it exited 0.
    """
    done = subprocess.run(
        [re.sub(r"(http://)?localhost:8080", server.base_url, arg) for arg in argv],
        env={**server.env(), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.e2e
def test_the_readme_s_publish_example_runs_as_written(tmp_path: Path) -> None:
    """The README's publish example runs as written.

    It runs against `simplefeed serve` on a free port. It mints a token, publishes (201), and
    reads the entry back from /recent.
    """
    (example,) = [block for block in code_blocks(doc_text("README.md"), "sh") if "curl" in block]
    assert "localhost:8080" in example and ".venv/bin/simplefeed" in example
    script = example.replace(".venv/bin/simplefeed", simplefeed_command()[0])
    with UwsgiServer.scratch(tmp_path, processes=1) as server:
        shown = run_example(["bash", "-euo", "pipefail", "-c", script], server, tmp_path)
    assert shown.startswith("HTTP/1.1 201 Created"), shown
    assert "<title>order paid</title>" in shown
    assert '{"order":42,"amount":"9.99"}' in shown


@pytest.mark.e2e
def test_the_publish_guide_s_examples_publish_as_written(tmp_path: Path) -> None:
    """The publish guide's examples publish as written.

    The curl, Python and JavaScript examples of docs/how-to/publish.md run against `simplefeed
    serve`. Each publishes one event. The curl one, run again, is a replay, because of its id.
    """
    guide = doc_text("docs/how-to/publish.md")
    (curl,) = [block for block in code_blocks(guide, "sh") if block.startswith("curl")]
    (python,) = code_blocks(guide, "python")
    (javascript,) = code_blocks(guide, "javascript")
    node = ensure_debian_binary("nodejs", lambda: shutil.which("node"))
    with UwsgiServer.scratch(tmp_path, processes=1) as server:
        (tmp_path / "publish.mjs").write_text(
            javascript.replace("http://localhost:8080", server.base_url)
        )

        def run(*argv: str) -> str:
            token = server.token
            return run_example(list(argv), server, tmp_path, TOKEN=token, SIMPLEFEED_TOKEN=token)

        assert run("bash", "-c", curl).startswith("HTTP/1.1 201 Created")
        assert run("bash", "-c", curl).startswith("HTTP/1.1 200 OK")  # A replay: the same id.
        assert run(sys.executable, "-c", python) == "2\n"  # The sequence number.
        assert run(node, "publish.mjs") == "3\n"
