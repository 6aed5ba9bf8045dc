"""The settings table is the one home of each setting: everything else reads it."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tunedsl
from tunedsl.config.graph import ExperimentGraph
from tunedsl.config.settings import Layer, normalize, setting_problem
from tunedsl.dsl.decorators import EXPERIMENT_ATTRIBUTES
from tunedsl.dsl.setting import REQUIRED
from tunedsl.dsl.settings_table import (
    EXPERIMENT_SETTINGS,
    FIELD_MAP,
    all_settings,
    lookup,
    markdown_table,
)

async def _answer(task, model):
    reply = await model.chat([{"role": "user", "content": task["question"]}])
    return tunedsl.WorkflowOutput(response=reply.content)


async def _score(task, response):
    return tunedsl.JudgeOutput(reward=float(response == task["answer"]))


def test_every_graph_field_is_a_row_with_its_default():
    """The graph has one field per row the graph keeps, with the row's default."""
    fields = attrs.fields_dict(ExperimentGraph)
    rows = [row for row in EXPERIMENT_SETTINGS if row.in_graph]
    assert list(fields)[1:-1] == [row.name for row in rows]
    for row in rows:
        field = fields[row.name]
        if row.required:
            assert field.default is attrs.NOTHING, row.name
        elif row.factory:
            assert field.default.factory() == row.default(), row.name
        else:
            assert field.default == row.default, row.name


def test_the_decorator_declares_the_rows_in_table_order():
    """@experiment accepts exactly the table's top-level names, in the docs' order."""
    assert EXPERIMENT_ATTRIBUTES == tuple(row.name for row in EXPERIMENT_SETTINGS)


@pytest.mark.parametrize("row", [row for row in all_settings() if row.check is not None
                                 and row.kind == "value" and not row.class_only],
                         ids=lambda row: row.name)
def test_every_value_row_refuses_what_its_check_refuses_in_toml(row):
    """A TOML layer reports a row's own check, under the row's dotted name."""
    bad = [] if row.name != "params" else None
    problem = row.check(bad)
    assert problem == setting_problem(row.name.replace("NAME", "judge"), bad)
    section, _, field = row.name.partition(".")
    if problem is None or "NAME" in row.name or row.name.count(".") > 1:
        return
    values = {section: {field: bad}} if field else {section: bad}
    _, problems = normalize(Layer("t.toml", values, "/"))
    assert [str(found) for found in problems] == [f"t.toml: invalid value @ {row.name}: {problem}"]
    assert [(found.where, found.setting) for found in problems] == [("t.toml", row.name)]


def test_trinity_keys_come_from_the_rows():
    """FIELD_MAP is the rows' (setting, Trinity key) pairs, and the writer uses them."""
    assert ("algorithm.grad_clip", "algorithm.optimizer.clip_grad") in FIELD_MAP
    assert dict(FIELD_MAP)["algorithm.group_size"] == lookup("algorithm.group_size").trinity
    assert lookup("model.lora.rank").default == 32
    assert lookup("name").default is REQUIRED


def test_tune_takes_any_setting_by_its_own_name(tmp_path):
    """tune() maps AgentScope's names through the table and takes other settings by name;
    a setting given by the name AgentScope spells otherwise says which to use."""
    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "q", "answer": "a"}\n')
    arguments = dict(workflow_func=_answer, judge_func=_score,
                     train_dataset=tunedsl.Dataset(str(data)),
                     model=tunedsl.Model("m", max_model_len=64))
    graph = tunedsl.tune(**arguments, experiment_name="named", rollout_timeout=600,
                         keep_rollouts_every=5, dry_run=True)
    assert (graph.name, graph.rollout_timeout, graph.keep_rollouts_every) == ("named", 600, 5)
    with pytest.raises(TypeError) as caught:
        tunedsl.tune(**arguments, project="p", dry_run=True)
    assert str(caught.value) == "tune() takes project as project_name= (AgentScope's name)"
    with pytest.raises(TypeError) as caught:
        tunedsl.tune(**arguments, rollout_timout=5, dry_run=True)
    assert str(caught.value) == ("tune() got an unexpected argument 'rollout_timout' "
                                 "(did you mean 'rollout_timeout'?)")


def test_a_resumed_run_may_change_exactly_the_resumable_rows():
    """How long a run goes on and how often it saves and evaluates are the rows marked
    resumable; the resume check reads them from the table."""
    from tunedsl.runs.rundir import RESUMABLE_CHANGES

    assert RESUMABLE_CHANGES == {row.name for row in all_settings() if row.resumable}
    assert {"train_dataset.total_steps", "algorithm.save_interval_steps",
            "algorithm.keep_best_checkpoint"} <= RESUMABLE_CHANGES
    assert "algorithm.learning_rate" not in RESUMABLE_CHANGES


@given(st.text(max_size=60))
def test_a_refused_folder_name_suggests_one_that_is_taken(text):
    """Whatever a refused project or name holds, the name it suggests is accepted."""
    from tunedsl.dsl.settings_table import folder_name

    problem = folder_name(text) if text else None
    if problem is not None and "write e.g." in problem:
        suggested = re.search(r"write e\.g\. '([^']*)'", problem)[1]
        assert folder_name(suggested) is None
