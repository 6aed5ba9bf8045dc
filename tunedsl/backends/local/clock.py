"""How long a step spent in the model's passes (``time/model_seconds``)."""

from __future__ import annotations

import time
from typing import Any

import torch


class ModelClock:
    """Seconds spent inside the forward passes of some modules (timed by hooks, so the
    sampler's passes count as the trainer's do) and in the backward passes run by
    `backward`."""

    def __init__(self, *modules: torch.nn.Module) -> None:
        self.seconds = 0.0
        self._started = 0.0
        for module in modules:
            self.watch(module)

    def watch(self, module: torch.nn.Module) -> None:
        """Time ``module``'s forward passes too (a reference model loaded mid-run)."""
        module.register_forward_pre_hook(self._start)
        module.register_forward_hook(self._stop)

    def _start(self, module: Any, args: Any) -> None:
        self._started = time.perf_counter()

    def _stop(self, module: Any, args: Any, output: Any) -> None:
        self.seconds += time.perf_counter() - self._started

    def backward(self, loss: torch.Tensor) -> None:
        started = time.perf_counter()
        loss.backward()
        self.seconds += time.perf_counter() - started
