"""Every Trinity-RFT default tunedsl restates is Trinity's own: read from a default
`trinity.common.config.Config` (what Trinity fills in for a setting a config leaves out).

The algorithm parts' default arguments are checked against their ``default_args()`` in
tests/test_algorithms.py; here, the settings the local trainer falls back to, the bounds
the Trinity backend computes its waits from, and the data format's tools column.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trinity.common.config")

from trinity.common.config import Config, FormatConfig  # noqa: E402

from tunedsl.backends.local import trainer  # noqa: E402
from tunedsl.backends.trinity import bounds  # noqa: E402
from tunedsl.data.conversations import TOOLS_KEY  # noqa: E402


def trinitys(path: str) -> object:
    """The value Trinity's default config holds at the dotted ``path``."""
    value: object = Config()
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_the_bounds_read_trinitys_defaults_for_what_a_config_leaves_out():
    assert bounds._TRINITY_DEFAULTS == {path: trinitys(path)
                                        for path in bounds._TRINITY_DEFAULTS}
    assert len(bounds._TRINITY_DEFAULTS) == 6


@pytest.mark.parametrize("restated, path", [
    (trainer.WEIGHT_DECAY, "algorithm.optimizer.weight_decay"),
    (trainer.GRAD_CLIP, "algorithm.optimizer.clip_grad"),
    (trainer.MIN_LR_RATIO, "algorithm.optimizer.min_lr_ratio"),
])
def test_an_unset_optimizer_setting_means_on_the_local_backend_what_it_means_on_trinity(
        restated, path):
    assert restated == trinitys(path)


def test_the_tools_column_is_trinitys():
    assert TOOLS_KEY == FormatConfig().tools_key
