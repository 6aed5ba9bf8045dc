"""tunedsl's pytest plugin (entry point ``pytest11``): the ``scripted_model`` fixture."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ..models.scripted import ScriptedModel


@pytest.fixture
def scripted_model() -> Callable[..., ScriptedModel]:
    """A factory for `ScriptedModel`: ``scripted_model(["reply", ...])`` or ``(fn)``."""
    return ScriptedModel
