"""Settings that are valid one by one but together leave training with nothing to learn.

They are said, never refused (a user may mean them, in a smoke test say): `check` and a
Trinity run list them as notes after the preflight, a local run prints them on stderr
before its first step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..dsl.algorithms import ALGORITHMS, part_names
from ..dsl.chat import GREEDY_BELOW, ModelCall
from ..dsl.turns import Turn

if TYPE_CHECKING:
    from ..config.graph import ExperimentGraph

#: Advantage functions that score a rollout against the rest of its task's group: when the
#: group's replies are identical, every advantage is 0 and no step changes the model.
GROUP_BASELINES = frozenset({"grpo", "step_wise_grpo", "rloo", "opmd"})


def phase_steps(graph: ExperimentGraph, rows: Mapping[str, int | None]) -> dict[str, int | None]:
    """The steps of each training phase, by its setting (``algorithm``; ``warmup`` with a
    warm-up), as Trinity's scheduler and the local backend count them (``total_steps``, else
    ``total_epochs x rows // batch_size``); None when the rows are not counted."""
    steps: dict[str, int | None] = {}
    for name, section in (("warmup", "warmup_dataset"), ("algorithm", "train_dataset")):
        record, dataset = getattr(graph, name, None), getattr(graph, section, None)
        if record is None or dataset is None:
            continue
        counted = rows.get(section)
        steps[name] = None if dataset.total_steps is None and counted is None else \
            dataset.steps(counted or 0, record.batch_size)
    return steps


def unused_auxiliary_models(graph: ExperimentGraph) -> list[str]:
    """Auxiliary models neither the workflow nor the judge takes (nor the algorithm's
    teacher): served all the same (a GPU engine on Trinity), for nothing. Said, not
    refused: a base Trinity YAML may list models for another purpose."""
    from ..dsl.algorithms import teacher_name

    teacher = teacher_name(graph.algorithm, graph.auxiliary_models)
    unused = sorted(name for name in graph.auxiliary_models if name != teacher)
    functions = [spec for spec in (graph.workflow, graph.judge) if spec is not None]
    if not unused or any("auxiliary_models" in spec.optional_params for spec in functions):
        return []
    return [f"auxiliary_models: {', '.join(unused)} declared, but no workflow or judge takes "
            f"auxiliary_models, so each is served for nothing; add the argument to the "
            f"function that calls them, or remove them"]


def futile_settings(graph: ExperimentGraph, steps: Mapping[str, int | None],
                    calls: Sequence[ModelCall] = (), turns: Sequence[Turn] = ()) -> list[str]:
    """What in ``graph`` makes training learn nothing, one line each.

    Args:
        graph: The experiment.
        steps: The steps each training phase takes, by its setting (``algorithm``, and
            ``warmup`` with a warm-up); None where they are not counted.
        calls: The trained model's calls in a rollout tried before the run, whose sampling
            shows a temperature the workflow sets per call.
        turns: The turns that rollout marked (``model.end_turn``), which only ``gigpo``
            reads.
    """
    lines = unused_auxiliary_models(graph)
    algorithm = graph.algorithm
    advantage = part_names(algorithm)["advantage"] if algorithm.algorithm_type in ALGORITHMS \
        else None
    temperatures = {call.sampling.get("temperature", graph.model.temperature)
                    for call in calls} or {graph.model.temperature}
    if advantage in GROUP_BASELINES and algorithm.group_size > 1 and \
            all(temperature < GREEDY_BELOW for temperature in temperatures):
        chosen = graph.model.temperature
        where = f"model.temperature = {_number(chosen)}" if chosen < GREEDY_BELOW else \
            f"the workflow's model calls set temperature={_number(max(temperatures))}"
        greedy = "" if temperatures == {0} else f" (below {GREEDY_BELOW:g} the engines " \
            f"answer greedily, as at 0)"
        lines.append(f"{where}: every rollout of a task's group gets the same reply{greedy}, so "
                     f"{algorithm.algorithm_type}'s advantages (each reward against its "
                     f"group's) are all 0 and training changes nothing; sample at a "
                     f"temperature above 0 (1.0 is the usual)")
    if turns and advantage is not None and advantage != "gigpo":
        lines.append(f"the workflow ends turns (model.end_turn), whose rewards and states only "
                     f"the gigpo advantage reads; {algorithm.algorithm_type} ({advantage}) "
                     f"trains on each rollout's reward alone: use Algorithm(\"gigpo\", ...) "
                     f"or set algorithm.advantage_fn = 'gigpo' to credit each turn")
    for name in ("warmup", "algorithm"):
        record, total = getattr(graph, name, None), steps.get(name)
        if record is None or total is None or not record.lr_warmup_steps:
            continue
        if record.lr_warmup_steps >= total:
            lines.append(f"{name}.lr_warmup_steps = {record.lr_warmup_steps}: the "
                         f"{'warm-up' if name == 'warmup' else 'run'} has {total} step"
                         f"{'s' if total != 1 else ''}, so the learning rate is still rising "
                         f"when it ends and never reaches {name}.learning_rate; make "
                         f"lr_warmup_steps a fraction of the steps (a tenth is usual)")
    return lines


def _number(value: float) -> str:
    """A temperature as the user wrote it: 0 for zero (0.0 too), else its repr."""
    return "0" if value == 0 else repr(value)
