"""The rows a local run trains on, and which of them each step takes."""

from __future__ import annotations

import functools
from typing import Any

import attrs
import numpy as np


def read_rows(dataset: Any, label: str) -> list[dict[str, Any]]:
    """Every row of a dataset (the local backend trains on small data)."""
    from ...data.datasets import rows

    return list(rows(dataset, label=label))


@attrs.frozen
class Schedule:
    """Which rows each step trains on: the rows Trinity's ``shuffle`` data selector gives a
    taskset of ``rows`` rows read ``batch`` at a time with ``seed``, so a seed means the same
    task order on both backends.

    That selector (``trinity/buffer/selector/selector.py``, ``ShuffleSelector``) draws a
    fresh permutation per epoch and reads positions straight across epoch ends, so a step's
    rows follow from its position alone, and a resumed run continues the order. (Positions
    map to ``(epoch, place)`` this way only while ``batch <= rows``, which the trainer
    requires; Trinity skips an epoch's permutation beyond that.)
    """

    rows: int
    batch: int
    seed: int

    @functools.lru_cache(maxsize=4)  # noqa: B019 - a handful of epochs, for the run's life
    def order(self, epoch: int) -> tuple[int, ...]:
        """The row order of one epoch (0-based): ``ShuffleSelector._get_orders``, NumPy's
        PCG64 seeded with ``seed + epoch``."""
        return tuple(np.random.default_rng(self.seed + epoch).permutation(self.rows).tolist())

    def indices(self, step: int) -> list[int]:
        """Row indices of ``step`` (0-based), drawn from epoch after epoch."""
        return [self.order(position // self.rows)[position % self.rows]
                for position in range(step * self.batch, (step + 1) * self.batch)]
