"""Count the instructions uWSGI spends on one archived page: the shipped static route, with the
page plugin and with the routing rules, against uWSGI's plain ``static-map`` of the same file.

Instruction counts come from callgrind, which other load on the machine does not disturb. Run
it from the checkout (needs valgrind: ``apt-get install -y valgrind``)::

    .venv/bin/python bench/route_cost.py            # about two minutes

Each configuration is an ini derived from ``uwsgi.ini`` (``bench/_read_servers.py``), with the
minimal falcon app as its module, one process and one thread. The static route's ini keeps the
shipped route. It runs once with the page plugin that ``simplefeed serve`` builds
(``simplefeed/runtime/plugin.py``), and once with the routing rules that serve pages without
it. The baseline's ini drops the route and adds ``static-map``. uWSGI runs under
callgrind, which counts only while a worker reads, answers or closes a request. A client on
one kept-alive connection asks for the page N times, one request at a time. Each figure is the
difference between two runs, of ``--requests`` and of 200 requests, divided by the difference
in requests, so that start-up and the first requests cancel out. The kernel's work (system
calls, sendfile) is not counted. The routing rules make one system call more than
``static-map``, the ``isfile`` test's stat. The plugin makes one ``stat``, where ``static-map``
resolves the whole path with ``realpath``.

The rows under the routing rules split their cost by uWSGI function, inclusive of what each
calls.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._read_servers import MINIMAL, UWSGI, derive_ini
from bench.servers import HOST, PROJECT_ROOT, clean_environ, free_port
from simplefeed.runtime import plugin

#: The functions whose inclusive cost the report splits out, with a line of text each.
PARTS = {
    "uwsgi_apply_routes_do": "all route rules, with the static action",
    "uwsgi_router_addheader_func": "the addheader rules",
    "uwsgi_route_condition_equal": "the equal conditions",
    "uwsgi_route_condition_contains": "the contains conditions",
    "uwsgi_route_condition_isfile": "the isfile condition",
    "uwsgi_router_goto_func": "the gotos",
    "uwsgi_regexp_match_ovec": "the route-uri regular expression",
    "uwsgi_routing_func_static": "the static action (uWSGI's file serving)",
    "archived_page": "the plugin's action, with uWSGI's file serving",
    "uwsgi_routing_translate": "of all these: copying each rule's text",
}
TOGGLES = ("wsgi_req_accept", "wsgi_req_recv", "uwsgi_close_request")


def archive(root: Path) -> None:
    """Write page 1 and its gzip copy, about the size of a page of 100 entries."""
    (root / "pages").mkdir(parents=True)
    body = b"<?xml version='1.0' encoding='utf-8'?>\n<feed>" + b"<entry>x</entry>\n" * 1200
    (root / "pages" / "1").write_bytes(body + b"</feed>\n")
    (root / "pages" / "1.gz").write_bytes(gzip.compress(body))


def ask(port: int, path: str, n: int) -> bytes:
    """GET ``path`` n times on one connection, as wrk asks; return the first answer's head."""
    request = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode()
    first = b""
    with socket.create_connection((HOST, port), timeout=30) as sock:
        for _ in range(n):
            sock.sendall(request)
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            while len(body) < (int(length.group(1)) if length else 0):
                body += sock.recv(65536)
            first = first or head
    return first


def profile(ini: Path, path: str, n: int, workdir: Path, env: dict[str, str]) -> Path:
    """Run uWSGI under callgrind for n requests; return the worker's profile."""
    port = free_port()
    out = workdir / f"{ini.stem}.{n}"
    argv = ["valgrind", "--tool=callgrind", "--collect-atstart=no"]
    argv += [f"--toggle-collect={name}" for name in TOGGLES]
    argv += [f"--callgrind-out-file={out}.%p", str(UWSGI), "--ini", str(ini)]
    env = {**env, "SIMPLEFEED_HTTP_SOCKET": f"{HOST}:{port}"}
    with (workdir / f"{ini.stem}.log").open("ab") as log:
        process = subprocess.Popen(
            argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                ask(port, path, 1)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((workdir / f"{ini.stem}.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        ask(port, path, n)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=180)
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # The master's profile is empty: the worker, a forked child, answered.
    return max(workdir.glob(f"{out.name}.*"), key=lambda p: p.stat().st_size)


def inclusive(profile_path: Path) -> dict[str, int]:
    """Return the total and the inclusive instructions of each function in ``PARTS``."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(profile_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = {
        "total": int(re.search(r"([\d,]+) +\(100.0%\) +PROGRAM TOTALS", text)[1].replace(",", ""))
    }
    for line in text.splitlines():
        m = re.match(r" *([\d,]+) \([ \d.]+%\) +\S*:(\w+) ", line)
        if m and m[2] in PARTS:
            found[m[2]] = found.get(m[2], 0) + int(m[1].replace(",", ""))
    return found


def per_request(
    ini: Path, path: str, n: int, workdir: Path, env: dict[str, str]
) -> dict[str, float]:
    small = inclusive(profile(ini, path, 200, workdir, env))
    large = inclusive(profile(ini, path, n, workdir, env))
    return {k: (large[k] - small.get(k, 0)) / (n - 200) for k in large}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2200)
    parser.add_argument("--ini", type=Path, help="an ini to measure instead of uwsgi.ini")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="route-cost-") as tmp:
        workdir = Path(tmp).resolve()
        archive(workdir / "archive")
        (workdir / "body").write_bytes(b"{}")
        env = clean_environ()
        env.update(
            PYTHONPATH=str(PROJECT_ROOT),
            SIMPLEFEED_PROCESSES="1",
            SIMPLEFEED_THREADS="1",
            SIMPLEFEED_ARCHIVE_DIR=str(workdir / "archive"),
            SIMPLEFEED_BENCH_BODY=str(workdir / "body"),
        )
        mapped = derive_ini(
            workdir / "static-map.ini",
            module=MINIMAL,
            static_map=f"/static={workdir / 'archive'}",
            threads=1,
        )
        route = derive_ini(workdir / "route.ini", module=MINIMAL, threads=1)
        if args.ini is not None:
            text = re.sub(r"(?m)^module = .*$", f"module = {MINIMAL}", args.ini.read_text())
            route.write_text(re.sub(r"(?m)^threads = \d+$", "threads = 1", text))
        built = plugin.built_here(os.environ)
        base = per_request(mapped, "/static/pages/1", args.requests, workdir, env)
        with_plugin = per_request(
            route, "/pages/1", args.requests, workdir, {**env, "SIMPLEFEED_PAGE_PLUGIN": str(built)}
        )
        rules = per_request(route, "/pages/1", args.requests, workdir, env)
    print("| one archived page | instructions |\n|---|---|")
    print(f"| uWSGI static-map | {base['total']:,.0f} |")
    for label, ours in (("the page plugin", with_plugin), ("the routing rules", rules)):
        print(f"| static route, {label} | {ours['total']:,.0f} |")
        for name, part in PARTS.items():
            if name in ours:
                print(f"| {part} | {ours[name]:,.0f} |")
    for label, ours in (("the page plugin", with_plugin), ("the routing rules", rules)):
        print(f"static route with {label} / static-map: {ours['total'] / base['total']:.2f}")


if __name__ == "__main__":
    main()
