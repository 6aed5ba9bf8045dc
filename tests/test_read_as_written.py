"""A local folder's split reaches the workflow as its files hold it, on every backend, or
is refused in words: the datasets library (eval, a local run, Trinity's reader) reads every
file of a folder with its first file's columns and types, failing on the others ("Couldn't
cast", naming no column) or changing their rows, while check read each file as written."""

from __future__ import annotations

import json
import os
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunedsl import Dataset
from tunedsl.data.as_read import refuse_rows_read_otherwise
from tunedsl.data.datasets import stream
from tunedsl.errors import DatasetError

from .cli_support import cli

READ = ("the datasets library (through which eval, a local run and Trinity read the data) "
        "reads")
FIX = ("; it reads every file of a folder with the columns and types of its first "
       "(train.jsonl): give every file the same keys, each with values of one type, or put "
       "each split in a folder of its own")
UNREADABLE = ("; it reads every file of a folder with the columns and types of its first: "
              "give every file the same keys, each with values of one type, or put each "
              "split in a folder of its own")


def folder(tmp_path, **files):
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        path = data / name.replace("__", ".").replace("_SLASH_", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(lines if isinstance(lines, str) else
                        "".join(json.dumps(row) + "\n" for row in lines))
    return data


def refusal(data, split):
    with pytest.raises(DatasetError) as caught:
        refuse_rows_read_otherwise(Dataset(str(data), split=split), None, "eval_dataset")
    return str(caught.value)


@pytest.mark.parametrize("train, test, split, said", [
    # a key one file has: datasets' CastError named no column
    ([{"q": "0", "a": "1"}], [{"q": "1", "a": "2", "id": 0}, {"q": "2", "a": "3"}], "test",
     "the datasets library cannot read {data} (split 'test'): {data}/test.jsonl holds the "
     "keys 'id', unlike {data}/train.jsonl" + UNREADABLE),
    # a value of another type: 2 reached the judge as 2.0
    ([{"a": 1.5}], [{"a": 2}], "test",
     "{data}/test.jsonl:1: " + READ + " 'a' as 2.0, and the file holds 2" + FIX),
    ([{"a": 1}], [{"a": 1.5}], "test",
     "the datasets library cannot read {data} (split 'test'): {data}/test.jsonl holds values "
     "of another type than {data}/train.jsonl under the same keys (Float value 1.500000 was "
     "truncated converting to int64)" + UNREADABLE),
    # a date read as a timestamp under one file's column, then as text
    ([{"d": ""}], [{"d": "2024-01-01"}], "test",
     "{data}/test.jsonl:1: " + READ + " 'd' as '2024-01-01 00:00:00', and the file holds "
     "'2024-01-01'" + FIX),
    ([{"a": {"x": 1}}], [{"a": {"x": 1, "y": [1.5]}}], "test",
     "the datasets library cannot read {data} (split 'test'): {data}/test.jsonl holds values "
     "of another type than {data}/train.jsonl under the same keys (Couldn't cast array of "
     "type struct<x: int64, y: list<item: double>> to {{'x': Value('int64')}})" + UNREADABLE),
])
def test_a_split_read_otherwise_than_its_files_hold_is_refused(tmp_path, train, test, split,
                                                                said):
    data = folder(tmp_path, train__jsonl=train, test__jsonl=test)
    assert refusal(data, split) == "eval_dataset: " + said.format(data=data)


def test_files_the_library_takes_by_its_own_patterns_are_compared(tmp_path):
    """``gsm_train.jsonl``/``gsm_test.jsonl`` are splits to the datasets library, and
    nested folders of a split too: check read neither."""
    data = folder(tmp_path, gsm_train__jsonl=[{"a": 1.5}], gsm_test__jsonl=[{"a": 2}])
    assert refusal(data, "test") == (
        f"eval_dataset: {data}/gsm_test.jsonl:1: {READ} 'a' as 2.0, and the file holds 2; it "
        f"reads every file of a folder with the columns and types of its first "
        f"(gsm_train.jsonl): give every file the same keys, each with values of one type, or "
        f"put each split in a folder of its own")
    nested = folder(tmp_path / "n", train_SLASH_a__jsonl=[{"a": 1}],
                    train_SLASH_more_SLASH_b__jsonl=[{"a": 1, "b": 2}])
    assert refusal(nested, "train") == (
        f"eval_dataset: the datasets library cannot read {nested} (split 'train'): "
        f"{nested}/train/more/b.jsonl holds the keys 'b', unlike {nested}/train/a.jsonl"
        + UNREADABLE)


@pytest.mark.parametrize("train, test", [
    ([{"a": "s"}, {"a": None}], [{"a": "t"}]),  # a column's nulls fit its type
    ([{"a": "s"}], [{"a": None}]),  # a column of nulls casts to any type
    ([{"a": [], "b": {"x": 1}}, {"a": [1], "b": {"x": 1, "y": 2}}], [{"a": [2], "b": {"x": 1}}]),
    ([{"a": 1}, {"a": 1.5}], [{"a": 2.5}]),  # a mix check names to the code reading it
    ([{"d": "2024-01-02"}], [{"d": "2024-01-05"}]),  # dates read as timestamps everywhere
    ([{"q": "1"}], ""),  # no rows: the row count's check says so
])
def test_folders_the_library_reads_as_written_pass(tmp_path, train, test):
    """Folders the datasets library reads as written (these were refused by a stricter
    comparison of the files' columns)."""
    data = folder(tmp_path, train__jsonl=train, test__jsonl=test)
    for split in ("train", "test"):
        refuse_rows_read_otherwise(Dataset(str(data), split=split), None, "eval_dataset")


def test_csv_and_parquet_files_are_compared_too(tmp_path):
    import pyarrow
    import pyarrow.parquet

    data = folder(tmp_path, train__csv="a,b\n1,x\n", test__csv="a,b\n1.5,y\n")
    assert refusal(data, "test").startswith(
        f"eval_dataset: the datasets library cannot read {data} (split 'test'): "
        f"{data}/test.csv holds values of another type than {data}/train.csv under the same "
        f"keys (Float value 1.500000 was truncated converting to int64)")
    other = tmp_path / "p"
    other.mkdir()
    pyarrow.parquet.write_table(pyarrow.table({"a": [1.5], "hint": ["x"]}),
                                other / "train.parquet")
    pyarrow.parquet.write_table(pyarrow.table({"a": [4]}), other / "test.parquet")
    assert refusal(other, "test").startswith(
        f"eval_dataset: {other}/test.parquet row 1: {READ} 'a' as 4.0, and the file holds 4; "
        f"it reads every file of a folder with the columns and types of its first "
        f"(train.parquet)")


def test_check_refuses_the_eval_split_as_eval_and_trinity_would(tmp_path, tiny_model):
    """Sweep 24's case: an eval split with a key in one row that the train split lacks
    passed check, then eval and run ended in datasets' "Couldn't cast" naming no column."""
    data = folder(tmp_path, train__jsonl=[{"question": "1+1=", "answer": "2"}],
                  test__jsonl=[{"question": "1+2=", "answer": "3", "id": 0},
                               {"question": "1+3=", "answer": "4"}])
    done = cli("check", "examples.arith.experiment:Arith", "--set",
               f"train_dataset.path={data}", "--set", f"eval_dataset.path={data}",
               "--set", f"model.model_path={tiny_model}")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"Error: eval_dataset: the datasets library cannot read {data} (split 'test'): "
        f"{data}/test.jsonl holds the keys 'id', unlike {data}/train.jsonl" + UNREADABLE)


#: Values of one column as JSON holds them: each file gives a column values of one kind.
KINDS = [st.none(), st.integers(-5, 5), st.floats(-2, 2, allow_nan=False).filter(
    lambda x: not x.is_integer()), st.text("ab", max_size=2), st.booleans(),
    st.lists(st.integers(0, 3), max_size=2), st.fixed_dictionaries({"x": st.integers(0, 3)}),
    st.sampled_from(["2024-01-02", "2024-02-03T04:05:06"])]


@st.composite
def split_file(draw):
    keys = draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    kinds = {key: draw(st.sampled_from(KINDS)) for key in keys}
    return [{key: draw(kinds[key]) for key in keys}
            for _ in range(draw(st.integers(1, 3)))]


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(train=split_file(), test=split_file())
def test_a_split_that_passes_reads_as_written_as_trinity_reads_it(tmp_path, train, test):
    """Whatever the two splits hold: either the test split is refused, or Trinity's reader
    (``load_dataset(path, split=...)``) reads it as written (values and their types; a
    key a row lacks may be read as null; key order aside), and so does eval's streamed
    read."""
    import datasets

    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    datasets.utils.logging.disable_progress_bar()
    for old in tmp_path.glob("data/*"):
        old.unlink()
    data = folder(tmp_path, train__jsonl=train, test__jsonl=test)
    try:
        refuse_rows_read_otherwise(Dataset(str(data), split="test"), None, "eval_dataset")
    except DatasetError:
        return
    read = datasets.load_dataset(str(data), split="test", cache_dir=str(tmp_path / "cache"),
                                 keep_in_memory=True).to_list()
    streamed = [dict(row) for row in stream(Dataset(str(data), split="test"))]
    assert json.dumps(streamed, default=str, sort_keys=True) == \
        json.dumps(read, default=str, sort_keys=True)
    shown = [{key: _as_written(value, held.get(key)) for key, value in row.items()
              if key in held or value is not None} for row, held in zip(read, test)]
    assert json.dumps(shown, sort_keys=True) == json.dumps(test, sort_keys=True)


def _as_written(read, held):
    """A timestamp read for the ISO text written (Arrow reads dates so, on every backend)
    as that text; anything else as read."""
    import datetime

    if isinstance(read, datetime.datetime) and isinstance(held, str) and \
            read.isoformat().startswith(held.removesuffix("Z")):
        return held
    return read


CARD = ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: "
        "train.jsonl\n  - split: test\n    path: holdout.jsonl\n---\n")


@pytest.mark.parametrize("files, split, read, checked", [
    # a dataset card's configs: check read test.jsonl, every backend holdout.jsonl
    ({"README__md": CARD, "test__jsonl": [{"q": "2"}], "holdout__jsonl": [{"q": "3"}]},
     "test", "holdout.jsonl", "test.jsonl"),
    # a card's configs naming a file of a subfolder, by the same name: both named by their
    # path in the folder (the line said "reads train.jsonl ... check read train.jsonl",
    # sweep 43 A-W5)
    ({"README__md": CARD.replace("path: train.jsonl", "path: alt/train.jsonl"),
      "alt_SLASH_train__jsonl": [{"q": "9"}], "holdout__jsonl": [{"q": "3"}]},
     "train", "alt/train.jsonl", "train.jsonl"),
    # a file the library's patterns give the split too: a backup, a second download
    # (sweep 44 A: "name the split's files as the library reads them", which they were);
    # training_extra.jsonl, by its other word for the split, is read now (sweep 50 A-W1)
    ({"train__jsonl__bak": [{"q": "2"}], "test__jsonl": [{"q": "3"}]}, "train",
     "train.jsonl, train.jsonl.bak", "train.jsonl"),
])
def test_a_split_the_library_reads_from_other_files_than_check_is_refused(tmp_path, files,
                                                                         split, read, checked):
    data = folder(tmp_path, train__jsonl=[{"q": "1"}], **files)
    extra = ", ".join(name for name in read.split(", ") if name != checked)
    fix = (f"move {extra} out of the folder (the library takes every file whose name holds "
           f"the split's for one of its files)" if checked in read.split(", ") else
           "name the split's files as the library reads them (train.jsonl, test.jsonl), or "
           "put each split in a folder of its own")
    alone = " alone" if checked in read.split(", ") else ""
    assert refusal(data, split) == (
        f"eval_dataset: the datasets library reads {read} as {data}'s split {split!r} (by its "
        f"file patterns, or a dataset card's configs), not {checked}{alone}; {fix}")


def test_a_date_no_python_date_holds_is_one_line(tmp_path):
    """A date in the year 0 (Arrow reads it; Python's datetime cannot hold it) was an
    internal error in check (OverflowError)."""
    data = folder(tmp_path, train__jsonl=[{"q": "1", "d": "0000-01-01"}],
                  test__jsonl=[{"q": "2", "d": "0000-01-01"}])
    said = refusal(data, "test")  # (the rest is the conversion's words: Python's own)
    assert said.startswith(f"eval_dataset: cannot read {data} (split 'test'): ") and \
        "\n" not in said and "out of range" in said


def test_a_json_array_whose_objects_differ_is_refused_as_eval_streams_it(tmp_path):
    """Streamed (eval, a local run), a .json array's objects of differing keys came as JSON
    text; read whole (Trinity), as objects: check read neither (SFT conversations with a
    tool call in one of them ended check --backend local in a TypeError)."""
    data = folder(tmp_path, train__json=json.dumps([
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "hi", "name": "x"}]}]))
    assert refusal(data, "train") == (
        f"eval_dataset: {data}/train.json row 1: {READ} 'messages'[0] as "
        f"'{{\"role\":\"user\",\"content\":\"hi\"}}', and the file holds {{'content': 'hi', "
        f"'role': 'user'}}; streamed (as eval and a local run read it), a .json array's "
        f"value whose objects differ is read as JSON text: write the file as JSON Lines "
        f"(train.jsonl, one object a line)")  # (it said to give every file the same keys)
    lines = tmp_path / "lines"
    lines.mkdir()
    (lines / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in json.loads(
        (data / "train.json").read_text())))
    refuse_rows_read_otherwise(Dataset(str(lines), split="train"), None, "eval_dataset")


def test_compressed_split_files_are_compared(tmp_path):
    import gzip

    data = tmp_path / "data"
    data.mkdir()
    for name, rows in (("train", [{"a": 2.5}]), ("test", [{"a": 4}])):
        with gzip.open(data / f"{name}.jsonl.gz", "wt") as handle:
            handle.write("".join(json.dumps(row) + "\n" for row in rows))
    assert refusal(data, "test") == (
        f"eval_dataset: {data}/test.jsonl.gz:1: {READ} 'a' as 4.0, and the file holds 4; it "
        f"reads every file of a folder with the columns and types of its first "
        f"(train.jsonl.gz): give every file the same keys, each with values of one type, or "
        f"put each split in a folder of its own")


def test_a_key_given_twice_in_a_row_is_refused_by_every_reader(tmp_path):
    """Python's json keeps the last; Trinity's reader refuses the row. The plain layout
    passed check."""
    from tunedsl.data.datasets import rows

    data = folder(tmp_path, train__jsonl='{"q": "1", "a": "2", "a": "3"}\n',
                  test__jsonl=[{"q": "1", "a": "2"}])
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(data), split="train"), label="train_dataset"))
    assert str(caught.value) == (
        f"train_dataset: {data}/train.jsonl:1: the key 'a' is given twice in one object; "
        f"Python's json keeps the last, and the datasets library (Trinity's reader too) "
        f"refuses the row: keep one")


def test_eval_reads_a_split_of_a_folder_that_is_not_alike_as_trinity_does(tmp_path):
    """A test file lacking a key its train file has: Trinity's reader hands it as null,
    and eval's reader now does too (it read the test file alone, without the key)."""
    from tunedsl.data.datasets import rows

    data = folder(tmp_path, train__jsonl=[{"q": "1", "hint": "h"}], test__jsonl=[{"q": "2"}])
    refuse_rows_read_otherwise(Dataset(str(data), split="test"), None, "eval_dataset")
    assert [dict(row) for row in rows(Dataset(str(data), split="test"))] == [
        {"q": "2", "hint": None}]


def test_a_key_given_twice_in_a_json_array_is_refused_for_what_is_lost(tmp_path):
    """In a .json array the library keeps the last value, as Python does (JSON Lines it
    refuses): the first is lost, whichever reader."""
    from tunedsl.data.quality import located_rows

    data = folder(tmp_path, train__json='[{"q": "1", "a": "2", "a": "3"}]')
    with pytest.raises(DatasetError) as caught:
        list(located_rows(Dataset(str(data), split="train"), label="train_dataset"))
    assert str(caught.value) == (
        f"train_dataset: {data}/train.json: the key 'a' is given twice in one object; "
        f"Python's json and the datasets library keep the last, so the first is lost: keep "
        f"one")


def test_a_bad_line_in_a_compressed_file_is_named_for_every_split(tmp_path):
    """A line no reader takes, inside train.jsonl.gz: the library's words named no file
    ("JSON parse error: Invalid value. in row 1"), and eval_dataset's line blamed its own
    split; a duplicate key there lost the eval_dataset: label (sweep 27 A-W1, A-W2)."""
    import gzip

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl.gz").write_bytes(gzip.compress(b'{"q": "1"}\n{oops\n'))
    (data / "test.jsonl.gz").write_bytes(gzip.compress(b'{"q": "2"}\n'))
    bad_line = (f"{data}/train.jsonl.gz:2: not a JSON line (Expecting property name enclosed "
                f"in double quotes); fix or delete that line")
    assert refusal(data, "train") == f"eval_dataset: {bad_line}"
    with pytest.raises(DatasetError) as caught:
        refuse_rows_read_otherwise(Dataset(str(data), split="test"), None, "train_dataset")
    assert str(caught.value) == f"train_dataset: {bad_line}"
    (data / "train.jsonl.gz").write_bytes(gzip.compress(b'{"q": "1"}\n'))
    (data / "test.jsonl.gz").write_bytes(gzip.compress(b'{"q": "2", "q": "3"}\n'))
    assert refusal(data, "test").startswith(f"eval_dataset: {data}/test.jsonl.gz:1: the key "
                                            f"'q' is given twice")


def test_a_split_the_folder_lacks_and_the_file_that_differs_are_named(tmp_path):
    """The library builds every split before it picks one: a split the folder lacks got
    another split's cast error, and a type conflict named every file, alike or not (sweep
    27 A-W1)."""
    import gzip

    import pyarrow
    import pyarrow.parquet

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl.gz").write_bytes(gzip.compress(b'{"q": "1", "a": 1}\n'))
    (data / "test.jsonl.gz").write_bytes(gzip.compress(b'{"q": "2", "a": 1.5}\n'))
    assert refusal(data, "validation") == (
        f"eval_dataset: {data} has no split 'validation' (it has: train, test); give one of "
        f"those as the split")
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    for name, value in (("train-0", 1), ("train-1", 1.5), ("test", 2)):
        pyarrow.parquet.write_table(pyarrow.table({"a": [value]}), parquet / f"{name}.parquet")
    assert refusal(parquet, "test") == (  # (test.parquet is like the first: not named)
        f"eval_dataset: the datasets library cannot read {parquet} (split 'test'): "
        f"{parquet}/train-1.parquet holds values of another type than "
        f"{parquet}/train-0.parquet under the same keys (Float value 1.500000 was truncated "
        f"converting to int64){UNREADABLE}")


@pytest.mark.parametrize("name", ["train.jsonl.gz", "train.json.xz", "train.jsonl.bz2"])
def test_a_compressed_file_of_json_null_is_refused_whichever_split_is_read(tmp_path, name):
    """pyarrow crashes the process (a segmentation fault) on a JSON file of ``null``; a
    compressed one crashed check and preview, even reading the other split, as a streamed
    read takes its columns from the first file of the folder (sweep 28 A-T1)."""
    import bz2
    import gzip
    import lzma

    from tunedsl.data.datasets import rows

    compress = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}
    data = tmp_path / "data"
    data.mkdir()
    (data / name).write_bytes(compress[os.path.splitext(name)[1]](b"null"))
    (data / f"test{name.removeprefix('train')}").write_bytes(
        compress[os.path.splitext(name)[1]](b'[{"q": "1"}]' if ".json." in name
                                            else b'{"q": "1"}\n'))
    for split in ("train", "test"):
        with pytest.raises(DatasetError) as caught:
            list(rows(Dataset(str(data), split=split), label="eval_dataset"))
        assert str(caught.value) == (
            f"eval_dataset: {data}/{name}:1: the file holds JSON null, not rows; a row must be "
            f"a JSON object with the task's keys")


@pytest.mark.parametrize("bad, kind", [(b"null", "NoneType"), (b"[1, 2]", "list"),
                                       (b'"text"', "str")])
def test_a_compressed_row_that_is_no_object_is_named_by_its_line(tmp_path, bad, kind):
    """A row of null, a list or text among good rows of a .jsonl.gz ended check in an
    internal error (sweep 29 A-T1); a plain file's row is refused by its line."""
    import gzip

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl.gz").write_bytes(gzip.compress(b'{"q": "1"}\n' + bad + b"\n"))
    (data / "test.jsonl.gz").write_bytes(gzip.compress(b'{"q": "2"}\n'))
    assert refusal(data, "train") == (
        f"eval_dataset: {data}/train.jsonl.gz:2: a row must be a JSON object with the task's "
        f"keys (got {kind})")


@pytest.mark.parametrize("bad, kind", [(b"null", "NoneType"), (b"[1, 2]", "list"),
                                       (b'"text"', "str")])
@pytest.mark.parametrize("form", ["train.jsonl", "train.jsonl.gz", "train.json",
                                  "train.json.gz"])
def test_preview_refuses_a_row_that_is_no_object_as_check_does(tmp_path, bad, kind, form):
    """preview showed a ``null`` row as a row of nulls (exit 0), and a list or text row of
    a compressed file in pyarrow's words ("row 0"), where check names the file:line
    (sweep 29 A-W11)."""
    import gzip

    from tunedsl.data.datasets import first_rows

    data = tmp_path / "data"
    data.mkdir()
    good = b'{"q": "1", "a": "2"}'
    text = b"[" + good + b", " + bad + b"]" if ".json." in form or form.endswith(".json") \
        else good + b"\n" + bad + b"\n"
    (data / form).write_bytes(gzip.compress(text) if form.endswith(".gz") else text)
    with pytest.raises(DatasetError) as caught:
        first_rows(Dataset(str(data), split="train"), 5, label="train_dataset")
    where = f"{data}/{form}" + (" row 2" if ".json." in form or form.endswith(".json") else ":2")
    assert str(caught.value) == (f"train_dataset: {where}: a row must be a JSON object with "
                                 f"the task's keys (got {kind})")


def test_a_parquet_column_named_twice_is_one_line(tmp_path):
    """pyarrow's "Multiple matches for FieldRef.Name(question)" came with its schema over
    seven lines, each an "Error:", and "write it again, or remove it" (sweep 30 A-W3)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    question, answer = pa.array(["1+1=", "2+2="]), pa.array(["2", "4"])
    pq.write_table(pa.Table.from_arrays([question, question, answer],
                                        names=["question", "question", "answer"]),
                   data / "train.parquet")
    pq.write_table(pa.table({"question": question, "answer": answer}), data / "test.parquet")
    assert refusal(data, "train") == (f"eval_dataset: {data}/train.parquet: the column "
                                      f"'question' is named twice; give each column a name "
                                      f"of its own")


def test_a_parquet_nan_is_not_called_a_value_read_otherwise(tmp_path):
    """A NaN in a Parquet float column was refused as "reads 'answer' as nan, and the file
    holds nan" with folder advice (NaN is not NaN); it is the same value, left to the row
    reader, which refuses it as no finite number (sweep 30 A-W4)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tunedsl.data.datasets import rows

    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"q": ["1", "2"], "answer": [1.5, float("nan")]}),
                   data / "train.parquet")
    pq.write_table(pa.table({"q": ["3"], "answer": [2.0]}), data / "test.parquet")
    refuse_rows_read_otherwise(Dataset(str(data), split="train"), None, "train_dataset")
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(data), split="train"), label="train_dataset"))
    assert str(caught.value) == (f"train_dataset: {data} row 2: answer is not a finite "
                                 f"number, which no results file (JSON) can hold; make it "
                                 f"null, or a number")


def test_a_csv_row_of_more_fields_in_a_folder_is_named_by_its_line(tmp_path):
    """A row with a field more than the header, in train.csv beside a good test.csv, was
    said as "test.csv holds not None, unlike train.csv" (None: the csv reader's key for
    the extra field), naming the wrong file (sweep 30 A-W1)."""
    data = folder(tmp_path, train__csv="question,answer\n2+2=,4\n3+4=,7,extra\n",
                  test__csv="question,answer\n1+1=,2\n")
    for split in ("train", "test"):
        assert refusal(data, split) == (
            f"eval_dataset: {data}/train.csv:3: 3 fields for the 2 columns of the first line, "
            f"and the datasets library would shift the columns of every row; quote a value "
            f"that holds a ',' or fix that line")


@pytest.mark.parametrize("first, other", [("train__csv", "test__csv"),
                                          ("train__jsonl", "test__jsonl")])
def test_an_empty_first_file_is_named_as_why_the_others_cannot_be_read(tmp_path, first, other):
    """A header-only train.csv (or an empty train.jsonl) types every column of the folder as
    null: the test split's line said test's keys differ from train's, which they do not
    (sweep 30 A-W2)."""
    rows = "question,answer\n1+1=,2\n" if other.endswith("csv") else \
        '{"question": "1+1=", "answer": "2"}\n'
    data = folder(tmp_path, **{first: "question,answer\n" if first.endswith("csv") else "",
                               other: rows})
    name = first.replace("__", ".")
    assert refusal(data, "test") == (
        f"eval_dataset: the datasets library cannot read {data} (split 'test'): {data}/{name} "
        f"has no rows, so every column is typed as null and no value of the other files fits; "
        f"it reads every file of a folder with the columns and types of its first: add rows "
        f"to {name}, or remove it")


def test_preview_refuses_a_split_the_library_reads_from_another_file_as_check_does(tmp_path,
                                                                                  capsys):
    """``preview`` showed a stray ``train.jsonl.bak``'s rows among the split's, which a run
    reads too and check refuses (sweep 44 A); a folder without one is shown."""
    from tunedsl import Dataset

    data = folder(tmp_path, train__jsonl=[{"q": "1"}], test__jsonl=[{"q": "3"}])
    assert Dataset(str(data), split="train").preview(5) == [{"q": "1"}]
    (data / "train.jsonl.bak").write_text('{"q": "2"}\n')
    capsys.readouterr()
    with pytest.raises(DatasetError) as refused:
        Dataset(str(data), split="train").preview(5)
    assert str(refused.value) == (
        f"dataset: the datasets library reads train.jsonl, train.jsonl.bak as {data}'s split "
        f"'train' (by its file patterns, or a dataset card's configs), not train.jsonl "
        f"alone; move train.jsonl.bak out of the folder (the library takes every file "
        f"whose name holds the split's for one of its files)")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("copy", ["train__json", "train-old__jsonl", "train_v2__jsonl"])
def test_a_split_read_from_two_files_of_the_same_rows_is_refused(tmp_path, copy):
    """``train.json`` beside ``train.jsonl`` (the file before a conversion), or an older
    copy named like the split: the datasets library reads both, and every task was read
    twice, check saying ok (sweep 47 A-S3). Files of other rows are the split's: named by
    check, not refused."""
    from tunedsl.api import check
    from tunedsl.data.as_read import refuse_a_split_read_twice

    rows = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(4)]
    data = folder(tmp_path, train__jsonl=rows,
                  **{copy: json.dumps(rows) if copy.endswith("__json") else rows})
    names = sorted(["train.jsonl", copy.replace("__", ".")])
    with pytest.raises(DatasetError) as caught:
        refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "train_dataset")
    assert str(caught.value) == (
        f"train_dataset: {names[0]} and {names[1]} hold the same rows (a copy, or the data in "
        f"two formats), and the datasets library reads both as {data}'s split 'train', so "
        f"every task would be read twice; move one out of the folder")
    if copy.endswith("__json"):
        return
    (data / copy.replace("__", ".")).write_text(json.dumps({"question": "9+1=",
                                                            "answer": "10"}) + "\n")
    from .local_support import graph_for
    from examples.arith.tiny_model import build_tiny_model

    model = build_tiny_model(str(tmp_path / "model"))
    lines = check(graph_for("Arith", model, tmp_path, f"train_dataset.path={data}",
                            "eval_dataset.path=" + str(data), "eval_dataset.split=train",
                            "algorithm.batch_size=1"), backend="local")
    assert f"train_dataset: {data} (split 'train'): 5 rows readable from 2 files the datasets " \
           f"library reads as the split ({', '.join(names)}), keys answer, question" in lines
