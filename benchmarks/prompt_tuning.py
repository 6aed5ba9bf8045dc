"""Prompt tuning on a loopback task: ``tunedsl.tune_prompt`` (GEPA) against AgentScope v1's
``tune_prompt`` (DSPy MIPROv2), same task, same starting prompt, same proposer, same budget.

    python benchmarks/prompt_tuning.py [--agentscope-python PATH] [--seeds 0,1,2,3,4]
                                       [--level light] [--budget N] [--target 0.9]

AgentScope's ``tune_prompt`` needs DSPy, which tunedsl's environment does not hold: it runs
in a separate environment, in a subprocess. ``bash benchmarks/agentscope_env.sh [DIR]``
builds one (``agentscope[tuner]==1.0.21`` from the package index, about 2-3 minutes and
1.2 GB) and prints the ``--agentscope-python`` to give. Without it, only tunedsl's side runs
and the table says how to build it. About 25 s per seed with both sides.

The task (the same for both): arithmetic questions of three kinds (``12 + 7``, ``15 - 4``,
``6 * 3``), 36 training and 24 validation tasks, reward 1 for the digits of the result and
0 for anything else. The task model (a real OpenAI-protocol server on loopback,
``tests/openai_server.py``, answering after ``--latency`` seconds) answers a kind in
digits only when the system prompt holds that kind's rule ("Give sums as digits only.",
"... differences ...", "... products ..."), and otherwise says "The sum is 19."; a task
whose two numbers add up to a multiple of 3 comes back in digits whatever the prompt (so
the starting prompt, "You are a helpful assistant.", scores 0.375 on the validation split
and a minibatch of three can mislead). A prompt with all three rules scores 1.0 there,
with two at most 0.88: a validation reward of 0.9 needs all three.

The proposer (the reflection model for GEPA, the prompt model for MIPROv2) is a scripted
stand-in on a second loopback server, and it is what makes the comparison fair: the n-th
instruction either optimiser asks for is the n-th of ONE seeded sequence, whatever the
request shows. Each instruction in it has an opening sentence, each of the three rules
with probability 1/2, and sometimes a decoy ("Think step by step."): its quality varies,
and one in eight draws reaches the target. Both optimisers therefore get the same
proposals, in the same order, and differ only in how they spend rollouts to score them and
which they keep. A proposer that "fixes what the failures it is shown need" was rejected:
MIPROv2's proposer is never shown failures (it reads a dataset summary, the program's
source, bootstrapped demos and a tip), so that rule would hand the win to GEPA by
construction; equally, a sequence ignores what GEPA's reflection prompt shows (the failing
rollouts), which is GEPA's own advantage with a real model, so this comparison is
conservative for tunedsl. The stand-in speaks each optimiser's real protocol: GEPA's
reflection prompt gets the instruction in a ``` block; DSPy's ChatAdapter requests
(``[[ ## field ## ]]`` markers) get every output field the request names, with the drawn
instruction in ``proposed_instruction`` and a fixed sentence in the others (the dataset
summary's ``observations``/``summary``, ``program_description``, ``module_description``).

AgentScope's side is the task in AgentScope's vocabulary: an async workflow
``(task, system_prompt) -> WorkflowOutput`` calling ``agentscope.model.OpenAIChatModel``
at the task server, a judge ``(task, response) -> JudgeOutput``, the training split as
``train_dataset`` (MIPROv2 holds 80% of it out to select by), its prompt model
``openai/proposer`` pointed at the proposer server, and ``optimization_level`` (``auto``)
``--level``: the only budget knob ``tune_prompt`` passes to MIPROv2 (light: 3 instruction
candidates x 6 demo sets over 10 trials, each a full evaluation of its 28 held-out tasks,
after a full evaluation of the starting prompt and bootstrapping; of the three
instructions it asks the proposer for it replaces the first by the starting prompt, so it
scores two drawn instructions). DSPy's cache is off, so every proposer request reaches
the server. tunedsl's side is ``tunedsl.tune_prompt`` with the training and validation
splits and ``budget`` = the rollouts AgentScope's run spent on that seed (``--budget``
otherwise; 300 without AgentScope).

Measured per optimiser and seed: task-model rollouts (requests the task server answered),
proposer requests (tunedsl's include its one-line probe), wall time of the ``tune_prompt``
call (imports not counted), the validation reward of the starting and the best prompt, and
the rollouts and seconds until a prompt reaching ``--target`` on the validation split was
first scored by the optimiser's own selection step (tunedsl: the candidates file's
``candidate`` line; MIPROv2: the end of the first trial evaluation of such an instruction,
logged by wrapping DSPy's ``eval_candidate_program``). Validation rewards are those of the
same 24 tasks for both, computed from the task model's rule (tunedsl's own scores are
checked against it). Each AgentScope figure is shown as a ratio to tunedsl's on the same
seed. The exit status is 0: this is a measurement.

Limitations: tunedsl selects on the validation split it is scored on, MIPROv2 on its own
hold-out of the training split (the rule is the same for every task of a kind, so this
changes little here). AgentScope's wrapper never uses MIPROv2's few-shot demos (its
workflow reads only the system prompt), so the trials spent on demo sets score the same
instruction again; that is how AgentScope's ``tune_prompt`` behaves, not an artefact of
this benchmark. The two run with their defaults for parallelism (tunedsl 16 rollouts at a
time on one event loop, DSPy 8 threads). AgentScope's ``tune_prompt`` runs every rollout
in its own ``asyncio.run``, so its workflow builds (and closes) a chat model per rollout,
about 50 ms of CPU here: part of its wall time, as it would be for any AgentScope user.
Its bootstrapping step runs one rollout at a time. Wall times depend on ``--latency`` and
on the machine; the ratios and the rollout counts are the portable figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.openai_server import OpenAIServer  # noqa: E402
from tunedsl import (  # noqa: E402
    Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, workflow)

START = "You are a helpful assistant."
RULES = {"+": "Give sums as digits only.", "-": "Give differences as digits only.",
         "*": "Give products as digits only."}
NAMES = {"+": "sum", "-": "difference", "*": "product"}
OPENINGS = ["You solve arithmetic questions.", "You are a careful calculator.",
            "You answer questions about numbers.", "You are an assistant for arithmetic."]
DECOYS = ["Think step by step.", "Double-check your work.", "Be polite.", "Keep it short."]
OTHER_FIELDS = "The tasks are short arithmetic questions; each answer is a whole number."
ENV_SCRIPT = "benchmarks/agentscope_env.sh"
DEFAULT_ENV = Path.home() / ".cache" / "tunedsl-bench" / "agentscope-venv"
FALLBACK_BUDGET = 300


# ------------------------------------------------------------------------------ the task


def tasks() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """36 training and 24 validation tasks, a third of each kind, from a fixed seed."""
    rng = random.Random(0)
    rows = {op: [] for op in RULES}
    for op in RULES:
        while len(rows[op]) < 20:
            a, b = rng.randint(2, 20), rng.randint(2, 12)
            a, b = max(a, b), min(a, b)
            value = {"+": a + b, "-": a - b, "*": a * b}[op]
            rows[op].append({"question": f"{a} {op} {b}", "answer": str(value)})
    train = [row for op in RULES for row in rows[op][:12]]
    val = [row for op in RULES for row in rows[op][12:]]
    rng.shuffle(train)  # kinds mixed: MIPROv2 holds out the last 80% of the order given
    rng.shuffle(val)
    return train, val


def answer(system: str, question: str) -> str:
    """The task model's rule: digits when the prompt holds the kind's rule or the two numbers
    add up to a multiple of 3, else a sentence."""
    a, op, b = question.split()
    value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    if RULES[op] in system or (int(a) + int(b)) % 3 == 0:
        return str(value)
    return f"The {NAMES[op]} is {value}."


def reward(row: dict[str, str], response: str) -> float:
    return 1.0 if str(response).strip() == row["answer"] else 0.0


def val_reward(prompt: str, rows: list[dict[str, str]]) -> float:
    """A prompt's mean reward over ``rows``, from the task model's rule (no rollout)."""
    return statistics.fmean(reward(row, answer(prompt, row["question"])) for row in rows)


def text_of(message: dict[str, Any]) -> str:
    """A message's text: plain content, or its text parts (AgentScope's formatter sends
    ``[{"type": "text", "text": ...}]``)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


class TaskModel:
    """The task server's handler: answers by `answer`, logging (time, system prompt)."""

    def __init__(self) -> None:
        self.log: list[tuple[float, str]] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        system = next((text_of(m) for m in messages if m["role"] == "system"), "")
        self.log.append((time.time(), system))
        return answer(system, text_of(messages[-1]))


def proposal(seed: int, number: int) -> str:
    """The ``number``-th instruction of seed ``seed``'s sequence (the same for everyone)."""
    rng = random.Random(f"{seed}:{number}")
    parts = [rng.choice(OPENINGS)] + [rule for rule in RULES.values() if rng.random() < 0.5]
    if rng.random() < 0.5:
        parts.append(rng.choice(DECOYS))
    return " ".join(parts)


class Proposer:
    """The scripted proposer: GEPA's reflection prompt and DSPy's ChatAdapter requests both
    draw the next instruction of one seeded sequence."""

    def __init__(self, seed: int) -> None:
        self.seed, self.drawn, self.requests = seed, [], 0

    def draw(self) -> str:
        self.drawn.append(proposal(self.seed, len(self.drawn)))
        return self.drawn[-1]

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        self.requests += 1
        text = "\n".join(text_of(m) for m in messages)
        if text_of(messages[-1]) == "Reply with: ok":  # tunedsl's probe
            return "ok"
        wanted = re.search(r"Respond with the corresponding output fields, starting with the "
                           r"field (.*?), and then ending with the marker", text)
        if wanted:  # DSPy's ChatAdapter: fill every output field it asks for
            fields = re.findall(r"\[\[ ## (\w+) ## \]\]", wanted.group(1))
            return "".join(f"[[ ## {field} ## ]]\n"
                           f"{self.draw() if field == 'proposed_instruction' else OTHER_FIELDS}"
                           f"\n\n" for field in fields) + "[[ ## completed ## ]]"
        if "Provide the new instructions within ``` blocks" in text:  # GEPA's reflection
            return f"A better instruction:\n```\n{self.draw()}\n```"
        raise ValueError(f"the scripted proposer cannot read this request: {text[:200]!r}")


# ----------------------------------------------------------------------- tunedsl's side


@workflow
async def solve(task, model, params):
    reply = await model.chat([{"role": "system", "content": params["system_prompt"]},
                              {"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=reply.content)


@judge
async def exact(task, response):
    return JudgeOutput(reward=reward(task, response))


@experiment
class Arithmetic:
    workflow = solve
    judge = exact
    train_dataset = Dataset("data", split="train")  # the folder is given at run time
    eval_dataset = Dataset("data", split="validation")
    model = Model("served", max_model_len=512)
    params = {"system_prompt": START}


def write_data(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)  # a --keep folder of an earlier run
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    train, val = tasks()
    for split, rows in (("train", train), ("validation", val)):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def run_tunedsl(seed: int, budget: int, folder: Path, latency: float,
                target: float) -> dict[str, Any]:
    import tunedsl

    data = write_data(folder)
    _, val = tasks()
    task_model, proposer = TaskModel(), Proposer(seed)
    candidates = folder / f"tunedsl-{seed}.jsonl"
    with OpenAIServer(task_model, delay=latency) as task, \
            OpenAIServer(proposer, delay=latency) as critic:
        started = time.time()
        graph = tunedsl.load_experiment(Arithmetic, overrides=[
            f"train_dataset.path={data}", f"eval_dataset.path={data}"])
        result = tunedsl.tune_prompt(
            graph, params=["system_prompt"], model=f"served@{task.base_url}",
            reflection_model=f"proposer@{critic.base_url}",
            search=tunedsl.PromptSearch(budget=budget, seed=seed), candidates=candidates,
            progress=False)
        seconds = time.time() - started
        rollouts = len(task.requests)
    lines = [json.loads(line) for line in candidates.read_text().splitlines()]
    ran, reached = 0, None
    for line in lines:
        ran += line["kind"] == "rollout"
        if line["kind"] == "candidate":
            # tunedsl's scores are the task model's rule, rollout by rollout
            assert abs(line["val_reward"] - val_reward(line["params"]["system_prompt"],
                                                       val)) < 1e-9, line
            if reached is None and line["val_reward"] >= target:
                reached = ran
    return {"rollouts": rollouts, "proposer": proposer.requests, "drawn": len(proposer.drawn),
            "seconds": seconds, "start": val_reward(result.start["system_prompt"], val),
            "best": val_reward(result.best["system_prompt"], val),
            "best_prompt": result.best["system_prompt"],
            **reached_at(task_model.log, reached, started)}


def reached_at(log: list[tuple[float, str]], rollouts: int | None,
               started: float) -> dict[str, Any]:
    """Rollouts and seconds (from the start) until the target was reached."""
    if rollouts is None:
        return {"to_rollouts": None, "to_seconds": None}
    return {"to_rollouts": rollouts, "to_seconds": log[rollouts - 1][0] - started}


# -------------------------------------------------------------------- AgentScope's side

AGENTSCOPE = r'''
"""The loopback task in AgentScope's vocabulary, tuned by agentscope.tuner.tune_prompt."""
import json, sys, time

task_url, data, level, start, out = sys.argv[1:6]

import dspy
import dspy.teleprompt.mipro_optimizer_v2 as mipro
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg
from agentscope.model import OpenAIChatModel
from agentscope.tuner import (DatasetConfig, JudgeOutput, PromptTuneConfig, WorkflowOutput,
                              tune_prompt)

dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
evaluations = []  # (end time, tasks, score, instruction) of each MIPROv2 evaluation
scored = mipro.eval_candidate_program


def logged(batch_size, trainset, program, evaluate, rng=None):
    result = scored(batch_size, trainset, program, evaluate, rng)
    evaluations.append((time.time(), min(batch_size, len(trainset)), float(result.score),
                        program.predictors()[0].signature.instructions))
    return result


mipro.eval_candidate_program = logged


async def workflow(task, system_prompt):
    model = OpenAIChatModel("served", api_key="unused", stream=False,
                            client_kwargs={"base_url": task_url})
    messages = await OpenAIChatFormatter().format([
        Msg("system", system_prompt, "system"), Msg("user", task["question"], "user")])
    try:
        reply = await model(messages)
    finally:  # tune_prompt runs each rollout in its own asyncio.run: close on this loop
        await model.client.close()
    text = "".join(block.get("text", "") for block in reply.content
                   if block.get("type") == "text")
    return WorkflowOutput(response=text)


async def judge(task, response):
    return JudgeOutput(reward=1.0 if str(response).strip() == task["answer"] else 0.0)


config = PromptTuneConfig(lm_model_name="openai/proposer", optimization_level=level,
                          eval_display_progress=False)
started = time.time()
prompt, metrics = tune_prompt(workflow=workflow, init_system_prompt=start, judge_func=judge,
                              train_dataset=DatasetConfig(path=f"{data}/train.jsonl"),
                              config=config)
ended = time.time()
with open(out, "w") as handle:
    json.dump({"prompt": prompt, "started": started, "ended": ended,
               "evaluations": evaluations}, handle)
'''


def run_agentscope(python: str, seed: int, level: str, folder: Path, latency: float,
                   target: float) -> dict[str, Any]:
    data = write_data(folder)
    _, val = tasks()
    script, out = folder / "agentscope_tune.py", folder / f"agentscope-{seed}.json"
    script.write_text(AGENTSCOPE)
    task_model, proposer = TaskModel(), Proposer(seed)
    with OpenAIServer(task_model, delay=latency) as task, \
            OpenAIServer(proposer, delay=latency) as critic:
        env = {**os.environ, "OPENAI_API_BASE": critic.base_url,
               "OPENAI_BASE_URL": critic.base_url, "OPENAI_API_KEY": "unused",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1",
               "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(folder / "hf"),
               "DSPY_CACHEDIR": str(folder / "dspy-cache"), "PYTHONHASHSEED": "0"}
        log = folder / f"agentscope-{seed}.log"
        with log.open("w") as handle:
            done = subprocess.run([python, str(script), task.base_url, str(data), level,
                                   START, str(out)], env=env, stdout=handle,
                                  stderr=subprocess.STDOUT, cwd=folder)
        if done.returncode != 0:
            tail = "\n".join(log.read_text().splitlines()[-30:])
            raise RuntimeError(f"AgentScope's tune_prompt failed (exit {done.returncode}):\n"
                               f"{tail}")
        rollouts = len(task.requests)
    got = json.loads(out.read_text())
    started = got["started"]
    reached = None
    for ended, _size, _score, instruction in got["evaluations"]:
        if val_reward(instruction, val) >= target:
            reached = sum(t <= ended for t, _ in task_model.log)
            break
    return {"rollouts": rollouts, "proposer": proposer.requests, "drawn": len(proposer.drawn),
            "seconds": got["ended"] - started, "start": val_reward(START, val),
            "best": val_reward(got["prompt"], val), "best_prompt": got["prompt"],
            "evaluations": len(got["evaluations"]),
            **reached_at(task_model.log, reached, started)}


# ---------------------------------------------------------------------------- the table

COLUMNS = [("rollouts", "rollouts", "d"), ("proposer", "proposer", "d"),
           ("wall s", "seconds", ".1f"), ("start", "start", ".3f"), ("best", "best", ".3f"),
           ("to target: rollouts", "to_rollouts", "d"), ("s", "to_seconds", ".1f")]
WIDTHS = [6, 36] + [max(len(title), 8) for title, _, _ in COLUMNS]


def line(cells: list[str]) -> str:
    return "  ".join(c.rjust(w) if i >= 2 else c.ljust(w)
                     for i, (c, w) in enumerate(zip(cells, WIDTHS)))


def shown(value: Any, form: str) -> str:
    if value is None:
        return "-"
    if form == "d":  # a count, or a mean of counts
        return format(value, ".0f" if value == int(value) else ".1f")
    return format(value, form)


def ratios(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    cells = []
    for _, key, _ in COLUMNS:
        other, mine = theirs[key], ours[key]
        if key == "start" or other is None or mine is None:
            cells.append("")
        else:
            cells.append("inf" if not mine else f"{other / mine:.2f}x")
    return cells


def mean(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each column's mean over the seeds; the to-target columns over the seeds that got
    there (None when none did)."""
    out = {}
    for _, key, _ in COLUMNS:
        values = [got[key] for got in results if got[key] is not None]
        out[key] = statistics.fmean(values) if values else None
    return out


def print_table(rows: list[tuple[int, str, dict[str, Any]]], target: float) -> None:
    print(line(["seed", "optimiser"] + [t for t, _, _ in COLUMNS]))
    print("-" * (sum(WIDTHS) + 2 * (len(WIDTHS) - 1)))
    names = list(dict.fromkeys(name for _, name, _ in rows))
    by_seed: dict[int, dict[str, dict[str, Any]]] = {}
    for seed, name, got in rows:
        by_seed.setdefault(seed, {})[name] = got
    for seed, got in by_seed.items():
        for name in names:
            print(line([str(seed), name] + [shown(got[name][k], f) for _, k, f in COLUMNS]))
        for name in names[1:]:
            print(line(["", "  ratio to tunedsl"] + ratios(got[name], got[names[0]])))
    if len(by_seed) > 1:
        print("-" * (sum(WIDTHS) + 2 * (len(WIDTHS) - 1)))
        means = {}
        for name in names:
            results = [got[name] for got in by_seed.values()]
            means[name] = mean(results)
            reached = sum(r["to_rollouts"] is not None for r in results)
            print(line(["mean", f"{name} ({reached}/{len(results)} hit)"] +
                       [shown(means[name][k], f) for _, k, f in COLUMNS]))
        for name in names[1:]:
            # to target: compared on the seeds both optimisers hit it (the same proposals)
            both = [got for got in by_seed.values()
                    if got[name]["to_rollouts"] is not None
                    and got[names[0]]["to_rollouts"] is not None]
            paired = {**means[name], **{k: v for k, v in mean([g[name] for g in both]).items()
                                        if k.startswith("to_")}}
            ours = {**means[names[0]], **{k: v for k, v in mean([g[names[0]] for g in both])
                                          .items() if k.startswith("to_")}}
            print(line(["", "  ratio to tunedsl"] + ratios(paired, ours)))
    print(f"to target: rollouts and seconds until a prompt scoring >= {target} on the validation "
          f"split was first scored by the optimiser (- = never). Means: over the seeds that hit "
          f"it; their ratio: over the seeds both hit.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agentscope-python", default=os.environ.get(
        "TUNEDSL_AGENTSCOPE_PYTHON", str(DEFAULT_ENV / "bin" / "python")),
        help="the python of an environment with agentscope[tuner]==1.0.21 (built by "
             f"{ENV_SCRIPT}; default $TUNEDSL_AGENTSCOPE_PYTHON, else {DEFAULT_ENV})")
    parser.add_argument("--seeds", default="0,1,2,3,4",
                        help="the proposer's sequences (and GEPA's seed) to run")
    parser.add_argument("--level", default="light", choices=["light", "medium", "heavy"],
                        help="AgentScope's optimization_level (MIPROv2's auto)")
    parser.add_argument("--budget", type=int, default=None,
                        help="tunedsl's rollouts (default: what AgentScope's run spent on the "
                             f"seed, else {FALLBACK_BUDGET})")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--latency", type=float, default=0.05,
                        help="seconds each model request takes (task and proposer)")
    parser.add_argument("--keep", help="keep the candidates files and logs in this folder")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    have_agentscope = Path(args.agentscope_python).exists()
    train, val = tasks()
    print(f"loopback task: {len(train)} train / {len(val)} validation tasks, starting prompt "
          f"{START!r} (validation {val_reward(START, val):.3f}), target {args.target}, "
          f"{args.latency:g} s a request")
    for seed in seeds:
        print(f"seed {seed}: the proposer's first instructions score " + ", ".join(
            f"{val_reward(proposal(seed, n), val):.2f}" for n in range(10)) + ", ...")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        for seed in seeds:
            theirs = None
            if have_agentscope:
                theirs = run_agentscope(args.agentscope_python, seed, args.level,
                                        folder / f"agentscope-{seed}", args.latency,
                                        args.target)
            budget = args.budget or (theirs["rollouts"] if theirs else FALLBACK_BUDGET)
            ours = run_tunedsl(seed, budget, folder / f"tunedsl-{seed}", args.latency,
                               args.target)
            rows.append((seed, "tunedsl GEPA", ours))
            if theirs:
                rows.append((seed, f"AgentScope MIPROv2 {args.level}", theirs))
            print(f"seed {seed}: tunedsl budget {budget}; instructions drawn: tunedsl "
                  f"{ours['drawn']}" + (f", AgentScope {theirs['drawn']}" if theirs else ""),
                  flush=True)
    print()
    print_table(rows, args.target)
    print()
    for seed, name, got in rows:
        print(f"seed {seed} {name} best: {got['best_prompt']!r}")
    if not have_agentscope:
        print(f"\nAgentScope's side did not run: no python at {args.agentscope_python}. Build "
              f"its environment with `bash {ENV_SCRIPT} DIR` (agentscope[tuner]==1.0.21 and "
              f"DSPy, outside this repository) and give --agentscope-python DIR/bin/python.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
