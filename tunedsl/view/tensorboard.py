"""A Trinity run's TensorBoard scalars as ``tunedsl view`` curves.

``monitor/tensorboard/<role>/events.out.tfevents.*``, written by Trinity's
``TensorboardMonitor`` (one folder per role: ``explorer``, ``trainer``, ...): the scalars
become the curves, under Trinity's own names (``rollout/reward/mean``,
``eval/<taskset>/reward/mean@<k>``), which are the names tunedsl's local backend writes
too. Roles are merged into one name space; when one metric has two values at one step
(two roles, or a resumed run writing the step again) the one written later (by the
event's wall time) wins, as it would on TensorBoard's own chart of the resumed run.
Without the ``tensorboard`` package there are no curves and a summary row says why.

``tensorboard`` and ``numpy`` are imported only when there is an event file to read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def read_tensorboard(folder: Path, notes: list[tuple[str, str]] | None = None, *,
                     finite_only: bool = True) -> dict[str, list[tuple[int, float]]]:
    """The scalars under ``folder`` (``monitor/tensorboard``, one sub-folder per role) as
    curves: name -> ``[(step, value), ...]`` in step order, roles merged, the later
    written value winning at a step logged twice. NaN and infinities are left out unless
    ``finite_only`` is False (a check that must tell a NaN loss from a missing one). No
    folder, no curves; no ``tensorboard`` package, no curves and a note saying so."""
    files = sorted(folder.glob("*/events.out.tfevents.*")) if folder.is_dir() else []
    if not files:
        return {}
    try:
        import numpy
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        if notes is not None:
            notes.append(("curves", "not shown: the tensorboard package is not installed "
                                    "(pip install tensorboard)"))
        return {}
    points: list[tuple[float, str, int, float]] = []
    for file in files:
        try:
            for event in EventFileLoader(str(file)).Load():
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    number = _scalar(value, tensor_util, numpy)
                    if number is not None and (math.isfinite(number) or not finite_only):
                        points.append((event.wall_time, value.tag, int(event.step), number))
        except Exception as exc:  # a truncated file (a killed run) still shows its start
            if notes is not None:
                notes.append((f"curves ({file.parent.name})",
                              f"{file.name} read in part: {type(exc).__name__}"))
    merged: dict[str, dict[int, float]] = {}
    for _, name, step, number in sorted(points, key=lambda point: point[0]):
        merged.setdefault(name, {})[step] = number
    return {name: sorted(steps.items()) for name, steps in merged.items()}


def _scalar(value: Any, tensor_util: Any, numpy: Any) -> float | None:
    """A summary value's number, or None (histograms, text...)."""
    if value.HasField("tensor"):  # the loader migrates legacy ``simple_value`` to this
        array = tensor_util.make_ndarray(value.tensor)
        if array.size != 1 or array.dtype.kind not in "fiu":
            return None
        array = array.reshape(())
    elif value.HasField("simple_value"):
        array = numpy.float32(value.simple_value)
    else:
        return None
    # TensorBoard keeps float32: its shortest text is the value as logged (0.1, not
    # 0.10000000149011612).
    return float(str(array))
