"""A multi-turn agent credited turn by turn (GiGPO), on the CPU.

    python -m examples.arith.tiny_model        # build the tiny model (no downloads)
    python -m tunedsl run examples.corridor.experiment:Corridor

The agent walks a corridor of six cells. Each turn it sees its task's door code and the
cell it stands in, and answers one digit: the cell's right digit opens the door to the
next cell and earns 1; any other leaves it where it was. Each turn ends with
``model.end_turn(reward=..., state=cell)``, so GiGPO compares the moves made from the same
cell across a task's rollouts (the step-level credit), beside whole walks (the episode
level). ``CorridorByWalk`` trains the same walks on their total alone
(``multi_step_grpo``), ``CorridorToTheEnd`` on reaching the end alone (a sparse reward);
``benchmarks/turn_credit.py`` compares the three.
"""

from __future__ import annotations

from tunedsl import Algorithm, Dataset, Model, WorkflowOutput, experiment, workflow

CELLS = 6


def right_digit(code: int, cell: int) -> str:
    """The digit that opens the door of ``cell`` in a corridor with door code ``code``."""
    return str((3 * cell + code) % 10)


@workflow
async def walk(task, model, params):
    """Up to ``turns`` turns, one call each; a turn earns 1 for the door it opens. The
    walk's reward is the doors it opened, or with ``params["walk_reward"] = "end"`` 1 for
    reaching the end and 0 short of it (a sparse reward)."""
    cell = 0
    for _ in range(task["turns"]):
        seen = f"{task['code']}{cell}="
        reply = await model.chat([{"role": "user", "content": seen}])
        opened = reply.content.strip() == right_digit(task["code"], cell)
        model.end_turn(reward=1.0 if opened else 0.0, state=seen)
        cell += opened
        if cell == CELLS:
            break
    reached = float(cell == CELLS)
    return WorkflowOutput(response=str(cell),
                          reward=reached if params["walk_reward"] == "end" else float(cell),
                          metrics={"reached_end": reached, "doors": float(cell)})


@experiment
class Corridor:
    """GiGPO: each move against the moves made from the same cell, plus each walk against
    its group's."""

    workflow = walk
    train_dataset = Dataset("data", split="train", total_steps=150)
    eval_dataset = Dataset("data", split="test")
    model = Model("../arith/tiny-model", max_model_len=32, max_tokens=1, temperature=1.0)
    algorithm = Algorithm("gigpo", group_size=8, batch_size=4, learning_rate=1e-3,
                          save_interval_steps=150, eval_interval_steps=50, seed=0)
    params = {"walk_reward": "doors"}
    project = "tunedsl-examples"


@experiment
class CorridorByWalk(Corridor):
    """The same walks, every call credited with its walk's total (multi_step_grpo)."""

    algorithm = Algorithm("multi_step_grpo", group_size=8, batch_size=4, learning_rate=1e-3,
                          save_interval_steps=150, eval_interval_steps=50, seed=0)


@experiment
class CorridorToTheEnd(CorridorByWalk):
    """The same walks rewarded only for reaching the end (``multi_step_grpo``): no turn's
    reward, so a walk that opens five doors of six earns what one that opens none does."""

    params = {"walk_reward": "end"}
