"""``simplefeed consume --jsonl``: the line of each entry, and when lines are written.

With checkpoints per page the lines are gathered and written together. These tests check
that the line is the one ``json_text(entry.to_json())`` gives, that a checkpoint never covers
a line still in memory, and that output which cannot be written stops the consumer.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from simplefeed.client import Checkpoint, StateFile
from simplefeed.client.command import EXIT_HANDLER, consume
from simplefeed.client.entry import (
    EntryAuthor,
    EntryCategory,
    EntryLink,
    FeedEntry,
    entry_json,
    json_text,
)
from simplefeed.client.errors import HandlerError
from simplefeed.client.jsonl import JsonLines
from simplefeed.settings import Settings
from tests.test_client_live import LiveServer

# SQLite only: these tests are about the output, not the database.
pytestmark = pytest.mark.sqlite_only

#: Any text, lone surrogates, controls and bidirectional marks included.
any_text = st.text(st.characters(codec=None, categories=None), max_size=12)
maybe = st.none() | any_text
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
entries = st.builds(
    FeedEntry,
    id=any_text,
    seq=st.integers(min_value=1),
    title=any_text,
    updated=any_text,
    content=json_value,
    content_type=maybe,
    summary=maybe,
    links=st.lists(
        st.builds(EntryLink, any_text, any_text, maybe, maybe, maybe, st.none() | st.integers(0)),
        max_size=2,
    ).map(tuple),
    page_url=any_text,
    author=st.none() | st.builds(EntryAuthor, any_text, maybe, maybe),
    categories=st.lists(st.builds(EntryCategory, any_text, maybe, maybe), max_size=2).map(tuple),
    published=maybe,
)


@given(entries)
def test_the_line_is_the_entry_s_json_text(entry: FeedEntry) -> None:
    line = entry_json(entry)
    assert line == json_text(entry.to_json())
    line.encode("utf-8")  # UTF-8 can carry it, lone surrogates escaped.


def test_a_float_the_content_holds_is_written_as_json_text_writes_it() -> None:
    entry = FeedEntry("urn:x", 1, "t", "u", [math.inf, -0.0, 1e300, 0.1], "application/json",
                      None, (), "https://p.example/1")  # fmt: skip
    assert entry_json(entry) == json_text(entry.to_json())


class _Stdout(io.TextIOWrapper):
    """Standard output over bytes in memory, counting its writes."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8")
        self.writes: list[bytes] = []
        original = self.buffer.write

        def write(data: Any) -> int:
            self.writes.append(bytes(data))
            return original(data)

        self.buffer.write = write  # type: ignore[method-assign]


def _entry(seq: int) -> FeedEntry:
    return FeedEntry(f"urn:e:{seq}", seq, f"é {seq}", "u", None, None, None, (), "https://p/1")


def test_lines_are_written_together_before_the_oldest_is_acknowledged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = _Stdout()
    monkeypatch.setattr(sys, "stdout", out)
    lines = JsonLines()
    for seq in range(1, 4):
        lines.send(_entry(seq))
    assert out.writes == []  # Nothing is acknowledged yet, so the lines may wait.
    assert lines.acknowledgement(_entry(1)) is None
    assert out.writes == [b"".join(entry_json(_entry(s)).encode() + b"\n" for s in (1, 2, 3))]
    lines.send(_entry(4))
    assert lines.acknowledgement(_entry(2)) is None  # Written already: no write per entry.
    assert lines.acknowledgement(_entry(3)) is None
    assert len(out.writes) == 1
    assert lines.acknowledgement(_entry(4)) is None
    assert out.writes[1] == entry_json(_entry(4)).encode() + b"\n"


def test_output_that_cannot_be_written_is_a_handler_error(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Stdout()
    monkeypatch.setattr(sys, "stdout", out)
    lines = JsonLines()
    lines.send(_entry(1))

    def full(data: Any) -> int:
        raise OSError(28, "No space left on device")

    out.buffer.write = full  # type: ignore[method-assign]
    with pytest.raises(HandlerError, match=r"\(sequence 1\): standard output: .*No space left"):
        lines.acknowledgement(_entry(1))


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    server = LiveServer(replace(settings, page_size=50))
    try:
        yield server
    finally:
        server.close()


def test_both_checkpoint_modes_print_the_same_lines(live: LiveServer, tmp_path: Path) -> None:
    live.publish(120)
    state = str(tmp_path / "s.sqlite3")
    printed = {
        every: CliRunner().invoke(
            consume,
            [live.recent, "--state", f"{state}.{every}", "--jsonl", "--checkpoint", every],
            catch_exceptions=False,
        )
        for every in ("entry", "page")
    }
    assert printed["page"].exit_code == 0, printed["page"].stderr
    assert printed["page"].stdout_bytes == printed["entry"].stdout_bytes
    assert len(printed["page"].stdout.splitlines()) == 120


@pytest.mark.parametrize("every", ["page", "entry"])
@pytest.mark.parametrize("on_error", ["stop", "park"])
def test_a_full_standard_output_stops_with_no_checkpoint(
    live: LiveServer, tmp_path: Path, every: str, on_error: str
) -> None:
    """Not one line is written, so no entry is handled: exit 3, nothing checkpointed or parked."""
    live.publish(120)
    state = tmp_path / "s.sqlite3"
    argv = [sys.executable, "-m", "simplefeed.client.command", live.recent, "--state", str(state)]
    argv += ["--jsonl", "--checkpoint", every, "--on-error", on_error]
    # Buffered standard output, as Python has it unless PYTHONUNBUFFERED is set.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            argv, stdout=full, stderr=subprocess.PIPE, text=True, env=env, check=False
        )
    assert done.returncode == EXIT_HANDLER, done.stderr
    assert "(sequence 1)" in done.stderr and "No space left on device" in done.stderr
    with StateFile(state) as file:
        checkpoint: Checkpoint | None = file.load_checkpoint(live.recent)
        assert (checkpoint, file.parked(live.recent)) == (None, [])
