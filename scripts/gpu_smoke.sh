#!/usr/bin/env bash
# Staged smoke test of `.[gpu]` on a GPU node with 1 or 2 GPUs: install it, then run
# examples/arith on Trinity-RFT in three stages. Each stage is judged by
# scripts/gpu_smoke_check.py from what Trinity wrote (its actors' logs, the experience
# database, TensorBoard events, checkpoint folders), never by an exit status: Trinity's
# launcher reports success even when its explorer or trainer loop swallowed an error.
# Not run in CI (CI has no GPU).
#
#     bash scripts/gpu_smoke.sh [WORKDIR]     # default: a new temporary folder, kept
#
# Needs: Linux x86_64; CPython 3.11 ($PYTHON, default python3.11); 1 or 2 NVIDIA GPUs
# (with more, 2 are used), Ampere or newer (vLLM runs the tiny model in bfloat16 with
# FlashAttention: its head size, 16, is below what vLLM's Triton backend takes), with a
# driver for CUDA 13.0 (>= 580: vllm 0.23.0 pins torch 2.11.0, whose PyPI wheels are
# built for CUDA 13.0); access to PyPI; about 15 GB free in WORKDIR (4.5 GB of wheels).
# Step 2 uses your pip configuration (a mirror, say); the check in step 1 ignores it and
# reads PyPI.
#
# Install:
#   1. scripts/check_gpu_install.sh --wheelhouse WORKDIR/wheels: proves the resolution
#      and leaves the verl-0.8.0+numpy2 wheel there (README, "GPU install");
#   2. a venv in WORKDIR/venv; pip install --find-links WORKDIR/wheels -e "REPO[gpu]";
#      pip check; scripts/check_gpu_install.sh --installed: the NVIDIA driver, torch's
#      CUDA build against it, sdpa on the GPU, flash_attn.bert_padding importing;
#   3. python -m examples.arith.tiny_model WORKDIR/tiny-model (random weights, own tokenizer).
# Stages, each a `python -m tunedsl run examples.arith.experiment:Arith --backend trinity`
# from the repository root into its own checkpoint root WORKDIR/<stage> (its output in
# WORKDIR/<stage>.out), on 1 node x the GPUs found:
#   a. explore: trinity.mode=explore for 2 steps (train_dataset.total_steps), evaluating
#      arith's test split at startup (explorer.eval_on_startup). Checked: the explorer
#      log says the vLLM engine, its API server and the workflow runners came up, and
#      holds no error a loop swallowed; buffer/explorer_output.db holds 15 x 8 rollouts
#      for each step; TensorBoard has eval/ metrics at step 0 and rollout/reward/mean.
#   b. experiences: those saved experiences: token ids, prompt_length, action masks (1
#      over each reply), one finite reward per rollout, and log-probs within 0.05 of the
#      tiny model's own, recomputed on the CPU at the rollout's temperature and top_p.
#   c. train: one step (total_steps=1) in a fresh run directory, trinity.mode=both (a vLLM
#      engine on one GPU, the verl trainer on the other), or with 1 GPU
#      trinity.mode=colocate (Trinity's single-GPU mode: both on it). First `tunedsl
#      check` must count the GPUs as Trinity does. Checked: no swallowed error, a finite
#      actor/pg_loss and actor/ppo_kl within 0.05 of 0 at step 1 (its rollouts come from
#      the weights it starts from), and a global_step_1 checkpoint folder.
#
# Expect one line per stage on stdout, "ok  <stage>: ..." or "FAIL <stage>: <why>"; the
# first FAIL is followed by the run directory and log file to read, and exit status 1.
# After "ok  train" the script exits 0. The rewards mean nothing (random weights); the
# point is that install, imports, rollouts through vLLM, the saved experiences, weight
# sync and one verl optimizer step all work. WORKDIR is kept; delete it when done.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -lt 1 ]; then
    echo "needs 1 or 2 NVIDIA GPUs; nvidia-smi shows none" >&2
    exit 1
fi
if [ "$gpus" -gt 2 ]; then
    gpus=2
fi
if [ $# -gt 0 ]; then
    mkdir -p "$1" && WORK="$(cd "$1" && pwd)"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/tunedsl-gpu-smoke.XXXXXX")"
fi
echo "== WORKDIR $WORK, $gpus GPU(s)" >&2

echo "== 1/3 resolution check" >&2
bash "$REPO/scripts/check_gpu_install.sh" --wheelhouse "$WORK/wheels"

echo "== 2/3 install" >&2
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
"$PY" -m pip install --quiet "pip==26.3"
"$PY" -m pip install --find-links "$WORK/wheels" -e "$REPO[gpu]"
"$PY" -m pip check
# The driver, torch's CUDA build against it, sdpa on the GPU, flash_attn.bert_padding.
bash "$REPO/scripts/check_gpu_install.sh" --installed "$PY"

cd "$REPO"
echo "== 3/3 tiny model" >&2
"$PY" -m examples.arith.tiny_model "$WORK/tiny-model"

ARITH=(examples.arith.experiment:Arith --set "model.model_path=\"$WORK/tiny-model\""
       --set trinity.cluster.node_num=1 --set "trinity.cluster.gpu_per_node=$gpus")
if [ "$gpus" -eq 1 ]; then
    TRAIN_MODE=colocate  # one GPU: Trinity's mode both needs one beside the engine's
else
    TRAIN_MODE=both
fi

# run_arith STAGE SETTINGS...: `tunedsl run` of arith into WORKDIR/STAGE; sets RUN_DIR to
# the run directory it announced. Its exit status is reported, not judged.
run_arith() {
    local stage=$1 status=0
    shift
    echo "== $stage: tunedsl run $* (output in $WORK/$stage.out)" >&2
    # Unbuffered, so the launcher's lines and Trinity's logs reach the file whole, in order.
    PYTHONUNBUFFERED=1 "$PY" -m tunedsl run "${ARITH[@]}" --backend trinity --no-progress \
        --set "checkpoint_root_dir=\"$WORK/$stage\"" "$@" > "$WORK/$stage.out" 2>&1 \
        || status=$?
    if [ "$status" -ne 0 ]; then
        echo "   tunedsl run exited $status; the checker reads what Trinity wrote" >&2
    fi
    RUN_DIR=$(awk 'match($0, /run directory  /) {print substr($0, RSTART + RLENGTH); exit}' \
        "$WORK/$stage.out")
    if [ -z "$RUN_DIR" ]; then
        echo "FAIL $stage: tunedsl made no run directory; see $WORK/$stage.out"
        exit 1
    fi
}

# judge STAGE RUN_DIR LOG OUTPUT [ARGS...]: the checker's line; after a FAIL, where to
# look, and stop.
judge() {
    local stage=$1 run=$2 log=$3 output=$4
    shift 4
    if ! "$PY" "$REPO/scripts/gpu_smoke_check.py" "$stage" "$run" "$@"; then
        echo "     run directory $run"
        echo "     log file $run/log/$log (tunedsl's output: $output)"
        exit 1
    fi
}

run_arith explore --set trinity.mode=explore --set train_dataset.total_steps=2 \
    --set trinity.explorer.eval_on_startup=true
EXPLORED=$RUN_DIR
judge explore "$EXPLORED" explorer.log "$WORK/explore.out"
judge experiences "$EXPLORED" explorer.log "$WORK/explore.out" --model "$WORK/tiny-model"

TRAIN=(--set "trinity.mode=$TRAIN_MODE" --set train_dataset.total_steps=1)
# The GPU count is Trinity's own: the engine plus the trainer, or both on one in colocate.
counted=$("$PY" -m tunedsl check "${ARITH[@]}" "${TRAIN[@]}" 2>&1) || true
if ! grep -q "$gpus GPUs needed as Trinity counts them" <<<"$counted"; then
    echo "FAIL train: tunedsl check does not count $gpus GPU(s) for mode $TRAIN_MODE:"
    tail -n 3 <<<"$counted"
    exit 1
fi
run_arith train "${TRAIN[@]}"
judge train "$RUN_DIR" trainer.log "$WORK/train.out"
echo "smoke test passed; WORKDIR $WORK" >&2
