"""feedparser's checks in a child process give the results of the check in this process.

simplefeed.client.checker runs them. It passes the same pages and gives the same errors as the
check in this process. The child is a real process, and it ends with its checker or its pass.
If the child dies, the check in this process takes over, and the result never differs.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from simplefeed.app import create_app
from simplefeed.client import FeedEntry, FeedError
from simplefeed.client import pages as pages_module
from simplefeed.client.checker import HELLO, Checker, helps
from simplefeed.client.parse import parse_page
from simplefeed.service import Simplefeed
from tests.conftest import FakeClock
from tests.test_client import CountingApp, consume, publish
from tests.test_client_parse import DECL, HEAD, ROOT, b64, doc, entry

URL = "http://x.test/pages/2"

GOOD = doc(
    entry(1, b'<content type="text">one</content>'),
    entry(2, b'<content type="application/json">%s</content>' % b64('{"a": 1}')),
    entry(3),
)
REFUSED = [
    # Refused by feedparser and by the strict reading. The error is feedparser's, as
    # parse_page has it.
    DECL + b'<!DOCTYPE feed [<!ENTITY x "y">]>' + ROOT + HEAD + b"</feed>",
    DECL + b'<feed xmlns="http://purl.org/atom/ns#"/>',
    b"<not-xml",
    # Refused by the strict reading only.
    doc(entry(1, b'<content type="application/json">bm90IGpzb24=</content>')),
    doc(entry(1, b"<sf:seq>1</sf:seq>")),
]


@pytest.fixture
def server(core: Simplefeed) -> CountingApp:
    return CountingApp(create_app(core.settings, core=core))


def children_checking() -> list[int]:
    """Return this process's children that run the checker."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"simplefeed.client.checker" in cmdline:
            found.append(int(pid))
    return found


def error_of(call: object) -> tuple[type[BaseException], str]:
    assert callable(call)
    with pytest.raises(FeedError) as caught:
        call()
    return type(caught.value), str(caught.value)


def test_the_helper_gives_the_pages_and_errors_the_check_in_this_process_gives() -> None:
    checker = Checker()
    try:
        assert checker.parse(URL, GOOD) == parse_page(URL, GOOD, parser="feedparser")
        for body in REFUSED:
            assert error_of(lambda b=body: checker.parse(URL, b)) == error_of(
                lambda b=body: parse_page(URL, b, parser="feedparser")
            ), body
        # Every answer came from the one child, still running. None fell back.
        child = checker._child
        assert child is not None and child.pid != os.getpid() and child.poll() is None
    finally:
        checker.close()
    assert child.returncode == 0  # The end of its input ended it.
    assert children_checking() == []


def test_a_helper_that_dies_is_replaced_by_the_check_in_this_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checker = Checker()
    try:
        checker.start()
        child = checker._child
        assert child is not None
        # In a process group of its own, because a Ctrl-C at the terminal is the parent's to
        # handle. The terminal sends it to the foreground process group.
        assert os.getsid(child.pid) == child.pid != os.getsid(0)
        assert checker.parse(URL, GOOD) == parse_page(URL, GOOD, parser="feedparser")
        assert checker._child is child
        child.kill()
        child.wait()
        with caplog.at_level(logging.WARNING, logger="simplefeed.client.checker"):
            assert checker.parse(URL, GOOD) == parse_page(URL, GOOD, parser="feedparser")
            for body in REFUSED:
                assert error_of(lambda b=body: checker.parse(URL, b)) == error_of(
                    lambda b=body: parse_page(URL, b, parser="feedparser")
                )
        said = [r.getMessage() for r in caplog.records if r.name == "simplefeed.client.checker"]
        assert len(said) == 1 and "in this process from now on" in said[0], said
        assert checker._child is None and children_checking() == []
    finally:
        checker.close()


def fake_helper(then: str) -> list[str]:
    """Return a child that says hello and reads a document as the checker does, then ``then``."""
    code = (
        "import struct, sys\n"
        "out, inp = sys.stdout.buffer, sys.stdin.buffer\n"
        f"out.write({HELLO!r})\n"
        "out.flush()\n"
        "(size,) = struct.unpack('>Q', inp.read(8))\n"
        "inp.read(size)\n"
        "def answer(text):\n"
        "    out.write(struct.pack('>I', len(text)) + text)\n"
        "    out.flush()\n"
        "    inp.read()\n"
        f"{then}\n"
    )
    return [sys.executable, "-c", code]


@pytest.mark.parametrize(
    ("then", "why"),
    [
        ("sys.exit(3)", "no verdict from it: it stopped"),
        # A length that no verdict has. It is not read, however much memory that would take.
        ("out.write(struct.pack('>I', 1 << 31))\nout.flush()\ninp.read()", "an answer of 2147"),
        ("answer(b'[]')", "no verdict from it"),
        ('answer(b\'{"reason": 1, "warnings": []}\')', "wrong shape"),
        ('answer(b\'{"reason": null, "warnings": "abc"}\')', "wrong shape"),
        ("answer(b'not json')", "no verdict from it"),
    ],
)
def test_a_helper_that_gives_no_verdict_is_replaced_by_the_check_in_this_process(
    then: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    checker = Checker(fake_helper(then))
    try:
        with caplog.at_level(logging.WARNING, logger="simplefeed.client.checker"):
            assert checker.parse(URL, GOOD) == parse_page(URL, GOOD, parser="feedparser")
            assert checker.parse(URL, GOOD) == parse_page(URL, GOOD, parser="feedparser")
        said = [r.getMessage() for r in caplog.records if r.name == "simplefeed.client.checker"]
        assert len(said) == 1 and why in said[0], said
        assert checker._child is None
    finally:
        checker.close()


def test_the_helper_ends_when_its_parent_is_killed() -> None:
    code = (
        "import os, signal\n"
        "from simplefeed.client.checker import Checker\n"
        "checker = Checker()\n"
        "checker.start()\n"
        "assert checker._child is not None\n"
        "print(checker._child.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, sys.path))},
        timeout=30,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    helper = int(done.stdout)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{helper}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break  # Gone and reaped.
        if state == "Z":
            break  # Ended. Its new parent reaps it.
        time.sleep(0.05)
    else:
        raise AssertionError(f"the helper {helper} outlived its parent")


@pytest.mark.parametrize(
    ("command", "why"),
    [
        # Another program where sys.executable would be, as when Python is embedded. It is
        # silent, or talkative.
        ([sys.executable, "-c", "import time; time.sleep(30)"], "did not say it was one (b'')"),
        ([sys.executable, "-c", "print('ready'); import time; time.sleep(30)"], "b'ready"),
        (["/nonexistent/python"], "cannot start it"),
    ],
)
def test_a_command_that_is_not_the_helper_leaves_the_check_to_this_process(
    command: list[str], why: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    children: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen[bytes]):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            children.append(self)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    checker = Checker(command, hello_s=0.5)
    try:
        with caplog.at_level(logging.WARNING, logger="simplefeed.client.checker"):
            checker.start()
            assert checker.parse(URL, GOOD) == parse_page(URL, GOOD, parser="feedparser")
            assert checker.parse(URL, GOOD) == parse_page(URL, GOOD, parser="feedparser")
        said = [r.getMessage() for r in caplog.records if r.name == "simplefeed.client.checker"]
        assert len(said) == 1 and why in said[0], said
        assert checker._child is None and children_checking() == []
    finally:
        checker.close()
    # Half a second to say hello, and a second to end once its input closed. Then it is
    # killed. It may fail first, writing to the pipe the checker closed. Had the checker
    # waited for it, it would have ended its 30 s sleep and returned 0.
    ended = [child.returncode for child in children]
    assert len(ended) == (0 if command[0] == "/nonexistent/python" else 1)
    assert all(code is not None and code != 0 for code in ended), ended


@pytest.mark.skipif(not helps(), reason="one CPU: the consumer starts no checker process")
def test_a_long_catch_up_has_feedparser_check_its_pages_in_a_helper_that_ends_with_the_pass(
    core: Simplefeed,
    server: CountingApp,
    clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = publish(core, 63)  # 12 archived pages of 5. 3 entries on the working page.
    checked: list[str] = []
    alive: list[list[int]] = []
    parse = Checker.parse

    def spy(self: Checker, url: str, body: bytes) -> object:
        checked.append(url)
        alive.append(children_checking())
        return parse(self, url, body)

    monkeypatch.setattr(Checker, "parse", spy)
    got: list[FeedEntry] = consume(server, tmp_path / "a.sqlite3", clock)
    # The child started at the eighth page walked back. It checked the pages read forward from
    # then on. This process checks the pages that the child did not.
    assert pages_module.CHECKER_AFTER_PAGES == 8
    assert len(checked) >= 9, checked
    assert all(len(pids) == 1 for pids in alive), alive
    assert children_checking() == []
    assert [e.id for e in got] == ids
    assert got == consume(server, tmp_path / "b.sqlite3", clock, parser="lxml")


def test_a_short_catch_up_starts_no_helper(
    core: Simplefeed,
    server: CountingApp,
    clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish(core, 33)  # 6 archived pages, fewer than CHECKER_AFTER_PAGES read.
    started: list[Checker] = []
    monkeypatch.setattr(Checker, "start", lambda self: started.append(self))
    assert len(consume(server, tmp_path / "a.sqlite3", clock)) == 33
    assert started == []
