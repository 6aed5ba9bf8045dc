"""tunedsl's Trinity path on a CPU, end to end: a real Tinker-compatible server for Trinity's
Tinker mode to train through.

Trinity-RFT's Tinker mode swaps its two GPU pieces, vLLM engines and the verl trainer, for
its ``TinkerModel`` engine and Tinker trainer, which call a Tinker service over HTTP with
the ``tinker`` SDK. Everything else is the run users pay GPUs for: tunedsl's launch,
Trinity's launcher, Ray actors, the explorer and its runners with tunedsl's workflow class,
the experience buffer, the trainer loop, weight sync, evals, checkpoints and resume.
`TinkerService` starts SkyRL tx 0.3.0 (a Tinker server on JAX that runs on a CPU) from its
own environment (``scripts/tinker_server_env.sh`` builds ``.venv-tx``), serving a tiny
Llama built in code, behind `tests.tinker_wire.TinkerWire` (the SDK is newer than tx).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tunedsl.backends.trinity.ray_head import free_port

from .tinker_wire import SDK_VERSION, TX_VERSION, TinkerWire

REPO = Path(__file__).resolve().parents[1]
#: The tx server's environment (scripts/tinker_server_env.sh).
TX_ENV = Path(os.environ.get("TUNEDSL_TINKER_SERVER_ENV", REPO / ".venv-tx"))
#: Trinity's runners import vLLM's names at module level; without vLLM (a GPU package) the
#: import-only shim stands in for them on every Ray worker (tests/vllm_shim says which).
VLLM_SHIM = REPO / "tests" / "vllm_shim"


def skip_unless_available() -> None:
    """Skip where the server cannot run: no tx environment, or no tinker SDK (Trinity's
    tinker extra is for Python 3.11+)."""
    if os.environ.get("TUNEDSL_TRINITY_ON_TINKER") == "skip":
        pytest.skip("TUNEDSL_TRINITY_ON_TINKER=skip (CI runs these once, on Python 3.11)")
    pytest.importorskip("trinity.common.config")
    tinker = pytest.importorskip("tinker", reason="the Tinker SDK needs Python 3.11+")
    if tinker.__version__ != SDK_VERSION:
        pytest.fail(f"tests/tinker_wire.py translates for tinker {SDK_VERSION}; "
                    f"{tinker.__version__} is installed")
    if not (TX_ENV / "bin" / "python").exists():
        pytest.skip(f"no Tinker server environment at {TX_ENV}: build it with "
                    f"'bash scripts/tinker_server_env.sh'")


def _tx_python() -> str:
    return str(TX_ENV / "bin" / "python")


class TinkerService:
    """SkyRL tx serving ``model`` on loopback, behind the wire adapter (``url``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # The SDK reads a base model whose name has exactly two slashes as
        # "<org>/<model>/<variant>" (sampling_client.py, _load_tokenizer_from_model_info):
        # a path with more slashes is read whole.
        self.model = str(folder / "models" / "tiny-llama")
        self.log_path = folder / "tx-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.wire: TinkerWire | None = None

    def build_model(self) -> None:
        """The arith example's tiny Llama, written by tx's own transformers (< 5), which
        cannot read the files transformers 5 writes; transformers 5 reads these."""
        subprocess.run([_tx_python(), "-m", "examples.arith.tiny_model", self.model],
                       cwd=REPO, check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})

    def start(self) -> TinkerService:
        self.build_model()
        port = free_port()
        # tx's API server starts its engine with `uv run --extra tinker --extra jax -m
        # tx.tinker.engine` (tx/tinker/api.py): outside a project uv runs it in the
        # environment VIRTUAL_ENV names, so the working directory must hold no pyproject.
        scratch = self.folder / "tx-cwd"
        scratch.mkdir()
        env = {**os.environ, "VIRTUAL_ENV": str(TX_ENV),
               "PATH": f"{TX_ENV / 'bin'}{os.pathsep}{os.environ['PATH']}",
               "JAX_PLATFORMS": "cpu"}
        env.pop("PYTHONPATH", None)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [_tx_python(), "-m", "tx.tinker.api", "--base-model", self.model,
             "--port", str(port), "--host", "127.0.0.1",
             "--checkpoints-base", str(self.folder / "tx-checkpoints"),
             "--database-url", f"sqlite:///{self.folder / 'tx.db'}"],
            cwd=scratch, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self._wait_until_healthy(port)
        self.wire = TinkerWire(f"http://127.0.0.1:{port}").__enter__()
        return self

    def _wait_until_healthy(self, port: int, seconds: float = 180.0) -> None:
        import urllib.request

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/healthz",
                                            timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        pytest.fail(f"SkyRL tx {TX_VERSION} did not come up; its log:\n"
                    f"{self.log_path.read_text(errors='replace')[-3000:]}")

    @property
    def url(self) -> str:
        assert self.wire is not None
        return self.wire.url

    def stop(self) -> None:
        if self.wire is not None:
            self.wire.__exit__(None, None, None)
            self.wire = None
        if self.process is not None and self.process.poll() is None:
            import signal

            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()


def run_environment() -> dict[str, str]:
    """The environment a ``tunedsl run`` on Tinker gets: the vLLM import shim for Trinity's
    runners (Ray's workers inherit it from the process that starts Ray) and a key the SDK
    requires (tx checks none)."""
    path = os.pathsep.join(filter(None, [str(VLLM_SHIM), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "TINKER_API_KEY": "tml-tunedsl-tests",
            "PYTHONUNBUFFERED": "1"}


def arith_on_tinker(service: TinkerService, root: Path, *, steps: int = 2,
                    extra: tuple[str, ...] = ()) -> list[str]:
    """``--set`` options that run the arith example through ``service``: ``steps`` explorer
    steps of 15 tasks x 8 replies, an eval every step and a checkpoint every second one (on
    Tinker a checkpoint step syncs no weights: tunedsl refuses one every step), two
    runners."""
    return ["--backend", "trinity", "--set", f"model.model_path={service.model}",
            "--set", f"tinker.base_url={service.url}", "--set", "tinker.rank=8",
            "--set", f"train_dataset.total_steps={steps}",
            "--set", f"checkpoint_root_dir={root}",
            "--set", "algorithm.save_interval_steps=2",
            "--set", "algorithm.eval_interval_steps=1",
            "--set", "trinity.explorer.runner_per_model=2", *extra]


def python() -> str:
    return sys.executable
