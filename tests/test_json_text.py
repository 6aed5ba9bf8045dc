"""`tunedsl.data.json_text.dumps`, the one way tunedsl writes a JSON line (results,
rollouts, metrics, candidates): on any value JSON can hold, with any text (lone
surrogates among it) and any float, it writes one line of strict JSON that UTF-8 encodes
and that reads back as the value, non-finite numbers as null."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tunedsl.data.json_text import dumps, finite, pretty

#: Any text Python can hold: every code point, surrogates (U+D800-U+DFFF) included.
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()))
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(ANY_TEXT, inner, max_size=4), max_leaves=20)


def same(read, written):
    """Equal as JSON values (a float NaN was written as null)."""
    if isinstance(written, float) and not math.isfinite(written):
        return read is None
    if isinstance(written, dict):
        return read.keys() == written.keys() and all(same(read[k], v)
                                                     for k, v in written.items())
    if isinstance(written, list):
        return len(read) == len(written) and all(map(same, read, written))
    return read == written and type(read) is type(written)


@settings(deadline=None)  # a loaded CI machine's pause is no finding
@given(VALUES)
def test_any_value_is_one_line_utf8_can_encode_that_reads_back_as_itself(value):
    text = dumps(value)
    assert "\n" not in text
    text.encode("utf-8")  # never a UnicodeEncodeError
    assert same(json.loads(text), value)


@settings(deadline=None)
@given(VALUES)
def test_pretty_text_is_dumps_indented(value):
    """What ``preview`` prints: the same value, indented, text UTF-8 can encode."""
    text = pretty(value)
    text.encode("utf-8")
    assert json.loads(text) == json.loads(dumps(value))


def test_a_lone_surrogate_is_written_as_its_escape():
    assert dumps({"reply": "ok \ud800 é"}) == '{"reply": "ok \\ud800 \\u00e9"}'
    assert dumps({"reply": "é"}) == '{"reply": "é"}'  # other text stays as it is


def test_a_nan_beside_a_lone_surrogate_is_null():
    assert dumps([float("nan"), "\udfff"]) == '[null, "\\udfff"]'
    assert finite([float("inf")]) == [None]
