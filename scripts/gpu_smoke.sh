#!/usr/bin/env bash
# Staged smoke test of `.[gpu]` on a GPU node with 1 to 4 GPUs: install it, then run
# examples/arith on Trinity-RFT in six stages. Each stage is judged by
# scripts/gpu_smoke_check.py from what Trinity wrote (its actors' logs, the experience
# database, TensorBoard events, checkpoint folders), never by an exit status: Trinity's
# launcher reports success even when its explorer or trainer loop swallowed an error.
# Not run in CI (CI has no GPU).
#
#     bash scripts/gpu_smoke.sh [WORKDIR]     # default: a new temporary folder, kept
#
# Needs: Linux x86_64; CPython 3.11 ($PYTHON, default python3.11); 1 to 4 NVIDIA GPUs
# (stages a-d and f use 2 at most; e needs 3, and uses 4 when there are), Ampere or
# newer (vLLM runs the tiny model in bfloat16 with FlashAttention: its head size, 16, is
# below what vLLM's Triton backend takes), with a
# driver for CUDA 13.0 (>= 580: vllm 0.23.0 pins torch 2.11.0, whose wheels on the package index are
# built for CUDA 13.0); access to the package index; about 15 GB free in WORKDIR (4.5 GB of wheels).
# Step 2 uses your pip configuration (a mirror, say); the check in step 1 ignores it and
# reads the package index.
#
# Install:
#   1. scripts/check_gpu_install.sh --wheelhouse WORKDIR/wheels: proves the resolution
#      and leaves the verl-0.8.0+numpy2 wheel there (docs/getting-started/install.md, "GPU install");
#   2. a venv in WORKDIR/venv; pip install --find-links WORKDIR/wheels -e "REPO[gpu]";
#      pip check; scripts/check_gpu_install.sh --installed: the NVIDIA driver, torch's
#      CUDA build against it, sdpa on the GPU, flash_attn.bert_padding importing;
#   3. python -m examples.arith.tiny_model WORKDIR/tiny-model (random weights, own tokenizer).
# Stages, each a `python -m tunedsl run examples.arith.experiment:Arith --backend trinity`
# (ArithWarmup for d) from the repository root into its own checkpoint root
# WORKDIR/<stage> (its output in WORKDIR/<stage>.out), on 1 node x the GPUs found (at
# most 2; e: 3 or 4):
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
#   d. warmup: ArithWarmup, a 2-step SFT warm-up (mode train, the trainer on every GPU)
#      then 1 RL step in c's mode, two Trinity stages in <run>/sft_warmup and <run>/rl.
#      Checked: each stage's trainer reached its planned step (trainer_meta.json) and
#      saved it, the warm-up with a Hugging Face copy; every workflow runner of the RL
#      stage logged that copy as its rollout model; RL's step 1 as c's (no swallowed error,
#      finite loss, ppo_kl near 0: vLLM and the trainer start from the same weights).
#   e. split (3 or more GPUs; else one "skip" line): mode both with one rollout engine of
#      tensor_parallel_size 2 (vLLM over two GPUs, and the weight sync to both) and the
#      trainer on the rest: 1 GPU, or 2 with 4 GPUs (verl's data parallelism too); first
#      `tunedsl check` must print that split. Checked: config.yaml's engine_num and
#      tensor_parallel_size, the explorer up, step 1 trained as in c.
#   f. resume: a run of RESUME_STEPS steps checkpointing each step, in c's mode, started
#      in a process group of its own; once <run>/global_step_1 and trainer_meta.json
#      exist, SIGINT to the group (a terminal's Ctrl-C). It must exit within 60 s (else
#      "FAIL resume", and the group is killed); then `--resume <run>` with the same
#      settings. Checked: exit 130 with the line "interrupted; resume with: tunedsl run
#      ... --backend trinity ... --resume <run>", Ctrl-C before the last step, then exit 0
#      with the trainer's latest_iteration the planned RESUME_STEPS (its output in
#      WORKDIR/resume-interrupted.out and WORKDIR/resume.out).
#
# Expect one line per stage on stdout, "ok  <stage>: ...", "skip <stage>: <why>" or
# "FAIL <stage>: <why>"; the first FAIL is followed by the run directory and log file to
# read, and exit status 1. After the last stage the script exits 0. The rewards mean
# nothing (random weights); the point is that install, imports, rollouts through vLLM,
# the saved experiences, weight sync, verl optimizer steps, the warm-up's hand-over to RL,
# a tensor-parallel engine and a resume after Ctrl-C all work. WORKDIR is kept; delete it when done.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
all_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
all_gpus=${all_gpus:-0}
if [ "$all_gpus" -lt 1 ]; then
    echo "needs 1 to 4 NVIDIA GPUs; nvidia-smi shows none" >&2
    exit 1
fi
gpus=$(( all_gpus > 2 ? 2 : all_gpus ))       # stages a-d and f
split_gpus=$(( all_gpus > 4 ? 4 : all_gpus ))  # stage e
#: The resume stage's steps: enough that Ctrl-C lands before the last one (each step
#: checkpoints, and the script polls every second).
RESUME_STEPS=6
#: Seconds a run may take to its first checkpoint (vLLM's start included), and to exit
#: after Ctrl-C.
FIRST_CHECKPOINT_WAIT=1800
EXIT_WAIT=60
if [ $# -gt 0 ]; then
    mkdir -p "$1" && WORK="$(cd "$1" && pwd)"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/tunedsl-gpu-smoke.XXXXXX")"
fi
echo "== WORKDIR $WORK, $all_gpus GPU(s)" >&2

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

ARITH=examples.arith.experiment:Arith
WARMUP=examples.arith.experiment:ArithWarmup
MODEL=(--set "model.model_path=\"$WORK/tiny-model\"")
# on_gpus N: the settings of a 1-node cluster of N GPUs (the run then never asks Ray).
on_gpus() {
    echo --set trinity.cluster.node_num=1 --set "trinity.cluster.gpu_per_node=$1"
}
read -r -a ON <<<"$(on_gpus "$gpus")"
if [ "$gpus" -eq 1 ]; then
    TRAIN_MODE=colocate  # one GPU: Trinity's mode both needs one beside the engine's
else
    TRAIN_MODE=both
fi

# announced OUTPUT: the run directory `tunedsl run` announced in OUTPUT ("" before it has).
announced() {
    awk 'match($0, /run directory  /) {print substr($0, RSTART + RLENGTH); exit}' "$1"
}

# run_experiment STAGE OUTPUT TARGET SETTINGS...: `tunedsl run TARGET` into WORKDIR/STAGE,
# its output in WORKDIR/OUTPUT.out; sets RUN_DIR to the run directory it announced and
# STATUS to its exit status, which is reported, not judged.
run_experiment() {
    local stage=$1 output=$2 target=$3
    shift 3
    STATUS=0
    echo "== $stage: tunedsl run $target $* (output in $WORK/$output.out)" >&2
    # Unbuffered, so the launcher's lines and Trinity's logs reach the file whole, in order.
    PYTHONUNBUFFERED=1 "$PY" -m tunedsl run "$target" "${MODEL[@]}" --backend trinity \
        --no-progress --set "checkpoint_root_dir=\"$WORK/$stage\"" "$@" \
        > "$WORK/$output.out" 2>&1 || STATUS=$?
    if [ "$STATUS" -ne 0 ]; then
        echo "   tunedsl run exited $STATUS; the checker reads what Trinity wrote" >&2
    fi
    RUN_DIR=$(announced "$WORK/$output.out")
    if [ -z "$RUN_DIR" ]; then
        echo "FAIL $stage: tunedsl made no run directory; see $WORK/$output.out"
        exit 1
    fi
}

# run_arith STAGE SETTINGS...: arith on the stages' GPUs, into WORKDIR/STAGE(.out).
run_arith() {
    local stage=$1
    shift
    run_experiment "$stage" "$stage" "$ARITH" "${ON[@]}" "$@"
}

# counts_for STAGE LINE SETTINGS...: `tunedsl check` of arith with SETTINGS must print
# LINE (Trinity's own GPU count or split, before any GPU is asked for), else FAIL.
counts_for() {
    local stage=$1 line=$2 counted
    shift 2
    counted=$("$PY" -m tunedsl check "$ARITH" "${MODEL[@]}" "$@" 2>&1) || true
    if ! grep -qF "$line" <<<"$counted"; then
        echo "FAIL $stage: tunedsl check does not say \"$line\":"
        tail -n 3 <<<"$counted"
        exit 1
    fi
}

# gpu_word N: "GPU" or "GPUs", as tunedsl counts them.
gpu_word() {
    if [ "$1" -eq 1 ]; then echo GPU; else echo GPUs; fi
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
counts_for train "$gpus $(gpu_word "$gpus") needed as Trinity counts them" "${ON[@]}" \
    "${TRAIN[@]}"
run_arith train "${TRAIN[@]}"
judge train "$RUN_DIR" trainer.log "$WORK/train.out"

# d. The warm-up's SFT stage trains on every GPU (mode train); RL runs in c's mode from
# its Hugging Face checkpoint, which only the RL stage's own logs can show it served.
run_experiment warmup warmup "$WARMUP" "${ON[@]}" --set "trinity.mode=$TRAIN_MODE" \
    --set warmup_dataset.total_steps=2 --set train_dataset.total_steps=1
judge warmup "$RUN_DIR" trainer.log "$WORK/warmup.out"

# e. One engine over two GPUs (tensor parallel) beside the trainer: the engine count is
# pinned, so the split is this one and not whatever fits the cluster best.
if [ "$split_gpus" -lt 3 ]; then
    echo "skip split: needs 3 GPUs (a rollout engine of tensor_parallel_size 2 and a" \
         "trainer on a GPU of its own); this machine has $all_gpus"
else
    trainer_gpus=$((split_gpus - 2))
    read -r -a SPLIT <<<"$(on_gpus "$split_gpus")"
    SPLIT+=(--set trinity.mode=both --set train_dataset.total_steps=1
            --set model.tensor_parallel_size=2 --set model.inference_engine_num=1)
    counts_for split "1 rollout engine on 2 GPUs, the trainer on $trainer_gpus $(gpu_word \
        "$trainer_gpus")" "${SPLIT[@]}"
    run_experiment split split "$ARITH" "${SPLIT[@]}"
    judge split "$RUN_DIR" trainer.log "$WORK/split.out" --tensor-parallel 2 --engines 1
fi

# as_foreground_job COMMAND...: exec COMMAND as a terminal runs a foreground job, to be
# started with `&`: in a session and process group of its own (its pid is the group's),
# with SIGINT's default action. A script's `&` makes its command ignore SIGINT (bash does
# so for background commands without job control), and a Python that starts with SIGINT
# ignored never raises KeyboardInterrupt: Ctrl-C would do nothing. Python restores it and
# execs, so the pid bash reports for the job is the command's.
as_foreground_job() {
    exec "$PY" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execv(sys.argv[1], sys.argv[1:])' "$@"
}

# f. Ctrl-C, then --resume. SIGINT goes to the run's whole process group, as Ctrl-C
# sends it. The interrupted run is waited for by hand: a run that ignores Ctrl-C must not
# hang the script.
RESUME=("${ON[@]}" --set "trinity.mode=$TRAIN_MODE"
        --set "train_dataset.total_steps=$RESUME_STEPS" --set algorithm.save_interval_steps=1)
echo "== resume: tunedsl run $ARITH ${RESUME[*]}, Ctrl-C after step 1's checkpoint" \
     "(output in $WORK/resume-interrupted.out)" >&2
PYTHONUNBUFFERED=1 as_foreground_job "$PY" -m tunedsl run "$ARITH" "${MODEL[@]}" \
    --backend trinity --no-progress --set "checkpoint_root_dir=\"$WORK/resume\"" \
    "${RESUME[@]}" > "$WORK/resume-interrupted.out" 2>&1 &
started=$!
# stop_group: SIGKILL what is left of the run's group, so no later stage meets it.
stop_group() {
    kill -KILL -- "-$started" 2>/dev/null || true
    wait "$started" 2>/dev/null || true
}
RUN_DIR="" deadline=$((SECONDS + FIRST_CHECKPOINT_WAIT))
# trainer_meta.json is written once the checkpoint's save returned: Ctrl-C then cannot
# land inside the save of step 1.
until [ -n "$RUN_DIR" ] && [ -d "$RUN_DIR/global_step_1" ] &&
      [ -f "$RUN_DIR/trainer_meta.json" ]; do
    if ! kill -0 "$started" 2>/dev/null; then
        first=0
        wait "$started" || first=$?
        echo "FAIL resume: tunedsl run exited $first before its first checkpoint;" \
             "see $WORK/resume-interrupted.out"
        exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        stop_group
        echo "FAIL resume: no checkpoint ${RUN_DIR:-<no run directory yet>}/global_step_1" \
             "within $FIRST_CHECKPOINT_WAIT s; see $WORK/resume-interrupted.out"
        exit 1
    fi
    sleep 1
    RUN_DIR=$(announced "$WORK/resume-interrupted.out")
done
kill -INT -- "-$started"
# Where the trainer stood at Ctrl-C: the checker needs a resume with steps left to do.
cp "$RUN_DIR/trainer_meta.json" "$WORK/resume-interrupted.meta.json"
waited=0
while kill -0 "$started" 2>/dev/null && [ "$waited" -lt "$EXIT_WAIT" ]; do
    sleep 1
    waited=$((waited + 1))
done
if kill -0 "$started" 2>/dev/null; then
    stop_group
    echo "FAIL resume: tunedsl run still running $EXIT_WAIT s after Ctrl-C (killed; a Ray" \
         "head it started may be left: ray stop); see $WORK/resume-interrupted.out"
    exit 1
fi
first=0
wait "$started" || first=$?
echo "   Ctrl-C: tunedsl run exited $first after ${waited} s" >&2
INTERRUPTED=$RUN_DIR
run_experiment resume resume "$ARITH" "${RESUME[@]}" --resume "$INTERRUPTED"
if [ "$RUN_DIR" != "$INTERRUPTED" ]; then
    echo "FAIL resume: --resume $INTERRUPTED announced the run directory $RUN_DIR"
    exit 1
fi
judge resume "$RUN_DIR" trainer.log "$WORK/resume.out" --exit-codes "$first" "$STATUS" \
    --interrupted-output "$WORK/resume-interrupted.out" \
    --interrupted-meta "$WORK/resume-interrupted.meta.json"
echo "smoke test passed; WORKDIR $WORK" >&2
