"""Build the uWSGI plugin that serves archived pages in C (``uwsgi_plugin/``).

``simplefeed serve`` builds it once per source and uWSGI build, into a cache directory, and
hands its path to uwsgi.ini in SIMPLEFEED_PAGE_PLUGIN. Its one routing action checks a page
request in one pass and calls uWSGI's own static file serving. Without it, uwsgi.ini's routing
rules do the same checks one rule at a time, for more than twice the instructions a page
(docs/benchmarks.md, "Archived pages as static files"). So a machine without a C compiler
still serves archived pages without Python, only slower.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from pathlib import Path

#: The plugin's C source, and the declaration that stands in for PCRE2's header.
SOURCE_DIR = Path(__file__).with_name("uwsgi_plugin")
SOURCE = SOURCE_DIR / "simplefeed_pages.c"
#: How long a build may take. It takes about a second.
BUILD_TIMEOUT_S = 120


class PluginUnavailable(Exception):
    """The plugin cannot be built here, for the reason given."""


def pyuwsgi_module() -> Path:
    """The file of pyuwsgi's module, which holds uWSGI itself."""
    spec = importlib.util.find_spec("pyuwsgi")
    if spec is None or spec.origin is None:
        raise PluginUnavailable("pyuwsgi is not installed here")
    return Path(spec.origin)


def cache_directory(environ: Mapping[str, str]) -> Path:
    """Where built plugins are kept: ``$XDG_CACHE_HOME/simplefeed``, or ``~/.cache/simplefeed``."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "simplefeed"


def compiler(environ: Mapping[str, str]) -> list[str]:
    """The C compiler's command: $CC, else the one Python was built with, else ``cc``.

    Raises :class:`PluginUnavailable` when that command is not on PATH.
    """
    cc = shlex.split(environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if shutil.which(cc[0]) is None:
        raise PluginUnavailable(f"no C compiler: {cc[0]!r} is not on PATH")
    return cc


def built_here(environ: Mapping[str, str]) -> Path:
    """The plugin for the uWSGI of this Python's environment, built now if need be."""
    uwsgi = Path(sys.executable).with_name("uwsgi")
    if not uwsgi.exists():
        raise PluginUnavailable(f"no {uwsgi}")
    return plugin_for(str(uwsgi), pyuwsgi_module(), environ)


def plugin_for(uwsgi: str, module: Path, environ: Mapping[str, str]) -> Path:
    """The plugin built for ``uwsgi`` and its ``module`` (pyuwsgi's), built now if need be.

    Its directory's name is a digest of the source and of the uWSGI build, so a new version of
    either builds a new plugin. The file's own name is the one uWSGI derives the plugin's
    symbol from. Raises :class:`PluginUnavailable` when the build fails.
    """
    stat = module.stat()
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), (SOURCE_DIR / "pcre2.h").read_bytes()):
        key.update(part)
    key.update(f"{module}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    target = cache_directory(environ) / key.hexdigest()[:16] / "simplefeed_pages_plugin.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as scratch:
            built = _build(uwsgi, module, Path(scratch), environ)
            # Two services may build at once. Each renames its own file into place whole.
            os.replace(built, target)
    except OSError as exc:
        raise PluginUnavailable(f"cannot build in {target.parent}: {exc}") from None
    return target


def _build(uwsgi: str, module: Path, scratch: Path, environ: Mapping[str, str]) -> Path:
    """Compile the plugin in ``scratch`` and return the file.

    uwsgi.h is the one this uWSGI was built with (``uwsgi --dot-h``), and the flags are its own
    (``uwsgi --cflags``). The plugin links to pyuwsgi's module, because Python loaded that
    module's symbols privately, where a plugin loaded after it cannot find them.
    """
    cc = compiler(environ)
    (scratch / "uwsgi.h").write_text(_uwsgi_output(uwsgi, "--dot-h"))
    built = scratch / "simplefeed_pages_plugin.so"
    command = [*cc, "-shared", *shlex.split(_uwsgi_output(uwsgi, "--cflags"))]
    command += ["-I", str(scratch), "-I", str(SOURCE_DIR), "-o", str(built), str(SOURCE)]
    command += [str(module)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise PluginUnavailable(f"{cc[0]} took over {BUILD_TIMEOUT_S} s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise PluginUnavailable(f"{cc[0]} failed: {said[-1] if said else done.returncode}")
    return built


def _uwsgi_output(uwsgi: str, option: str) -> str:
    """What ``uwsgi OPTION`` prints, for the options that describe its build."""
    try:
        done = subprocess.run(
            [uwsgi, option], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PluginUnavailable(f"{uwsgi} {option}: {exc}") from None
    if done.returncode != 0 or not done.stdout:
        raise PluginUnavailable(f"{uwsgi} {option} printed nothing")
    return done.stdout


def main() -> None:
    """Build the plugin for this environment's uWSGI, and say where it is or why it is not."""
    try:
        built = built_here(os.environ)
    except PluginUnavailable as exc:
        print(f"simplefeed: cannot build the page plugin ({exc}); serve goes on without it")
        return
    print(f"simplefeed: the page plugin is {built}")


if __name__ == "__main__":
    main()
