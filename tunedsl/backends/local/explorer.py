"""The local backend's explorer: rollouts on the CPU, as Trinity's explorer runs them.

Each rollout runs the shared rollout function (`tunedsl.rollout.run`) with a fresh
recording `ChatModel` on the policy's engine and one on each auxiliary model (a frozen
model loaded here, or its endpoint). A step's rollouts run at once on one event loop
that lives for the run, under a watchdog; what failed is logged to the run's rollout log.
The explorer knows nothing of learning: the trainer (`tunedsl.backends.local.trainer`)
turns what it returns into samples and updates the weights its engine samples from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from ...config.graph import ExperimentGraph
from ...errors import RolloutError, RunError
from ...interrupts import cancelling
from ...models.endpoint import auxiliary_endpoint
from ...rollout.group import roll_out_group
from ...rollout.loop import run_rollouts_on, wind_down
from ...rollout.run import (
    CANCELLED_INSIDE,
    LOOP_STOPPED,
    Agent,
    RolloutResult,
    run_bounded_rollout,
    stopped_the_loop,
)
from ...rollout.together import all_or_none
from ...rollout.watchdog import Watchdog
from .chat import ChatCodec, LocalChatModel, local_sampling
from .engine import Engine, eos_ids
from .models import EndpointModel, FrozenModel, load_policy
from .steps import Rollout

T = TypeVar("T")


def frozen_model(graph: ExperimentGraph, name: str) -> FrozenModel | EndpointModel:
    """The auxiliary model ``name``: loaded once, never trained, sampled with its own
    settings (or called at its endpoint)."""
    spec = graph.auxiliary_models[name]
    if spec.base_url is not None:
        client, factory = auxiliary_endpoint(spec, name)
        return EndpointModel(client=client, factory=factory)
    model, tokenizer = load_policy(graph, f"auxiliary_models.{name}")
    model.eval().requires_grad_(False)
    engine = Engine(model, eos_token_id=eos_ids(model, tokenizer),
                    pad_token_id=tokenizer.pad_token_id, seed=graph.algorithm.seed + 1)
    codec = ChatCodec(tokenizer, enable_thinking=spec.enable_thinking)
    return FrozenModel(engine=engine, codec=codec,
                       sampling=local_sampling(spec, graph.model.max_model_len),
                       tool_call_parser=spec.tool_call_parser,
                       max_model_len=spec.max_model_len or graph.model.max_model_len,
                       reasoning_parser=spec.reasoning_parser)


class LocalExplorer:
    """Runs an experiment's rollouts with the policy's ``engine`` and ``codec``.

    Attributes:
        auxiliary: The auxiliary models by name.
        errors: The logger each failed rollout is written to (the run adds its log file).
    """

    def __init__(self, graph: ExperimentGraph, engine: Engine, codec: ChatCodec) -> None:
        self.graph, self.engine, self.codec = graph, engine, codec
        self.agent = Agent.from_graph(graph)
        self.timeout = float(graph.rollout_timeout)  # Trinity's explorer.max_timeout
        self.sampling = local_sampling(graph.model)
        # One event loop for the whole run: a fresh asyncio.run per step cost more than
        # the step's own rollouts on small models.
        self.loop = asyncio.new_event_loop()
        self.watchdog = Watchdog(self.loop)
        self.auxiliary = {name: frozen_model(graph, name) for name in graph.auxiliary_models}
        self.errors = logging.getLogger(f"tunedsl.local.rollouts.{id(self)}")

    def session(self) -> LocalChatModel:
        """A fresh recording `ChatModel` of the policy for one rollout."""
        model = self.graph.model
        return LocalChatModel(self.engine, self.codec, name=model.model_path,
                              sampling=self.sampling, tool_call_parser=model.tool_call_parser,
                              max_model_len=model.max_model_len,
                              reasoning_parser=model.reasoning_parser)

    async def _roll_out_group(self, task: dict[str, Any], index: int,
                              size: int) -> list[Rollout]:
        """``size`` rollouts of ``task`` side by side, a ``@group_judge`` scoring them
        together (`roll_out_group`): each with its own session of the policy."""
        models = [self.session() for _ in range(size)]
        auxiliary = {name: frozen.session(name) for name, frozen in self.auxiliary.items()}

        async def roll_out(member: int) -> RolloutResult:
            helpers = {name: frozen.session(name) for name, frozen in self.auxiliary.items()}
            return await run_bounded_rollout(self.agent, task, models[member], helpers,
                                             seconds=self.timeout, watchdog=self.watchdog,
                                             ends_model=True)

        outcomes = await roll_out_group(roll_out, size, self.agent, task, auxiliary,
                                        seconds=self.timeout, watchdog=self.watchdog)
        return [self._rollout(task, index, model, outcome)
                for model, outcome in zip(models, outcomes)]

    def _rollout(self, task: dict[str, Any], index: int, model: LocalChatModel,
                 outcome: RolloutResult | RolloutError) -> Rollout:
        if isinstance(outcome, RolloutError):
            self.errors.error("rollout failed for task %s: %s\n%s", task, outcome,
                              outcome.user_traceback or outcome)
            return Rollout(task_index=index, result=None, calls=model.calls,
                           error=str(outcome), traceback=outcome.user_traceback,
                           output=outcome.output)
        return Rollout(task_index=index, result=outcome, calls=model.calls,
                       output=outcome.output)

    def rollouts(self, rows: list[dict[str, Any]], indices: list[int],
                 group: int) -> list[list[Rollout]]:
        """``group`` rollouts of each indexed row, all at once, grouped by row."""
        async def gather() -> list[list[Rollout]]:
            return await all_or_none(self._roll_out_group(rows[i], i, group) for i in indices)

        task = self.loop.create_task(gather())

        def cancel() -> None:  # as asyncio.run on Ctrl-C: cancel, and wake the loop
            task.cancel()
            self.loop.call_soon_threadsafe(lambda: None)

        try:
            with cancelling(cancel), self.watchdog:
                return run_rollouts_on(self.loop, task)
        except asyncio.CancelledError:  # not by an interrupt (cancelling makes that one)
            raise RunError(CANCELLED_INSIDE) from None
        except RuntimeError as error:
            if not stopped_the_loop(error):
                raise
            task.cancel()  # its rollouts end with the run, as asyncio.run's would
            raise RunError(LOOP_STOPPED) from None

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` run to its end on the run's event loop (a teacher endpoint's scoring)."""
        return self.loop.run_until_complete(work)

    def reseed(self, seed: int) -> None:
        """Restart sampling for a phase of rollouts; KV caches kept from before (older
        weights, or the preflight a resumed run skips) are dropped."""
        self.engine.reseed(seed)
        self.engine.forget()
        for index, frozen in enumerate(self.auxiliary.values()):
            if isinstance(frozen, FrozenModel):
                frozen.engine.reseed(seed + 7 * (index + 1))
                frozen.engine.forget()

    def close(self) -> None:
        """Release the endpoints' connections and the run's event loop. Rollouts an
        interrupt left pending are cancelled and run to their end first, as `asyncio.run`
        does (`wind_down`), so none is left never awaited (Python warns of each at exit)."""
        wind_down(self.loop)
        for frozen in self.auxiliary.values():
            if isinstance(frozen, EndpointModel):
                self.loop.run_until_complete(frozen.client.close())
        self.loop.close()
