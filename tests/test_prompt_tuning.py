"""`tunedsl tune-prompt` / `tunedsl.tune_prompt` for real: a task model on loopback HTTP whose
answers depend on the system prompt, and a reflection model (also real HTTP) that proposes
the prompt that works once it reads failing rollouts."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunedsl.errors import ConfigError
from tunedsl.evaluation.prompt_tuning import DEFAULT_VAL_FRACTION, rollout_key

from .cli_support import cli, cli_started, stopped_when
from .openai_server import OpenAIServer

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAGIC = "Answer with the sum in digits only."
TUNED = f"You add two numbers. {MAGIC}"
START = "You are a helpful assistant."

EXPERIMENT = f'''
from tunedsl import Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, workflow


@workflow
async def solve(task, model, params):
    if task["question"] == "boom":
        raise RuntimeError("this task always fails")
    reply = await model.chat([{{"role": "system", "content": params["system_prompt"]}},
                              {{"role": "user", "content": task["question"]}}])
    return WorkflowOutput(response=reply.content)


@workflow
async def plain(task, model):
    reply = await model.chat([{{"role": "user", "content": task["question"]}}])
    return WorkflowOutput(response=reply.content)


@judge
async def exact(task, response):
    return JudgeOutput(reward=1.0 if response.strip() == task["answer"] else 0.0,
                       metrics={{"chars": float(len(response))}})


@experiment
class Sums:
    workflow = solve
    judge = exact
    train_dataset = Dataset("data", split="train")
    eval_dataset = Dataset("data", split="test")
    model = Model("served", max_model_len=256)
    params = {{"system_prompt": {START!r}, "retries": 2}}


@experiment
class Plain:
    workflow = plain
    judge = exact
    train_dataset = Dataset("data", split="train")
    eval_dataset = Dataset("data", split="test")
    model = Model("served", max_model_len=256)
    params = {{"system_prompt": {START!r}}}
'''

TRAIN = [(1, 2), (2, 2), (3, 3), (4, 1), (5, 4), (2, 7), (6, 0), (1, 1)]
# Under the starting prompt only sums divisible by 3 come back as digits: 2 of 6 (1/3).
TEST = [(1, 5), (2, 3), (4, 4), (3, 6), (7, 1), (0, 2)]


def task_model(messages):
    """Digits (right) when the system prompt holds the magic instruction or the sum is a
    multiple of 3; otherwise a sentence the judge scores 0."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    a, b = map(int, messages[-1]["content"].split("+"))
    return str(a + b) if MAGIC in system or (a + b) % 3 == 0 else f"The sum is {a + b}."


def reflection_model(messages):
    """Answers the probe; shown failing rollouts (reward 0), proposes the magic prompt."""
    text = messages[-1]["content"]
    if text == "Reply with: ok":
        return "ok"
    if "Reward 0" in text:
        return f"A better instruction:\n```\n{TUNED}\n```"
    return "```\nKeep going.\n```"


def write_experiment(folder: Path, test=TEST) -> Path:
    (folder / "data").mkdir(parents=True)
    for split, pairs in (("train", TRAIN), ("test", test)):
        rows = [{"question": f"{a}+{b}", "answer": str(a + b)} if a is not None else
                {"question": "boom", "answer": "0"} for a, b in pairs]
        (folder / "data" / f"{split}.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows))
    path = folder / "exp.py"
    path.write_text(EXPERIMENT)
    return path


def read_lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def servers():
    with OpenAIServer(task_model) as task, OpenAIServer(reflection_model) as critic:
        yield task, critic


def tune_args(exp, task, critic, *extra):
    return ["tune-prompt", f"{exp}:Sums", "--param", "system_prompt", "--base-url",
            task.base_url, "--model", "served", "--reflection-model",
            f"critic@{critic.base_url}", "--no-progress", *extra]


def test_tuned_prompt_beats_the_start_and_a_resume_repeats_no_rollout(tmp_path, servers):
    task, critic = servers
    exp = write_experiment(tmp_path)
    candidates, best = tmp_path / "run.jsonl", tmp_path / "best.toml"
    args = tune_args(exp, task, critic, "--budget", "40", "--candidates", str(candidates),
                     "-o", str(best))
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    lines = read_lines(candidates)
    rollouts = [line for line in lines if line["kind"] == "rollout"]
    reflections = [line for line in lines if line["kind"] == "reflection"]
    scored = [line for line in lines if line["kind"] == "candidate"]
    assert lines[0]["kind"] == "start" and lines[0]["tune_settings"]["start"] == {
        "system_prompt": START}
    # Every rollout is one request to the task model, none beyond the budget; the
    # reflection model had the probe and the reflections.
    # Tuning ended at the tuned prompt, the first to score 1 (--perfect-reward's default) on
    # every validation task: the start's 6, a minibatch of 3 for it and the proposal, 6.
    assert len(task.requests) == len(rollouts) == 6 + 3 + 3 + 6
    assert len(critic.requests) == 1 + len(reflections) and reflections
    assert [(c["number"], c["params"], c["val_rewards"], c["val_errors"]) for c in scored] == [
        (0, {"system_prompt": START}, [1.0, 0.0, 0.0, 1.0, 0.0, 0.0], 0),
        (1, {"system_prompt": TUNED}, [1.0] * 6, 0)]
    # Each rollout is an eval results line too: task, the model calls, reward, metrics.
    first = rollouts[0]
    assert first["split"] == "val" and first["messages"][0]["messages"][0] == {
        "role": "system", "content": START}
    assert {k: first[k] for k in ("task_index", "repeat", "error")} == {
        "task_index": first["task_index"], "repeat": 0, "error": None}
    assert set(first["metrics"]) == {"chars"}
    assert done.stdout.splitlines() == [
        f"candidates   {candidates} (2 scored; {len(rollouts)} rollouts run, 0 from the file, "
        f"0 failed)",
        "validation   start 0.3333 -> best 1.0000 (6 tasks)",
        f"settings     {best} (apply with --settings {best})",
        "best system_prompt:",
        f"    {TUNED}"]
    assert tomllib.loads(best.read_text()) == {"params": {"system_prompt": TUNED}}

    # view shows it as a run: a step per candidate, its rollouts' transcripts, the scores.
    from tunedsl.view.sources import CandidatesSource, open_source

    source = open_source(candidates)
    assert isinstance(source, CandidatesSource) and len(source.entries) == len(rollouts)
    assert source.curves == {"eval/validation/reward/mean@1": [(0, 1 / 3), (1, 1.0)]}
    ids = [c["candidate"] for c in scored]
    assert source.summary[:3] == [
        ("candidates", "2 tried, 2 scored on the validation split"),
        ("validation", "start 0.3333 -> best 1.0000 (step 1)"), ("best system_prompt", TUNED)]
    assert source.summary[3:] == [(f"step 0 ({ids[0]})", f"validation 0.3333: {START}"),
                                  (f"step 1 ({ids[1]})", f"validation 1.0000: {TUNED}")]
    shown = source.record(0)
    assert (shown["step"], shown["task"]["split"], shown["calls"]) == (0, "val",
                                                                       first["messages"])

    before_task, before_critic = len(task.requests), len(critic.requests)
    again = cli(*args, "--resume")
    assert again.returncode == 0, again.stderr
    assert len(task.requests) == before_task  # not one rollout ran again
    assert len(critic.requests) == before_critic + 1  # the probe only: reflections replayed
    assert f"(2 scored; 0 rollouts run, {len(rollouts)} from the file, 0 failed)" in again.stdout
    assert read_lines(candidates) == lines  # nothing new to keep

    refused = cli(*args)  # without --resume the file is never appended to
    assert (refused.returncode, refused.stderr) == (2, f"Error: --candidates {candidates} already "
                                                       f"holds a tuning run; add --resume to "
                                                       f"continue it, or choose another file\n")


def thinking_reflection(messages):
    """Thinks aloud, quoting the old prompt between fences, then answers the new prompt,
    which holds a fenced example of its own."""
    text = messages[-1]["content"]
    if text == "Reply with: ok":
        return "ok"
    if "Reward 0" in text:
        return (f"<think>The prompt was\n```\n{START}\n```\nwhich fails.</think>\nNew:\n"
                f"```\n{TUNED_WITH_EXAMPLE}\n```\n")
    return "```\nKeep going.\n```"


TUNED_WITH_EXAMPLE = f"{TUNED}\nFor example:\n```\n1+2 -> 3\n```"


def test_the_proposal_is_read_after_the_thoughts(tmp_path):
    """GEPA takes what lies between a reply's first and last fences: thoughts quoting the
    old prompt in fences made a "best" prompt of both, ``</think>`` included, written to
    the settings with exit 0. The thoughts are dropped (a fenced example inside the new
    prompt stays whole); a resume replays the same."""
    exp = write_experiment(tmp_path)
    candidates, best = tmp_path / "run.jsonl", tmp_path / "best.toml"
    with OpenAIServer(task_model) as task, OpenAIServer(thinking_reflection) as critic:
        args = tune_args(exp, task, critic, "--budget", "40", "--candidates",
                         str(candidates), "-o", str(best))
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        assert tomllib.loads(best.read_text()) == {
            "params": {"system_prompt": TUNED_WITH_EXAMPLE}}
        replies = [line["reply"] for line in read_lines(candidates)
                   if line["kind"] == "reflection"]
        assert any("</think>" in reply for reply in replies)  # kept as answered
        best.unlink()
        again = cli(*args, "--resume")
    assert again.returncode == 0, again.stderr
    assert tomllib.loads(best.read_text()) == {"params": {"system_prompt": TUNED_WITH_EXAMPLE}}


@pytest.mark.parametrize("reply, error", [
    ("<think>Only thinking.</think>\n", "the reflection model answered its thoughts only, "
                                         "and no proposal after them"),
    ("<think>Thinking, and cut", "the reflection model's reply ends inside its thoughts "
                                 "(<think> without </think>: cut at its length limit?), so it "
                                 "proposes nothing"),
    ("<THINKING>Only thinking.</THINKING>", "the reflection model answered its thoughts "
                                            "only, and no proposal after them"),
    ("New prompt:\n```text\n  \n```\n", "the reflection model's fences hold no text, so "
                                         "it proposes an empty prompt"),
    # a lone or unclosed fence: GEPA read "" from it (sweep 28 B-05)
    ("```", "the reflection model's fences hold no text, so it proposes an empty prompt"),
    ("```text", "the reflection model's fences hold no text, so it proposes an empty prompt"),
    # an invisible prompt was taken (sweep 29 B-07)
    ("```\n\u200b\ufeff\n```", "the reflection model's fences hold no text, so it proposes "
                             "an empty prompt"),
    ("  ```text\n ", "the reflection model's fences hold no text, so it proposes an empty "
                    "prompt"),
])
def test_a_reply_of_thoughts_alone_proposes_nothing(reply, error):
    """It made an empty "best" prompt, or one of thoughts, with exit 0."""
    from tunedsl.evaluation.prompt_tuning import proposal_text

    with pytest.raises(ValueError) as caught:
        proposal_text(reply)
    assert str(caught.value) == error


_TEXT = st.text(st.characters(blacklist_characters="`<>", blacklist_categories=("Cs",)),
                max_size=40)


def _shows_something(text):
    """Whether a proposal is visible (blank space, format marks and control characters
    alone are refused: an invisible prompt)."""
    import unicodedata

    return any(unicodedata.category(character)[0] not in "ZC" for character in text)


@given(thoughts=_TEXT, old=_TEXT, new=_TEXT.filter(_shows_something), around=_TEXT,
       tag=st.sampled_from(["think", "thinking", "THINK", "Thinking"]))
def test_gepa_reads_the_proposal_whatever_the_thoughts_quote(thoughts, old, new, around, tag):
    """Whatever the thoughts hold and quote, GEPA's own extractor reads the block after
    them from what the reflection hands it."""
    from gepa.strategies.instruction_proposal import InstructionProposalSignature

    from tunedsl.evaluation.prompt_tuning import proposal_text

    reply = f"<{tag}>{thoughts}\n```\n{old}\n```</{tag}>{around}\n```\n{new}\n```\n{around}"
    extracted = InstructionProposalSignature.output_extractor(proposal_text(reply))
    assert extracted == {"new_instruction": new.strip()}


@pytest.mark.parametrize("budget", [13, 20])
def test_the_budget_is_never_exceeded(tmp_path, servers, budget):
    """A batch that would go past the budget ends the run: not one rollout past it, and
    fewer short of it than the largest batch (the validation split). 13 cuts before the
    tuned prompt's validation (6 + 3 + 3 run), 20 before a minibatch after it (18 run):
    with a perfect reward of 2 the tuned prompt's 1.0 does not end the run first."""
    import tunedsl

    task, critic = servers
    exp = write_experiment(tmp_path)
    result = tunedsl.tune_prompt(
        f"{exp}:Sums", params=["system_prompt"], model=f"served@{task.base_url}",
        reflection_model=f"critic@{critic.base_url}",
        search=tunedsl.PromptSearch(budget=budget, perfect_reward=2.0),
        candidates=tmp_path / "run.jsonl", progress=False)
    assert result.rollouts == len(task.requests) == {13: 12, 20: 18}[budget]
    assert budget - len(TEST) < result.rollouts <= budget


def test_a_failed_rollout_counts_as_a_failure_with_the_python_api(tmp_path, servers):
    """The API, with AgentScope's init_system_prompt: the validation task whose workflow
    raises scores 0 for every candidate (never skipped, so 5 of 6 is the best there is)."""
    import tunedsl

    task, critic = servers
    exp = write_experiment(tmp_path, test=[*TEST[:5], (None, None)])
    result = tunedsl.tune_prompt(
        f"{exp}:Sums", init_system_prompt="Be brief.", model=f"served@{task.base_url}",
        reflection_model=f"critic@{critic.base_url}", search=tunedsl.PromptSearch(budget=30),
        candidates=tmp_path / "run.jsonl", progress=False)
    assert (result.start, result.best) == ({"system_prompt": "Be brief."},
                                           {"system_prompt": TUNED})
    assert (result.start_reward, result.best_reward) == (pytest.approx(2 / 6),
                                                         pytest.approx(5 / 6))
    assert result.settings_file == tmp_path / "run.toml"
    lines = read_lines(tmp_path / "run.jsonl")
    failed = [line for line in lines if line["kind"] == "rollout" and line["error"]]
    assert failed and {(line["split"], line["task_index"], line["reward"]) for line in failed} \
        == {("val", 5, None)}
    assert failed[0]["error"].endswith("raised RuntimeError: this task always fails")
    assert result.failed == len(failed) == 2  # the start's and the tuned prompt's
    scored = [line for line in lines if line["kind"] == "candidate"]
    assert [(c["val_rewards"][5], c["val_errors"]) for c in scored] == [(0.0, 1), (0.0, 1)]


def test_the_tuned_toml_wins_over_the_class_params_in_eval_and_run(tmp_path, servers):
    """The class's params sit above TOML, but a --settings file's [params] sit above the
    class's, key by key: eval scores the tuned prompt, run's config carries it, the class's
    other params stay, and --set still wins over the file."""
    from tunedsl import load_experiment

    task, _ = servers
    exp = write_experiment(tmp_path)
    best = tmp_path / "best.toml"
    from tunedsl.evaluation.prompt_tuning import params_toml

    best.write_text(params_toml({"system_prompt": TUNED}, ["tuned"]))
    graph = load_experiment(f"{exp}:Sums", settings=str(best))
    assert dict(graph.params) == {"system_prompt": TUNED, "retries": 2}
    assert dict(load_experiment(f"{exp}:Sums").params)["system_prompt"] == START
    assert dict(load_experiment(f"{exp}:Sums", settings=str(best), overrides=[
        "params.system_prompt=x"]).params)["system_prompt"] == "x"
    for settings, mean in ((["--settings", str(best)], "1.0000"), ([], "0.3333")):
        done = cli("eval", f"{exp}:Sums", *settings, "--base-url", task.base_url, "--model",
                   "served", "-o", str(tmp_path / f"eval{len(settings)}.jsonl"),
                   "--no-progress")
        assert done.returncode == 0, done.stderr
        assert f"reward       mean {mean}" in done.stdout
    config = cli("config", f"{exp}:Sums", "--settings", str(best))
    assert config.returncode == 0, config.stderr
    assert TUNED in config.stdout and START not in config.stdout


def _read_back(toml_text: str) -> dict:
    """``[params]`` as the settings layers read them from a ``--settings`` file."""
    import tempfile

    from tunedsl.config.settings import normalize, read_toml

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "best.toml"
        path.write_text(toml_text, encoding="utf-8")
        values, problems = normalize(read_toml(path))
    assert problems == []
    return values["params"]


@pytest.mark.parametrize("text", ["one line", "two\nlines", "it's\n", "a '''quote'''\nx",
                                  'tab\tand "double"', "ends with '\nq'", "ctrl\x01x\ny",
                                  "see ${env:HOME}", "$${env:HOME} and $$${env:X}",
                                  "${env:}", "${HOME}"])
def test_params_toml_reads_back_as_written(text):
    """What tune-prompt writes is what the settings read: tuned text naming ${env:HOME}
    was read as the home folder (a proposal naming a key's variable would send the key)."""
    from tunedsl.evaluation.prompt_tuning import params_toml

    assert _read_back(params_toml({"system_prompt": text, "odd key": text})) == {
        "system_prompt": text, "odd key": text}


@given(st.text(alphabet=st.sampled_from("$ {}env:HOMEab'\"\n\\"), max_size=40))
def test_any_tuned_text_reads_back_as_written(text):
    from tunedsl.evaluation.prompt_tuning import params_toml

    assert _read_back(params_toml({"system_prompt": text})) == {"system_prompt": text}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_bad_input_is_one_line_and_exit_2_before_any_rollout(tmp_path, servers):
    task, critic = servers
    exp = write_experiment(tmp_path)
    base = ["--base-url", task.base_url, "--model", "served", "--reflection-model",
            f"critic@{critic.base_url}", "--no-progress", "--candidates",
            str(tmp_path / "run.jsonl")]
    where = f"{exp}:14"
    port = _closed_port()
    cases = [
        ([f"{exp}:Sums"], "give the text param(s) to tune with --param NAME (the experiment's "
                          "text params: system_prompt; set one in its params = {...})"),
        ([f"{exp}:Sums", "--param", "system_promt"],
         "--param system_promt: the experiment has no param 'system_promt' (did you mean "
         "'system_prompt'?), so the workflow cannot read it (its params: retries, "
         "system_prompt); add it to the class's params = {...}"),
        ([f"{exp}:Sums", "--param", "retries"],
         "--param retries: its value 2 (an int) is not text; only text params can be tuned "
         "(text params: system_prompt)"),
        ([f"{exp}:Plain", "--param", "system_prompt"],
         f"Plain ({exp}:36): params: system_prompt set, but neither @workflow plain ({where}) "
         f"nor @judge exact ({exp}:20) takes them, so they reach nothing; add a params "
         f"argument to the function that reads them, or remove them"),
        ([f"{exp}:Sums", "--param", "system_prompt", "--budget", "5"],
         "--budget 5: below one evaluation of the validation split (6 rollouts); give at "
         "least 6, and room for proposals, e.g. --budget 100"),
        ([f"{exp}:Sums", "--param", "system_prompt", "--budget", "20", "--reflection-model",
          f"critic@http://127.0.0.1:{port}/v1"],
         f"--reflection-model critic@http://127.0.0.1:{port}/v1: http://127.0.0.1:{port}/v1 "
         f"did not answer (ConnectError: Cannot connect to host 127.0.0.1:{port} "
         f"ssl:default [Connect call failed ('127.0.0.1', {port})]); check its URL, and that "
         f"it is up"),
    ]
    for args, message in cases:
        own = base  # a case's own reflection model replaces the usual one (given once)
        if "--reflection-model" in args:
            at = base.index("--reflection-model")
            own = base[:at] + base[at + 2:]
        done = cli("tune-prompt", *args[:1], *own, *args[1:])
        assert (done.returncode, done.stderr) == (2, f"Error: {message}\n"), args
    assert task.requests == []  # not one rollout was spent on bad input
    assert not (tmp_path / "run.jsonl").exists()


def rollouts(lines):
    return [line for line in lines if line["kind"] == "rollout"]


def test_every_starting_rollout_failing_stops_and_a_resume_runs_them_again(tmp_path, servers):
    """The task endpoint answering 500 to everything: exit 1 once the starting prompt's
    validation rollouts have all failed, each kept as a failure, no candidate scored, no
    reflection asked. Nothing was chosen by them, so a resume runs them again: while the
    endpoint still fails it stops the same way (not scoring the start 0 and tuning on);
    once it answers, it tunes from the start's real score (2 of 6)."""
    task, critic = servers
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates)
    error = (f"@workflow solve ({exp}:5) raised InternalServerError: Error code: 500 - "
             f"{{'error': {{'message': 'scripted failure 500'}}}}")
    task.failures[:] = [500] * 1000  # down, whatever openai's retries
    for done in (cli(*args), cli(*args, "--resume")):
        assert (done.returncode, done.stdout, done.stderr) == (1, "", (
            f"Error: every validation rollout of the starting prompt failed, so tuning "
            f"stopped; the first error: {error}; once that is fixed, --candidates {candidates} "
            f"--resume runs them again\n"))
    lines = read_lines(candidates)
    assert [line["kind"] for line in lines] == ["start"] + ["rollout"] * 12
    assert sorted((line["split"], line["task_index"], line["error"], line["reward"])
                  for line in lines[1:]) == sorted([("val", i, error, None) for i in range(6)] * 2)
    assert len(critic.requests) == 2  # the two probes

    task.failures.clear()  # up again
    before = len(task.requests)
    done = cli(*args, "--resume")
    assert done.returncode == 0, done.stderr
    after = read_lines(candidates)
    assert after[:len(lines)] == lines  # kept as they were
    new = rollouts(after[len(lines):])
    assert len(task.requests) - before == len(new)
    start = lines[1]["candidate"]
    assert sorted(line["task_index"] for line in new if line["candidate"] == start
                  and line["split"] == "val") == list(range(6))
    assert [(c["params"], c["val_rewards"]) for c in after if c["kind"] == "candidate"] == [
        ({"system_prompt": START}, [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]),
        ({"system_prompt": TUNED}, [1.0] * 6)]
    assert done.stdout.splitlines()[:2] == [
        f"candidates   {candidates} (2 scored; {len(new)} rollouts run, 0 from the file, "
        f"0 failed)", "validation   start 0.3333 -> best 1.0000 (6 tasks)"]


def test_three_reflection_failures_in_a_row_stop_and_a_resume_finishes(tmp_path):
    """The reflection model answers the probe, then fails three requests in a row (a 500
    after each of openai's retries, twice, then a body that is no chat completion): exit 1
    at the third, though it would answer the fourth. The failures are kept; a resume asks
    them again, replays every rollout it asks for from the file, runs only new ones, and
    reaches the tuned prompt."""
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    with OpenAIServer(task_model) as task, OpenAIServer(
            reflection_model, failures=[None] + [500] * 8 + [200]) as critic:
        args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates)
        done = cli(*args)
        assert (done.returncode, done.stdout, done.stderr) == (1, "", (
            f"Error: the reflection model failed 3 times in a row, so tuning stopped; the last "
            f"error: ConnectionError: the model endpoint {critic.base_url}/ answered an error "
            f"('scripted failure 200') with status 200, not an OpenAI chat completion; check "
            f"the URL (an OpenAI-compatible server's ends in /v1); --candidates {candidates} "
            f"--resume "
            f"continues when it answers again\n"))
        lines = read_lines(candidates)
        assert [line["error"].split(":")[0] for line in lines if line["kind"] == "reflection"] \
            == ["InternalServerError", "InternalServerError", "ConnectionError"]
        assert (len(critic.requests), critic.failures) == (10, [])
        kept = {rollout_key(line) for line in rollouts(lines)}
        assert len(task.requests) == len(kept)
        again = cli(*args, "--resume")
        asked = len(critic.requests) - 10
    assert again.returncode == 0, again.stderr
    after = read_lines(candidates)
    assert after[:len(lines)] == lines
    new = rollouts(after[len(lines):])
    assert len(task.requests) - len(kept) == len(new)
    assert not {rollout_key(line) for line in new} & kept  # no rollout ran twice
    assert asked == 1 + sum(line["kind"] == "reflection" for line in after[len(lines):])
    # The path up to the first reflection is the same: the start's 6 validation rollouts
    # and the first minibatch's 3 come from the file; now answered, that reflection leads
    # to the tuned prompt, and the second minibatch is never asked for.
    assert again.stdout.splitlines()[:2] == [
        f"candidates   {candidates} (2 scored; {len(new)} rollouts run, 9 from the file, "
        f"0 failed)", "validation   start 0.3333 -> best 1.0000 (6 tasks)"]
    assert again.stdout.splitlines()[-1] == f"    {TUNED}"


@pytest.mark.parametrize("failures", [[500] * 4, [500] * 4 + [200]], ids=["once", "twice"])
def test_a_reflection_model_that_recovers_does_not_stop_the_run(tmp_path, failures):
    """One or two failed reflections (a 500 after openai's retries; then a body that is no
    chat completion), then answers: the run reaches the tuned prompt. The failures are kept
    and replayed as failures, so resuming the finished run asks the reflection model
    nothing but the probe and runs no rollout: GEPA takes the path it took."""
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    with OpenAIServer(task_model) as task, OpenAIServer(
            reflection_model, failures=[None, *failures]) as critic:
        args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates)
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        lines = read_lines(candidates)
        served = len(task.requests), len(critic.requests)
        again = cli(*args, "--resume")
        assert (len(task.requests), len(critic.requests)) == (served[0], served[1] + 1)
    assert done.stdout.splitlines()[-1] == f"    {TUNED}"
    failed = len(failures) // 4 + (200 in failures)
    assert [line["error"] is not None for line in lines if line["kind"] == "reflection"][
        :failed + 1] == [True] * failed + [False]
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == done.stdout.splitlines()[1:]
    assert read_lines(candidates) == lines


@pytest.mark.parametrize("busy", [429, 503])
def test_a_busy_reflection_model_is_probed_again_as_the_tuning_would_ask_it(tmp_path, busy):
    """A 429 to the probe refused the reflection model as one that "did not answer",
    though it was up and would have answered the tuning's retried requests (sweep 32), and
    so did a passing 503 (sweep 40 B W1); it is asked again with openai's retries, and one
    still failing after them is refused."""
    exp = write_experiment(tmp_path)
    with OpenAIServer(task_model) as task, OpenAIServer(reflection_model,
                                                        failures=[busy]) as critic:
        done = cli(*tune_args(exp, task, critic, "--budget", "40", "--candidates",
                              tmp_path / "run.jsonl"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"    {TUNED}"
    with OpenAIServer(task_model) as task, OpenAIServer(reflection_model,
                                                        failures=[busy] * 9) as critic:
        refused = cli(*tune_args(exp, task, critic, "--budget", "40", "--candidates",
                                 tmp_path / "busy.jsonl"))
        asked = len(critic.requests)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines()[-1].endswith(
        "is still busy after openai's retries (RateLimitError: Error code: 429 - {'error': "
        "{'message': 'scripted failure 429'}}); try again later, or give another reflection "
        "model" if busy == 429 else
        "still answers with a server error after openai's retries (InternalServerError: "
        "Error code: 503 - {'error': {'message': 'scripted failure 503'}}); check that the "
        "server behind it is healthy")
    assert (asked, task.requests) == (5, [])  # the probe, again with 3 retries; no rollout
    assert not (tmp_path / "busy.jsonl").exists()


@pytest.mark.parametrize("resume", [False, True], ids=["new", "resumed"])
def test_ctrl_c_while_the_reflection_model_is_probed_says_how_to_go_on(tmp_path, resume):
    """Ctrl-C while the reflection model is probed (before any rollout) said a bare
    "interrupted"; a new tuning says nothing was written, a resumed one how to continue."""
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    with OpenAIServer(task_model) as task, OpenAIServer(reflection_model) as critic:
        args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates)
        if resume:
            assert cli(*args).returncode == 0
        critic.delay = 4  # the probe is answered late: Ctrl-C comes first
        probed = len(critic.requests) + 1
        process = cli_started(*args, *(["--resume"] if resume else []),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = stopped_when(process, lambda: len(critic.requests) >= probed)
    said = (f"; {candidates} keeps every rollout and reflection that finished: continue with "
            f"--candidates {candidates} --resume" if resume else
            " before the first rollout, so nothing was written; run the same command again "
            "to start")
    assert (process.returncode, err) == (130, f"Error: interrupted{said}\n")
    assert candidates.exists() == resume


def test_ctrl_c_keeps_what_finished_and_a_resume_repeats_no_rollout(tmp_path):
    """Ctrl-C in a real process with rollouts in flight: exit 130, one line saying how to
    continue, every line of the candidates file whole and no cancelled rollout recorded as
    a failure; the resume replays every rollout kept and runs only the rest."""
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    with OpenAIServer(task_model, delay=0.5) as task, OpenAIServer(reflection_model) as critic:
        args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates,
                         "--concurrency", "2")
        process = cli_started(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = stopped_when(process, lambda: candidates.exists() and candidates.read_text()
                                .count('"rollout"') >= 2)
        assert (process.returncode, out, err) == (130, "", (
            f"Error: interrupted; {candidates} keeps every rollout and reflection that "
            f"finished: continue with --candidates {candidates} --resume\n"))
        assert candidates.read_text().endswith("\n")
        lines = read_lines(candidates)  # each line whole JSON
        kept = {rollout_key(line) for line in rollouts(lines)}
        assert len(kept) >= 2 and all(line.get("error") is None for line in lines)
        assert {"system_prompt": TUNED} not in [line.get("params") for line in lines]
        task.delay, before = 0.0, len(task.requests)
        done = cli(*args, "--resume")
    assert done.returncode == 0, done.stderr
    new = rollouts(read_lines(candidates)[len(lines):])
    assert len(task.requests) - before == len(new)
    assert not {rollout_key(line) for line in new} & kept
    assert done.stdout.splitlines()[:2] == [
        f"candidates   {candidates} (2 scored; {len(new)} rollouts run, {len(kept)} from the "
        f"file, 0 failed)", "validation   start 0.3333 -> best 1.0000 (6 tasks)"]


def test_the_perfect_reward_ends_tuning_and_a_reward_above_it_names_the_fix(tmp_path, servers):
    """A judge whose best is above --perfect-reward: the first rollout scoring above it
    stops the run (exit 1, the file kept); resumed with the judge's best, nothing is run
    twice and, the tuned prompt no longer perfect, tuning spends the budget."""
    task, critic = servers
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    args = tune_args(exp, task, critic, "--budget", "40", "--candidates", str(candidates))
    stopped = cli(*args, "--perfect-reward", "0.5")
    assert (stopped.returncode, stopped.stderr) == (1, (
        f"Error: a rollout scored 1, above --perfect-reward 0.5 (the reward no rollout can "
        f"beat: GEPA reflects on no minibatch scoring it, and tuning ends at a candidate "
        f"scoring it on every validation task); give the judge's best reward: --candidates "
        f"{candidates} --resume --perfect-reward R continues\n"))
    kept = [line for line in read_lines(candidates) if line["kind"] == "rollout"]
    assert len(kept) == len(task.requests) == len(TEST)  # the start's validation, kept
    resumed = cli(*args, "--resume", "--perfect-reward", "2")
    assert resumed.returncode == 0, resumed.stderr
    rollouts = [line for line in read_lines(candidates) if line["kind"] == "rollout"]
    assert f"rollouts run, {len(TEST)} from the file, 0 failed)" in resumed.stdout
    assert len(task.requests) == len(rollouts) > 40 - len(TEST)  # on to the budget
    assert resumed.stdout.splitlines()[-1] == f"    {TUNED}"
    refused = cli(*args, "--perfect-reward", "nan")
    assert (refused.returncode, refused.stderr) == (2, (
        "Error: --perfect-reward nan: give the best reward your judge gives, a finite number "
        "(1 for a judge scoring 0 to 1)\n"))


#: The tune_settings keys a candidates file has kept since it kept what scores a rollout.
SCORING = ("sampling", "experiment", "functions", "untuned_params", "rollout_timeout")


def test_a_resume_that_would_score_rollouts_otherwise_is_refused_as_in_eval(tmp_path, servers):
    """The start line keeps what eval's results keep of what scores a rollout: the sampling
    settings, the params not tuned (by digest), the workflow's and judge's code (by digest),
    and rollout_timeout. A resume with any of them changed is refused in eval's words (exit
    2, before a rollout runs or a line is written), from the CLI and the API; one with
    another budget, perfect reward, concurrency or -o, which only steer the search, is
    taken and replays the file."""
    import tunedsl

    task, critic = servers
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates)
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    settings = read_lines(candidates)[0]["tune_settings"]
    assert {key: settings[key] for key in SCORING if key != "functions"} == {
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": None,
                     "enable_thinking": None},
        "experiment": "Sums", "untuned_params": {"retries": "d4735e3a265e16ee"},
        "rollout_timeout": 3600}
    assert settings["functions"] == {"workflow": "solve@906ddb13de66ebf3",
                                     "judge": "exact@bcf646335dc4a379"}
    kept, served = candidates.read_bytes(), len(task.requests)
    source = exp.read_text()
    edited_judge = source.replace("1.0 if response.strip()", "1.0 if response.strip(' ')")
    edited_workflow = source.replace('"content": task["question"]',
                                     '"content": task["question"] + " "')
    assert edited_judge != source != edited_workflow
    changes = [
        (["--set", "model.temperature=0.2"], None, "sampling.temperature 1.0 -> 0.2"),
        (["--set", "model.max_tokens=3"], None, "sampling.max_tokens None -> 3"),
        (["--set", "model.top_p=0.5"], None, "sampling.top_p 1.0 -> 0.5"),
        (["--set", "rollout_timeout=5"], None, "rollout_timeout 3600 -> 5"),
        (["--set", "params.retries=3"], None,
         "params.retries (its digest d4735e3a265e16ee -> 4e07408562bedb8b)"),
        ([], edited_judge,
         "functions.judge 'exact@bcf646335dc4a379' -> 'exact@17fa42101d80a214'"
         " (its code: its file, a project file imported from it, an environment variable "
         "they read, or a data file they read by name)"),
        ([], edited_workflow,
         "functions.workflow 'solve@906ddb13de66ebf3' -> 'solve@483a896291d8075d'"
         " (its code: its file, a project file imported from it, an environment variable "
         "they read, or a data file they read by name)"),
        (["--set", "model.temperature=0.2", "--set", "rollout_timeout=5"], None,
         "rollout_timeout 3600 -> 5; sampling.temperature 1.0 -> 0.2"),
    ]
    for extra, code, because in changes:
        exp.write_text(code or source)
        refused = cli(*args, "--resume", *extra)
        assert (refused.returncode, refused.stderr) == (2, (
            f"Error: --resume {candidates}: its results were made with other settings "
            f"({because}); merging would mix two tunings, so resume with the same options or "
            f"write to another --candidates file\n")), extra
    exp.write_text(source)
    assert (candidates.read_bytes(), len(task.requests)) == (kept, served)  # nothing ran

    # The API says it in its words; a Model's own temperature is the sampling it sets.
    with pytest.raises(tunedsl.ConfigError) as api:
        tunedsl.tune_prompt(f"{exp}:Sums", params=["system_prompt"],
                            model=tunedsl.Model("served", base_url=task.base_url,
                                                temperature=0.2),
                            reflection_model=f"critic@{critic.base_url}",
                            search=tunedsl.PromptSearch(budget=40), candidates=candidates,
                            resume=True, progress=False)
    assert str(api.value) == (
        f"resuming {candidates}: its results were made with other settings "
        f"(sampling.temperature 1.0 -> 0.2); merging would mix two tunings, so resume with "
        f"the same options or write to another candidates file")
    assert (candidates.read_bytes(), len(task.requests)) == (kept, served)

    # What only steers the search may change: the file is replayed, no rollout runs again.
    for extra in (["--budget", "60"], ["--perfect-reward", "2", "--budget", "30"],
                  ["--concurrency", "3", "-o", str(tmp_path / "other.toml")]):
        again = cli(*tune_args(exp, task, critic, "--candidates", candidates), "--resume",
                    *extra)
        assert again.returncode == 0, (extra, again.stderr)
        assert read_lines(candidates)[0]["tune_settings"] == settings
    assert (tmp_path / "other.toml").exists()


def test_a_candidates_file_from_before_the_scoring_settings_were_kept_still_resumes(
        tmp_path, servers):
    """A start line without the scoring settings (a file written before tunedsl kept them):
    what they were is unknown, so they are not checked (another temperature is taken and
    the file replayed as it stands); the settings the file does keep are checked as before,
    and its start line is left as it was."""
    task, critic = servers
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "run.jsonl"
    args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates)
    assert cli(*args).returncode == 0
    first, rest = candidates.read_text().split("\n", 1)
    start = json.loads(first)
    for key in SCORING:
        del start["tune_settings"][key]
    candidates.write_text(json.dumps(start) + "\n" + rest)
    lines, served = read_lines(candidates), len(task.requests)
    again = cli(*args, "--resume", "--set", "model.temperature=0.2", "--set",
                "rollout_timeout=5")
    assert again.returncode == 0, again.stderr
    assert f"(2 scored; 0 rollouts run, {served} from the file, 0 failed)" in again.stdout
    assert (read_lines(candidates), len(task.requests)) == (lines, served)
    refused = cli(*["other" if arg == "served" else arg for arg in args], "--resume")
    assert (refused.returncode, refused.stderr) == (2, (
        f"Error: --resume {candidates}: its results were made with other settings (model "
        f"'served' -> 'other'); merging would mix two tunings, so resume with the same "
        f"options or write to another --candidates file\n"))


def test_a_kept_reflection_reply_with_a_lone_surrogate_is_not_replayed_as_a_prompt(tmp_path,
                                                                                    servers):
    """A candidates file keeping a reflection reply with a lone surrogate (written before
    tunedsl refused one, or edited): the resume replayed it as a candidate prompt, every
    rollout of which failed. It counts as a failed reflection now, and GEPA goes on."""
    task, critic = servers
    exp = write_experiment(tmp_path)
    candidates = tmp_path / "c.jsonl"
    args = tune_args(exp, task, critic, "--budget", "40", "--candidates", candidates)
    assert cli(*args).returncode == 0
    lines = read_lines(candidates)
    at = next(i for i, line in enumerate(lines) if line["kind"] == "reflection")
    lines[at]["reply"] = "```\nAnswer \ud800 in digits only.\n```"
    candidates.write_text("".join(json.dumps(line) + "\n" for line in lines[:at + 1]))
    done = cli(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert all(line.get("error") is None for line in rollouts(read_lines(candidates)))


def _parrot(messages):
    """A reflection model that proposes its parent's text every time."""
    text = messages[-1]["content"]
    return "ok" if text == "Reply with: ok" else f"```\n{START}\n```"


def test_a_reflection_model_repeating_its_parent_is_why_nothing_changed(tmp_path):
    """A reflection model answering the parent's text again was told "a larger --budget
    tries more", which buys more of the same (sweep 29 W-05)."""
    exp = write_experiment(tmp_path)
    with OpenAIServer(task_model) as task, OpenAIServer(_parrot) as critic:
        done = cli(*tune_args(exp, task, critic, "--budget", "30", "--candidates",
                              tmp_path / "c.jsonl"))
    assert done.returncode == 0, done.stderr
    asked = sum(line["kind"] == "reflection" for line in read_lines(tmp_path / "c.jsonl"))
    assert asked >= 2
    assert f"why          every proposal of the reflection model ({asked}) repeated its " \
           f"parent's text, so none could beat it; the model does not follow the " \
           f"instruction to write a new one: give another --reflection-model" \
           in done.stdout.splitlines()


def test_a_minibatch_the_budget_cannot_score_is_why_nothing_changed(tmp_path, servers):
    """``--budget 60 --minibatch 56`` (what the refusal of a larger one advised) spent the
    whole budget on minibatches and said "a larger --budget tries more": a proposal is
    scored only when the validation split, twice, and two minibatches fit (sweep 31 B-01)."""
    task, critic = servers
    exp = write_experiment(tmp_path)
    done = cli(*tune_args(exp, task, critic, "--budget", "20", "--minibatch", "7",
                          "--candidates", tmp_path / "c.jsonl"))
    assert done.returncode == 0, done.stderr
    val = int(re.search(r"\((\d+) tasks\)", done.stdout)[1])
    assert f"why          --budget 20 cannot score a proposal with --minibatch 7: that takes " \
           f"the validation split twice and two minibatches, {2 * val + 14} rollouts; give " \
           f"--minibatch {(20 - 2 * val) // 2} or fewer, or a larger --budget" \
        in done.stdout.splitlines()


def test_a_reflection_reply_cut_short_names_the_server_s_limit(tmp_path):
    """A reflection reply cut at finish reason "length" was told to "raise the reflection
    model's max_tokens", which tunedsl never sends and nothing sets (sweep 48 B-W2)."""
    def cut(completion):
        completion["choices"][0]["finish_reason"] = "length"
        return completion

    exp = write_experiment(tmp_path)
    with OpenAIServer(task_model) as task, \
            OpenAIServer(lambda messages: "New prompt:\n```\nAdd them.\n```", answer=cut) \
            as critic:
        done = cli(*tune_args(exp, task, critic, "--budget", "30", "--candidates",
                              tmp_path / "c.jsonl"))
    assert (done.returncode, done.stderr.splitlines()[-1]) == (1, (
        f"Error: the reflection model failed 3 times in a row, so tuning stopped; the last "
        f"error: ValueError: the reflection model's reply was cut at its server's limit on a "
        f"reply's length (finish reason length); raise that limit on the server (vLLM: "
        f"--max-model-len), or choose a reflection model that allows longer replies; "
        f"--candidates {tmp_path / 'c.jsonl'} --resume continues when it answers again"))
    assert all("max_tokens" not in request for request in critic.requests[1:])


def test_a_start_already_perfect_is_why_nothing_changed(tmp_path):
    """A starting prompt scoring the perfect reward on every validation task was told "no
    proposal reached the validation split ... a larger --budget tries more" (sweep 28 W-01)."""
    from tunedsl.evaluation.prompt_tuning import TuneResult

    result = TuneResult(best={"system_prompt": "Add."}, best_reward=1.0,
                        start={"system_prompt": "Add."}, start_reward=1.0, candidates=1,
                        val_size=3, rollouts=3, reused=0, failed=0,
                        candidates_file=tmp_path / "c.jsonl", perfect_reward=1.0)
    assert result.unchanged and result.why_unchanged() == (
        "the start already scores the perfect reward (1) on every validation task, so there "
        "was nothing to improve")


@pytest.mark.parametrize("given, shared, said", [
    (True, False, "the key in TUNEDSL_CRITIC_KEY (given with --reflection-api-key-env) was "
                  "sent; export the key this endpoint takes in it"),
    (False, False, "give the name of the environment variable holding it with "
                   "--reflection-api-key-env"),
    # the policy's endpoint and key, shared: named where that key was given
    (False, True, "the key in TUNEDSL_CRITIC_KEY (given with --api-key-env) was sent; export "
                  "the key this endpoint takes in it")])
def test_a_reflection_model_refusing_its_key_is_told_where_the_key_came_from(
        tmp_path, monkeypatch, given, shared, said):
    """A 401 to the reflection probe was said as an endpoint that "did not answer ... check
    that it is up", advising --api-key-env, which names the policy's key (sweep 38 W1,
    sweep 39 B W3)."""
    exp = write_experiment(tmp_path)
    monkeypatch.setenv("TUNEDSL_CRITIC_KEY", "wrong")
    with OpenAIServer(task_model, api_key="right") as task, \
            OpenAIServer(reflection_model, api_key="right") as critic:
        args = tune_args(exp, task, critic, "--candidates", tmp_path / "c.jsonl")
        if shared:
            args[args.index("--reflection-model") + 1] = "critic"
            args += ["--api-key-env", "TUNEDSL_CRITIC_KEY"]
        elif given:
            args += ["--reflection-api-key-env", "TUNEDSL_CRITIC_KEY"]
        done = cli(*args)
        url = task.base_url if shared else critic.base_url
    spec = "critic" if shared else f"critic@{critic.base_url}"
    assert (done.returncode, done.stderr.splitlines()[-1]) == (2, (
        f"Error: --reflection-model {spec}: the model endpoint {url}/ refused the request "
        f"(HTTP 401: Incorrect API key provided); check its API key: {said}")), done.stderr


@pytest.mark.parametrize("share", [DEFAULT_VAL_FRACTION, 0.5])
def test_a_val_fraction_beside_an_eval_dataset_is_refused_whatever_its_value(tmp_path,
                                                                               servers, share):
    """The default value given was taken without a word, where any other was refused
    (sweep 50's known list): the eval dataset is the validation set either way."""
    import tunedsl

    task, critic = servers
    exp = write_experiment(tmp_path)
    with pytest.raises(ConfigError) as caught:
        tunedsl.tune_prompt(
            f"{exp}:Sums", params=["system_prompt"], model=f"served@{task.base_url}",
            reflection_model=f"critic@{critic.base_url}",
            search=tunedsl.PromptSearch(budget=30, val_fraction=share),
            candidates=tmp_path / "run.jsonl", progress=False)
    assert str(caught.value) == (
        f"search.val_fraction={share}: the experiment has an eval_dataset, whose rows are the "
        f"validation set, so no share of the training data is held out; drop "
        f"search.val_fraction")
    assert not task.requests
