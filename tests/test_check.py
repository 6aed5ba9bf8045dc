"""``tunedsl check``: datasets, task keys, Trinity acceptance, and the CLI exit codes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tunedsl
from tunedsl.api import check
from tunedsl.checks.preflight import task_keys
from tunedsl.errors import ConfigError, DatasetError

from .cli_support import cli

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "examples.math_agent.experiment:MathAgent"
EXAMPLE_DATA = str(REPO / "examples" / "math_agent" / "data")
EMPTY = str(REPO / "tests" / "fixtures" / "empty_data")

MODULE = '''\
from tunedsl import Algorithm, Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, \\
    workflow


@workflow
async def solve(task, model):
    return WorkflowOutput(response=task["prompt"])


@judge
async def grade(task, response):
    return JudgeOutput(reward=float(response == task["solution"]))


@experiment
class MissingKeys:
    workflow = solve
    judge = grade
    train_dataset = Dataset("data")
    model = Model("m", max_model_len=64)
    algorithm = Algorithm(batch_size=1)


@experiment
class Empty:
    workflow = solve
    train_dataset = Dataset({empty!r})
    model = Model("m", max_model_len=64)


@experiment
class Nowhere:
    workflow = solve
    train_dataset = Dataset({missing!r})
    model = Model("m", max_model_len=64)
'''


@pytest.fixture()
def project(tmp_path: Path, tiny_model: Path) -> Path:
    """A module with three broken experiments, beside data lacking the keys read (and the
    model folder ``m`` they train)."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "m").symlink_to(tiny_model, target_is_directory=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    (tmp_path / "exp.py").write_text(
        MODULE.format(empty=EMPTY, missing=str(tmp_path / "missing")))
    return tmp_path


def line_of(path: Path, text: str) -> int:
    return path.read_text().splitlines().index(text) + 1


def expected_errors(project: Path, case: str, where: str) -> list[str]:
    """The exact lines ``check`` reports for one broken experiment."""
    module = project / "exp.py"
    data = str((project / "data").resolve())
    if case == "MissingKeys":
        return [
            f"train_dataset: key 'prompt' read by @workflow solve ({where}:"
            f"{line_of(module, '@workflow')}) is missing from {data} (split 'train'); its rows "
            "have: 'answer', 'question'",
            f"train_dataset: key 'solution' read by @judge grade ({where}:"
            f"{line_of(module, '@judge')}) is missing from {data} (split 'train'); its rows "
            "have: 'answer', 'question'",
        ]
    if case == "Empty":
        return [f"train_dataset: {EMPTY} (split 'train') has no rows; point it at a dataset "
                "with tasks"]
    return [f"train_dataset: path {project / 'missing'} does not exist; fix the path, or give "
            "a Hugging Face hub id such as 'openai/gsm8k'"]


# -------------------------------------------------------------------------------- task keys


async def _reader(task, model):
    question = task["question"]
    hint = task.get("hint")
    other = {"ignored": 1}
    return question + task["answer"] + task["question"] + str(hint) + str(other["ignored"])


def test_task_keys_finds_subscripts_in_order_of_first_use():
    """task["key"] subscripts are found once each; task.get and other dicts are not."""
    assert task_keys(_reader) == ("question", "answer")


def test_task_keys_of_the_example_functions():
    """The example's workflow reads question and its judge reads answer."""
    from examples.math_agent.experiment import exact_answer, solve

    assert task_keys(solve) == ("question",)
    assert task_keys(exact_answer) == ("answer",)


def test_task_keys_leave_out_keys_given_a_default():
    """``task.setdefault("k", 0)`` then ``task["k"]``, and a new task of the data's and its
    own defaults, were refused as keys missing from the data (sweep 44 B-W4); a key read
    without one still counts."""
    async def defaults(task, response):
        task.setdefault("tolerance", 0)
        task.update({"unit": ""}, scale=1)
        task = {**task, "places": 2}
        task = dict(task, sign=1)
        task = {"hint": ""} | task  # (sweep 45 A-W12)
        task |= {"note": ""}
        return (task["tolerance"], task["unit"], task["scale"], task["places"], task["sign"],
                task["hint"], task["note"], task["answer"])

    assert task_keys(defaults) == ("answer",)


#: A module's own defaults, which a workflow merges into the task by name (sweep 46 A-W8).
DEFAULTS = {"hint": "", "unit": ""}
#: Not a mapping: its name gives no key.
NOT_DEFAULTS = ["places"]


async def _or_merged(task, response):
    task = DEFAULTS | task
    return task["hint"], task["unit"], task["answer"]


async def _unpacked(task, response):
    task = {**DEFAULTS, **task}
    return task["hint"], task["unit"], task["answer"]


async def _dict_of(task, response):
    task = dict(DEFAULTS, **task)
    return task["hint"], task["unit"], task["answer"]


async def _updated(task, response):
    task.update(DEFAULTS)
    return task["hint"], task["unit"], task["answer"]


async def _chained(task, response):
    import collections

    task = collections.ChainMap(task, DEFAULTS)
    return task["hint"], task["unit"], task["answer"]


async def _augmented(task, response):
    task |= DEFAULTS
    return task["hint"], task["unit"], task["answer"]


async def _not_a_mapping(task, response):
    task = dict(task, *NOT_DEFAULTS)
    return task["hint"], task["answer"]


@pytest.mark.parametrize("reader", [_or_merged, _unpacked, _dict_of, _updated, _chained,
                                    _augmented])
def test_task_keys_leave_out_keys_a_module_s_dict_of_defaults_gives(reader):
    """``task = DEFAULTS | task`` (and its other spellings) with a module-level dict of
    defaults was refused as "key 'hint' ... is missing from data": a valid experiment could
    not run (sweep 46 A-W8)."""
    assert task_keys(reader) == ("answer",)


def test_task_keys_of_a_name_that_holds_no_mapping_are_still_needed():
    assert task_keys(_not_a_mapping) == ("hint", "answer")


class _Settings:
    """Defaults held by a class, which a workflow merges by attribute (sweep 47 A-W5)."""
    DEFAULTS = {"hint": "", "unit": ""}


def _normalize(task):
    return {"hint": "", "unit": "", **task}


async def _class_defaults(task, response):
    task = _Settings.DEFAULTS | task
    return task["hint"], task["unit"], task["answer"]


async def _normalized(task, response):
    before = task["answer"]
    task = _normalize(task)
    return task["hint"], task["unit"], before


async def _from_a_call(task, response):
    task = _Settings.__dict__["DEFAULTS"].copy() | task
    return task["hint"], task["unit"]


def test_task_keys_leave_out_keys_a_class_s_defaults_give():
    """``task = Settings.DEFAULTS | task`` was refused as "key 'hint' ... is missing" (sweep
    47 A-W5)."""
    assert task_keys(_class_defaults) == ("answer",)


@pytest.mark.parametrize("reader", [_normalized, _from_a_call])
def test_task_keys_read_after_the_task_is_remade_by_the_user_s_code_are_not_required(reader):
    """``task = normalize(task)`` may give any key, which only running it tells: keys read
    after it were refused as missing from the data (sweep 47 A-W5). Keys read before it
    still count; the preflight's rollout runs the rest."""
    assert task_keys(reader) == (("answer",) if reader is _normalized else ())


def test_task_keys_without_source_is_empty():
    """A callable with no Python source yields no keys rather than an error."""
    assert task_keys(len) == ()


# --------------------------------------------------------------------------------- in-process


def test_check_example_reports_every_step():
    """The example passes: datasets readable with their keys, a scripted rollout, then
    Trinity accepts it."""
    lines = check(tunedsl.load_experiment(EXAMPLE), backend="trinity")
    assert lines == [
        f"experiment: {EXAMPLE} builds",
        "backend: trinity (chosen with backend='trinity'): its checks pass",
        f"train_dataset: {EXAMPLE_DATA} (split 'train'): 64 rows readable, keys answer, question",
        f"eval_dataset: {EXAMPLE_DATA} (split 'test'): 16 rows readable, keys answer, question",
        "rollout: workflow and judge ran on the first training task with a scripted model "
        "(reward 0)",
        "trinity: Trinity-RFT accepts the config (algorithm multi_step_grpo, advantage "
        "step_wise_grpo, train_batch_size 256, 2 GPUs needed as Trinity counts them)",
        "trinity: on 1 node x 2 GPUs, 1 rollout engine on 1 GPU, the trainer on 1 GPU; verl "
        "trains each step's 256 experiences on one data-parallel rank",
        "trinity: Trinity evaluates at step 0 and every 25 steps but not after the last one, "
        "so step 4 is not evaluated (the local backend evaluates after its last step too); "
        "evaluate the last checkpoint with tunedsl eval",
    ]


def test_check_grpo_fixture_reports_grpo_advantage():
    """The grpo fixture's acceptance line shows Trinity's derived grpo values."""
    lines = check(tunedsl.load_experiment(str(REPO / "tests" / "fixtures" / "good.py") + ":Good"),
                  backend="trinity")
    assert lines[-2] == ("trinity: Trinity-RFT accepts the config (algorithm grpo, advantage "
                         "grpo, train_batch_size 8, 2 GPUs needed as Trinity counts them)")


def one_task_experiment(folder, model, workflow_body, *class_lines):
    """Write ``folder/exp.py`` (a one-task experiment around ``workflow_body``, training the
    model folder ``m``, a link to ``model``) and its data; return the experiment's import
    string."""
    (folder / "m").symlink_to(model, target_is_directory=True)
    (folder / "data").mkdir()
    (folder / "data" / "train.jsonl").write_text('{"question": "q"}\n')
    (folder / "exp.py").write_text(
        "import time\n"
        "from tunedsl import Algorithm, Dataset, Model, WorkflowOutput, experiment, workflow\n"
        f"@workflow\nasync def solve(task, model):\n{workflow_body}"
        "@experiment\nclass Exp:\n    workflow = solve\n    train_dataset = Dataset('data')\n"
        "    model = Model('m', max_model_len=64)\n"
        + "".join(f"    {line}\n" for line in class_lines))
    return f"{folder / 'exp.py'}:Exp"


def test_check_reports_a_workflow_that_fails_on_the_scripted_model(tmp_path, tiny_model):
    """The preflight rollout names the user's function and keeps its traceback."""
    target = one_task_experiment(
        tmp_path, tiny_model,
        "    reply = await model.chat([{'role': 'user', 'content': task['question']}])\n"
        "    return WorkflowOutput(response=reply.content, reward=1 / int(reply.content))\n",
        "algorithm = Algorithm(batch_size=1)")
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(target))
    assert str(info.value).startswith("rollout: on the first training task, with a scripted "
                                      "model that always replies '0': @workflow solve (")
    assert str(info.value).endswith("raised ZeroDivisionError: division by zero")
    assert "1 / int(reply.content)" in info.value.user_traceback


@pytest.mark.parametrize("override, said", [
    # "rejects the generated config: Invalid configuration: Key 'bogus_key' not in
    # 'AlgorithmConfig' full_key: ..." (sweep 47 A-W10): tunedsl writes no such key, so it
    # is the base YAML's or [trinity]'s
    ("trinity.algorithm.bogus_key=1",
     "trinity: algorithm.bogus_key: Trinity-RFT has no such setting (a key of the base YAML "
     "given as trinity_config, or of the [trinity] table); fix its name, or remove it"),
    # OmegaConf's "Merge error: int is not a subclass of ExplorerConfig. value: 5 full_key:
    # object_type=Config" (sweep 49 A-W7)
    ("trinity.explorer=5",
     "trinity: explorer is given the int 5, where Trinity-RFT reads a table of settings "
     "(ExplorerConfig); give a table (in the base YAML or [trinity]), or remove it"),
    # Trinity's reason with the key's path, not OmegaConf's reference_type and object_type
    ("trinity.synchronizer.sync_method=x",
     "trinity: Trinity-RFT rejects synchronizer.sync_method: Invalid value 'x', expected "
     "one of [NCCL, CHECKPOINT, MEMORY]"),
])
def test_check_says_trinity_s_refusal_of_a_key_the_user_gave_by_its_path(override, said):
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[override])
    with pytest.raises(ConfigError) as info:
        check(graph, backend="trinity")
    assert info.value.problems == (said,)


def _not_a_table(path: str, given: str, table: str) -> str:
    return (f"trinity: {path} is given the {given}, where Trinity-RFT reads a table of "
            f"settings ({table}); give a table (in the base YAML or [trinity]), or remove it")


@pytest.mark.parametrize("override, said", [
    # "internal error in tunedsl: AttributeError: 'int' object has no attribute 'items'"
    # from check_engine_sampling (sweep 50 A-T1)
    ("trinity.explorer.rollout_model=5",
     _not_a_table("explorer.rollout_model", "int 5", "InferenceModelConfig")),
    # OmegaConf's "Merge error: int is not a subclass of ExplorerInput ..." (sweep 50 A-W9)
    ("trinity.buffer.explorer_input=5",
     _not_a_table("buffer.explorer_input", "int 5", "ExplorerInput")),
    ("trinity.buffer.explorer_input.taskset=5",
     _not_a_table("buffer.explorer_input.taskset", "int 5", "TasksetConfig")),
    ("trinity.synchronizer=[1, 2]",
     _not_a_table("synchronizer", "list [1, 2]", "SynchronizerConfig")),
    ('trinity.buffer.explorer_input.taskset.rollout_args="x"',
     _not_a_table("buffer.explorer_input.taskset.rollout_args", "str x", "GenerationConfig")),
    ("trinity.explorer.dynamic_timeout=[]",
     _not_a_table("explorer.dynamic_timeout", "list []", "DynamicTimeoutConfig")),
])
def test_check_names_a_nested_trinity_table_given_no_table_by_its_path(override, said):
    """Trinity's own config classes say which keys are tables, at any depth; the Trinity
    backend says so before its checks read the tables, and the YAML every backend's check
    validates (and ``tunedsl config`` writes) is not made with it."""
    from tunedsl.backends.trinity.validate import fitted_config

    graph = tunedsl.load_experiment(EXAMPLE, overrides=[override])
    with pytest.raises(ConfigError) as info:
        check(graph, backend="trinity")
    assert info.value.problems == (said,)
    with pytest.raises(ConfigError) as info:
        fitted_config(graph)
    assert info.value.problems == (said,)


def test_check_names_every_nested_table_given_no_table_in_a_base_yaml(tmp_path):
    """A base YAML's number where Trinity reads a table is named by its file and path, not
    replaced by tunedsl's own table without a word (sweep 50 A-W9); [trinity]'s follow."""
    base = tmp_path / "base.yaml"
    base.write_text("explorer:\n  rollout_model: 5\nbuffer:\n  explorer_input:\n"
                    "    taskset: 5\n    eval_tasksets:\n      - name: e\n"
                    "        rollout_args: [1]\nsynchronizer: null\n")
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        f"trinity_config={str(base)!r}", "trinity.buffer.explorer_input.taskset=true"])
    with pytest.raises(ConfigError) as info:
        check(graph, backend="trinity")
    assert info.value.problems == tuple(
        [f"{base}: {path} is {value}, where Trinity-RFT reads a table of settings; give a "
         f"table, or remove it"
         for path, value in [("explorer.rollout_model", "5"),
                             ("buffer.explorer_input.taskset", "5"),
                             ("buffer.explorer_input.eval_tasksets[0].rollout_args", "[1]")]]
        + [_not_a_table("buffer.explorer_input.taskset", "bool True", "TasksetConfig")])


def test_check_passes_nested_trinity_tables_given_as_tables(tmp_path):
    """Tables given as tables, at any depth, in the base YAML and [trinity], pass."""
    base = tmp_path / "base.yaml"
    base.write_text("explorer:\n  rollout_model:\n    enable_prefix_caching: true\n"
                    "  over_rollout: {}\nbuffer:\n  explorer_input:\n    taskset:\n"
                    "      rollout_args: {top_k: -1}\n")
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        f"trinity_config={str(base)!r}", "trinity.explorer.dynamic_timeout.enable=false",
        "trinity.buffer.explorer_input.taskset.format.prompt_key='question'"])
    assert any(line.startswith("trinity: Trinity-RFT accepts the config")
               for line in check(graph, backend="trinity"))


@pytest.mark.parametrize("case", ["MissingKeys", "Empty", "Nowhere"])
def test_check_dataset_errors(project, case, monkeypatch):
    """Missing keys, an empty dataset and a missing path each raise the exact message."""
    monkeypatch.chdir(project)
    graph = tunedsl.load_experiment(f"{project / 'exp.py'}:{case}")
    with pytest.raises(DatasetError) as info:
        check(graph)
    assert str(info.value).splitlines() == expected_errors(project, case, "exp.py")


def test_check_reports_train_and_eval_problems_together(project, monkeypatch):
    """A broken eval dataset is reported alongside the train dataset's missing keys."""
    monkeypatch.chdir(project)
    graph = tunedsl.load_experiment(f"{project / 'exp.py'}:MissingKeys",
                                    overrides=[f'eval_dataset.path="{project / "gone"}"'])
    with pytest.raises(DatasetError) as info:
        check(graph)
    assert str(info.value).splitlines() == expected_errors(project, "MissingKeys", "exp.py") + [
        f"eval_dataset: path {project / 'gone'} does not exist; fix the path, or give a "
        "Hugging Face hub id such as 'openai/gsm8k'"]


def test_check_refuses_train_dataset_smaller_than_a_batch(project, monkeypatch):
    """A train dataset with fewer rows than batch_size cannot fill one step."""
    graph = tunedsl.load_experiment(f"{project / 'exp.py'}:MissingKeys",
                                    overrides=["algorithm.batch_size=2"])
    with pytest.raises(DatasetError) as info:
        check(graph)
    assert str(info.value) == (
        f"train_dataset: {(project / 'data').resolve()} (split 'train') has 1 rows, fewer than "
        "algorithm.batch_size = 2, so not one training step can be filled; lower batch_size "
        "or add tasks")


# ---------------------------------------------------------------------------------------- CLI


def test_cli_check_example_exits_zero_with_ok_lines():
    """python -m tunedsl check on the example prints ok lines and exits 0."""
    done = cli("check", EXAMPLE, "--backend", "trinity")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"ok  experiment: {EXAMPLE} builds"
    assert len(lines) == 8 and all(line.startswith(("ok  ", "note  ")) for line in lines)
    assert lines[-3].startswith("ok  trinity: Trinity-RFT accepts the config")
    assert "Error:" not in done.stderr


@pytest.mark.parametrize("case", ["MissingKeys", "Empty", "Nowhere"])
def test_cli_check_dataset_errors_exit_two(project, case):
    """The CLI prints each problem as an Error: line on stderr and exits 2."""
    done = cli("check", f"{project / 'exp.py'}:{case}")
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    # Paths outside the working folder are shown in full.
    assert errors == ["Error: " + line
                      for line in expected_errors(project, case, str(project / "exp.py"))]
    # the checks that passed before the dataset's were shown as they finished
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [
        "ok  experiment", "ok  backend"]


def test_cli_check_settings_error_exits_two(tmp_path):
    """A settings problem from --set is an Error: line and exit code 2."""
    done = cli("check", EXAMPLE, "--backend", "trinity", "--set", "algorithm.group_size=eight")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "Error: --set: invalid value @ algorithm.group_size: must be an integer (got 'eight')"]


def test_check_counts_gpus_as_trinity_does_for_parallel_engines():
    """A rollout engine with tensor 2 x data 2 parallelism needs 4 GPUs, the trainer one
    more: check accepts exactly 5 and refuses 4 with Trinity's own arithmetic."""
    pytest.importorskip("trinity.common.config")
    parallel = ["model.tensor_parallel_size=2",
                "trinity.explorer.rollout_model.data_parallel_size=2"]
    lines = check(tunedsl.load_experiment(EXAMPLE, overrides=parallel), backend="trinity")
    assert lines[-3].endswith("5 GPUs needed as Trinity counts them)")
    sized = ["trinity.cluster.node_num=1", "trinity.cluster.gpu_per_node=5"]
    assert check(tunedsl.load_experiment(EXAMPLE, overrides=[*parallel, *sized]),
                 backend="trinity")[-3:-1] == lines[-3:-1]
    short = ["trinity.cluster.node_num=1", "trinity.cluster.gpu_per_node=4"]
    with pytest.raises(ConfigError) as info:
        check(tunedsl.load_experiment(EXAMPLE, overrides=[*parallel, *short]),
              backend="trinity")
    assert str(info.value) == (
        "trinity: Trinity-RFT rejects the generated config: Not enough GPUs for trainer. "
        "Explorer requires 4 GPUs, but total available GPUs are 4. (the config needs 5 GPUs "
        "on one node as Trinity counts them)")


def test_the_preflight_rollout_has_a_time_limit_even_for_a_blocking_workflow(tmp_path,
                                                                              tiny_model):
    """A workflow that blocks (time.sleep) is reported after min(rollout_timeout, 120) s."""
    target = one_task_experiment(
        tmp_path, tiny_model, "    time.sleep(30)\n    return WorkflowOutput(reward=1.0)\n",
        "algorithm = Algorithm(group_size=2, batch_size=1)", "rollout_timeout = 1")
    graph = tunedsl.load_experiment(target)
    import time

    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        check(graph)
    assert time.perf_counter() - started < 10
    assert str(info.value) == (
        "rollout: on the first training task, with a scripted model that always replies '0': "
        "the workflow and judge did not finish within 1 s; the model answers at once, so the "
        "workflow is waiting on something else (a network call, a lock, a sleep)")


def test_a_rollout_abandoned_past_its_time_limit_leaves_later_rollouts_putting_back_the_folder(
        tmp_path, tiny_model, monkeypatch):
    """check's preflight abandons a blocking rollout in a thread of its own; counted with
    every other rollout, it kept each later rollout in the process from putting back the
    working folder its workflow left (a run's checkpoints then went under the workflow's
    sandbox; CI, after the preflight test ran in the same worker)."""
    import asyncio

    from tunedsl.testing import ScriptedModel, arun_rollout

    blocking = tmp_path / "blocking"
    blocking.mkdir()
    graph = tunedsl.load_experiment(one_task_experiment(
        blocking, tiny_model, "    time.sleep(5)\n    return WorkflowOutput(reward=1.0)\n",
        "algorithm = Algorithm(group_size=2, batch_size=1)", "rollout_timeout = 1"))
    with pytest.raises(ConfigError):
        check(graph)  # its rollout still sleeps in the preflight's thread
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    monkeypatch.chdir(tmp_path)

    @tunedsl.workflow
    async def enters_its_sandbox(task, model):
        os.chdir(sandbox)
        return tunedsl.WorkflowOutput(reward=1.0)

    asyncio.run(arun_rollout(enters_its_sandbox, {"question": "q"}, ScriptedModel(["0"])))
    assert Path.cwd() == tmp_path


GUARDED = '''\
from tunedsl import Algorithm, Dataset, JudgeOutput, Model, WorkflowOutput, experiment, judge, \\
    workflow


@workflow
async def solve(task, model):
    reply = await model.chat([{"role": "user", "content": task["question"]}])
    task["seen"] = True
    task["count"] = task.get("count", 0)
    task["count"] += 1
    hint = task["hint"] if "hint" in task else ""
    try:
        extra = task["extra"]
    except KeyError:
        extra = ""
    return WorkflowOutput(response=reply.content + hint + extra)


@judge
async def grade(task, response):
    return JudgeOutput(reward=float(response == task["answer"]))


@experiment
class Guarded:
    workflow = solve
    judge = grade
    train_dataset = Dataset("data")
    model = Model("m", max_model_len=64)
    algorithm = Algorithm(batch_size=1)
'''


def test_keys_a_function_writes_or_reads_guarded_are_not_required(project):
    """check refused data lacking a key the workflow writes (task["seen"] = True, += 1) or
    reads only where a missing one is handled ("k" in task, try/except KeyError), while
    run took the same experiment; the keys it reads unguarded are still required."""
    (project / "guarded.py").write_text(GUARDED)
    report = check(tunedsl.load_experiment(f"{project / 'guarded.py'}:Guarded"), backend="local")
    assert any(line.startswith("train_dataset:") for line in report)
    (project / "guarded.py").write_text(GUARDED.replace('task["hint"] if "hint" in task else ""',
                                                            'task["hint"]'))
    with pytest.raises(DatasetError) as caught:
        check(tunedsl.load_experiment(f"{project / 'guarded.py'}:Guarded"), backend="local")
    assert "key 'hint' read by @workflow solve" in str(caught.value)


def test_check_hands_over_each_line_as_its_check_finishes(project):
    """check printed nothing until every check had run (a rollout can take a minute): each
    line reaches ``on_line`` as it is made, in the order returned, and the lines made before
    a failing check are shown before its error."""
    (project / "guarded.py").write_text(GUARDED)
    shown: list[str] = []
    report = check(tunedsl.load_experiment(f"{project / 'guarded.py'}:Guarded"),
                   backend="local", on_line=shown.append)
    assert shown == report
    shown.clear()
    with pytest.raises(DatasetError):
        check(tunedsl.load_experiment(f"{project / 'exp.py'}:MissingKeys"), backend="local",
              on_line=shown.append)
    assert [line.split(":")[0] for line in shown] == ["experiment", "backend"]


def test_check_refuses_an_on_line_that_is_not_a_function(project):
    """``check(on_line=5)`` ran every check, then failed with a plain TypeError."""
    with pytest.raises(ConfigError) as caught:
        check(tunedsl.load_experiment(f"{project / 'exp.py'}:MissingKeys"), on_line=5)
    assert str(caught.value) == ("on_line=5: give a function of one line (print, list.append), "
                                 "or None")


@pytest.mark.parametrize("backend", ["trinity", "local"])
def test_check_reads_an_eval_taskset_the_trinity_table_adds(backend, tiny_model):
    """A second eval taskset under ``[trinity]`` went to Trinity unread; it is read as
    ``eval_dataset`` is, and on the local backend noted as evaluated by Trinity only."""
    taskset = "buffer.explorer_input.eval_tasksets.hard"
    data = REPO / "examples" / "arith" / "data"
    graph = tunedsl.load_experiment("examples.arith.experiment:Arith", overrides=[
        f"model.model_path={tiny_model}", f"trinity.{taskset}.path={data}",
        f"trinity.{taskset}.split=test"])
    lines = check(graph, backend=backend)
    added = [line for line in lines if taskset in line]
    rows = len((data / "test.jsonl").read_text().splitlines())
    assert added == [
        f"{taskset}: {data} (split 'test'): {rows} rows readable, keys answer, question",
        *([f"local: {taskset} is evaluated by Trinity only; the local backend evaluates "
           f"eval_dataset"] if backend == "local" else [])]


def test_an_auxiliary_model_the_trinity_table_adds_is_the_experiments():
    """An auxiliary model only ``[trinity]`` named reached Trinity unprobed and uncounted,
    and the preflight rollout had none by that name; it is declared as a base YAML's is."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        "trinity.explorer.auxiliary_models.critic.model_path=/models/critic",
        "trinity.explorer.auxiliary_models.critic.engine_num=2"])
    critic = graph.auxiliary_models["critic"]
    assert (critic.model_path, critic.inference_engine_num) == ("/models/critic", 2)


def test_the_trinity_tables_entry_for_the_eval_taskset_is_eval_dataset():
    """``[trinity.buffer.explorer_input.eval_tasksets.eval]`` changed the path Trinity
    evaluates while check read ``eval_dataset``'s; it is read back as eval_dataset, as the
    training taskset's keys are train_dataset's."""
    taskset = "trinity.buffer.explorer_input.eval_tasksets.eval"
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        f"{taskset}.path={EMPTY}", f"{taskset}.split=valid"])
    assert (graph.eval_dataset.path, graph.eval_dataset.split) == (EMPTY, "valid")


def test_a_trinity_number_read_from_the_environment_bounds_a_step(monkeypatch):
    """``repeat_times = "${env:GS}"`` under ``[trinity]`` was refused by the step bounds as
    "must be a whole number (got '4')"; they read the number it spells, as Trinity does."""
    from tunedsl.backends.trinity.config import trinity_config

    monkeypatch.setenv("TUNEDSL_TEST_RUNNERS", "3")
    graph = tunedsl.load_experiment(EXAMPLE, overrides=[
        "trinity.explorer.runner_per_model=${env:TUNEDSL_TEST_RUNNERS}"])
    fixed = trinity_config(tunedsl.load_experiment(EXAMPLE, overrides=[
        "trinity.explorer.runner_per_model=3"]))
    read = trinity_config(graph)
    assert read["explorer"]["max_timeout"] == fixed["explorer"]["max_timeout"]
    assert read["explorer"]["runner_per_model"].template == "${oc.env:TUNEDSL_TEST_RUNNERS}"


def test_a_trinity_tables_relative_path_is_read_beside_its_file(tmp_path, monkeypatch):
    """A ``[trinity]`` eval taskset's ``path = "hard"`` was read from the current folder
    (check failed from another one, and the YAML kept it relative); it is read beside the
    settings file, as a base YAML's and every dataset path of the settings are."""
    from tunedsl.backends.trinity.config import trinity_config

    (tmp_path / "hard").mkdir()
    rows = (REPO / "examples" / "math_agent" / "data" / "test.jsonl").read_text()
    (tmp_path / "hard" / "train.jsonl").write_text(rows)
    settings = tmp_path / "tunedsl.toml"
    settings.write_text('[trinity.buffer.explorer_input.eval_tasksets.hard]\npath = "hard"\n')
    monkeypatch.chdir(REPO)
    graph = tunedsl.load_experiment(EXAMPLE, settings=str(settings))
    tasksets = trinity_config(graph)["buffer"]["explorer_input"]["eval_tasksets"]
    assert [t["path"] for t in tasksets if t["name"] == "hard"] == [str(tmp_path / "hard")]
    assert [line for line in check(graph, backend="trinity") if "hard" in line] == [
        f"buffer.explorer_input.eval_tasksets.hard: {tmp_path / 'hard'} (split 'train'): "
        f"{len(rows.splitlines())} rows readable, keys answer, question"]


def test_check_notes_a_model_path_that_is_not_on_this_machine():
    """An absolute model_path missing here passed check without a word (sweep 24): it may
    be on the GPU nodes only, so check says where the run will look for it."""
    graph = tunedsl.load_experiment(EXAMPLE, overrides=["model.model_path=/nowhere/model"])
    notes = [line for line in check(graph, backend="trinity") if "/nowhere/model" in line]
    assert notes == ["trinity: model.model_path /nowhere/model is not on this machine; the run "
                     "reads it on the GPU nodes, so it must be there"]


def test_a_workflow_adding_a_signal_handler_is_told_where_rollouts_run(tmp_path, tiny_model):
    """``loop.add_signal_handler`` in a workflow failed check's rollout (run in a thread of
    its own) in asyncio's words alone, "set_wakeup_fd only works in main thread", though eval
    and a local run, in the main thread, ran it (sweep 37 W1)."""
    target = one_task_experiment(
        tmp_path, tiny_model,
        "    import asyncio, signal\n"
        "    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, print)\n"
        "    return WorkflowOutput(reward=1.0)\n",
        "algorithm = Algorithm(group_size=2, batch_size=1)")
    with pytest.raises(ConfigError) as caught:
        check(tunedsl.load_experiment(target))
    assert str(caught.value).endswith(
        "; asyncio adds a signal handler (loop.add_signal_handler) only in a process's main "
        "thread, and a rollout may run in another: check runs it in a thread of its own, and "
        "Ray runs a Trinity rollout worker's event loop in one; guard the call (except "
        "RuntimeError), or leave it out")
