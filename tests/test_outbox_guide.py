"""docs/how-to/outbox.md runs as written: the Flask example app commits orders and their
events, the guide's relay command ships them to `simplefeed serve`, and its status command
shows an empty outbox. Its direct-publish example publishes too."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.servers import UwsgiServer, simplefeed_command
from tests.markdown import ROOT, code_blocks, doc_text

EXAMPLE = ROOT / "docs" / "how-to" / "outbox_flask.py"


def load_example() -> object:
    spec = importlib.util.spec_from_file_location("outbox_flask", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # SQLAlchemy resolves the annotations through it
    spec.loader.exec_module(module)
    return module


def shell(block: str, server: UwsgiServer, cwd: Path) -> str:
    """A shell block of the guide, run against ``server`` from ``cwd``."""
    script = block.replace("https://feeds.example", server.base_url).replace("\\\n", " ")
    script = re.sub(r"(^|\s)(\.venv/bin/)?simplefeed ", rf"\1{simplefeed_command()[0]} ", script)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=server.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.e2e
def test_the_outbox_guide_runs_as_written(tmp_path: Path) -> None:
    guide = doc_text("docs/how-to/outbox.md")
    setup, relay, status = code_blocks(guide, "sh")
    (direct,) = [block for block in code_blocks(guide, "python") if "Publisher(" in block]
    example = load_example()
    app = example.create_app(f"sqlite:///{tmp_path / 'shop.sqlite3'}")  # type: ignore[attr-defined]
    client = app.test_client()
    assert client.post("/orders/42").status_code == 201
    paid = client.post("/orders/42/pay")
    assert paid.status_code == 200
    assert client.post("/orders/7/pay").status_code == 404  # no order: no event either
    event_id = paid.get_json()["event"]
    with UwsgiServer.scratch(tmp_path / "server", processes=1) as server:
        shell(setup, server, tmp_path)
        shell(relay.replace(" --follow", ""), server, tmp_path)
        assert shell(status, server, tmp_path).startswith("0 rows")
        recent = httpx.get(server.url("/feeds/orders/recent")).text
        assert recent.count("<title>order paid</title>") == 1
        assert f"<id>{event_id}</id>" in recent
        token = (tmp_path / "orders.token").read_text().strip()
        code = direct.replace("https://feeds.example", server.base_url)
        done = subprocess.run(
            [sys.executable, "-c", f"token = {token!r}\n{code}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("2 ")
