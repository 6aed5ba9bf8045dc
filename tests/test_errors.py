"""tunedsl's errors cross process boundaries whole (`multiprocessing`, a
`ProcessPoolExecutor`): pickled and copied, each keeps its class, message and fields."""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from tunedsl.config.environment import Unresolved
from tunedsl.config.settings import UnsetVariables
from tunedsl.errors import (
    ConfigError,
    DatasetError,
    ExperimentImportError,
    FieldProblem,
    PreflightFailed,
    Problem,
    RolloutError,
    RunError,
    RunInterrupted,
    SignatureError,
    TunedslError,
)

ERRORS = [
    ConfigError(["a line", Problem("refused", where="t.toml", setting="model.x", fix="fix it")]),
    FieldProblem("group_size", "must be an integer (got 'x')"),
    PreflightFailed("before training: boom", user_traceback="Traceback ..."),
    UnsetVariables([Unresolved(Problem("x: environment variable X is not set", where="t.toml",
                                       setting="model.base_url"))]),
    RolloutError("judge raised", stage="judge", user_traceback="Traceback ..."),
    RunInterrupted("interrupted at step 3", run_dir="runs/a"),
    RunError("every rollout failed"), DatasetError("d.jsonl:1: not JSON"),
    ExperimentImportError("no module"), SignatureError("not async"),
]


def fields(error: TunedslError) -> tuple:
    return type(error), str(error), error.args, vars(error)


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_every_error_survives_pickling_and_copying(error):
    """RolloutError needs stage=, FieldProblem two arguments, UnsetVariables records: each
    was rebuilt from its message alone, which failed (a BrokenProcessPool, the real error
    lost, or a pool's result thread dying)."""
    assert fields(pickle.loads(pickle.dumps(error))) == fields(error)
    assert fields(copy.copy(error)) == fields(error)


def _judge_fails() -> None:
    raise RolloutError("@judge exact raised ValueError: no", stage="judge")


def test_an_error_raised_in_a_worker_process_reaches_the_caller():
    with ProcessPoolExecutor(max_workers=1) as pool:
        with pytest.raises(RolloutError) as caught:
            pool.submit(_judge_fails).result(timeout=60)
    assert (str(caught.value), caught.value.stage) == ("@judge exact raised ValueError: no",
                                                       "judge")
