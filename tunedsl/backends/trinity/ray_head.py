"""The Ray cluster a Trinity run uses: the user's, or one tunedsl starts and stops.

tunedsl starts Ray as ``ray start --head --block`` in a session of its own, never inside
its own process (``ray.init()`` with no address), for three reasons read in Trinity
0.6.0's launcher (``cli/launcher.py``):

- ``run_stage`` ends with ``ray.shutdown()``. A Ray started inside the driver dies with
  it, so the next stage's ``ray.init(address="auto")`` finds no cluster (Trinity's own
  CLI refuses to run without an external cluster for this reason). A head of its own
  outlives every ``ray.shutdown()``: it is only a disconnect.
- Each stage's job gets only the environment Trinity gives it; tunedsl connects before
  every stage with the run's own runtime_env (its code, API keys), and Trinity's
  ``ray.init(..., ignore_reinit_error=True)`` keeps that connection.
- Ctrl-C at a terminal signals the whole foreground process group. Ray's processes in
  the driver's group took the SIGINT too and the run did not end; in a session of their
  own only the command gets it, ends its wait, and stops the head.

The head is stopped (SIGTERM to its session, then SIGKILL) however the run ends.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from ...errors import RunError

#: Seconds a head may take to answer before the run gives up on it.
START_SECONDS = 120.0
#: Seconds a head may take to stop on SIGTERM before it is killed.
STOP_SECONDS = 30.0


def forget_address(port: int) -> None:
    """Remove Ray's address file if it names the cluster at ``port``: ``ray start`` writes
    it, where ``ray.init()`` looks first; ``ray stop`` removes it, a stopped ``--block``
    does not, and the next ``ray.init`` would try the dead address for minutes."""
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    try:
        if path.read_text().strip().rpartition(":")[2] == str(port):
            path.unlink()
    except OSError:
        pass


def token_auth_as_ray_decides() -> None:
    """Token authentication as Ray chooses it for a local cluster, in this process and so in
    the head it starts: on when a token exists (Ray 2.60's ``ray start`` turns it on then,
    and a driver connecting by address uses it only once told: ``ray._private.worker.init``,
    "an explicit address ... never does"). Ray before token authentication has no such
    switch."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: How long a port that answers TCP has to complete a gRPC handshake (a Ray head on this
#: machine does in a few milliseconds).
GRPC_HANDSHAKE_SECONDS = 5


def unreachable(address: str) -> str | None:
    """Why nothing answers at a Ray address (``host:port``, ``ray://host:port``), or None.

    A TCP connect and a gRPC handshake answer in seconds; ``ray.init`` retries a dead
    address for minutes, and waits on a port that is not Ray's for as long as it is left to.
    """
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():
        return "not a host:port address"
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None  # a TLS head's handshake needs its certificates; the port answers
    return _not_grpc(f"{host}:{port}")


def _not_grpc(address: str) -> str | None:
    """Why what answers at ``address`` is not a Ray head (or Ray Client server), or None.

    Both speak gRPC; ``ray.init`` given another service's port (the dashboard's, 8265, is
    the usual one) waits for a gRPC reply it never gets, for as long as it is left to.
    """
    import grpc  # Ray's own dependency: the protocol its head speaks

    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=GRPC_HANDSHAKE_SECONDS)
        return None
    except grpc.FutureTimeoutError:
        return (f"it answers, but not as a Ray head: no gRPC handshake within "
                f"{GRPC_HANDSHAKE_SECONDS} s; the head's port is 6379 unless 'ray start "
                f"--port' chose another (the dashboard's 8265 is not it)")
    finally:
        channel.close()


class RayHead:
    """A single-node Ray cluster this process started (`start`) and stops (`stop`)."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: IO[bytes],
                 log_path: Path) -> None:
        self.process, self.port, self._log, self.log_path = process, port, log, log_path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, *, num_gpus: int | None = None) -> RayHead:
        """Start ``ray start --head --block`` in a session of its own; return once its
        GCS answers.

        Raises:
            RunError: the head exited or did not answer within `START_SECONDS`.
        """
        port = free_port()
        ray = Path(sys.executable).with_name("ray")
        command = [str(ray) if ray.exists() else "ray", "start", "--head", "--block",
                   f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"]
        if num_gpus is not None:
            command.append(f"--num-gpus={num_gpus}")
        handle = tempfile.NamedTemporaryFile(prefix="tunedsl-ray-head-", suffix=".log",
                                             delete=False)
        token_auth_as_ray_decides()
        # On SIGTERM a head first drains its node for Ray Serve's sake, up to this many
        # seconds (``Node._drain_node_before_shutdown``); the run's head serves nothing.
        env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle,
                                   stderr=subprocess.STDOUT, start_new_session=True, env=env)
        head = cls(process, port, handle, Path(handle.name))
        atexit.register(head.stop)  # an exception the caller does not catch stops it too
        deadline = time.monotonic() + START_SECONDS
        while unreachable(head.address) is not None:
            if process.poll() is not None or time.monotonic() > deadline:
                head.stop()
                raise RunError(f"the Ray head tunedsl started did not come up; its output "
                               f"is in {head.log_path}")
            time.sleep(0.2)
        return head

    def stop(self) -> None:
        """Stop the head and every Ray process it started (its whole session); once."""
        if self._log.closed:
            return
        if self.process.poll() is None:
            # To the head alone: it stops what it started (``Node``'s SIGTERM handler);
            # signalled too, Ray's own processes die under it and its cleanup waits on them.
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        self._signal(signal.SIGKILL)  # anything of the session that outlived the head
        self._log.close()
        forget_address(self.port)

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
