"""@workflow, @judge and @experiment: identity, direct calls, and every error message."""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path

import pytest

from examples.math_agent.experiment import exact_answer, solve
from tests.fixtures.good import answer, exact
from tests.fixtures.two_experiments import Large, Small, self_scoring
from tunedsl import Algorithm, ChatResponse, Dataset, JudgeOutput, Model, WorkflowOutput
from tunedsl import experiment, judge, workflow
from tunedsl.dsl.decorators import EXPERIMENT_ATTRIBUTES, is_experiment, spec_of
from tunedsl.errors import ConfigError, SignatureError

REPO = Path(__file__).resolve().parents[1]
HERE = "tests/test_decorators.py"  # as the library displays it: relative to the cwd
MODULE = "tests.test_decorators"


@pytest.fixture(autouse=True)
def _run_from_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def next_line() -> int:
    """The number of the line after the caller's current line."""
    return sys._getframe(1).f_lineno + 1


class StubModel:
    """A stand-in chat model: answers by the last user message, and records every call."""

    name = "stub"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[dict], dict]] = []

    async def chat(self, messages, **kw):
        self.calls.append((messages, kw))
        return ChatResponse(content=self.answers[messages[-1]["content"]])


def signature_error(decorator, fn) -> str:
    """Decorate ``fn`` expecting a SignatureError, and return its message."""
    with pytest.raises(SignatureError) as excinfo:
        decorator(fn)
    return str(excinfo.value)


def config_error(cls) -> ConfigError:
    """Apply @experiment to ``cls`` expecting a ConfigError, and return it."""
    with pytest.raises(ConfigError) as excinfo:
        experiment(cls)
    return excinfo.value


# ----------------------------------------------------------------------- @workflow, @judge


def test_bare_workflow_returns_the_same_function_with_its_spec():
    """Bare @workflow hands back the very function, carrying where it was defined."""
    line = next_line()
    async def agent(task, model):
        return WorkflowOutput(response=task)

    assert workflow(agent) is agent
    spec = spec_of(agent)
    assert (spec.kind, spec.module, spec.qualname) == ("workflow", MODULE, agent.__qualname__)
    assert spec.ref == f"{MODULE}:{agent.__qualname__}"
    assert (spec.line, spec.where) == (line, f"{HERE}:{line}")
    assert spec.optional_params == frozenset()


def test_decorator_syntax_keeps_functions_callable():
    """Functions written with @workflow / @judge syntax run directly and return their outputs."""
    @workflow
    async def two_turns(task, model):
        first = await model.chat([{"role": "user", "content": task["q"]}], temperature=0.2)
        second = await model.chat([{"role": "user", "content": first.content}])
        return WorkflowOutput(response=second.content, metrics={"turns": 2.0})

    @judge
    async def by_length(task, response):
        return JudgeOutput(reward=float(len(response)))

    model = StubModel({"hi": "hello", "hello": "done!"})
    out = asyncio.run(two_turns({"q": "hi"}, model))
    assert out == WorkflowOutput(response="done!", metrics={"turns": 2.0})
    assert model.calls == [([{"role": "user", "content": "hi"}], {"temperature": 0.2}),
                           ([{"role": "user", "content": "hello"}], {})]
    assert asyncio.run(by_length({}, out.response)) == JudgeOutput(reward=5.0)


def test_fixture_workflow_and_judge_run_with_a_stub_model():
    """The fixture's answer/exact pair yields the model's reply and rewards only the right answer."""
    task = {"question": "2+3", "answer": "5"}
    out = asyncio.run(answer(task, StubModel({"2+3": " 5\n"})))
    assert out == WorkflowOutput(response=" 5\n")
    assert asyncio.run(exact(task, out.response)) == JudgeOutput(reward=1.0)
    assert asyncio.run(exact(task, "6")) == JudgeOutput(reward=0.0)


def test_self_scoring_workflow_and_example_agent_run_directly():
    """A self-scoring workflow and the math example compute rewards from the stub's replies."""
    task = {"question": "What is 2 plus 2?", "answer": "4"}
    scored = asyncio.run(self_scoring(task, StubModel({task["question"]: "it is 4"}), {}))
    assert scored == WorkflowOutput(response="it is 4", reward=1.0)
    model = StubModel({task["question"]: "2 + 2 = 4\nAnswer: 4"})
    out = asyncio.run(solve(task, model, {"system_prompt": "Add."}))
    assert out.response == "2 + 2 = 4\nAnswer: 4"
    assert model.calls[0][0] == [{"role": "system", "content": "Add."},
                                 {"role": "user", "content": task["question"]}]
    assert asyncio.run(exact_answer(task, out.response)) == JudgeOutput(
        reward=1.0, metrics={"answered": 1.0})
    assert asyncio.run(exact_answer(task, "no idea")) == JudgeOutput(
        reward=0.0, metrics={"answered": 0.0})


def test_optional_parameters_are_accepted_and_recorded():
    """auxiliary_models, params and logger are allowed and listed in the spec's optional_params."""
    async def agent(task, model, auxiliary_models, params, logger): ...
    async def grade(task, response, logger=None): ...

    assert spec_of(workflow(agent)).optional_params == {"auxiliary_models", "params", "logger"}
    assert spec_of(judge(grade)).optional_params == {"logger"}
    assert spec_of(self_scoring).optional_params == {"auxiliary_models"}


def test_sync_function_is_refused():
    """A plain def is refused with the async signature to write instead."""
    line = next_line()
    def agent(task, model): ...

    assert signature_error(workflow, agent) == (
        f"@workflow {agent.__qualname__} ({HERE}:{line}) must be async: "
        f"write async def agent(task, model)")
    assert isinstance(SignatureError("x"), TypeError)


def test_a_lambda_is_told_to_become_an_async_def_of_a_name():
    """A lambda was told to "write async def <lambda>(task, model)" (sweep 49 A-W12)."""
    answers = lambda task, model: None  # noqa: E731
    assert signature_error(workflow, answers).endswith(
        "must be async: write async def NAME(task, model)")


def test_missing_required_parameters():
    """Each missing required parameter is named, with the full signature to write."""
    line = next_line()
    async def no_model(task): ...
    async def no_response(task): ...
    async def no_task(model): ...

    assert signature_error(workflow, no_task) == (
        f"@workflow {no_task.__qualname__} ({HERE}:{line + 2}) is missing the parameter 'task': "
        f"write async def no_task(task, model)")
    assert signature_error(workflow, no_model) == (
        f"@workflow {no_model.__qualname__} ({HERE}:{line}) is missing the parameter 'model': "
        f"write async def no_model(task, model)")
    assert signature_error(judge, no_response) == (
        f"@judge {no_response.__qualname__} ({HERE}:{line + 1}) is missing the parameter "
        f"'response': write async def no_response(task, response)")


def test_unknown_parameter_suggests_the_closest_name():
    """A misspelt optional parameter gets a did-you-mean and the list of allowed names."""
    line = next_line()
    async def agent(task, model, auxiliary_model): ...

    assert signature_error(workflow, agent) == (
        f"@workflow {agent.__qualname__} ({HERE}:{line}) has an unknown parameter "
        f"'auxiliary_model' (did you mean 'auxiliary_models'?); a workflow takes task, model "
        f"and optionally auxiliary_models, params, logger")


def test_unknown_parameter_without_a_close_match():
    """An unknown judge parameter with no near name lists what a judge takes."""
    line = next_line()
    async def grade(task, answer): ...

    assert signature_error(judge, grade) == (
        f"@judge {grade.__qualname__} ({HERE}:{line}) has an unknown parameter 'answer'; "
        f"a judge takes task, response and optionally auxiliary_models, params, logger")


def test_star_args_and_star_kwargs_are_refused():
    """*args and **kwargs are refused because arguments are passed by name."""
    line = next_line()
    async def agent(task, model, *args): ...
    async def grade(task, response, **kwargs): ...

    assert signature_error(workflow, agent) == (
        f"@workflow {agent.__qualname__} ({HERE}:{line}) takes *args; tunedsl passes "
        f"arguments by name, so list them: async def agent(task, model)")
    assert signature_error(judge, grade) == (
        f"@judge {grade.__qualname__} ({HERE}:{line + 1}) takes **kwargs; tunedsl passes "
        f"arguments by name, so list them: async def grade(task, response)")


def test_positional_only_parameters_are_refused():
    """A positional-only parameter cannot receive the by-name arguments, so decoration refuses it."""
    line = next_line()
    async def agent(task, model, /): ...

    with pytest.raises(TypeError):  # what happens when it is called the way tunedsl calls it
        asyncio.run(agent(task={}, model=None))
    message = signature_error(workflow, agent)
    assert message.startswith(f"@workflow {agent.__qualname__} ({HERE}:{line})")
    assert "'task'" in message


def test_decorating_a_class_is_refused():
    """@workflow on a class says to decorate a function instead."""
    line = next_line()
    class Agent: ...

    assert signature_error(workflow, Agent) == (
        f"@workflow cannot decorate the class {Agent.__qualname__} ({HERE}:{line}); "
        f"decorate a function: async def f(task, model)")


def test_decorating_twice_is_refused():
    """A second tunedsl decorator, the same or the other one, is refused naming the first."""
    line = next_line()
    async def agent(task, model): ...
    async def grade(task, response): ...

    workflow(agent)
    judge(grade)
    assert signature_error(workflow, agent) == (
        f"{agent.__qualname__} ({HERE}:{line}) is already decorated with @workflow; "
        f"apply one tunedsl decorator, once")
    assert signature_error(workflow, grade) == (
        f"{grade.__qualname__} ({HERE}:{line + 1}) is already decorated with @judge; "
        f"apply one tunedsl decorator, once")
    assert spec_of(grade).kind == "judge"


def test_non_functions_are_refused():
    """An int or a functools.partial is not a function, and the message shows what it got."""
    async def grade(task, response): ...

    partial = functools.partial(grade, {})
    assert signature_error(workflow, 42) == (
        "@workflow expects a function, got 42; write async def f(task, model)")
    assert signature_error(judge, partial) == (
        f"@judge expects a function, got {partial!r}; write async def f(task, response)")


# ------------------------------------------------------------------------------ @experiment


@workflow
async def agent(task, model):
    return WorkflowOutput(response="x")


@judge
async def grader(task, response):
    return JudgeOutput(reward=1.0)


def test_experiment_returns_the_same_class_and_collects_it():
    """@experiment hands back the class and records its functions and declared settings."""
    data, algo = Dataset("d"), Algorithm("grpo")

    class Exp:
        workflow = agent
        judge = grader
        train_dataset = data
        algorithm = algo

    assert experiment(Exp) is Exp
    assert is_experiment(Exp)
    spec = spec_of(Exp)
    assert (spec.workflow, spec.judge, spec.qualname) == (agent, grader, Exp.__qualname__)
    assert spec.declared == {"workflow": agent, "judge": grader, "train_dataset": data,
                             "algorithm": algo}


def test_experiment_name_option_and_helpers():
    """@experiment(name=...) records the name, and helper methods stay usable but undeclared."""
    @experiment(name="run-1")
    class Exp:
        workflow = agent
        def helper(self): return 1  # noqa: E301, E704
        static = staticmethod(lambda: 2)
        klass = classmethod(lambda cls: cls.__name__)
        prop = property(lambda self: 4)

    assert spec_of(Exp).declared == {"workflow": agent, "name": "run-1"}
    assert (Exp().helper(), Exp.static(), Exp.klass(), Exp().prop) == (1, 2, "Exp", 4)


def test_missing_workflow():
    """An experiment without a workflow says what to add."""
    line = next_line()
    class Exp:
        judge = grader

    error = config_error(Exp)
    assert error.problems == (
        f"@experiment {Exp.__qualname__} ({HERE}:{line}) has no workflow: "
        f"add 'workflow = <your @workflow function>'",)


def test_undecorated_workflow_suggests_adding_the_decorator():
    """A plain async function as workflow is refused with 'add @workflow above' it."""
    async def plain(task, model): ...

    line = next_line()
    class Exp:
        workflow = plain

    assert str(config_error(Exp)) == (
        f"@experiment {Exp.__qualname__} ({HERE}:{line}).workflow must be a @workflow function "
        f"(got the undecorated function {plain.__qualname__}): add @workflow above "
        f"'async def plain'")


def test_a_workflow_called_in_the_class_body_is_named_as_a_call():
    """``workflow = agent(...)`` gave a coroutine's repr and Python's "never awaited"
    warnings (sweep 43 A-W10): the line says to drop the call, and no warning follows."""
    import gc
    import warnings

    line = next_line()
    class Exp:
        workflow = agent({"q": 1}, None)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert str(config_error(Exp)) == (
            f"@experiment {Exp.__qualname__} ({HERE}:{line}).workflow is a call of agent(...), "
            f"not the function; assign the function itself: workflow = agent")
        del Exp
        gc.collect()
    assert [str(w.message) for w in caught] == []


def test_judge_that_is_a_workflow_function():
    """A @workflow function assigned as judge is refused, naming its actual kind."""
    line = next_line()
    class Exp:
        workflow = agent
        judge = agent

    assert str(config_error(Exp)) == (
        f"@experiment {Exp.__qualname__} ({HERE}:{line}).judge must be a @judge function "
        f"(got the @workflow function agent): assign a function decorated with @judge (or "
        f"@group_judge)")


@pytest.mark.parametrize(("key", "value", "detail"), [
    ("train_dataset", "data/", "must be a Dataset(...) (got 'data/' of type str)"),
    ("model", "Qwen/Qwen3-8B", "must be a Model(...) (got 'Qwen/Qwen3-8B' of type str)"),
    # the entry at fault, with the model it names (sweep 29 A-W7)
    ("auxiliary_models", {"critic": "Qwen/Qwen3-8B"},
     "\b['critic'] must be a Model(...) (got 'Qwen/Qwen3-8B' of type str); write e.g. "
     "{'critic': Model('Qwen/Qwen3-8B', max_model_len=4096)}"),
    ("auxiliary_models", {"a": Model("m", max_model_len=64), "b": 3},
     "\b['b'] must be a Model(...) (got 3 of type int); write e.g. "
     "{'b': Model('Qwen/Qwen3-0.6B', max_model_len=4096)}"),
    ("auxiliary_models", [1, 2], "must be a dict of name -> Model(...) (got [1, 2] of type list)"),
    ("params", "lr=3", "must be a dict (got 'lr=3' of type str)"),
    ("monitor", "wandbb", "'wandbb' is not a known monitor (did you mean 'wandb'?); "
                          "choose one of: mlflow, swanlab, tensorboard, wandb"),
    ("project", "", "must be a non-empty string (got '')"),
    ("project", "../x", "'../x' names a folder of the run's path (checkpoint_root_dir/project/"
                        "name), so it may hold only ASCII letters, digits, '_', '.' and '-' (not "
                        "'..'): write e.g. 'x', and choose where runs go with "
                        "checkpoint_root_dir"),
    ("name", "x" * 300, f"{'x' * 40!r}... is 300 characters; it names a folder of the run's "
                        "path, which must fit a file name: give at most 200"),
    # paths no file system takes: an internal error in check or run (sweep 32 A-T3, A-T4)
    ("checkpoint_root_dir", "ck\ud800x", "holds a lone surrogate, which no path or file can "
                                         "hold (got 'ck\\ud800x')"),
    ("checkpoint_root_dir", "/y" * 2500, f"{'/y' * 30!r}... is 5000 bytes, longer than a path "
                                        f"may be (4095); give a shorter path"),
    ("trinity_config", "x" * 300 + ".yaml", f"{'x' * 60!r}...: its part {'x' * 40!r}... is 305 "
                                             f"bytes, longer than a file or folder name may "
                                             f"be (255); give a shorter path"),
    ("rollout_timeout", 0, "must be a positive number of seconds (got 0)"),
    ("rollout_timeout", 1e308, "must be at most 1000000000 seconds, about 31 years (got "
                               "1e+308); give 1000000000 for no practical limit"),
    ("rollout_timeout", 2.5, "must be a whole number of seconds, as Trinity reads it (got 2.5)"),
    ("keep_rollouts_every", 1.5, "must be a whole number >= 1 (got 1.5)"),
])
def test_bad_attribute_values(key, value, detail):
    """Each wrong attribute is reported as '<owner>.<key> <detail>', with the check its
    row of the settings table gives TOML values too."""
    line = next_line()
    class Exp:
        workflow = agent

    setattr(Exp, key, value)
    error = config_error(Exp)
    said = f"@experiment {Exp.__qualname__} ({HERE}:{line}).{key} {detail}"
    assert error.problems == (said.replace(" \b", ""),)  # (\b: an entry of the attribute)


def test_unknown_attribute_suggests_the_closest_name():
    """A misspelt attribute gets a did-you-mean and the list of attributes an experiment declares."""
    line = next_line()
    class Exp:
        workflow = agent
        trian_dataset = Dataset("d")

    assert str(config_error(Exp)) == (
        f"@experiment {Exp.__qualname__} ({HERE}:{line}) has an unknown attribute "
        f"'trian_dataset' (did you mean 'train_dataset'?); an experiment declares "
        f"{', '.join(EXPERIMENT_ATTRIBUTES)}")
    assert {"workflow", "judge", "train_dataset", "model", "algorithm"} <= set(EXPERIMENT_ATTRIBUTES)


def test_several_problems_are_reported_together():
    """Every problem of a class comes in one ConfigError, the missing workflow first."""
    line = next_line()
    class Exp:
        train_dataset = 3
        monitor = "tensorbord"
        modle = Model("m")

    error = config_error(Exp)
    owner = f"@experiment {Exp.__qualname__} ({HERE}:{line})"
    assert len(error.problems) == 4
    assert error.problems[0] == (
        f"{owner} has no workflow: add 'workflow = <your @workflow function>'")
    assert error.problems[1] == f"{owner}.train_dataset must be a Dataset(...) (got 3 of type int)"
    assert error.problems[2].startswith(
        f"{owner}.monitor 'tensorbord' is not a known monitor (did you mean 'tensorboard'?)")
    assert error.problems[3].startswith(
        f"{owner} has an unknown attribute 'modle' (did you mean 'model'?)")
    assert str(error) == "\n".join(error.problems)
    assert isinstance(error, ValueError)


def test_experiment_on_a_function_is_refused():
    """@experiment on a function says it decorates a class."""
    line = next_line()
    async def plain(task, model): ...

    assert signature_error(experiment, plain) == (
        f"@experiment decorates a class, got the undecorated function {plain.__qualname__} "
        f"({HERE}:{line}); write '@experiment class MyExperiment: workflow = ...'")


def test_experiment_twice_is_refused():
    """Applying @experiment a second time is refused."""
    line = next_line()
    class Exp:
        workflow = agent

    experiment(Exp)
    assert signature_error(experiment, Exp) == (
        f"{Exp.__qualname__} ({HERE}:{line}) is already decorated with @experiment; apply it once")


def test_subclass_overrides_and_inherits_attributes():
    """Large inherits Small's workflow and data and overrides its model; specs are not inherited."""
    small, large = spec_of(Small), spec_of(Large)
    assert large.workflow is small.workflow is self_scoring
    assert large.declared["train_dataset"] is Small.train_dataset
    assert large.declared["model"] is Large.model and large.declared["model"] is not Small.model
    assert large.declared["model"].model_path == "Qwen/Qwen3-8B"
    assert (large.declared["name"], large.declared["monitor"]) == ("large-run", "wandb")
    assert "monitor" not in small.declared and "name" not in small.declared

    class Unmarked(Small): ...

    assert not is_experiment(Unmarked)
    assert spec_of(Unmarked) is None


def test_attributes_assigned_after_the_decorator_are_what_loads():
    """Notebook style: a class changed after @experiment loads as it reads now (sweep 13
    found the decorator's snapshot ran instead: a 2-second timeout set later was ignored and
    each hung rollout took 100 s)."""
    from tunedsl import load_experiment

    @experiment(name="given")
    class Late:
        workflow = agent
        train_dataset = Dataset("d")
        model = Model("m", max_model_len=64)
        rollout_timeout = 3600
        algorithm = Algorithm("grpo")

    Late.rollout_timeout = 7
    Late.algorithm = Algorithm("dapo")
    Late.name = "ignored: the decorator's name wins, as it did"
    graph = load_experiment(Late)
    assert (graph.rollout_timeout, graph.algorithm.algorithm_type, graph.name) == \
        (7, "dapo", "given")


def test_a_bad_or_unknown_attribute_assigned_after_the_decorator_is_refused_at_load():
    from tunedsl import load_experiment

    line = next_line()
    class Late:
        workflow = agent

    experiment(Late)
    Late.modle = Model("m")
    Late.rollout_timeout = "soon"
    with pytest.raises(ConfigError) as raised:
        load_experiment(Late)
    owner = f"@experiment {Late.__qualname__} ({HERE}:{line})"
    unknown, timeout = raised.value.problems  # in the order they were assigned
    assert unknown.startswith(f"{owner} has an unknown attribute 'modle' (did you mean 'model'?)")
    assert timeout.startswith(f"{owner}.rollout_timeout ")


def test_a_path_setting_given_as_a_pathlib_path_is_its_text(tmp_path):
    """``checkpoint_root_dir = pathlib.Path("ck")`` was refused as "must be a non-empty
    string", while Model's and Dataset's paths take a Path (sweep 30 A-W5)."""
    import pathlib

    from tunedsl import load_experiment

    @experiment
    class WithPaths:
        workflow = agent
        train_dataset = Dataset(pathlib.Path("d"))
        model = Model("m", max_model_len=64)
        checkpoint_root_dir = tmp_path / "ck"

    graph = load_experiment(WithPaths)
    assert graph.checkpoint_root_dir == str(tmp_path / "ck")
    assert isinstance(graph.checkpoint_root_dir, str)


def test_a_subclass_drops_its_bases_judge_with_none():
    """``judge = None`` (the workflow sets the reward) was refused as "must be a @judge
    function (got None)", so a subclass could not drop an inherited judge (sweep 30 A-W8);
    the workflow alone is as an experiment with no judge."""
    @experiment
    class Judged:
        workflow = agent
        judge = grader
        train_dataset = Dataset("d")
        model = Model("m", max_model_len=64)

    @experiment
    class Unjudged(Judged):
        judge = None

    assert spec_of(Judged).judge is not None and spec_of(Unjudged).judge is None


def test_a_subclass_drops_an_optional_record_of_its_base_with_none():
    """``eval_dataset = None`` is the documented default, so a subclass sets it to say "no
    eval set" (sweep 13 W2: refused as 'must be a Dataset(...)'); a record an experiment
    cannot go without still must be one."""
    from tunedsl import load_experiment

    @experiment
    class Base:
        workflow = agent
        train_dataset = Dataset("d")
        eval_dataset = Dataset("e")
        model = Model("m", max_model_len=64)
        warmup = Algorithm("sft")
        warmup_dataset = Dataset("w")

    @experiment
    class NoEval(Base):
        eval_dataset = None
        warmup = None
        warmup_dataset = None

    assert load_experiment(Base).eval_dataset is not None
    graph = load_experiment(NoEval)
    assert (graph.eval_dataset, graph.warmup, graph.warmup_dataset) == (None, None, None)

    line = next_line()
    class NoModel(Base):
        model = None

    assert config_error(NoModel).problems == (
        f"@experiment {NoModel.__qualname__} ({HERE}:{line}).model must be a Model(...) (got "
        f"None of type NoneType)",)


def test_an_optional_dataset_given_in_part_by_a_layer_needs_its_path():
    """``--set eval_dataset.split=test`` on a class without an eval set (or one that
    dropped its base's) was an internal error (sweep 14 T1); it is the required-field
    message the train set gets."""
    from tunedsl import load_experiment

    line = next_line()
    @experiment
    class Base:
        workflow = agent
        train_dataset = Dataset("d")
        eval_dataset = Dataset("e")
        model = Model("m", max_model_len=64)

    @experiment
    class NoEval(Base):
        eval_dataset = None

    for cls, where in ((NoEval, line + 7), (Base, line)):
        for section in ("eval_dataset", "warmup_dataset"):
            if cls is Base and section == "eval_dataset":
                continue  # Base has its path: a split alone is fine
            with pytest.raises(ConfigError) as raised:
                load_experiment(cls, overrides=[f"{section}.split=test"])
            assert str(raised.value) == (
                f"{cls.__qualname__} ({HERE}:{where}): required field missing @ "
                f"{section}.path; set {section} = Dataset(\"path/to/data\") on the class, path "
                f"= ... under [{section}] in tunedsl.toml, or overrides item "
                f"{section}.path=...")
    assert load_experiment(Base, overrides=["eval_dataset.split=test"]).eval_dataset.split == "test"


def test_a_metaclass_answering_every_attribute_does_not_confuse_the_decorator():
    """A config framework's metaclass whose ``__getattr__`` answers any name made
    @experiment read 1 as the class's code object (sweep 14 T3)."""
    from tunedsl import load_experiment

    class Defaults(type):
        def __getattr__(cls, key):
            return 1

    @experiment
    class Answering(metaclass=Defaults):
        workflow = agent
        train_dataset = Dataset("d")
        model = Model("m", max_model_len=64)

    # inspect cannot find its line (it unwraps the class through __getattr__), as for a
    # class made by type(): the file is still named.
    assert spec_of(Answering).where == f"{HERE}:0"
    assert load_experiment(Answering).rollout_timeout == 3600


def test_a_setting_a_class_reads_from_its_metaclass_is_refused():
    """Python reads a metaclass's attribute on the class, so ``Y.rollout_timeout`` says 11;
    the experiment would have run with 3600 (sweep 14 S5)."""
    class Settings(type):
        rollout_timeout = 11

    line = next_line()
    class FromMeta(metaclass=Settings):
        workflow = agent

    assert config_error(FromMeta).problems == (
        f"@experiment {FromMeta.__qualname__} ({HERE}:{line}).rollout_timeout comes from its "
        f"metaclass {Settings.__qualname__}, which an experiment does not read; set "
        f"rollout_timeout in the class body (or a base class)",)


def test_code_run_from_a_markdown_file_is_located_by_its_own_lines(tmp_path):
    """A README's example run with exec() under the README's name: Python 3.12's inspect
    tokenizes the Markdown to find a function's block and raised TokenError (CI, 3.12).
    A function is placed by its code object; a class carries no line of its own before
    Python 3.13 and its module is not imported, so it is unknown, as for a class type()
    made."""
    guide = tmp_path / "guide.md"
    guide.write_text("# Guide\n\nIt's `tunedsl`'s guide.\n", encoding="utf-8")
    source = (
        "from tunedsl import Dataset, Model, WorkflowOutput, experiment, workflow\n"
        "\n"
        "@workflow\n"
        "async def walk(task, model):\n"
        "    return WorkflowOutput(reward=1.0)\n"
        "\n"
        "@experiment\n"
        "class Guided:\n"
        "    workflow = walk\n"
        "    train_dataset = Dataset('d')\n"
        "    model = Model('m', max_model_len=64)\n")
    namespace: dict = {"__name__": "guide_example"}
    exec(compile("\n" * 10 + source, str(guide), "exec"), namespace)  # noqa: S102
    from tunedsl.dsl.decorators import where

    assert where(namespace["walk"]) == f"{guide}:13"  # its decorator's line, as Python counts
    assert spec_of(namespace["Guided"]).where == "<unknown>:0"


@pytest.mark.parametrize("body", [{}, {"rollout_timeout": 30}])
def test_a_setting_a_metaclass_answers_through_getattribute_is_refused(body):
    """``__getattribute__`` made ``Y.rollout_timeout`` say 7 where the run used 3600 (or
    the body's 30): sweep 15 S3. A metaclass answering every name stays a catch-all
    (sweep 14 T3)."""
    class Answers(type):
        def __getattribute__(cls, key):
            return 7 if key == "rollout_timeout" else type.__getattribute__(cls, key)

    Answered = Answers("Answered", (), {"workflow": agent, **body, "__module__": __name__})

    assert Answered.rollout_timeout == 7
    assert config_error(Answered).problems == (
        f"@experiment Answered ({HERE}:0).rollout_timeout is answered by "
        f"its metaclass {Answers.__qualname__}'s __getattribute__, which an experiment does "
        f"not read; set rollout_timeout in the class body (or a base class)",)


