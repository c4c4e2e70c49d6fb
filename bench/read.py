"""Read-path benchmark, for every GET a consumer or a cache makes, against the machine's ceilings.

One command, from the checkout (needs wrk and nginx: ``apt-get install -y wrk nginx``)::

    .venv/bin/python bench/read.py              # about 9 minutes
    .venv/bin/python bench/read.py --quick      # one short round per cell, to try it out

It starts every server itself on 127.0.0.1, and stops them whatever happens. These are the
servers.

Simplefeed runs as shipped (``simplefeed serve``, ``uwsgi.ini``) on a SQLite database with 250
entries. Pages 1-2 are archived, page 3 is working, and /recent holds 50 entries.

The framework's ceiling is a minimal falcon app (``bench/minimal_falcon.py``). It runs under
the same uWSGI options, from an ini derived from ``uwsgi.ini`` with only ``module`` changed. It
answers /recent with the same bytes and headers, or a 304.

Plain uWSGI serves a static file, against the shipped static route for archived pages. It uses
the same derived ini with ``static-map``, without the shipped static route.

One nginx runs the shipped server block (``deploy/nginx/``) and a plain static server block.

Another nginx acts as a CDN's edge (``deploy/cdn/``) in front of moto's S3 server. It runs
against the same object straight from the S3 server. The option ``--no-bucket`` skips it.

It measures each with wrk, for 1 and 4 uWSGI processes. Wrk runs one thread on 16 connections,
in rounds of a few seconds. Ours and its baseline alternate, so that a slow moment hurts both.
Ratios are of median request rates. Then it measures the uWSGI options themselves. The shipped
http11-socket with 200 threads per worker runs against three others. One is http-socket with
``Connection: close``, as shipped before keep-alive. One is a single thread per worker. One is
uWSGI's HTTP router.

The figures and the reading of them are in docs/benchmarks.md (section "Reading").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._read_servers import (
    CDN_TEMPLATE,
    Child,
    Load,
    derive_ini,
    machine,
    minimal_falcon,
    nginx,
    wrk,
)
from bench.servers import HOST, S3Server, UwsgiServer, free_port
from simplefeed.archive.s3 import S3Store


def get(url: str, headers: Mapping[str, str] | None = None) -> httpx.Response:
    """GET as wrk asks, with no Accept-Encoding unless ``headers`` give one.

    Else httpx would send its own, and be answered in br with br's ETag.
    """
    return httpx.get(url, headers={"Accept-Encoding": "identity", **(headers or {})}, timeout=10)


PAGE_SIZE = 100
EVENTS = 250
BUCKET = "simplefeed-bench"


@dataclass
class Row:
    section: str
    name: str
    processes: int | str
    ours: list[Load]
    baseline_name: str = ""
    target: float | None = None
    baseline: list[Load] = field(default_factory=list)
    note: str = ""

    @staticmethod
    def rate(loads: list[Load]) -> float:
        return statistics.median(x.rate for x in loads) if loads else 0.0

    @staticmethod
    def p99(loads: list[Load]) -> float:
        return statistics.median(x.p99_us for x in loads) / 1000 if loads else 0.0

    @staticmethod
    def cpu(loads: list[Load]) -> float:
        return statistics.median(x.cpu_us for x in loads) if loads else 0.0

    @staticmethod
    def errors(loads: list[Load]) -> dict[str, int]:
        total: dict[str, int] = {}
        for x in loads:
            for k, v in x.errors.items():
                total[k] = total.get(k, 0) + v
        return total

    @property
    def ratio(self) -> float | None:
        base = self.rate(self.baseline)
        return self.rate(self.ours) / base if base else None

    @property
    def cpu_ratio(self) -> float | None:
        """Return the baseline's CPU per request over ours, a comparison less disturbed by load."""
        ours = self.cpu(self.ours)
        return self.cpu(self.baseline) / ours if ours and self.baseline else None


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path, stack: contextlib.ExitStack):
        self.args = args
        self.workdir = workdir
        self.stack = stack
        self.rows: list[Row] = []
        self.database_url = f"sqlite:///{workdir / 'simplefeed.sqlite3'}"
        self.archive = workdir / "archive"
        self.body_file = workdir / "recent.xml"

    # -- servers ------------------------------------------------------------------------------

    def ours(self, name: str, processes: int, ini: Path | None = None, **env: str) -> UwsgiServer:
        server = UwsgiServer(
            self.database_url,
            self.archive,
            self.workdir / name,
            page_size=PAGE_SIZE,
            processes=processes,
            ini=ini,
            # The same links, so the same bytes, from every configuration measured.
            extra_env={"SIMPLEFEED_BASE_URL": "http://feeds.example.test", **env},
        )
        return self.stack.enter_context(server)

    def baseline(self, name: str, processes: int, **derive: object) -> tuple[Child, str]:
        child, url = minimal_falcon(
            name, self.workdir, self.body_file, processes=processes, **derive
        )
        self.stack.callback(child.stop)
        return child, url

    def seed(self, server: UwsgiServer) -> None:
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(timeout=30, headers=headers) as client:
            if (
                client.get(server.url("/recent")).content.count(b"<entry>")
                or (self.archive / "pages" / "1").exists()
            ):
                return
            for start in range(0, EVENTS, 50):
                batch = [
                    {
                        "title": f"order {i} shipped",
                        "content": {"order": i, "items": list(range(i % 7)), "note": "x" * 80},
                        "categories": [{"term": "orders"}],
                    }
                    for i in range(start, start + 50)
                ]
                r = client.post(server.url("/entries"), json=batch)
                assert r.status_code == 201, r.text
        self.body_file.write_bytes(get(server.url("/recent")).content)

    # -- measuring ----------------------------------------------------------------------------

    def load(
        self,
        server: UwsgiServer | Child | S3Server | tuple[UwsgiServer | Child, ...],
        url: str,
        headers: Mapping[str, str] | None = None,
        connections: int | None = None,
    ) -> Load:
        """Run wrk against url, and measure the CPU time of ``server``, or of all if several."""
        servers = server if isinstance(server, tuple) else (server,)
        pgids = []
        for s in servers:
            assert s.process is not None
            pgids.append(s.process.pid)  # Each server leads its own process group (setsid).
        return wrk(
            url,
            duration=self.args.duration,
            connections=connections or self.args.connections,
            headers=headers,
            pgids=tuple(pgids),
        )

    def pair(
        self,
        row: Row,
        ours: Callable[[], Load],
        base: Callable[[], Load] | None = None,
    ) -> Row:
        for _ in range(self.args.rounds):
            row.ours.append(ours())
            if base is not None:
                row.baseline.append(base())
        self.rows.append(row)
        print(format_row(row), flush=True)
        return row

    @staticmethod
    def check(url: str, status: int, headers: Mapping[str, str] | None = None) -> bytes:
        r = get(url, headers)
        assert r.status_code == status, f"{url}: {r.status_code}, expected {status}"
        return r.content

    # -- the cells ----------------------------------------------------------------------------

    def run_processes(self, processes: int) -> None:
        usock = free_port()
        ours = self.ours(f"ours-{processes}", processes, SIMPLEFEED_UWSGI_SOCKET=f"{HOST}:{usock}")
        self.seed(ours)
        etag = get(ours.url("/recent")).headers["etag"]
        mini, minimal = self.baseline(f"minimal-{processes}", processes)
        min_etag = get(minimal + "/recent").headers["etag"]
        # uWSGI's plain static-map of the same file as the static route sends.
        ust, ustatic = self.baseline(
            f"uwsgi-static-{processes}", processes, static_map=f"/static={self.archive}"
        )

        # Archived pages from uWSGI as `simplefeed serve` runs alone, on http11-socket. The
        # `ours` server has the uwsgi socket for nginx. So its HTTP socket closes every
        # connection.
        alone = self.ours(f"alone-{processes}", processes)
        recent, page1 = ours.url("/recent"), alone.url("/pages/1")
        same_file = ustatic + "/static/pages/1"
        page_bytes = (self.archive / "pages" / "1").read_bytes()
        inm, min_inm = {"If-None-Match": etag}, {"If-None-Match": min_etag}
        self.check(recent, 304, inm)
        self.check(minimal + "/recent", 304, min_inm)
        assert self.check(recent, 200) == self.check(minimal + "/recent", 200)
        assert self.check(page1, 200) == page_bytes == self.check(same_file, 200)
        for coding in ("gzip", "br"):
            accept = {"Accept-Encoding": coding}
            for url in (page1, same_file):
                assert get(url, accept).headers["content-encoding"] == coding, url
        # Compressed. The client asks for gzip, and its 304s carry the gzip ETag.
        gz = {"Accept-Encoding": "gzip"}
        gz_inm = {**gz, "If-None-Match": etag[:-1] + '-gzip"'}
        min_gz_inm = {**gz, "If-None-Match": min_etag[:-1] + '-gzip"'}
        self.check(recent, 304, gz_inm)
        self.check(minimal + "/recent", 304, min_gz_inm)

        p = processes
        self.pair(
            Row("targets", "/recent 304", p, [], "minimal falcon 304", target=0.8),
            lambda: self.load(ours, recent, inm),
            lambda: self.load(mini, minimal + "/recent", min_inm),
        )
        self.pair(
            Row("targets", "/recent 200, unchanged", p, [], "minimal falcon, same bytes", 0.7),
            lambda: self.load(ours, recent),
            lambda: self.load(mini, minimal + "/recent"),
        )
        self.pair(
            Row("targets", "archived page, uWSGI static route", p, [], "uWSGI static-map", 0.9),
            lambda: self.load(alone, page1),
            lambda: self.load(ust, same_file),
        )
        # What the static route saves. A query string sends the same page through the app.
        self.pair(
            Row("more", "archived page through the app", p, [], "uWSGI static-map"),
            lambda: self.load(alone, page1 + "?app"),
            lambda: self.load(ust, same_file),
        )
        self.pair(
            Row("compressed", "/recent 304, gzip ETag", p, [], "minimal falcon 304", 0.8),
            lambda: self.load(ours, recent, gz_inm),
            lambda: self.load(mini, minimal + "/recent", min_gz_inm),
        )
        self.pair(
            Row("compressed", "/recent 200 gzip", p, [], "minimal falcon, same gzip bytes", 0.7),
            lambda: self.load(ours, recent, gz),
            lambda: self.load(mini, minimal + "/recent", gz),
        )
        for coding in ("gzip", "br"):
            accept = {"Accept-Encoding": coding}
            self.pair(
                Row(
                    "compressed",
                    f"archived page {coding}, uWSGI static route",
                    p,
                    [],
                    f"uWSGI static-map, its {coding} copy",
                ),
                lambda accept=accept: self.load(alone, page1, accept),  # type: ignore[misc]
                lambda accept=accept: self.load(ust, same_file, accept),  # type: ignore[misc]
            )

        nport, sport = free_port(), free_port()
        plain = (
            f"    server {{ listen {HOST}:{sport};"
            f" location / {{ root {self.archive}; gzip_static on; }} }}\n"
        )
        proxy = nginx(
            self.workdir / f"nginx-{processes}",
            listen=nport,
            upstream=f"{HOST}:{usock}",
            archive_dir=self.archive,
            extra_server=plain,
        )
        self.stack.callback(proxy.stop)
        via = f"http://{HOST}:{nport}"
        self.check(via + "/recent", 304, inm)
        assert self.check(via + "/pages/1", 200) == page_bytes
        assert self.check(f"http://{HOST}:{sport}/pages/1", 200) == page_bytes
        self.pair(
            Row("more", "/recent 304 through nginx (uwsgi_pass)", p, [], "direct (http11-socket)"),
            lambda: self.load((proxy, ours), via + "/recent", inm),
            lambda: self.load(ours, recent, inm),
        )
        self.pair(
            Row("targets", "archived page, shipped nginx (static)", p, [], "nginx static"),
            lambda: self.load((proxy, ours), via + "/pages/1"),
            lambda: self.load(proxy, f"http://{HOST}:{sport}/pages/1"),
        )
        self.pair(
            Row("compressed", "archived page gzip, shipped nginx", p, [], "nginx gzip_static"),
            lambda: self.load((proxy, ours), via + "/pages/1", {"Accept-Encoding": "gzip"}),
            lambda: self.load(proxy, f"http://{HOST}:{sport}/pages/1", {"Accept-Encoding": "gzip"}),
        )
        if not self.args.no_bucket:
            self.run_bucket(processes, ours, page_bytes)

    def run_bucket(self, processes: int, ours: UwsgiServer, page_bytes: bytes) -> None:
        """Run nginx as a CDN's edge in front of moto's S3 server (deploy/cdn/).

        It runs against the same object straight from the S3 server.
        """
        s3 = self.stack.enter_context(S3Server(self.workdir / f"s3-{processes}"))
        s3.bucket(BUCKET)
        s3.public_read(BUCKET, "archive")
        store = S3Store.from_url(f"s3://{BUCKET}/archive", s3.environ())
        store.put("pages/1", page_bytes, 0)
        eport = free_port()
        edge = nginx(
            self.workdir / f"edge-{processes}",
            listen=eport,
            template=CDN_TEMPLATE,
            values={
                "SIMPLEFEED_SERVICE": f"{HOST}:{ours.port}",
                "SIMPLEFEED_BUCKET_HOST": f"{HOST}:{s3.port}",
                "SIMPLEFEED_BUCKET_HOST_HEADER": f"{HOST}:{s3.port}",
                "SIMPLEFEED_BUCKET_PATH": f"/{BUCKET}/archive",
            },
        )
        self.stack.callback(edge.stop)
        at_edge = f"http://{HOST}:{eport}/pages/1"
        direct = f"{s3.endpoint}/{BUCKET}/archive/pages/1"
        assert self.check(at_edge, 200) == page_bytes == self.check(direct, 200)
        self.pair(
            Row("bucket", "archived page, nginx edge on S3", processes, [], "the S3 server"),
            lambda: self.load(edge, at_edge),
            lambda: self.load(s3, direct),
        )

    def run_modes(self, processes: int) -> None:
        """Measure the uWSGI options of uwsgi.ini, how it listens and its threads."""
        p = processes
        variants: list[tuple[str, dict[str, object], int]] = [
            (
                "http-socket + Connection: close (before keep-alive)",
                {"listen": "http-socket"},
                self.args.connections,
            ),
            (
                "http-socket + Connection: close, threads = 1 (before)",
                {"listen": "http-socket", "threads": 1},
                self.args.connections,
            ),
            ("http11-socket, threads = 1", {"threads": 1}, self.args.connections),
            ("http11-socket, connections = processes", {}, p),
            ("HTTP router + keep-alive", {"listen": "http-router"}, self.args.connections),
        ]
        for label, derive, connections in variants:
            self.run_mode(p, label, derive, connections)

    def run_mode(self, p: int, label: str, derive: dict[str, object], connections: int) -> None:
        name = label.split(",")[0].split(" ")[0] + ("-c" if connections == p else "")
        name += f"-t{derive['threads']}" if "threads" in derive else ""
        ini = derive_ini(self.workdir / f"ours-{name}-{p}.ini", **derive)  # type: ignore[arg-type]
        with contextlib.ExitStack() as stack:
            saved, self.stack = self.stack, stack
            try:
                # The command `simplefeed serve` sets SIMPLEFEED_THREADS, over the ini's default.
                threads = (
                    {"SIMPLEFEED_THREADS": str(derive["threads"])} if "threads" in derive else {}
                )
                ours = self.ours(f"ours-{name}-{p}", p, ini, **threads)
                mini, minimal = self.baseline(f"minimal-{name}-{p}", p, **derive)
                inm = {"If-None-Match": get(ours.url("/recent")).headers["etag"]}
                min_inm = {"If-None-Match": get(minimal + "/recent").headers["etag"]}
                self.check(ours.url("/recent"), 304, inm)
                self.check(minimal + "/recent", 304, min_inm)
                self.pair(
                    Row("modes", f"/recent 304, {label}", p, [], "minimal falcon 304"),
                    lambda: self.load(ours, ours.url("/recent"), inm, connections),
                    lambda: self.load(mini, minimal + "/recent", min_inm, connections),
                )
            finally:
                self.stack = saved


# -- output -----------------------------------------------------------------------------------


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def format_row(row: Row) -> str:
    ratio = row.ratio
    met = ""
    if row.target is not None and ratio is not None:
        met = "met" if ratio >= row.target else "MISSED"
    errors = Row.errors(row.ours)
    errors.update({f"base {k}": v for k, v in Row.errors(row.baseline).items()})
    cpu_ratio = row.cpu_ratio
    cells = [
        row.name,
        str(row.processes),
        fmt_rate(Row.rate(row.ours)),
        f"{Row.p99(row.ours):.2f}",
        f"{Row.cpu(row.ours):.0f}",
        row.baseline_name,
        fmt_rate(Row.rate(row.baseline)) if row.baseline else "",
        f"{Row.p99(row.baseline):.2f}" if row.baseline else "",
        f"{Row.cpu(row.baseline):.0f}" if row.baseline else "",
        f"{ratio:.0%}" if ratio is not None else "",
        f"{cpu_ratio:.0%}" if cpu_ratio is not None else "",
        f">= {row.target:.0%} {met}" if row.target is not None else "",
        " ".join(f"{k}={v}" for k, v in errors.items()),
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| GET | uWSGI processes | req/s | p99 ms | CPU us/req | baseline | baseline req/s "
    "| baseline p99 ms | baseline CPU us/req | ratio (req/s) | CPU ratio | target | wrk errors |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def report(rows: list[Row], info: Mapping[str, str], args: argparse.Namespace) -> str:
    out = ["", "## Machine", ""]
    out += [f"- {k}: {v}" for k, v in info.items()]
    out.append(
        f"- wrk: 1 thread, {args.connections} connections, {args.rounds} x {args.duration} s "
        "per cell and baseline, alternating; medians"
    )
    for section, title in (
        ("targets", "Targets"),
        ("compressed", "Compressed (Accept-Encoding: gzip / br)"),
        ("more", "Other paths"),
        ("bucket", "The bucket behind an nginx edge (deploy/cdn/, moto's S3 server)"),
        ("modes", "uWSGI options (compare with the shipped http11-socket rows above)"),
    ):
        selected = [r for r in rows if r.section == section]
        if selected:
            out += ["", f"## {title}", "", HEADER] + [format_row(r) for r in selected]
    scaling = []
    for r in rows:
        if r.section != "modes" and r.processes == 1:
            four = [x for x in rows if x.name == r.name and x.processes == 4]
            if four:
                one, many = Row.rate(r.ours), Row.rate(four[0].ours)
                scaling.append(
                    f"| {r.name} | {fmt_rate(one)} | {fmt_rate(many)} | {many / one:.2f}x |"
                )
    if scaling:
        out += [
            "",
            "## Scaling, 1 -> 4 uWSGI processes (ours)",
            "",
            "| GET | 1 process req/s | 4 processes req/s | 4 / 1 |",
            "|---|---|---|---|",
            *scaling,
        ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=3, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="wrk runs per cell (alternating)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--processes", default="1,4", help="uWSGI process counts")
    parser.add_argument("--no-modes", action="store_true", help="skip the uWSGI option variants")
    parser.add_argument("--no-bucket", action="store_true", help="skip the S3 edge (moto)")
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s per cell")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.rounds = 1, 1
    missing = [tool for tool in ("wrk", "nginx") if shutil.which(tool) is None]
    if missing:
        print(f"bench/read.py needs {' and '.join(missing)}: apt-get install -y wrk nginx")
        return 2
    info = machine()
    print("\n".join(f"{k}: {v}" for k, v in info.items()), flush=True)
    print(HEADER, flush=True)
    counts = [int(x) for x in args.processes.split(",")]
    with tempfile.TemporaryDirectory(prefix="sf-bench-read-") as tmp:
        bench = None
        with contextlib.ExitStack() as stack:
            bench = Bench(args, Path(tmp), stack)
            for processes in counts:
                with contextlib.ExitStack() as per:
                    saved, bench.stack = bench.stack, per
                    try:
                        bench.run_processes(processes)
                    finally:
                        bench.stack = saved
            if not args.no_modes:
                for processes in counts:
                    bench.run_modes(processes)
        info = {**info, "load average after": machine()["load average"]}
        text = report(bench.rows, info, args)
        print(text)
        if args.json:
            args.json.write_text(
                json.dumps({"machine": info, "rows": [asdict(r) for r in bench.rows]}, indent=2)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
