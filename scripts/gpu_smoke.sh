#!/usr/bin/env bash
# Smoke test of `.[gpu]` on a GPU node: install it, then train examples/arith for one
# Trinity-RFT step. Not run in CI (CI has no GPU).
#
#     bash scripts/gpu_smoke.sh [WORKDIR]     # default: a new temporary folder, kept
#
# Needs: Linux x86_64; CPython 3.11 ($PYTHON, default python3.11); 2 NVIDIA GPUs, Ampere
# or newer (vLLM runs the tiny model in bfloat16 with FlashAttention: its head size, 16,
# is below what vLLM's Triton backend takes), with a driver for CUDA 13.0 (>= 580:
# vllm 0.23.0 pins torch 2.11.0, whose PyPI wheels are built for CUDA 13.0); access to
# PyPI; about 15 GB free in WORKDIR (4.5 GB of wheels). Step 2 uses your pip
# configuration (a mirror, say); the check in step 1 ignores it and reads PyPI.
#
# Steps:
#   1. scripts/check_gpu_install.sh --wheelhouse WORKDIR/wheels: proves the resolution
#      and leaves the verl-0.8.0+numpy2 wheel there (README, "GPU install");
#   2. a venv in WORKDIR/venv; pip install --find-links WORKDIR/wheels -e "REPO[gpu]";
#      pip check;
#   3. python -m examples.arith.tiny_model WORKDIR/tiny-model (random weights, own tokenizer);
#   4. from the repository root: tunedsl check (which must count 2 GPUs as Trinity does), then
#        python -m tunedsl run examples.arith.experiment:Arith --backend trinity \
#          --set model.model_path=WORKDIR/tiny-model --set train_dataset.total_steps=1 \
#          --set trinity.cluster.node_num=1 --set trinity.cluster.gpu_per_node=2 \
#          --set checkpoint_root_dir=WORKDIR/checkpoints
#      (1 vLLM engine on one GPU, the verl trainer on the other).
#
# Expect: "ok ..." preflight lines on stderr, a local Ray instance started (or the cluster
# in RAY_ADDRESS, or the one already running, used), Trinity's logs, then "run directory
# WORKDIR/checkpoints/tunedsl-examples/Arith-<timestamp>" and exit status 0. The reward
# after one step means nothing; the point is that install, imports, rollouts through vLLM,
# weight sync and one verl optimizer step all work. A failed run exits 1 and names its
# log folder. WORKDIR is kept either way; delete it when done.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -lt 2 ]; then
    echo "needs 2 NVIDIA GPUs; nvidia-smi shows ${gpus:-0}" >&2
    exit 1
fi
if [ $# -gt 0 ]; then
    mkdir -p "$1" && WORK="$(cd "$1" && pwd)"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/tunedsl-gpu-smoke.XXXXXX")"
fi
echo "== WORKDIR $WORK" >&2

echo "== 1/4 resolution check" >&2
bash "$REPO/scripts/check_gpu_install.sh" --wheelhouse "$WORK/wheels"

echo "== 2/4 install" >&2
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install --quiet "pip==26.3"
"$PY" -m pip install --find-links "$WORK/wheels" -e "$REPO[gpu]"
"$PY" -m pip check

cd "$REPO"
echo "== 3/4 tiny model" >&2
"$PY" -m examples.arith.tiny_model "$WORK/tiny-model"
echo "== 4/4 one Trinity step" >&2
# The GPU count is Trinity's own: one vLLM engine plus the trainer is 2 on this node.
"$PY" -m tunedsl check examples.arith.experiment:Arith \
    --set "model.model_path=\"$WORK/tiny-model\"" | tee /dev/stderr \
    | grep -q "2 GPUs needed as Trinity counts them"
"$PY" -m tunedsl run examples.arith.experiment:Arith --backend trinity --no-progress \
    --set "model.model_path=\"$WORK/tiny-model\"" \
    --set train_dataset.total_steps=1 \
    --set trinity.cluster.node_num=1 --set trinity.cluster.gpu_per_node=2 \
    --set "checkpoint_root_dir=\"$WORK/checkpoints\""
echo "smoke test passed; WORKDIR $WORK" >&2
