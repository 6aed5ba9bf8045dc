"""One way to write JSON: strict JSON that every reader parses.

Python's ``json`` writes NaN and infinities as bare ``NaN``/``Infinity``, which strict
readers (a browser's ``JSON.parse``, jq, most languages' parsers) reject; a judge's metric or
an empty step's statistic can be NaN. Every line tunedsl writes (results, rollouts, metrics)
goes through `dumps`: a number that is not finite becomes ``null``, and a value JSON has no
type for (a timestamp, bytes in a task's column) is kept as its text. Text that JSON allows
but UTF-8 cannot encode (a lone surrogate such as ``"\\ud800"``, which an endpoint's reply
or a dataset row may hold) is written as JSON's ``\\uXXXX`` escape, so the line can always be
written to a UTF-8 file and reads back as the same string.
"""

from __future__ import annotations

import json
import math
from typing import Any

# One encoder for every line (``json.dumps`` with options builds a new one per call).
_STRICT = json.JSONEncoder(ensure_ascii=False, default=str, allow_nan=False)
# For a line holding text UTF-8 cannot encode: everything past ASCII escaped.
_ESCAPED = json.JSONEncoder(ensure_ascii=True, default=str, allow_nan=False)
# What a person reads (``preview``): indented, the same rules.
_PRETTY = json.JSONEncoder(ensure_ascii=False, default=str, allow_nan=False, indent=2)
_PRETTY_ESCAPED = json.JSONEncoder(ensure_ascii=True, default=str, allow_nan=False, indent=2)


def is_count(value: Any) -> bool:
    """Whether a JSON value is a whole number, 0 or more (JSON's ``true`` is no number)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite, however deep, replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def text_digest(text: str, length: int = 16) -> str:
    """A short, stable name for ``text``: the first ``length`` hex digits of its SHA-256."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:length]


def digest(value: Any, length: int = 16) -> str:
    """A short, stable name for a JSON value: `text_digest` of its `dumps` text."""
    return text_digest(dumps(value), length)


def dumps(value: Any) -> str:
    """``value`` as strict JSON text on one line (non-finite numbers as null) that UTF-8
    can encode."""
    return _encode(value, _STRICT, _ESCAPED)


def as_written(value: Any) -> Any:
    """``value`` as a JSON Lines file holds it once read back (`dumps`, then parsed): what
    a line's copy of it equals, whatever the order of its keys."""
    import json

    return json.loads(dumps(value))


def pretty(value: Any, encoding: str = "utf-8") -> str:
    """``value`` as `dumps` writes it, indented for a person to read; past ASCII escaped
    where ``encoding`` (a terminal's, a pipe's) cannot encode the text."""
    return _encode(value, _PRETTY, _PRETTY_ESCAPED, encoding)


def _encode(value: Any, encoder: json.JSONEncoder, escaped: json.JSONEncoder,
            encoding: str = "utf-8") -> str:
    try:
        text = encoder.encode(value)
    except ValueError:  # a NaN or infinity somewhere: the rare case pays for the walk
        value = finite(value)
        text = encoder.encode(value)
    if not text.isascii():
        try:
            text.encode(encoding)
        except (UnicodeEncodeError, LookupError):  # a lone surrogate: escaped whole
            return escaped.encode(value)
    return text
