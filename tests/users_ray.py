"""A Ray cluster started as a user starts one (``ray start --head``), for the tests that run
tunedsl on a cluster it did not start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tunedsl.backends.trinity.ray_head import forget_address, free_port, unreachable


def on_users_cluster(base: dict[str, str] | None = None) -> dict[str, str]:
    """A user's environment for a token-authenticated cluster they connect to by address:
    a driver that connects by address authenticates only when told (Ray's token-auth
    guide). ``base``: the environment to add to (this process's by default)."""
    return {**(base if base is not None else os.environ), "RAY_AUTH_MODE": "token"}


def _named(port: int) -> bool:
    from ray._common.utils import get_ray_address_file

    try:
        return Path(get_ray_address_file(None)).read_text().strip().endswith(f":{port}")
    except OSError:
        return False


@contextlib.contextmanager
def users_ray_cluster(*options: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``ray start --head --block OPTIONS`` in a session of its own; yields its address and
    stops it as ``ray stop`` does (SIGTERM to the head, no Serve drain)."""
    port = free_port()
    ray = Path(sys.executable).with_name("ray")
    head = subprocess.Popen(
        [str(ray), "start", "--head", "--block", f"--port={port}", "--include-dashboard=false",
         "--disable-usage-stats", *options],
        env={**on_users_cluster(env), "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        # Ready once `ray start` has named it in Ray's address file, where a driver that is
        # given no address looks (its GCS answers a moment before).
        while unreachable(address) is not None or not _named(port):
            assert head.poll() is None and time.monotonic() < deadline, "ray start failed"
            time.sleep(0.5)
        yield address
    finally:
        head.terminate()
        head.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # whatever of its session outlived it
        forget_address(port)  # as `ray stop` does
