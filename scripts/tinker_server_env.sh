#!/usr/bin/env bash
# Build .venv-tx: SkyRL tx 0.3.0, a Tinker-compatible trainer and sampler on JAX that runs on
# the CPU, for the tests that run tunedsl's Trinity path end to end (tests/test_trinity_on_tinker.py).
# It needs transformers < 5, so it cannot share tunedsl's environment; the tests start it as a
# server and talk to it over loopback. Python 3.11+ (tx's own floor). Usage:
#   bash scripts/tinker_server_env.sh [VENV]      (default .venv-tx)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-tx}
python=${TINKER_SERVER_PYTHON:-python3.11}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tx.tinker.api, jax" 2>/dev/null; then
  exit 0  # already built
fi
"$python" -m venv "$venv"
# torch==2.13.0 makes pip take the CPU wheel this machine keeps (peft, which tx imports, needs
# torch; uv alone would download a multi-GB CUDA build).
"$venv/bin/python" -m pip install --quiet --no-compile "torch==2.13.0" "uv==0.13.9"
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" "skyrl-tx[tinker]==0.3.0" \
  jax flax optax -c constraints/tinker-server.txt
