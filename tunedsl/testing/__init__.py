"""Unit-test agent code without a model server: `ScriptedModel` and `run_rollout`.

The pytest plugin (registered through the ``pytest11`` entry point) adds a
``scripted_model`` fixture::

    def test_solve(scripted_model):
        trajectory = run_rollout(MathAgent, {"question": "1+1", "answer": "2"},
                                 scripted_model(["Answer: 2"]))
        assert trajectory.reward == 1.0
"""

from ..dsl.chat import ChatResponse, ModelCall, ToolCall
from ..errors import RolloutError
from ..models.scripted import ScriptedModel
from .kit import Trajectory, arun_group, arun_rollout, run_group, run_rollout

#: The record of one call a `ScriptedModel` answered (the same record every model keeps).
ScriptedCall = ModelCall

__all__ = ["ChatResponse", "ModelCall", "RolloutError", "ScriptedCall", "ScriptedModel",
           "ToolCall", "Trajectory", "arun_group", "arun_rollout", "run_group", "run_rollout"]
