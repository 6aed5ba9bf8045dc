"""``tunedsl view``: a local, read-only web page over runs and eval results.

`open_source` reads what a path holds (`sources`, `trinity_run` with its readers
`trinity_runs.config`, `trinity_runs.experiences` and `tensorboard`), `Viewer`
answers the page's questions (`app`, `query`), `serve` puts it on loopback (`server`), and
`write_report` writes it as one self-contained HTML file. It is an application beside the
CLI (the last stage of the package's layers), since it reads every backend's runs.

Importing this package reads none of those modules (`Viewer` and `open_source` load on
first use): the CLI takes the defaults below for its help text on every command.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DatasetError
from ..wording import given, options, spelled

if TYPE_CHECKING:
    from .app import Viewer
    from .sources import open_source

#: The port ``tunedsl view`` tries first; when it is taken (and was not asked for) any
#: free port is used instead.
DEFAULT_PORT = 8765
#: Rollouts a ``--out`` file embeds unless told otherwise.
DEFAULT_MAX_ROLLOUTS = 2000

__all__ = ["DEFAULT_MAX_ROLLOUTS", "DEFAULT_PORT", "Viewer", "open_source", "view",
           "write_report"]


#: Names this package exports from its modules, each loaded when first asked for.
_LAZY = {"Viewer": "app", "open_source": "sources"}


def __getattr__(name: str) -> Any:
    """`Viewer` or `open_source`, imported on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # later lookups find it without this hook
    return value


def write_report(viewer: Viewer, out: str | Path, max_rollouts: int = DEFAULT_MAX_ROLLOUTS) -> int:
    """Write the page with its data embedded to ``out`` (it needs no server and no
    network); returns how many rollouts were left out."""
    from ..runs.writing import write_whole
    from .app import page_html

    data = viewer.embedded(max_rollouts)
    write_whole(out, page_html(data), label=given("out", out))
    return data["left_out"]


def view(paths: Sequence[str | Path], *, host: str = "127.0.0.1", port: int | None = None,
         open_browser: bool = True, out: str | Path | None = None,
         max_rollouts: int = DEFAULT_MAX_ROLLOUTS) -> None:
    """Show a run directory, an eval results file, or two eval results compared.

    Args:
        paths: One path, or two eval results files (before, after).
        host: The address to serve on (loopback unless told otherwise).
        port: The port; None tries `DEFAULT_PORT`, then any free one.
        open_browser: Open the page in the default browser.
        out: Write the page to this HTML file instead of serving it.
        max_rollouts: With ``out``: the most rollouts the file embeds.
    """
    from ..dsl import arguments

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]  # one path given as itself, not a list of one
    if not isinstance(paths, Sequence) or not 1 <= len(paths) <= 2:
        raise ConfigError("give one path to view, or two eval results to compare")
    paths = [arguments.path("paths", path, optional=False) for path in paths]
    out = arguments.path("out", out)
    if not isinstance(host, str) or not host.strip():  # '' would serve every interface
        raise ConfigError(f"{given('host', repr(host))}: give an address to serve on, such "
                          f"as 127.0.0.1 (this machine only)")
    arguments.whole("port", port, minimum=0, optional=True)
    arguments.whole("max_rollouts", max_rollouts, minimum=None)
    if max_rollouts < 0:
        raise ConfigError(f"{given('max_rollouts', max_rollouts)}: give 0 or more")
    from .app import Viewer
    from .sources import open_source

    if out is not None:  # before reading anything: the page must not replace its data
        from ..runs.outputs import (
            HTML_PAGE,
            Input,
            refuse_misnamed,
            refuse_overwriting,
            run_data_inputs,
        )


        refuse_overwriting(out, "out", [
            *(Input("the run directory being viewed" if Path(path).is_dir() else
                    "the results being viewed", str(path)) for path in paths),
            *(data for path in paths if Path(path).is_dir() for data in run_data_inputs(path))],
            HTML_PAGE)
        # (after what the file is, or what it is inside: view -o x.toml wrote a page there;
        # sweep 49)
        refuse_misnamed(out, "out", "view writes an HTML page", HTML_PAGE.suffixes)
    if len(paths) == 2 and _same_file(*paths):  # (a typo of one name, most likely)
        print(f"note: {paths[0]} and {paths[1]} are one file, so each rollout is compared "
              f"with itself; give the results before and after a change", file=sys.stderr)
    sources = [open_source(path) for path in paths]
    for path, source in zip(paths, sources):
        if not source.entries and not source.curves:
            refuse_unless_results_text(path)
    if out is not None:  # a page of nothing, to share, would say only "0 rollouts"
        for path, source in zip(paths, sources):
            if not source.entries and not source.curves:
                raise DatasetError(f"{path}: nothing to show yet (no finished rollout, no "
                                   f"metric), so no page was written; watch it as it is "
                                   f"written with: tunedsl view {path}")
    viewer = Viewer(sources)
    if out is not None:
        left_out = write_report(viewer, out, max_rollouts)
        note = f" ({left_out} rollouts left out; {spelled('max_rollouts')} keeps more)" \
            if left_out else ""
        print(f"wrote {out}{note}", file=sys.stderr)
        return
    from .server import serve

    try:
        serve(viewer, host, DEFAULT_PORT if port is None else port, open_browser)
    except OSError as exc:
        if port is None and exc.errno == errno.EADDRINUSE:
            serve(viewer, host, 0, open_browser)
            return
        where = options(("host", host), ("port", DEFAULT_PORT if port is None else port))
        if isinstance(exc, socket.gaierror) and ":" in host:  # the server is IPv4 only
            raise ConfigError(f"{given('host', host)}: the viewer serves IPv4 addresses "
                              f"only; give 127.0.0.1 (this machine) or 0.0.0.0 (every "
                              f"interface)") from None
        if isinstance(exc, socket.gaierror):  # a host name nothing resolves
            raise ConfigError(f"{given('host', host)}: no such host ({exc.strerror}); give "
                              f"an address of this machine, such as 127.0.0.1") from None
        raise ConfigError(f"{where}: cannot serve there: {exc.strerror or exc}; choose "
                          f"another ({given('port', 0)} takes any free port)") from None


#: How compressed files begin, and what compresses them.
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
               (b"\x28\xb5\x2f\xfd", "zstd"), (b"PK\x03\x04", "zip"))


def refuse_unless_results_text(path: str | os.PathLike[str]) -> None:
    """Refuse a file with nothing to show whose first bytes cannot begin JSON Lines (a
    compressed file, bytes that are not UTF-8, text that is no JSON object): its one
    unfinished line would otherwise be taken for a line still being written.

    Raises:
        DatasetError: one line naming the file, what it holds and the fix.
    """
    if not os.path.isfile(path):
        return
    with open(path, "rb") as file:
        head = file.read(4096)
    start = head.lstrip()
    if not start:
        return
    what = next((f"a {kind} file" for magic, kind in _COMPRESSED if head.startswith(magic)),
                None)
    fix = "decompress it first" if what else "give the results file eval wrote (-o)"
    if what is None:
        try:
            start.decode("utf-8")
        except UnicodeDecodeError as error:
            if error.start < len(start) - 4:  # not just a character cut by the 4 KB read
                what = "bytes that are not UTF-8 text"
    if what is None and not start.startswith(b"{"):
        what = "text whose first line is no JSON object"
    if what is not None:
        raise DatasetError(f"{path}: {what}, not eval results (JSON Lines) or a run "
                           f"directory's file; {fix}")


def _same_file(first: str | Path, second: str | Path) -> bool:
    """Whether two paths name one file (a link, ``./a.jsonl`` and ``a.jsonl`` too)."""
    try:
        return os.path.samefile(first, second)
    except OSError:  # (one missing: said by its reader)
        return False
