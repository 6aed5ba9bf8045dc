"""A local folder's split files agree on their columns, or the split that differs is
refused in words: the datasets library (eval, a local run, Trinity) reads every split of a
folder with the first split's columns, failing on the others ("Couldn't cast") or changing
their rows, while tunedsl's own reader (check) read each file as written."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunedsl import Dataset
from tunedsl.data.datasets import rows, stream
from tunedsl.errors import DatasetError

from .cli_support import cli

FIX = ("; the datasets library reads a folder's splits with the columns of its first file "
       "(train.jsonl), so these rows would fail to load or reach the workflow changed; give "
       "every split the same keys, each with one type of value, or put each split in a "
       "folder of its own")


def folder(tmp_path, **files):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name, lines in files.items():
        (data / name.replace("__", ".")).write_text(
            "".join(json.dumps(row) + "\n" for row in lines))
    return data


def refusal(data, split):
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(data), split=split)))
    return str(caught.value)


@pytest.mark.parametrize("test, why", [
    ([{"q": "1", "a": "2", "id": 0}, {"q": "2", "a": "3"}],
     "{data}/test.jsonl:1 has the key 'id', which no row of {data}/train.jsonl has"),
    ([{"q": "1"}], "{data}/test.jsonl has no row with the key 'a', which {data}/train.jsonl:1 "
                   "has"),
    ([{"q": "1", "a": 2}], "{data}/test.jsonl:1: 'a' is an integer, and text in "
                           "{data}/train.jsonl:1"),
    ([{"q": "1", "a": ["2"]}], "{data}/test.jsonl:1: 'a' is a list of text, and text in "
                               "{data}/train.jsonl:1"),
    ([{"q": "1", "a": {"x": "2"}}], "{data}/test.jsonl:1: 'a' is an object {{x: text}}, and "
                                    "text in {data}/train.jsonl:1"),
])
def test_a_split_whose_columns_differ_from_the_first_splits_is_refused_by_every_reader(
        tmp_path, test, why):
    """Each reader refuses it alike: the rows (eval, a local run), the streamed rows
    (datasets, as Trinity reads them) and check's own reader."""
    data = folder(tmp_path, train__jsonl=[{"q": "0", "a": "1"}], test__jsonl=test)
    expected = "dataset: " + why.format(data=data) + FIX
    assert refusal(data, "test") == expected
    with pytest.raises(DatasetError) as caught:
        list(stream(Dataset(str(data), split="test")))
    assert str(caught.value) == expected
    assert list(rows(Dataset(str(data), split="train"))) == [{"q": "0", "a": "1"}]


def test_shards_of_the_first_split_that_differ_are_refused(tmp_path):
    """Two shards of one split are read with one set of columns too."""
    data = folder(tmp_path, **{"train-00000-of-00002__jsonl": [{"a": 1}],
                               "train-00001-of-00002__jsonl": [{"a": 1, "b": 2}]})
    assert refusal(data, "train") == (
        f"dataset: {data}/train-00001-of-00002.jsonl:1 has the key 'b', which no row of "
        f"{data}/train-00000-of-00002.jsonl has; the datasets library reads a folder's splits "
        f"with the columns of its first file (train-00000-of-00002.jsonl), so these rows would "
        f"fail to load or reach the workflow changed; give every split the same keys, each "
        f"with one type of value, or put each split in a folder of its own")


@pytest.mark.parametrize("train, test", [
    ([{"a": "s"}, {"a": None}], [{"a": "t"}]),  # a column's nulls fit its type
    ([{"a": "s"}], [{"a": None}]),  # a column of nulls casts to any type
    ([{"a": [1, None]}], [{"a": [2]}]),
])
def test_columns_that_datasets_reads_alike_pass(tmp_path, train, test):
    data = folder(tmp_path, train__jsonl=train, test__jsonl=test)
    assert list(stream(Dataset(str(data), split="test"))) == test
    assert list(rows(Dataset(str(data), split="test"))) == test


def test_check_refuses_the_eval_split_as_eval_would(tmp_path, tiny_model):
    """The sweep's case: an eval split with a key in one row that the train split lacks
    passed check, then eval and run ended in datasets' "Couldn't cast" naming no column."""
    data = folder(tmp_path, train__jsonl=[{"question": "1+1=", "answer": "2"}],
                  test__jsonl=[{"question": "1+2=", "answer": "3", "id": 0},
                               {"question": "1+3=", "answer": "4"}])
    done = cli("check", "examples.arith.experiment:Arith", "--set",
               f"train_dataset.path={data}", "--set", f"eval_dataset.path={data}",
               "--set", f"model.model_path={tiny_model}")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"Error: eval_dataset: {data}/test.jsonl:1 has the key 'id', which no row of "
        f"{data}/train.jsonl has" + FIX)


#: Values of one column as JSON holds them: each file gives a column values of one kind.
KINDS = [st.none(), st.integers(-5, 5), st.floats(-2, 2, allow_nan=False).filter(
    lambda x: not x.is_integer()), st.text("ab", max_size=2), st.booleans(),
    st.lists(st.integers(0, 3), max_size=2), st.fixed_dictionaries({"x": st.integers(0, 3)})]


@st.composite
def split_file(draw):
    keys = draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    kinds = {key: draw(st.sampled_from(KINDS)) for key in keys}
    return [{key: draw(kinds[key]) for key in keys}
            for _ in range(draw(st.integers(1, 3)))]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(train=split_file(), test=split_file())
def test_a_split_that_passes_reads_through_datasets_as_written(tmp_path, train, test):
    """Whatever the two splits hold: either the test split is refused, or the datasets
    library reads it as written (values, their types and keys)."""
    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    for old in tmp_path.glob("data/*"):
        old.unlink()
    data = folder(tmp_path, train__jsonl=train, test__jsonl=test)
    try:
        read = [dict(row) for row in stream(Dataset(str(data), split="test"))]
    except DatasetError:
        return
    assert json.dumps(read, sort_keys=True) == json.dumps(test, sort_keys=True)
