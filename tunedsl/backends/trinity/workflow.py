"""The Trinity-RFT Workflow class named by ``default_workflow_type`` in tunedsl's YAML.

Trinity imports it on its workflow runners by dotted path. This module imports
only Trinity's workflow base class, which does not need vLLM; Trinity's model
wrapper (which does) is reached only through the objects Trinity passes in.
"""

from __future__ import annotations

from typing import Any

from trinity.common.workflows.workflow import Workflow

from ...config.importer import load_object
from ...errors import RolloutError
from ...runtime.models.endpoint import OpenAIChatModel
from ...runtime.rollout import Agent, run_rollout

#: Fields of a taskset's ``rollout_args`` that become the model's sampling defaults.
_SAMPLING_ARGS = ("temperature", "top_p", "top_k", "max_tokens", "logprobs")


def agent_from_workflow_args(args: dict[str, Any]) -> Agent:
    """The user's functions and params, from the import strings in ``workflow_args``."""
    judge = load_object(args["judge"]) if args.get("judge") else None
    return Agent(workflow=load_object(args["workflow"]), judge=judge,
                 params=args.get("params") or {})


class TunedslWorkflow(Workflow):
    """Runs a tunedsl ``@workflow`` (and ``@judge``) as one Trinity rollout.

    The trained model and each auxiliary model are handed to the user's code as
    `OpenAIChatModel` s over Trinity's own OpenAI clients, so every call is recorded
    in Trinity's history; each recorded call becomes one `Experience` carrying the
    rollout's reward, and the last one carries its metrics.
    """

    is_async = True

    def __init__(self, *, task: Any, model: Any, auxiliary_models: Any = None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.agent = agent_from_workflow_args(task.workflow_args)
        client = model.get_openai_async_client()
        rollout_args = task.rollout_args
        sampling = {key: getattr(rollout_args, key, None) for key in _SAMPLING_ARGS}
        if sampling.get("top_k") == -1:  # Trinity's "disabled"
            sampling.pop("top_k")
        if sampling.get("logprobs") is not None:  # OpenAI's logprobs is a flag
            sampling["top_logprobs"], sampling["logprobs"] = sampling["logprobs"], True
        # Trinity's client records every call in its history: hand it out as it is.
        self.chat_model = OpenAIChatModel(client, client.model_path, sampling=sampling,
                                          client_records_calls=True)
        self.auxiliary_chat_models = {}
        for wrapper in self.auxiliary_model_wrappers or ():
            aux_client = wrapper.get_openai_async_client()
            name = wrapper.config.name
            self.auxiliary_chat_models[name] = OpenAIChatModel(
                aux_client, aux_client.model_path, name=name,
                sampling=getattr(wrapper, "generate_kwargs", None), client_records_calls=True,
            )

    async def run_async(self) -> list[Any]:
        """Run the shared rollout, then turn the recorded model calls into experiences."""
        try:
            result = await run_rollout(self.agent, self.task.raw_task, self.chat_model,
                                       self.auxiliary_chat_models)
        except RolloutError as error:
            # Calls made before the failure must not leak into the retry's experiences.
            self.model.extract_experience_from_history()
            self.logger.error("rollout failed for task %s: %s\n%s", self.task.raw_task, error,
                              error.user_traceback or "")
            raise
        experiences = self.model.extract_experience_from_history()
        for experience in experiences:
            experience.reward = result.reward
        if experiences:
            experiences[-1].metrics = dict(result.metrics)
        return experiences
