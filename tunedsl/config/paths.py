"""Relative paths mean "beside the file that names them": one rule for every source."""

from __future__ import annotations

import os
from typing import Any


def beside(value: Any, folder: str | None, *, only_if_exists: bool = True) -> Any:
    """``value`` made absolute against ``folder`` when it is a relative path.

    With ``only_if_exists`` (the default) a path that is not there is left alone: it may
    be a Hugging Face hub id such as ``openai/gsm8k``. Non-strings, absolute paths and
    ``${...}`` templates are returned unchanged.
    """
    if not folder or not isinstance(value, str) or os.path.isabs(value) or "${" in value:
        return value
    candidate = os.path.normpath(os.path.join(folder, value))
    if only_if_exists and not os.path.exists(candidate):
        return value
    return candidate
