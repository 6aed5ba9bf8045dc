"""A workflow's response as a results line keeps it (`tunedsl.evaluation.responses`): data that
reads back from JSON as the same object is kept as data, anything else as its repr, which
`rescore` refuses to judge rather than hand the judge another object."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunedsl.errors import DatasetError
from tunedsl.evaluation.responses import decode_response, encode_response

#: JSON data as a workflow may return it (finite numbers; text keys).
PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def through_a_line(response):
    """``response`` written to a results line and read back for the judge."""
    record = json.loads(json.dumps(encode_response(response)))
    return decode_response(record, "r.jsonl:1")


@given(PLAIN)
def test_json_data_reaches_the_judge_again_as_it_was(response):
    back = through_a_line(response)
    assert back == response and type(back) is type(response)


@pytest.mark.parametrize("response", [
    ("4", 2),                  # a tuple reads back as a list
    {1: "x"},                  # a number as a key reads back as text
    {"a": [1, (2, 3)]},        # ... however deep
    float("nan"),              # NaN reads back as null
    2 ** 20_000,               # more digits than Python reads back
], ids=["tuple", "int-key", "nested-tuple", "nan", "huge-int"])
def test_data_json_would_change_is_kept_as_its_repr_and_refused_by_rescore(response):
    """rescore handed the judge a list for a tuple and text keys for numbers, at exit 0."""
    record = encode_response(response)
    assert record["response_is_repr"] is True
    with pytest.raises(DatasetError) as caught:
        through_a_line(response)
    assert str(caught.value).startswith("r.jsonl:1: the response was saved as its repr")


def test_a_response_nested_deeper_than_a_reader_goes_is_kept_as_its_repr():
    """10,000 levels: eval stopped with a RecursionError (an internal error) and its
    results file lost every finished rollout."""
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    record = encode_response(deep)
    assert record["response_is_repr"] is True
    assert record["response"] == record["response_text"] == (
        "<builtins.list object (its repr raised RecursionError)>")


def test_numpy_text_and_numbers_are_kept_as_data():
    """numpy's float64 and str_ read back as float and str, which a judge's checks accept
    (they were kept as their repr, and rescore refused them)."""
    import numpy as np

    record = encode_response({"answer": np.str_("4"), "score": np.float64(0.5)})
    assert record["response_is_repr"] is False
    assert through_a_line({"answer": np.str_("4"), "score": np.float64(0.5)}) == {
        "answer": "4", "score": 0.5}
