"""The Python API checks its arguments where it is called (`tunedsl.dsl.arguments`): one
line naming the argument, before any work, whatever value a caller passes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tunedsl
from tunedsl.dsl import arguments
from tunedsl.errors import ConfigError

ARITH = "examples.arith.experiment:Arith"
ANYTHING = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(),
                     st.lists(st.integers(), max_size=3), st.dictionaries(st.text(), st.text(),
                                                                          max_size=2))


@given(ANYTHING)
def test_a_whole_number_argument_takes_ints_of_at_least_its_minimum_only(value):
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    try:
        arguments.whole("repeat", value)
    except ConfigError as refused:
        assert not ok and str(refused).startswith(f"repeat={value!r}: give a whole number of "
                                                  f"at least 1")
    else:
        assert ok


@given(ANYTHING)
def test_a_fraction_argument_takes_numbers_strictly_between_0_and_1_only(value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and 0 < value < 1
    try:
        arguments.fraction("confidence", value)
    except ConfigError as refused:
        assert not ok and str(refused) == (f"confidence={value!r}: give a number between 0 "
                                           f"and 1 (excluded)")
    else:
        assert ok


@pytest.mark.parametrize("call, message", [
    (lambda: tunedsl.select_model(ARITH, "mw", base_url="http://127.0.0.1:9/v1"),
     "candidate_models='mw': give a list of models, not one string; write "
     "candidate_models=['mw', ...]"),
    (lambda: tunedsl.select_model(ARITH, ["a", "b"], base_url="http://127.0.0.1:9/v1",
                                  bootstrap=tunedsl.Bootstrap(seed=-1)),
     "bootstrap.seed=-1: give a whole number of at least 0"),
    (lambda: tunedsl.select_model(ARITH, ["a", "b"], base_url="http://127.0.0.1:9/v1",
                                  bootstrap=tunedsl.Bootstrap(resamples="10")),
     "bootstrap.resamples='10': give a whole number of at least 1, not a str"),
    (lambda: tunedsl.select_model(ARITH, ["a", "b"], base_url="http://127.0.0.1:9/v1",
                                  bootstrap=tunedsl.Bootstrap(confidence=1.5)),
     "bootstrap.confidence=1.5: give a number between 0 and 1 (excluded)"),
    (lambda: tunedsl.select_model(ARITH, ["a", "b"], base_url="http://127.0.0.1:9/v1",
                                  bootstrap=0.9),
     "bootstrap=0.9: give a tunedsl Bootstrap(confidence=..., resamples=..., seed=...)"),
    (lambda: tunedsl.tune_prompt(ARITH, params="system_prompt", reflection_model="r@http://x/v1",
                                 model="m@http://127.0.0.1:9/v1"),
     "params='system_prompt': give a list of strings, not one string; write "
     "params=['system_prompt']"),
    (lambda: tunedsl.tune_prompt(ARITH, params=["system_prompt", 1],
                                 reflection_model="r@http://x/v1", model="m@http://127.0.0.1:9/v1"),
     "params=['system_prompt', 1]: give a list of strings; item 1 is an int (1)"),
    (lambda: tunedsl.load_experiment(ARITH, settings=""),
     "settings='': give the path of a TOML settings file (a str or a pathlib.Path)"),
    (lambda: tunedsl.tune_prompt(ARITH, auxiliary_models="grader=x",
                                 reflection_model="r@http://x/v1", model="m@http://127.0.0.1:9/v1"),
     "auxiliary_models='grader=x': give a dict of name -> Model(...), not a str"),
    (lambda: tunedsl.tune_prompt(ARITH, search=tunedsl.PromptSearch(budget="40"),
                                 reflection_model="r@http://x/v1", model="m@http://127.0.0.1:9/v1"),
     "search.budget='40': give a whole number, not a str"),
    (lambda: tunedsl.tune_prompt(ARITH, search={"budget": 40}, reflection_model="r@http://x/v1",
                                 model="m@http://127.0.0.1:9/v1"),
     "search={'budget': 40}: give a tunedsl PromptSearch(budget=..., ...)"),
    (lambda: tunedsl.tune_prompt(ARITH, reflection_model=None, model="m@http://127.0.0.1:9/v1"),
     "reflection_model=None: give NAME, NAME@URL or a Model(NAME, base_url=..., "
     "api_key_env=...)"),
    (lambda: tunedsl.load_experiment(ARITH, overrides=[None]),
     "overrides item None: give KEY=VALUE strings, e.g. 'algorithm.group_size=8'"),
    (lambda: tunedsl.load_experiment(ARITH, overrides=None),
     "overrides=None: give a list of KEY=VALUE strings, e.g. "
     "overrides=['algorithm.group_size=8']"),
    (lambda: tunedsl.run(ARITH, overrides={"train_dataset.total_steps": 1}),
     "overrides={'train_dataset.total_steps': 1}: give a list of KEY=VALUE strings, e.g. "
     "overrides=['algorithm.group_size=8']"),
    (lambda: tunedsl.run(ARITH, backend="local", resume=5),
     "resume=5: give a file or folder path (a str or a pathlib.Path)"),
    (lambda: tunedsl.run(ARITH, backend="local", from_good_checkpoint=True),
     "from_good_checkpoint=True chooses the checkpoint a resume starts from; give the run "
     "with resume=RUN_DIR too"),
    (lambda: tunedsl.check(ARITH, backend="trinity", cluster=8),
     "cluster=8: give a non-empty string"),
    (lambda: tunedsl.as_agentscope("model"),
     "as_agentscope('model'): give the ChatModel a workflow or judge received (its model "
     "argument)"),
])
def test_the_api_names_a_bad_argument_before_any_work(call, message):
    with pytest.raises(ConfigError) as refused:
        call()
    assert str(refused.value) == message


def test_a_scripted_model_of_no_replies_names_what_to_give():
    from tunedsl.testing import ScriptedModel

    with pytest.raises(TypeError) as refused:
        ScriptedModel(None)
    assert str(refused.value) == ("ScriptedModel(None): give a list of replies (or a function "
                                  "of the messages)")

