"""What tunedsl's Trinity workflow class costs: rollouts per second of `TunedslWorkflow`
against a minimal native Trinity workflow making the same call, in one run.

    python benchmarks/trinity_workflow.py [--rounds 7] [--batch 16] [--group 4]

Both run the math example's task (one chat call, the same messages and sampling
settings, the same judge) through Trinity-RFT 0.6.0's own ``WorkflowRunner`` (asynchronous
mode), ``ModelWrapper`` with history recording, and buffer reader, against the test
suite's loopback vLLM-style server in another process (tests/trinity_runner.py says
what stands in). Rounds alternate native and tunedsl batches; the median of each is
reported and their ratio. Goal: tunedsl >= 0.95x native.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SERVER = r'''
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tests.trinity_runner import VLLMServer, knows

async def main():
    server = VLLMServer(knows("examples/math_agent/data", "So... Answer: {answer}"))
    await server.start()
    print(server.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''


def native_workflow() -> type:
    """The same rollout written directly against Trinity's workflow API."""
    from trinity.common.workflows.workflow import Workflow

    from examples.math_agent.experiment import SYSTEM_PROMPT, final_answer

    class NativeMath(Workflow):
        is_async = True

        async def run_async(self) -> list[Any]:
            client = self.model.get_openai_async_client()
            args = self.task.rollout_args
            await client.chat.completions.create(
                model=client.model_path, temperature=args.temperature, top_p=args.top_p,
                max_tokens=args.max_tokens, messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": self.task.raw_task["question"]}])
            experiences = self.model.extract_experience_from_history()
            text = experiences[-1].response_text or ""
            reward = 1.0 if final_answer(text) == self.task.raw_task["answer"] else 0.0
            for experience in experiences:
                experience.reward = reward
            experiences[-1].metrics = {"reward": reward,
                                       "answered": float(final_answer(text) is not None)}
            return experiences

    return NativeMath


async def _batch(runner: Any, tasks: list[Any], workflow: type, group: int) -> tuple[int, float]:
    started = time.perf_counter()
    rollouts = 0
    for task_id, task in enumerate(tasks):
        task = dataclasses.replace(task, workflow=workflow, batch_id="0", task_id=task_id,
                                   rollout_args=dataclasses.replace(task.rollout_args, n=group))
        status, _ = await runner.run_task(task=task, batch_id="0", repeat_times=group)
        assert status.ok, status.message
        rollouts += status.completed_runs
    return rollouts, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    options = parser.parse_args()

    import pytest

    import tunedsl
    # First: without vLLM installed, it puts the import-only shim on the path.
    from tests.trinity_runner import read_tasks, serve_models
    from tests.trinity_support import validate
    from trinity.explorer.workflow_runner import WorkflowRunner
    from tunedsl.backends.trinity.workflow import TunedslWorkflow

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(ROOT)], stdout=subprocess.PIPE,
                              text=True)
    port = int(server.stdout.readline())
    try:
        with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
            graph = tunedsl.load_experiment("examples.math_agent.experiment:MathAgent", overrides=[
                f"algorithm.batch_size={options.batch}", f"algorithm.group_size={options.group}",
                "trinity.explorer.concurrent_mode=asynchronous"])
            logging.disable(logging.CRITICAL)  # Trinity's validator shouts "no GPU" on CPUs
            config = validate(graph, Path(folder))
            logging.disable(logging.NOTSET)
            serve_models(patch, {"rollout": types.SimpleNamespace(port=port)})
            tasks = read_tasks(config.buffer.explorer_input.tasksets[0])
            runner = WorkflowRunner(config, rollout_model_id=0, runner_id=0)
            native = native_workflow()

            async def measure() -> dict[str, list[float]]:
                await runner.prepare()
                await _batch(runner, tasks, native, options.group)  # warm-up, both paths
                await _batch(runner, tasks, TunedslWorkflow, options.group)
                rates: dict[str, list[float]] = {"native": [], "tunedsl": []}
                for _ in range(options.rounds):
                    for name, workflow in (("native", native), ("tunedsl", TunedslWorkflow)):
                        rollouts, seconds = await _batch(runner, tasks, workflow, options.group)
                        rates[name].append(rollouts / seconds)
                return rates

            rates = asyncio.run(measure())
    finally:
        server.terminate()
    native_rate = statistics.median(rates["native"])
    tunedsl_rate = statistics.median(rates["tunedsl"])
    print(f"{options.rounds} rounds of {options.batch} tasks x {options.group} rollouts, "
          f"Trinity WorkflowRunner (asynchronous) against a loopback vLLM-style server")
    print(f"native Trinity workflow  {native_rate:8.1f} rollouts/s (median)")
    print(f"TunedslWorkflow          {tunedsl_rate:8.1f} rollouts/s (median)")
    ratio = tunedsl_rate / native_rate
    print(f"ratio                    {ratio:8.2f}x native (goal >= 0.95)  "
          f"{'ok' if ratio >= 0.95 else 'BELOW GOAL'}")


if __name__ == "__main__":
    main()
