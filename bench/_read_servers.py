"""Servers and load for ``bench/read.py``.

They are uWSGI configurations derived from the shipped ``uwsgi.ini``, nginx with the shipped
server block, and wrk. Every server is a child process on 127.0.0.1 that leads its own process
group (setsid). It is stopped when the ``ExitStack`` that started it closes, whatever happened.
Its process group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.servers import HOST, PROJECT_ROOT, clean_environ, free_port

BENCH_DIR = Path(__file__).resolve().parent
REPORT_LUA = BENCH_DIR / "_read_report.lua"
NGINX_TEMPLATE = PROJECT_ROOT / "deploy" / "nginx" / "simplefeed.conf.template"
CDN_TEMPLATE = PROJECT_ROOT / "deploy" / "cdn" / "nginx.conf.template"
UWSGI = Path(sys.executable).with_name("uwsgi")

# -- uWSGI configurations ---------------------------------------------------------------------

LISTEN_MODES = ("http11-socket", "http-socket", "http-router")


def derive_ini(
    dest: Path,
    *,
    module: str | None = None,
    listen: str = "http11-socket",
    static_map: str | None = None,
    threads: int | None = None,
) -> Path:
    """Write a copy of the shipped uwsgi.ini with only the named settings changed.

    The ``listen`` setting takes three values. The value ``http11-socket`` is as shipped, with
    keep-alive in the workers. The value ``http-socket`` adds ``Connection: close``. That makes
    one request per connection, as shipped before keep-alive. The value ``http-router`` puts
    uWSGI's HTTP router process, with keep-alive, in front of the workers. The ``threads``
    setting gives the threads per worker, instead of the shipped number.
    """
    text = (PROJECT_ROOT / "uwsgi.ini").read_text()
    if module is not None:
        text, n = re.subn(r"(?m)^module = .*$", f"module = {module}", text)
        assert n == 1, "uwsgi.ini has no single module line"
    if static_map is not None:
        # A plain static-map with its gzip copies. It leaves out the shipped static route's
        # rules and the headers it adds, which uWSGI would otherwise apply to each file.
        text = re.sub(r"(?m)^(route[-a-z]*|add-header) = .*\n", "", text)
        text += f"\nstatic-map = {static_map}\n"
    assert listen in LISTEN_MODES, listen
    if listen == "http-socket":
        text = re.sub(r"(?m)^http11-socket = ", "http-socket = ", text)
        text += "\nadd-header = Connection: close\n"
    elif listen == "http-router":
        text = re.sub(r"(?m)^http11-socket = ", "http = ", text)
        text += "\nhttp-keepalive = 1\n"
    if threads is not None:
        text, n = re.subn(r"(?m)^threads = \d+$", f"threads = {threads}", text)
        assert n == 1, "uwsgi.ini has no single default threads line"
    dest.write_text(text)
    return dest


# -- processes --------------------------------------------------------------------------------


class Child:
    """A server process that leads its own process group, so ``stop`` leaves nothing behind."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        ready_url: str,
        stop_signal: int = signal.SIGTERM,
        timeout: float = 20.0,
    ) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self.ready_url = ready_url
        self.stop_signal = stop_signal
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    client.get(self.ready_url)
                    return
                except httpx.TransportError:
                    time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer {self.ready_url}\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, self.stop_signal)
                self.process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def uwsgi(
    name: str, ini: Path, *, port: int, processes: int, workdir: Path, env: Mapping[str, str]
) -> Child:
    """Run uWSGI itself, not ``simplefeed serve``, with a derived ini, for the baselines."""
    full = clean_environ()
    full["PYTHONPATH"] = str(PROJECT_ROOT)
    full.update(
        {
            "SIMPLEFEED_HTTP_SOCKET": f"{HOST}:{port}",
            "SIMPLEFEED_PROCESSES": str(processes),
        }
    )
    full.update(env)
    return Child(
        name,
        [str(UWSGI), "--ini", str(ini)],
        env=full,
        cwd=workdir,
        ready_url=f"http://{HOST}:{port}/",
    )


#: The read benchmark's baseline: a minimal falcon app answering like Simplefeed's /recent.
MINIMAL = "bench.minimal_falcon:application"


def minimal_falcon(
    name: str, workdir: Path, body: Path, *, processes: int, **derive: Any
) -> tuple[Child, str]:
    """Run bench/minimal_falcon.py under the shipped uWSGI options, and return its base URL.

    ``derive`` is as for :func:`derive_ini`. The app answers with the bytes of ``body``.
    """
    port = free_port()
    ini = derive_ini(workdir / f"{name}.ini", module=MINIMAL, **derive)
    child = uwsgi(
        name,
        ini,
        port=port,
        processes=processes,
        workdir=workdir,
        env={"SIMPLEFEED_BENCH_BODY": str(body)},
    )
    return child, f"http://{HOST}:{port}"


def render_template(template: str, values: Mapping[str, str]) -> str:
    """Fill ``${NAME}`` for the given names only, as envsubst with a named list does.

    None may be left unfilled.
    """
    out = template
    for key, value in values.items():
        out = out.replace("${" + key + "}", value)
    left = re.findall(r"\$\{SIMPLEFEED_[A-Z_]+\}", out)
    if left:
        raise ValueError(f"placeholders not filled: {sorted(set(left))}")
    return out


NGINX_MAIN = """\
# Test/bench skeleton around the shipped server block (Debian's defaults where they matter).
{user}
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    sendfile on;
    tcp_nopush on;
    types_hash_max_size 2048;
    include {prefix}/mime.types;
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    scgi_temp_path {prefix}/tmp/scgi;
{servers}
}}
"""


def nginx(
    prefix: Path,
    *,
    listen: int,
    upstream: str = "",
    archive_dir: Path | None = None,
    extra_server: str = "",
    workers: str = "auto",
    template: Path = NGINX_TEMPLATE,
    values: Mapping[str, str] | None = None,
) -> Child:
    """Run nginx in the foreground with the shipped server block, plus ``extra_server``.

    Or run it with ``template`` filled with ``values``. The listening address is filled in here.
    """
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "tmp").mkdir(exist_ok=True)
    for name in ("mime.types", "uwsgi_params"):
        shutil.copy(Path("/etc/nginx") / name, prefix / name)
    if values is None:
        values = {
            "SIMPLEFEED_SERVER_NAME": "localhost",
            "SIMPLEFEED_UPSTREAM": upstream,
            "SIMPLEFEED_ARCHIVE_DIR": str(archive_dir),
        }
    server = render_template(
        template.read_text(), {**values, "SIMPLEFEED_LISTEN": f"{HOST}:{listen}"}
    )
    (prefix / "simplefeed.conf").write_text(server)
    conf = prefix / "nginx.conf"
    conf.write_text(
        NGINX_MAIN.format(
            # Run as root, nginx's workers would be "nobody", who cannot enter a private
            # temporary directory. Outside root, nginx runs as the caller anyway.
            user="user root;" if os.geteuid() == 0 else "",
            workers=workers,
            prefix=prefix,
            servers=f"    include {prefix}/simplefeed.conf;\n{extra_server}",
        )
    )
    argv = ["nginx", "-p", str(prefix), "-e", str(prefix / "error.log"), "-c", str(conf)]
    return Child(
        "nginx",
        [*argv, "-g", "daemon off;"],
        env=clean_environ(),
        cwd=prefix,
        ready_url=f"http://{HOST}:{listen}/healthz",
        stop_signal=signal.SIGQUIT,
    )


# -- load -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    requests: int
    seconds: float
    p50_us: int
    p99_us: int
    errors: dict[str, int]
    #: CPU time (user + system) the server's processes spent per request, in microseconds.
    #: Other load on the machine disturbs it much less than the request rate.
    cpu_us: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


_TICK = os.sysconf("SC_CLK_TCK")


def group_cpu(*pgids: int) -> float:
    """Return the CPU seconds (user + system) the live processes of these groups used so far."""
    total = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and int(fields[2]) in pgids:
                total += int(fields[11]) + int(fields[12])
    return total / _TICK


def process_cpu(*pids: int) -> float:
    """Return the CPU seconds (user + system) used so far by these live processes."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def _stat(pid: int) -> list[bytes] | None:
    """Return the fields of /proc/PID/stat after the command name, the state first, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()


def wrk(
    url: str,
    *,
    duration: float,
    connections: int,
    threads: int = 1,
    headers: Mapping[str, str] | None = None,
    pgids: tuple[int, ...] = (),
    script: Path | None = None,
) -> Load:
    """Run wrk against url.

    ``pgids`` are the servers' process groups, whose CPU time is measured. ``script`` is Lua
    run before the report's, such as request and response functions.
    """
    report = REPORT_LUA
    if script is not None:
        with tempfile.NamedTemporaryFile(
            "w", suffix=".lua", prefix="wrk-", delete=False
        ) as combined:
            combined.write(script.read_text() + "\n" + REPORT_LUA.read_text())
        report = Path(combined.name)
    argv = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        "--timeout",
        "2s",
        "-s",
        str(report),
    ]
    for name, value in (headers or {}).items():
        argv += ["-H", f"{name}: {value}"]
    argv.append(url)
    cpu_before = group_cpu(*pgids)
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, check=True, timeout=duration + 30
        ).stdout
    finally:
        if report != REPORT_LUA:
            report.unlink()
    cpu = group_cpu(*pgids) - cpu_before
    data: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return Load(
        cpu_us=cpu * 1e6 / data["requests"] if data["requests"] else 0.0,
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        p50_us=data["latency_us"]["p50"],
        p99_us=data["latency_us"]["p99"],
        errors={k: v for k, v in data["errors"].items() if v},
    )


# -- the machine ------------------------------------------------------------------------------


def _first_line(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0] if lines else "?"


def machine() -> dict[str, str]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import falcon

    return {
        "cpus": str(len(os.sched_getaffinity(0))),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "uwsgi": _first_line([str(UWSGI), "--version"]),
        "falcon": falcon.__version__,
        "nginx": _first_line(["nginx", "-v"]).replace("nginx version: ", ""),
        "wrk": _first_line(["wrk", "-v"]).split(" [")[0],
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
