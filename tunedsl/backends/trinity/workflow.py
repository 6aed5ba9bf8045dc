"""The Trinity-RFT Workflow class named by ``default_workflow_type`` in tunedsl's YAML.

Trinity imports it on its workflow runners by dotted path. This module imports
only Trinity's workflow base class, which does not need vLLM; Trinity's model
wrapper (which does) is reached only through the objects Trinity passes in.
"""

from __future__ import annotations

from typing import Any

from trinity.common.workflows.workflow import Workflow

from ..._importer import load_object


class TunedslWorkflow(Workflow):
    """Runs a tunedsl ``@workflow`` (and ``@judge``) as one Trinity rollout.

    ``task.workflow_args`` holds import strings only (``workflow``, ``judge`` and,
    for class experiments, ``experiment``), so the YAML stays self-contained.
    """

    is_async = True

    def __init__(self, *, task: Any, model: Any, auxiliary_models: Any = None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        args = task.workflow_args
        self.workflow_func = load_object(args["workflow"])
        self.judge_func = load_object(args["judge"]) if args.get("judge") else None

    async def run_async(self) -> list[Any]:
        """Run the rollout; its body arrives with the Trinity backend."""
        raise NotImplementedError(
            "tunedsl's Trinity rollout is not implemented yet: "
            "`python -m tunedsl run --backend trinity` lands with the Trinity backend"
        )
