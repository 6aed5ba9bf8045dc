"""The rows a local run trains on, and which of them each step takes."""

from __future__ import annotations

import functools
import random
from typing import Any

import attrs


def read_rows(dataset: Any, label: str) -> list[dict[str, Any]]:
    """Every row of a dataset (the local backend trains on small data)."""
    from ...runtime.datasets import rows

    return list(rows(dataset, label=label))


@attrs.frozen
class Schedule:
    """Which rows each step trains on: a seeded shuffle per epoch, in steps of ``batch``."""

    rows: int
    batch: int
    seed: int

    @functools.lru_cache(maxsize=4)  # noqa: B019 - a handful of epochs, for the run's life
    def order(self, epoch: int) -> tuple[int, ...]:
        """The row order of one epoch."""
        order = list(range(self.rows))
        random.Random(self.seed * 7919 + epoch).shuffle(order)
        return tuple(order)

    def indices(self, step: int) -> list[int]:
        """Row indices of ``step`` (0-based), drawn from epoch after epoch."""
        return [self.order(position // self.rows)[position % self.rows]
                for position in range(step * self.batch, (step + 1) * self.batch)]
