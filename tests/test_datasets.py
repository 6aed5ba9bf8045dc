"""Reading datasets: local JSON Lines files through the standard library, as `datasets` reads them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunedsl import Dataset
from tunedsl.data.datasets import plain_jsonl_rows, rows, stream

from .cli_support import cli

REPO = Path(__file__).resolve().parents[1]

#: name -> (lines, read without datasets?)
FILES = {
    "flat": (['{"question": "1+1=", "answer": "2", "level": 1, "score": 0.5, "ok": true}',
              "",  # blank lines are skipped
              '{"question": "2+2=", "answer": "4", "level": 3, "score": 1.0, "ok": false}'],
             True),
    "nested": (['{"q": "a", "meta": {"tags": ["x", "y"], "n": 1}, "steps": [{"k": 1}]}',
                '{"q": "b", "meta": {"tags": ["z"], "n": 2}, "steps": [{"k": 2}, {"k": 3}]}'],
               True),
    "missing_key": (['{"a": 1, "b": "x"}', '{"a": 2}'], False),  # datasets fills b with None
    "int_and_float": (['{"a": 1}', '{"a": 2.5}'], False),  # datasets makes 1 a float
    "key_order": (['{"a": 1, "b": 2}', '{"b": 3, "a": 4}'], False),
    "empty_list": (['{"a": [1]}', '{"a": []}'], False),
    "mixed_list": (['{"a": [1, 2.5]}'], False),
    "null_and_text": (['{"a": null}', '{"a": "x"}'], False),
    # Arrow reads ISO dates as timestamps: datetimes, as Trinity's reader gives them too
    "iso_dates": (['{"d": "2024-01-02", "t": "2024-01-02T03:04:05Z", "s": "2024-1-2"}'], False),
    "empty": ([], False),
}


def dataset_file(tmp_path, name):
    lines, _ = FILES[name]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return Dataset(str(path), split="train")


@pytest.mark.parametrize("name", sorted(FILES))
def test_local_jsonl_rows_are_what_datasets_yields(tmp_path, name):
    """Rows of one shape are read with the standard library, and equal datasets' (types
    and key order included); any other file is left to datasets, which converts or refuses
    it as it always did."""
    dataset = dataset_file(tmp_path, name)
    plain = plain_jsonl_rows(dataset.path)
    assert (plain is not None) == FILES[name][1]
    try:
        expected = [dict(row) for row in stream(dataset)]
    except Exception as error:  # datasets refuses it: so must rows()
        with pytest.raises(type(error)):
            list(rows(dataset))
        return
    got = list(rows(dataset))
    # same values, types (a datetime's repr names it) and key order
    assert json.dumps(got, default=repr) == json.dumps(expected, default=repr)
    assert json.dumps(list(rows(dataset, limit=1)), default=repr) == \
        json.dumps(got[:1], default=repr)


def test_nan_in_a_row_is_refused_by_line_not_typed_by_datasets(tmp_path):
    """NaN (which Python's json writes for a float NaN) went to the datasets library, which
    typed the whole column from it: a column of "2"-like strings became numbers."""
    from tunedsl.errors import DatasetError

    path = tmp_path / "d.jsonl"
    path.write_text('{"a": "2"}\n{"a": NaN}\n')
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(path), split="train")))
    assert str(caught.value) == (
        f"dataset: {path}:2: NaN is not JSON (Python's json writes it for a float NaN or "
        f'infinity; the datasets library then reads the whole column as numbers, "2" as 2); '
        f"write null, or a number")


def test_a_folder_of_split_files_is_read_without_importing_datasets(tmp_path):
    """The arith example's folder (train.jsonl and test.jsonl) is read by split with the
    standard library; a folder with anything else in it goes through datasets, whose file
    patterns decide what each split holds."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.jsonl").write_text('{"a": 1}\n')
    (other / "train-extra.jsonl").write_text('{"a": 2}\n')  # datasets reads it as train too
    script = f"""
import sys
from tunedsl import Dataset
from tunedsl.data.datasets import rows
data = {str(REPO / "examples" / "arith" / "data")!r}
train, test = (list(rows(Dataset(data, split=split))) for split in ("train", "test"))
print(len(train), len(test), train[0] != test[0], "datasets" in sys.modules)
print(sorted(row["a"] for row in rows(Dataset({str(other)!r}))), "datasets" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["45 10 True False", "[1, 2] True"]


def test_a_malformed_jsonl_row_is_a_dataset_error(tmp_path):
    """preview (and check, run) name the file and line of a row that cannot be parsed."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"question": "1+1="}\n{broken\n')
    done = cli("preview", "examples.arith.experiment:Arith", "--set",
               f"train_dataset.path={tmp_path / 'data'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (f"Error: train_dataset: {tmp_path / 'data' / 'train.jsonl'}:2: not "
                           f"a JSON line (Expecting property name enclosed in double quotes); "
                           f"fix or delete that line\n")


def test_a_byte_order_mark_is_read_past_by_check_as_by_preview_and_run(tmp_path):
    """A UTF-8 file saved with a byte-order mark (as some editors do): check reads it as
    preview, run and the datasets library (Trinity's reader) do, keys and all; before,
    check refused the file that the others trained on."""
    from tunedsl import Dataset
    from tunedsl.data.quality import scan
    from tunedsl.data.datasets import first_rows

    (tmp_path / "train.jsonl").write_bytes(
        b'\xef\xbb\xbf{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer": "4"}\n')
    dataset = Dataset(str(tmp_path))
    quality = scan(dataset, ["question", "answer"], label="train_dataset")
    assert (quality.rows, quality.keys, quality.missing) == (2, {"question", "answer"}, {})
    assert first_rows(dataset, 1, label="train_dataset") == [{"question": "1+1=",
                                                              "answer": "2"}]


def test_a_data_path_through_a_looping_link_is_said_to_loop(tmp_path):
    """``loop/train.jsonl``, where ``loop`` is a link to itself, was taken for a hub id
    (sweep 49 A-W5)."""
    from tunedsl.errors import DatasetError

    (tmp_path / "loop").symlink_to("loop")
    path = str(tmp_path / "loop" / "train.jsonl")
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(path)))
    assert str(caught.value) == (
        f"dataset: {path}: {tmp_path / 'loop'} is a symbolic link to loop, which loops back "
        f"to itself; fix the link, or give the data's own path")


@pytest.mark.parametrize("target", ["gone", "loop"])
def test_a_broken_symbolic_link_is_named_not_taken_for_a_hub_id(tmp_path, monkeypatch, target):
    """A dataset path that is a link to nothing (or a loop of links) is a path to fix: it was
    taken for a Hugging Face hub id, and the hub asked for it."""
    from tunedsl.errors import DatasetError

    link = tmp_path / "data"
    link.symlink_to(tmp_path / target)
    if target == "loop":
        (tmp_path / "loop").symlink_to(link)
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(link))))
    ends = "loops back to itself" if target == "loop" else "does not exist"
    assert str(caught.value) == (
        f"dataset: path {link} is a symbolic link to {tmp_path / target}, which {ends}; fix "
        f"the link, or give the data's own path")


def test_check_reads_pretty_printed_objects_as_preview_does(tmp_path):
    """JSON objects each over several lines are rows to the datasets library (preview, run,
    Trinity's reader); check's located reader reads them too, each at its first line (it
    refused the file at line 1)."""
    from tunedsl.data.quality import located_rows

    (tmp_path / "train.jsonl").write_text('{"q": "1",\n "a": "2"}\n\n{"q": "3",\n "a": "4"}\n')
    located = list(located_rows(Dataset(str(tmp_path))))
    assert located == [(f"{tmp_path / 'train.jsonl'}:1", {"q": "1", "a": "2"}),
                       (f"{tmp_path / 'train.jsonl'}:4", {"q": "3", "a": "4"})]
    assert [row for _, row in located] == list(rows(Dataset(str(tmp_path))))


def test_check_reads_a_pretty_printed_array_in_a_jsonl_file_as_preview_does(tmp_path):
    """One JSON array over many lines, in a file named .jsonl: its objects are rows to the
    datasets library (preview, run); check refused it as one row that is a list."""
    import json

    from tunedsl.data.quality import located_rows

    tasks = [{"q": "1", "a": "2"}, {"q": "3", "a": "4"}]
    (tmp_path / "train.jsonl").write_text(json.dumps(tasks, indent=2) + "\n")
    located = list(located_rows(Dataset(str(tmp_path))))
    assert located == [(f"{tmp_path / 'train.jsonl'} row 1", tasks[0]),
                       (f"{tmp_path / 'train.jsonl'} row 2", tasks[1])]
    assert [row for _, row in located] == list(rows(Dataset(str(tmp_path))))


def test_a_parquet_file_of_no_rows_has_no_rows(tmp_path):
    """pyarrow's "BatchSize must be greater than 0" for an empty Parquet file is read as
    what it is: no rows (which check and eval then say in their own words)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"question": pa.array([], pa.string())}),
                   tmp_path / "data" / "train.parquet")
    assert list(rows(Dataset(str(tmp_path / "data")), label="train_dataset")) == []



@pytest.mark.parametrize("split", ["train", "test"])
def test_a_parquet_file_whose_features_are_no_json_is_named(tmp_path, split):
    """A Parquet file whose ``huggingface`` schema metadata is not JSON: the datasets
    library's JSON error was blamed on the folder's other file (sweep 38 A-W6). Each split
    is refused naming the file, whichever split is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tunedsl.errors import DatasetError

    (tmp_path / "data").mkdir()
    table = pa.table({"question": ["1+1="], "answer": ["2"]})
    pq.write_table(table.replace_schema_metadata({"huggingface": "{not json"}),
                   tmp_path / "data" / "train.parquet")
    pq.write_table(table, tmp_path / "data" / "test.parquet")
    bad = tmp_path / "data" / "train.parquet"
    with pytest.raises(DatasetError) as refused:
        list(rows(Dataset(str(tmp_path / "data"), split=split), label="train_dataset"))
    assert str(refused.value) == (
        f"train_dataset: {bad}: its 'huggingface' schema metadata (the datasets library's "
        f"features) is not JSON (Expecting property name enclosed in double quotes: line 1 "
        f"column 2 (char 1)); write the file again without it, e.g. with pyarrow: "
        f"pq.write_table(table.replace_schema_metadata(None), ...)")
    pq.write_table(table, bad)  # written again without it: read
    assert list(rows(Dataset(str(tmp_path / "data"), split=split))) == [
        {"question": "1+1=", "answer": "2"}]


def test_a_data_file_linked_to_nothing_is_named(tmp_path):
    """A folder whose train.jsonl is a link to a file that is gone: the link is named (it
    was "the folder holds no data files", with a train.jsonl right there)."""
    from tunedsl.errors import DatasetError

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").symlink_to(tmp_path / "moved" / "train.jsonl")
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path / "data")), label="train_dataset"))
    assert str(caught.value) == (
        f"train_dataset: {tmp_path}/data/train.jsonl is a symbolic link to "
        f"{tmp_path}/moved/train.jsonl, which does not exist; point the link at the data, or "
        f"remove it")


@pytest.mark.parametrize("beside", [None, "test.jsonl"])
def test_a_data_file_linked_to_itself_is_named_a_loop(tmp_path, beside):
    """A train.jsonl linked to itself was "a link to train.jsonl, which does not exist";
    with another split beside it, "has no split 'train' (it has: test)"."""
    from tunedsl.errors import DatasetError

    (tmp_path / "data").mkdir()
    if beside:
        (tmp_path / "data" / beside).write_text('{"q": "1"}\n')
    (tmp_path / "data" / "train.jsonl").symlink_to("train.jsonl")
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path / "data")), label="train_dataset"))
    assert str(caught.value) == (
        f"train_dataset: {tmp_path}/data/train.jsonl is a symbolic link to train.jsonl, which "
        f"loops back to itself; point the link at the data, or remove it")


@pytest.mark.parametrize("extension", [".jsonl", ".csv"])
def test_a_shard_linked_to_nothing_is_named_not_skipped(tmp_path, extension):
    """A split of two shards, one a link to nothing, was read as the other alone: "1 rows
    readable", half the data gone without a word."""
    from tunedsl.errors import DatasetError

    (tmp_path / "data").mkdir()
    row = '{"q": "1+1=", "a": "2"}\n' if extension == ".jsonl" else "q,a\n1+1=,2\n"
    (tmp_path / "data" / f"train-00000-of-00002{extension}").write_text(row)
    link = tmp_path / "data" / f"train-00001-of-00002{extension}"
    link.symlink_to("moved" + extension)
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path / "data")), label="train_dataset"))
    assert str(caught.value).endswith(
        f"{link} is a symbolic link to moved{extension}, which does not exist, so the split "
        f"would be read without it; point the link at the data, or remove it")


@pytest.mark.parametrize("beside", [None, "test.jsonl"])
def test_a_folder_named_as_a_data_file_is_named_a_folder(tmp_path, beside):
    """A folder data/train.jsonl got "rename train.jsonl to train.jsonl (the datasets
    library reads extensions in lower case only)"; with another split beside it, "has no
    split 'train' (it has: test)"."""
    from tunedsl.errors import DatasetError

    (tmp_path / "data" / "train.jsonl").mkdir(parents=True)
    if beside:
        (tmp_path / "data" / beside).write_text('{"q": "1"}\n')
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path / "data")), label="train_dataset"))
    assert str(caught.value) == (
        f"train_dataset: {tmp_path}/data/train.jsonl is a folder, not a data file; put the "
        f"tasks in a file of that name")


def test_a_row_count_past_what_python_counts_reads_every_row(tmp_path):
    """``preview -n 99999999999999999999`` was an internal error (islice takes no more than
    sys.maxsize): a count that large reads every row."""
    small, mixed = tmp_path / "t.jsonl", tmp_path / "m.jsonl"
    small.write_text('{"a": 1}\n{"a": 2}\n')
    mixed.write_text('{"a": 1}\n{"a": 2.5}\n')  # read by the datasets library (streamed)
    assert list(rows(Dataset(str(small), split="train"), limit=10**20)) == [{"a": 1}, {"a": 2}]
    assert list(rows(Dataset(str(mixed), split="train"), limit=10**20)) == [{"a": 1.0},
                                                                              {"a": 2.5}]


SURROGATE_SAYS = ("holds a lone surrogate (a \\ud800-\\udfff escape without its pair), which "
                  "is not text a model, a tokenizer or the datasets library can take; fix that "
                  "line")


def surrogate_refusals(tmp_path, text: str) -> set[str]:
    """What each reader of a data file says of ``text`` (one JSON line): the rows an eval
    or run reads, the check's own reader (``check`` streams the rows by file and line), and
    a file of another row too many for the plain path (the datasets library's then)."""
    from tunedsl.data.json_files import json_problem
    from tunedsl.errors import DatasetError

    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    path = folder / "train.jsonl"
    said = set()
    for lines in ([text], [text, '{"other": 1}']):  # the second: keys differ, datasets reads it
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(DatasetError) as caught:
            list(rows(Dataset(str(folder), split="train")))
        said.add(str(caught.value))
        said.add(str(json_problem(str(folder), "train", "dataset")))
    return said


def test_a_lone_surrogate_in_a_key_or_a_value_is_refused_by_line_by_every_reader(tmp_path):
    """JSON's "\\ud800" without its pair is valid JSON and no UTF-8 text: check passed it,
    eval refused a key with it in pyarrow's words and a value failed inside a tokenizer or an
    endpoint request (sweep 14 S3)."""
    path = tmp_path / "data" / "train.jsonl"
    assert surrogate_refusals(tmp_path, '{"question": "1+1=\\ud800", "answer": "2"}') == {
        f"dataset: {path}:1: the value at 'question' {SURROGATE_SAYS}"}
    assert surrogate_refusals(tmp_path, '{"a": 1, "note\\udfff": 1}') == {
        f"dataset: {path}:1: the key 'note\\udfff' {SURROGATE_SAYS}"}
    assert surrogate_refusals(tmp_path, '{"messages": [{"content": "x\\udc80y"}]}') == {
        f"dataset: {path}:1: the value at 'messages.0.content' {SURROGATE_SAYS}"}


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8),
       st.integers(0xD800, 0xDFFF), st.booleans())
def test_any_lone_surrogate_anywhere_in_a_string_is_found(tmp_path_factory, text, point, in_key):
    """Generated: a string of any text with one surrogate escape spliced in, as a key or a
    value; a pair (a real character outside the BMP) is text and passes."""
    from tunedsl.data.json_files import lone_surrogate

    spliced = text[:len(text) // 2] + chr(point) + text[len(text) // 2:]
    row = json.loads(json.dumps({spliced: 1} if in_key else {"k": [spliced]}))
    assert lone_surrogate(row) == (f"the key {spliced!r}" if in_key else "the value at 'k.0'")
    assert lone_surrogate(json.loads('{"k": "\\ud83d\\ude00"}')) is None  # a pair: 😀
    assert lone_surrogate({"k": text, text: [text]}) is None


def test_a_lone_surrogate_in_a_json_file_is_refused_not_dropped(tmp_path):
    """A ``.json`` file (one list of rows): the datasets library dropped the escape without a
    word, so "1+1=\\ud800" reached the workflow as "1+1=" in eval and run (sweep 15); a
    pair of escapes (one character) is text and reads as it is."""
    from tunedsl.errors import DatasetError

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.json").write_text('[{"q": "1+1=\\ud800"}, {"q": "2+2="}]\n')
    (folder / "test.json").write_text('[{"q": "1+1=\\ud83d\\ude00"}]\n')
    for reader in (rows, stream):
        with pytest.raises(DatasetError) as caught:
            list(reader(Dataset(str(folder), split="train")))
        assert str(caught.value) == (
            f"dataset: {folder / 'train.json'} row 1: the value at 'q' {SURROGATE_SAYS}")
    assert list(rows(Dataset(str(folder), split="test"))) == [{"q": "1+1=\U0001F600"}]


@pytest.mark.parametrize("line, said", [
    ('{"q": NaN}', "NaN is not JSON"),
    ('{"q": 99999999999999999999}', "q is an integer beyond 64 bits"),
    ('{"q": ' + "[" * 200 + "]" * 200 + "}", "nested 201 levels deep"),
])
def test_the_eval_split_failing_on_the_train_file_of_its_folder_is_labelled_as_its_own(
        tmp_path, line, said):
    """The eval split's read meets the train file of the same folder (the library reads a
    folder with its first file's columns): its line was labelled ``dataset:``, where the
    train split's says ``train_dataset:`` (sweep 29 A-W4)."""
    from tunedsl.errors import DatasetError

    (tmp_path / "train.jsonl").write_text(line + "\n")
    (tmp_path / "test.jsonl").write_text('{"q": "1"}\n')
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path), split="test"), label="eval_dataset"))
    assert str(caught.value).startswith(f"eval_dataset: {tmp_path}/train.jsonl:1: {said}")


CARD_CONFIGS = """---
configs:
- config_name: easy
  data_files:
  - split: train
    path: files/{easy}
- config_name: hard
  data_files:
  - split: train
    path: files/train.jsonl
---
"""


@pytest.mark.parametrize("card, said", [
    ("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
     "    path: files/missing.jsonl\n---\n",
     "{card}: its configs name the data file files/missing.jsonl, which does not exist; fix "
     "the path in the card, or add the file"),
    ("---\nconfigs: [ {config_name: default\n---\n",
     "{card}:2: the dataset card's header is not valid YAML (expected ',' or '}}', but got "
     "'<stream end>'); fix it, or remove the card"),
    (CARD_CONFIGS.format(easy="train.jsonl"),
     "{card} declares the configurations easy, hard; give one as Dataset(..., name=...)"),
])
def test_a_dataset_card_the_library_cannot_follow_is_named(tmp_path, card, said):
    """A card's missing data file (a line of 200 extensions), its broken YAML header and
    its several configurations with no Dataset(name=...) were said in the datasets
    library's words, naming no README.md (sweep 29 A-W2)."""
    from tunedsl.errors import DatasetError

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "train.jsonl").write_text('{"q": "1"}\n')
    (tmp_path / "README.md").write_text(card)
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path), split="train"), label="train_dataset"))
    assert str(caught.value) == "train_dataset: " + said.format(card=tmp_path / "README.md")


@pytest.mark.parametrize("file", ["development.jsonl", "holdout.jsonl", "development/part.jsonl"])
def test_a_split_file_the_library_reads_as_no_split_is_named(tmp_path, file):
    """``split="development"`` beside a development.jsonl was refused as "no split
    'development' (it has: train)": the datasets library reads no split from that name and
    left the file out, unnamed (sweep 35 A-W10)."""
    from tunedsl.errors import DatasetError

    name = file.split("/")[0].split(".")[0]
    (tmp_path / "train.jsonl").write_text('{"q": "1"}\n')
    (tmp_path / file).parent.mkdir(exist_ok=True)
    (tmp_path / file).write_text('{"q": "2"}\n' if file.endswith("jsonl") else "q\n2\n")
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path), split=name), label="eval_dataset"))
    shown = file.split("/")[0] + ("/" if "/" in file else "")
    assert str(caught.value) == (
        f"eval_dataset: {tmp_path} has no split {name!r}: the datasets library reads no split "
        f"from {shown} (it knows a split by the words of its file name: train, training, "
        f"validation, valid, dev, val, test, testing, eval, evaluation); rename it, e.g. "
        f"validation{shown[len(name):]}, and give that split (split='validation')")


@pytest.mark.parametrize("name, read_as, file", [
    ("dev", "validation", "dev.jsonl"), ("valid", "validation", "valid.jsonl"),
    ("eval", "test", "eval.jsonl"),
    # a folder and a hub's shard name: the old line, with no word of the split (sweep 32)
    ("dev", "validation", "dev/part.jsonl"), ("dev", "validation", "dev-00000-of-00001.jsonl"),
    # a word the library finds between marks: said to be read as no split (sweep 49 A-W15)
    ("my_test_set", "test", "my_test_set.jsonl")])
def test_a_split_named_as_its_file_says_which_split_the_library_reads_it_as(tmp_path, name,
                                                                           read_as, file):
    """``split="dev"`` beside a dev.jsonl was refused as "no split 'dev' (it has: train,
    validation)", without saying dev.jsonl is the validation split (sweep 31 A-W5)."""
    from tunedsl.errors import DatasetError

    (tmp_path / "train.jsonl").write_text('{"q": "1"}\n')
    (tmp_path / file).parent.mkdir(exist_ok=True)
    (tmp_path / file).write_text('{"q": "2"}\n')
    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(tmp_path), split=name), label="eval_dataset"))
    assert str(caught.value) == (
        f"eval_dataset: {tmp_path} has no split {name!r}: the datasets library reads "
        f"{file.split('/')[0] + ('/' if '/' in file else '')} as its split {read_as!r}; give "
        f"split={read_as!r}")


@pytest.mark.parametrize("command, label", [
    (["preview"], "train_dataset"), (["check", "--backend", "trinity"], "eval_dataset"),
    (["eval", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"], "eval_dataset")],
    ids=["preview", "check", "eval"])
@pytest.mark.parametrize("unreadable", ["file", "folder", "unsearchable folder"])
def test_a_data_file_or_folder_that_cannot_be_read_is_said_in_one_line(tmp_path, unreadable,
                                                                       command, label):
    """A train.jsonl without read permission was an internal error in check and preview; a
    folder that cannot be listed was too (sweep 41 A-T1), and still in check and eval
    (sweep 42 A-T1). Root ignores file permissions: the command runs without the
    capabilities that let it (setpriv)."""
    import os
    import shutil

    from .cli_support import REPO, unprivileged

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    data = project / "data"
    locked, mode, fix = (data / "train.jsonl", 0, "cannot read it (Permission denied); make "
                         f"it readable (chmod u+r {data / 'train.jsonl'})") \
        if unreadable == "file" else \
        (data, 0o300 if unreadable == "folder" else 0, f"cannot list it (Permission denied); "
         f"make it readable (chmod u+rx {data})")
    # (the eval set is the same folder's test split, and the datasets library reads every
    # split of a folder to give one: its train.jsonl is read for the eval set too)
    locked.chmod(mode)
    try:
        done = subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl", command[0],
                               "experiment.py:Arith", *command[1:]], cwd=project,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        locked.chmod(0o644 if unreadable == "file" else 0o755)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        2, f"Error: {label}: {locked}: {fix}"), done.stderr


@pytest.mark.parametrize("form", ["parquet", "csv", "jsonl.gz"])
def test_a_data_file_of_any_format_that_cannot_be_read_is_said_with_its_chmod(tmp_path, form):
    """A parquet, CSV or compressed file without read permission: check said "cannot be read
    as parquet ([Errno 13] ...); write it again, or remove it", preview the chmod (sweep 42
    A-W8). Root ignores file permissions: the command runs without the capabilities that let
    it (setpriv)."""
    import gzip
    import os
    import shutil

    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.parquet

    from .cli_support import REPO, unprivileged

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    data = project / "data"
    for split in ("train", "test"):  # (one format in the folder: the eval set is its test)
        rows = [json.loads(line) for line in (data / f"{split}.jsonl").read_text().splitlines()]
        (data / f"{split}.jsonl").unlink()
        written = data / f"{split}.{form}"
        if form == "parquet":
            pyarrow.parquet.write_table(pa.Table.from_pylist(rows), written)
        elif form == "csv":
            pyarrow.csv.write_csv(pa.Table.from_pylist(rows), written)
        else:
            written.write_bytes(gzip.compress("".join(json.dumps(row) + "\n" for row in rows)
                                              .encode()))
    locked = data / f"train.{form}"
    locked.chmod(0)
    try:
        done = subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl", "check",
                               "experiment.py:Arith", "--backend", "trinity"], cwd=project,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        locked.chmod(0o644)
    assert done.returncode == 2 and done.stderr.splitlines()[-1].endswith(
        f"_dataset: {locked}: cannot read it (Permission denied); make it readable "
        f"(chmod u+r {locked})"), done.stderr


@pytest.mark.parametrize("command", [["preview"], ["check", "--backend", "trinity"],
                                     ["eval", "--base-url", "http://127.0.0.1:9/v1",
                                      "--model", "m"]], ids=["preview", "check", "eval"])
@pytest.mark.parametrize("given", ["folder", "file"])
def test_a_named_pipe_as_a_data_file_is_refused_not_waited_on(tmp_path, command, given):
    """A FIFO named train.jsonl: check, preview and eval waited for a writer that never came,
    without a word, until Ctrl-C (sweep 42 A-W5)."""
    import os
    import shutil

    from .cli_support import REPO

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    pipe = project / "data" / "train.jsonl"
    pipe.unlink()
    os.mkfifo(pipe)
    settings = ["--set", f"train_dataset.path={pipe}", "--set", f"eval_dataset.path={pipe}",
                "--set", "eval_dataset.split=train"] if given == "file" else []
    done = subprocess.run([sys.executable, "-m", "tunedsl", command[0], "experiment.py:Arith",
                           *command[1:], *settings], cwd=project, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and done.stderr.splitlines()[-1].endswith(
        f"_dataset: {pipe} is a named pipe (FIFO), not a data file: reading it would wait for "
        f"a writer; give a file that holds the tasks"), done.stderr


def test_tunedsl_ignores_the_files_the_datasets_library_ignores():
    """`library_file`'s names are the library's own list of files that are no data."""
    from datasets.data_files import FILES_TO_IGNORE

    from tunedsl.data.json_files import LIBRARY_FILES

    assert LIBRARY_FILES == set(FILES_TO_IGNORE)


@pytest.mark.parametrize("saved", ["DatasetDict", "Dataset", "DatasetDict without train's arrow",
                                   "DatasetDict without any arrow"])
def test_a_folder_save_to_disk_wrote_is_read_as_the_library_reads_it(tmp_path, saved):
    """A DatasetDict's folder: check and eval read its state.json and dataset_info.json as
    rows ("its rows have: _data_files, _fingerprint, ..."), and one Dataset's was said to
    hold "2 formats" (sweep 42 A-W6). The DatasetDict is read as the library (Trinity's
    reader) reads it; one Dataset's, which the library refuses, is said so, with the fix.
    A copy without its .arrow files passed check, its state.json read as the one task
    (sweep 44 A), or was said in the library's words."""
    import os
    import shutil

    import datasets

    from .cli_support import REPO

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    data = project / "data"
    splits = {split: datasets.Dataset.from_json(str(data / f"{split}.jsonl"))
              for split in ("train", "test")}
    shutil.rmtree(data)
    if saved.startswith("DatasetDict"):
        datasets.DatasetDict(splits).save_to_disk(str(data))
    else:
        splits["train"].save_to_disk(str(data))
    if saved.endswith("arrow"):
        for split in ("train",) if "train" in saved else ("train", "test"):
            for arrow in (data / split).glob("*.arrow"):
                arrow.unlink()
    done = subprocess.run([sys.executable, "-m", "tunedsl", "check", "experiment.py:Arith",
                           "--backend", "trinity"], cwd=project, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    if saved.endswith("arrow"):
        assert (done.returncode, done.stderr.splitlines()[0]) == (2, (
            f"Error: train_dataset: {data} is a folder save_to_disk wrote, and {data}/"
            f"{'train' if 'train' in saved else 'test'} holds none of its .arrow files, which "
            f"keep the rows (a copy that left them out); copy the folder whole")), done.stderr
        return
    if saved == "DatasetDict":
        assert done.returncode == 0, done.stderr
        assert f"ok  train_dataset: {data} (split 'train'): 45 rows readable, keys answer, " \
               f"question" in done.stdout.splitlines(), done.stdout
        return
    assert (done.returncode, done.stderr.splitlines()[0]) == (2, (
        f"Error: train_dataset: {data} is one Dataset that save_to_disk wrote, which the datasets "
        "library's load_dataset (Trinity's reader too) does not read; write its rows to a "
        "data file (load_from_disk(path).to_json('tasks/train.jsonl')) and give that, or save "
        "a DatasetDict of its splits")), done.stderr


@pytest.mark.parametrize("layout", ["dangling link", "link to itself", "folder"])
def test_check_says_why_the_library_sees_no_split_as_preview_does(tmp_path, layout):
    """train.jsonl a dangling link, a link to itself, or a folder: check said "has no split
    'train' (it has: test)" where preview named the cause (sweep 42 A-W4)."""
    import os
    import shutil

    from .cli_support import REPO

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    train = project / "data" / "train.jsonl"
    train.unlink()
    if layout == "folder":
        train.mkdir()
        said = f"{train} is a folder, not a data file; put the tasks in a file of that name"
    else:
        target = "/nonexistent/x.jsonl" if layout == "dangling link" else "train.jsonl"
        train.symlink_to(target)
        gone = "does not exist" if layout == "dangling link" else "loops back to itself"
        said = (f"{train} is a symbolic link to {target}, which {gone}; point the link at the "
                f"data, or remove it")
    for command in (["check", "--backend", "trinity"], ["preview"]):
        done = subprocess.run([sys.executable, "-m", "tunedsl", command[0],
                               "experiment.py:Arith", *command[1:]], cwd=project,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert (done.returncode, done.stderr.splitlines()[0]) == (
            2, f"Error: train_dataset: {said}"), (command, done.stderr)


@pytest.mark.skipif(os.getuid() != 0, reason="gives a file to another user (needs root)")
def test_a_data_file_of_another_user_says_who_can_let_it_be_read(tmp_path):
    """``chmod u+r`` of another user's file changes only its owner's permission (sweep 42
    A-W7): the line names the owner and the chmod that lets others read it."""
    import pwd
    import shutil

    from .cli_support import REPO, unprivileged

    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    train = project / "data" / "train.jsonl"
    nobody = pwd.getpwnam("nobody")
    os.chown(train, nobody.pw_uid, nobody.pw_gid)
    train.chmod(0o600)
    done = subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl", "preview",
                           "experiment.py:Arith"], cwd=project, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (done.returncode, done.stderr.splitlines()[-1]) == (2, (
        f"Error: train_dataset: {train}: cannot read it (Permission denied); make it "
        f"readable: it belongs to nobody, who (or root) can let you (chmod o+r {train})"))


@pytest.mark.parametrize("split", ["train", "test"])
def test_one_saved_dataset_is_refused_whatever_split_is_asked(tmp_path, split):
    """As eval_dataset (split test) it was "has no split 'test' (it has: train); give one
    of those", and giving train met the refusal train_dataset got at once (sweep 44 A-W8)."""
    import datasets

    from tunedsl import Dataset
    from tunedsl.data.datasets import stream
    from tunedsl.errors import DatasetError

    datasets.Dataset.from_list([{"question": "1+1=", "answer": "2"}]).save_to_disk(
        str(tmp_path / "one"))
    with pytest.raises(DatasetError) as refused:
        stream(Dataset(str(tmp_path / "one"), split=split), label="eval_dataset")
    assert str(refused.value) == (
        f"eval_dataset: {tmp_path / 'one'} is one Dataset that save_to_disk wrote, which the "
        f"datasets library's load_dataset (Trinity's reader too) does not read; write its rows "
        f"to a data file (load_from_disk(path).to_json('tasks/train.jsonl')) and give that, or "
        f"save a DatasetDict of its splits")


def test_a_split_folder_of_a_saved_dataset_dict_names_the_whole(tmp_path):
    """``eval_dataset.path=dd/test`` was "has no split 'test' (it has: train)"."""
    import datasets

    from tunedsl import Dataset
    from tunedsl.data.datasets import stream
    from tunedsl.errors import DatasetError

    datasets.DatasetDict({"test": datasets.Dataset.from_list([{"q": "1"}])}).save_to_disk(
        str(tmp_path / "dd"))
    with pytest.raises(DatasetError) as refused:
        stream(Dataset(str(tmp_path / "dd" / "test"), split="test"), label="eval_dataset")
    assert str(refused.value) == (
        f"eval_dataset: {tmp_path / 'dd' / 'test'} is one split's folder of a DatasetDict that "
        f"save_to_disk wrote; give the DatasetDict's folder, {tmp_path / 'dd'}, and the split "
        f"by its name ('test')")


def test_a_saved_dataset_dict_missing_one_of_its_shards_is_refused(tmp_path):
    """The library read the shards there were: half the tasks dropped without a word, and
    check said "ok" (sweep 45 A-S4)."""
    import datasets

    from tunedsl import Dataset
    from tunedsl.data.datasets import stream
    from tunedsl.errors import DatasetError

    rows = [{"q": str(i)} for i in range(8)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(
        str(tmp_path / "dd"), num_shards={"train": 2})
    (tmp_path / "dd" / "train" / "data-00001-of-00002.arrow").unlink()
    with pytest.raises(DatasetError) as refused:
        stream(Dataset(str(tmp_path / "dd"), split="train"), label="train_dataset")
    assert str(refused.value) == (
        f"train_dataset: {tmp_path / 'dd'} is a folder save_to_disk wrote, and "
        f"{tmp_path / 'dd' / 'train'} lacks data-00001-of-00002.arrow, one of the .arrow files "
        f"its state.json names, which keep the rows (a copy cut short); copy the folder whole")


@pytest.mark.parametrize("older_shards, said", [
    (3, "holds data-00000-of-00003.arrow and 2 more, which its state.json does not name (left "
        "by an earlier save_to_disk: it does not remove old shards), yet would be read with "
        "the rest; remove them, or save into an empty folder"),
    (1, "holds data-00000-of-00001.arrow, which its state.json does not name (left by an "
        "earlier save_to_disk: it does not remove old shards), yet would be read with the "
        "rest; remove it, or save into an empty folder")])
def test_a_saved_dataset_dict_over_an_older_save_is_refused(tmp_path, older_shards, said):
    """save_to_disk into the folder of an earlier save leaves the older shards: the library
    read them with the new ones, 30 stale rows of 38, and check said "ok" (sweep 46
    A-S4)."""
    import datasets

    from tunedsl import Dataset
    from tunedsl.data.datasets import stream
    from tunedsl.errors import DatasetError

    old = datasets.Dataset.from_list([{"q": f"old{i}"} for i in range(30)])
    datasets.DatasetDict({"train": old}).save_to_disk(str(tmp_path / "dd"),
                                                     num_shards={"train": older_shards})
    new = datasets.Dataset.from_list([{"q": str(i)} for i in range(8)])
    datasets.DatasetDict({"train": new}).save_to_disk(str(tmp_path / "dd"),
                                                     num_shards={"train": 2})
    assert len(datasets.load_from_disk(str(tmp_path / "dd"))["train"]) == 8
    with pytest.raises(DatasetError) as refused:
        stream(Dataset(str(tmp_path / "dd"), split="train"), label="train_dataset")
    assert str(refused.value) == (
        f"train_dataset: {tmp_path / 'dd'} is a folder save_to_disk wrote, and "
        f"{tmp_path / 'dd' / 'train'} " + said)


def test_a_saved_dataset_dict_with_an_empty_shard_names_it(tmp_path):
    """A shard cut to 0 bytes: pyarrow's "File is too small: 0", naming no file (sweep 46
    A-W3)."""
    import datasets

    from tunedsl import Dataset
    from tunedsl.data.datasets import stream
    from tunedsl.errors import DatasetError

    rows = [{"q": str(i)} for i in range(8)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(
        str(tmp_path / "dd"), num_shards={"train": 2})
    shard = tmp_path / "dd" / "train" / "data-00001-of-00002.arrow"
    shard.write_bytes(b"")
    with pytest.raises(DatasetError) as refused:
        stream(Dataset(str(tmp_path / "dd"), split="train"), label="train_dataset")
    assert str(refused.value) == (
        f"train_dataset: {shard} is empty (0 bytes), one of the .arrow files that keep the rows "
        f"(a copy or a save cut short); copy the folder whole, or save it again")


def test_a_changed_folder_names_the_files_that_changed(tmp_path):
    """A resume refused over a folder of several datasets said "one of its files": which
    one (of train.jsonl, test.jsonl, a stray copy) was left to guess (sweep 47, on B-W1)."""
    from tunedsl.data.digest import _digests, changed_datasets

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"q": "1"}\n')
    (folder / "test.jsonl").write_text('{"q": "2"}\n')
    (folder / "gone.jsonl").write_text('{"q": "3"}\n')

    def recorded() -> dict:
        whole, files = _digests(folder)
        return {"train_dataset": whole, "eval_dataset": whole,
                "files": {"train_dataset": files, "eval_dataset": files}}

    before = recorded()
    (folder / "test.jsonl").write_text('{"q": "20"}\n')
    (folder / "gone.jsonl").unlink()
    (folder / "new.jsonl").write_text('{"q": "4"}\n')
    after = recorded()
    paths = {"train_dataset": "data", "eval_dataset": "data"}
    assert changed_datasets(before, after, paths) == [
        f"data (the data of train_dataset and eval_dataset: gone.jsonl removed, new.jsonl "
        f"added, test.jsonl changed; its digest {before['train_dataset']} -> "
        f"{after['train_dataset']})"]
    assert changed_datasets({**before, "eval_dataset": after["eval_dataset"]}, after, paths) \
        == [f"train_dataset's data (gone.jsonl removed, new.jsonl added, test.jsonl changed; "
            f"its digest {before['train_dataset']} -> {after['train_dataset']})"]
    older = {key: value for key, value in before.items() if key != "files"}
    assert changed_datasets(older, after, paths)[0].startswith(
        "data (the data of train_dataset and eval_dataset: one of its files; its digest ")


def test_a_changed_folder_of_two_datasets_is_said_as_that_folder():
    """A digest is of a whole folder: the eval split alone changed in a folder that holds
    the training split too was said as "train_dataset's data, eval_dataset's data changed"
    (sweep 46 B-W1); datasets of folders of their own are named each."""
    from tunedsl.data.digest import changed_datasets

    before, after = {"train_dataset": "a1", "eval_dataset": "a1"}, \
        {"train_dataset": "b2", "eval_dataset": "b2"}
    assert changed_datasets(before, after, {"train_dataset": "data", "eval_dataset": "data"}) \
        == ["data (the data of train_dataset and eval_dataset: one of its files; its digest "
            "a1 -> b2)"]
    assert changed_datasets(before, after, {"train_dataset": "tr", "eval_dataset": "ev"}) == [
        "train_dataset's data (its digest a1 -> b2)", "eval_dataset's data (its digest a1 -> b2)"]
    assert changed_datasets(before, {**after, "eval_dataset": "a1"}, {}) == [
        "train_dataset's data (its digest a1 -> b2)"]


def _split_folder(folder: Path, **files: list[dict]) -> Path:
    """A folder of JSON Lines files (``train-old__jsonl``: ``train-old.jsonl``), a ``.json``
    file's rows as one array."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, held in files.items():
        name = name.replace("__", ".")
        (folder / name).write_text(json.dumps(held) if name.endswith(".json") else
                                   "".join(json.dumps(row) + "\n" for row in held))
    return folder


_ROWS = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(8)]


@pytest.mark.parametrize("other, said", [
    ({"train__json": _ROWS[::-1]},
     "train.json and train.jsonl hold the same rows (a copy, or the data in two formats), "
     "and the datasets library reads both as {data}'s split 'train', so every task would be "
     "read twice; move one out of the folder"),
    ({"train-old__jsonl": [dict(reversed(row.items())) for row in _ROWS[2:][::-1]]
      + [{"question": "9+1=", "answer": "10"}]},
     "train-old.jsonl and train.jsonl share 6 rows (6 of the 7 in train-old.jsonl), and the "
     "datasets library reads both as {data}'s split 'train', so each of those tasks would be "
     "read twice; remove the older copy, or move it out of the folder"),
    ({"train-00000-of-00001__jsonl": _ROWS[:5]},
     "train-00000-of-00001.jsonl and train.jsonl share 5 rows (5 of the 5 in "
     "train-00000-of-00001.jsonl), and the datasets library reads both as {data}'s split "
     "'train', so each of those tasks would be read twice; remove the older copy, or move it "
     "out of the folder"),
])
def test_a_split_file_sharing_rows_with_another_is_refused(tmp_path, other, said):
    """The same rows in another order (``train.json``, ``train.jsonl``'s reversed), or an
    older copy sharing most of them, its keys in another order (``train-old.jsonl``): the
    datasets library read both, 16 and 15 rows, every shared task twice, check saying ok
    (sweep 48 A-S2). ``preview`` refuses it as check and run do."""
    from tunedsl.data.as_read import refuse_a_split_read_twice
    from tunedsl.errors import DatasetError

    data = _split_folder(tmp_path / "data", train__jsonl=_ROWS, **other)
    assert len(list(stream(Dataset(str(data), split="train")))) > len(_ROWS)  # (the bug)
    for refuse in (lambda: refuse_a_split_read_twice(Dataset(str(data), split="train"), None,
                                                     "train_dataset"),
                   lambda: Dataset(str(data), split="train").preview(2)):
        with pytest.raises(DatasetError) as refused:
            refuse()
        label = "dataset" if "preview" in refuse.__code__.co_names else "train_dataset"
        assert str(refused.value) == f"{label}: " + said.format(data=data)


@pytest.mark.parametrize("files", [
    {"train__jsonl": _ROWS + _ROWS[:3]},  # duplicate rows within one file: the dataset's
    {"train-00000-of-00002__jsonl": _ROWS, "train-00001-of-00002__jsonl": _ROWS},  # one set
    {"train-a__jsonl": _ROWS, "train-b__jsonl": _ROWS[:3] + [{"q": i} for i in range(5)]},
])
def test_files_of_a_split_that_share_few_rows_or_are_shards_of_one_set_are_read(tmp_path,
                                                                                 files):
    """A row a dataset holds twice is kept: in one file, in shards of one set (written from
    one dataset: its duplicate rows), or in files of other tasks that share few (3 of 8)."""
    from tunedsl.data.as_read import refuse_a_split_read_twice

    data = _split_folder(tmp_path / "data", **files)
    assert refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "t") == \
        [str(data / name.replace("__", ".")) for name in sorted(files)]


def _write_rows(path: Path, rows: list[dict]) -> None:
    """``rows`` as ``path``'s format holds them: CSV, Parquet, JSON Lines gzip-compressed."""
    import csv
    import gzip
    import io

    if path.name.endswith(".csv"):
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        path.write_text(text.getvalue())
    elif path.name.endswith(".parquet"):
        import pyarrow
        import pyarrow.parquet

        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    else:
        path.write_bytes(gzip.compress("".join(json.dumps(row) + "\n"
                                               for row in rows).encode()))


@pytest.mark.parametrize("ending", [".csv", ".parquet", ".jsonl.gz"])
def test_a_split_file_sharing_rows_is_refused_in_every_format(tmp_path, ending):
    """``train-old.csv`` beside ``train.csv`` (parquet, gzip-compressed JSON Lines alike),
    the same rows reversed or a copy: read twice, check saying ok (sweep 49 A-S1); the
    comparison read JSON files alone."""
    from tunedsl.data.as_read import refuse_a_split_read_twice
    from tunedsl.errors import DatasetError

    data = tmp_path / "data"
    data.mkdir()
    _write_rows(data / f"train{ending}", _ROWS)
    _write_rows(data / f"train-old{ending}", _ROWS[::-1][:6] + [_ROWS[0]])
    with pytest.raises(DatasetError) as refused:
        refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "train_dataset")
    assert str(refused.value) == (
        f"train_dataset: train-old{ending} and train{ending} share 7 rows (7 of the 7 in "
        f"train-old{ending}), and the datasets library reads both as {data}'s split 'train', "
        f"so each of those tasks would be read twice; remove the older copy, or move it out "
        f"of the folder")


def _write_library_rows(path: Path, rows: list[dict]) -> None:
    """``rows`` as an Arrow IPC stream (``.arrow``), an Arrow IPC file (``.file.arrow``), or
    their ``"text"`` a line (``.txt``, gzip-compressed for ``.txt.gz``)."""
    import gzip

    import pyarrow
    import pyarrow.ipc

    if path.name.endswith(".arrow"):
        table = pyarrow.Table.from_pylist(rows)
        new = pyarrow.ipc.new_file if ".file." in path.name else pyarrow.ipc.new_stream
        with new(str(path), table.schema) as writer:
            writer.write_table(table)
        return
    text = "".join(row["text"] + "\n" for row in rows).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)


_TEXT_ROWS = [{"text": f"{i}+1="} for i in range(8)]


@pytest.mark.parametrize("ending", [".arrow", ".file.arrow", ".txt", ".txt.gz"])
def test_a_split_s_arrow_or_text_files_sharing_rows_are_refused(tmp_path, ending):
    """``train-old.arrow`` beside ``train.arrow`` (``.txt`` alike), a copy: the datasets
    library read both, every task twice, check saying "6 rows readable" (sweep 50 A-S1):
    only the formats tunedsl reads by file and line were compared. An older copy sharing
    most rows is said as a share, as in every other format."""
    from tunedsl.data.as_read import refuse_a_split_read_twice
    from tunedsl.errors import DatasetError

    data = tmp_path / "data"
    data.mkdir()
    _write_library_rows(data / f"train{ending}", _TEXT_ROWS)
    _write_library_rows(data / f"train-old{ending}", _TEXT_ROWS[::-1])
    assert _library_rows(data, "train") == 2 * len(_TEXT_ROWS)  # (the bug: read twice)
    with pytest.raises(DatasetError) as refused:
        Dataset(str(data), split="train").preview(2)
    assert str(refused.value) == (
        f"dataset: train-old{ending} and train{ending} hold the same rows (a copy, or the data "
        f"in two formats), and the datasets library reads both as {data}'s split 'train', so "
        f"every task would be read twice; move one out of the folder")
    _write_library_rows(data / f"train-old{ending}", [*_TEXT_ROWS[2:], {"text": "new"}])
    with pytest.raises(DatasetError) as refused:
        refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "train_dataset")
    assert str(refused.value) == (
        f"train_dataset: train-old{ending} and train{ending} share 6 rows (6 of the 7 in "
        f"train-old{ending}), and the datasets library reads both as {data}'s split 'train', "
        f"so each of those tasks would be read twice; remove the older copy, or move it out "
        f"of the folder")


@settings(max_examples=25, deadline=None)
@given(lines=st.lists(st.text(st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d"
                                                                  "\x1e\x85\u2028\u2029",
                                            blacklist_categories=("Cs",)), max_size=6),
                      min_size=2, max_size=8, unique=True),
       other=st.lists(st.text(alphabet="xyz", min_size=7, max_size=9), min_size=1,
                      max_size=8, unique=True))
def test_text_files_of_a_split_are_compared_by_the_lines_the_library_reads(lines, other):
    """Generated lines: ``train-old.txt`` holding ``train.txt``'s lines in another order is
    refused as the same rows; a file of other lines is read with it, as the library reads
    both (a row a line, its line end dropped)."""
    import tempfile

    from tunedsl.data.as_read import refuse_a_split_read_twice
    from tunedsl.errors import DatasetError

    rows = [{"text": line} for line in lines]
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder)
        _write_library_rows(data / "train.txt", rows)
        _write_library_rows(data / "train-old.txt", rows[::-1])
        with pytest.raises(DatasetError, match=r"^t: train-old.txt and train.txt hold the "):
            refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "t")
        _write_library_rows(data / "train-old.txt", [{"text": line} for line in other])
        assert refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "t") == [
            str(data / "train-old.txt"), str(data / "train.txt")]


@pytest.mark.parametrize("other", ["train2", "train01", "train 2", "my_train", "train (1)"])
def test_a_split_s_other_file_the_library_reads_by_its_patterns_is_read_by_check(tmp_path,
                                                                                 other):
    """``train2.jsonl`` beside ``train.jsonl``, other rows: the datasets library reads both
    as split 'train', and check, reading only train.jsonl, refused the valid split (sweep
    49 A-W16). Its files are found by the library's own patterns."""
    from tunedsl.data.as_read import refuse_a_split_read_twice

    data = _split_folder(tmp_path / "data", train__jsonl=_ROWS[:4],
                         **{f"{other}__jsonl": _ROWS[4:]})
    assert len(list(stream(Dataset(str(data), split="train")))) == 8
    assert refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "t") == sorted(
        [str(data / "train.jsonl"), str(data / f"{other}.jsonl")])


def test_tunedsl_knows_the_datasets_library_s_words_for_each_split():
    """`split_files` finds a split's files by the library's own words for it."""
    from datasets.data_files import SPLIT_KEYWORDS as LIBRARY

    from tunedsl.data.json_files import SPLIT_KEYWORDS

    assert SPLIT_KEYWORDS == {str(split): tuple(words) for split, words in LIBRARY.items()}


@pytest.mark.parametrize("split, mine, other", [
    ("train", "train", "training"), ("train", "train", "my-training"),
    ("test", "test", "testing"), ("test", "test", "eval"),
    ("validation", "validation", "val"), ("validation", "validation", "dev_2"),
    ("validation", "valid", "val"),
])
def test_a_split_s_file_named_by_another_of_the_library_s_words_for_it_is_read(
        tmp_path, split, mine, other):
    """``training.jsonl`` beside ``train.jsonl`` (``testing`` beside ``test``, ``val``
    beside ``validation``), other rows: the datasets library reads both as the split, and
    check refused it, "move training.jsonl out of the folder" (sweep 50 A-W1). Read, and
    a copy under the other word is refused as any copy is."""
    from tunedsl.data.as_read import refuse_a_split_read_twice, refuse_rows_read_otherwise
    from tunedsl.data.quality import scan
    from tunedsl.errors import DatasetError

    data = _split_folder(tmp_path / "data", **{f"{mine}__jsonl": _ROWS[:3],
                                               f"{other}__jsonl": _ROWS[3:6]})
    if split != "train":  # (a folder of no train split is read as train alone)
        _split_folder(data, train__jsonl=_ROWS[6:])
    dataset = Dataset(str(data), split=split)
    assert _library_rows(data, split) == 6
    refuse_rows_read_otherwise(dataset, None, "eval_dataset")
    assert scan(dataset, ["question"]).rows == 6
    assert refuse_a_split_read_twice(dataset, None, "eval_dataset") == sorted(
        [str(data / f"{mine}.jsonl"), str(data / f"{other}.jsonl")])
    _split_folder(data, **{f"{other}__jsonl": _ROWS[:3][::-1]})
    first, second = sorted([f"{mine}.jsonl", f"{other}.jsonl"])
    with pytest.raises(DatasetError) as refused:
        dataset.preview(2)
    assert str(refused.value) == (
        f"dataset: {first} and {second} hold the same rows (a copy, or the data in two "
        f"formats), and the datasets library reads both as {data}'s split {split!r}, so every "
        f"task would be read twice; move one out of the folder")


def test_a_file_of_one_task_many_times_beside_another_holding_it_is_read(tmp_path):
    """One task written 50 times on purpose, in a file of its own beside others holding it
    once, was refused as "share 1 row (1 of the 1 in ...)" (sweep 49 A-W1)."""
    from tunedsl.data.as_read import refuse_a_split_read_twice

    data = _split_folder(tmp_path / "data", train_maze__jsonl=[_ROWS[0]] * 50,
                         train_mix__jsonl=_ROWS)
    assert len(refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "t")) == 2


_TASK = st.fixed_dictionaries({"q": st.integers(0, 30)}, optional={"a": st.text(max_size=3)})


@settings(max_examples=60, deadline=None)
@given(first=st.lists(_TASK, min_size=1, max_size=12), second=st.lists(_TASK, max_size=12),
       data=st.data())
def test_two_files_are_refused_when_half_the_rows_of_one_are_in_the_other(first, second,
                                                                          data):
    """Generated rows: two files of a split are refused exactly when at least half the
    different rows of one are in the other, two of them at least unless the files are the
    same rows (sweep 49 A-W1), whatever the order of rows and keys (a row's keys reversed is
    the same row), named with how many they share."""
    import tempfile

    from tunedsl.data.as_read import refuse_a_split_read_twice
    from tunedsl.errors import DatasetError

    second = data.draw(st.permutations(second + data.draw(st.lists(st.sampled_from(first)))))
    second = [dict(reversed(row.items())) for row in second]
    key = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731
    mine, theirs = {key(row) for row in first}, {key(row) for row in second}
    shared, fewer = len(mine & theirs), min(len(mine), len(theirs))
    same = mine == theirs and len(first) == len(second)
    with tempfile.TemporaryDirectory() as folder:
        made = _split_folder(Path(folder), train__jsonl=first, train_v2__jsonl=second)
        try:
            refuse_a_split_read_twice(Dataset(str(made), split="train"), None, "t")
        except DatasetError as refused:
            assert shared and 2 * shared >= fewer and (shared >= 2 or same)
            said = str(refused)
            assert said.startswith("t: train.jsonl and train_v2.jsonl ")
            if same:
                assert " hold the same rows " in said
            else:
                assert f" share {shared} row{'s' * (shared > 1)} ({shared} of the {fewer} in " \
                       in said
        else:
            assert not shared or 2 * shared < fewer or (shared < 2 and not same)


#: How each compression the datasets library reads a data file through is written here.
_PACKED = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}
#: A task of fixed keys (a key one file lacks is another refusal: the library cannot cast).
_FIXED_TASK = st.fixed_dictionaries({"q": st.integers(0, 30), "a": st.text(max_size=3)})


def _packed(path: Path, rows: list[dict]) -> None:
    """``rows`` as JSON Lines, compressed by ``path``'s last ending (`_PACKED`)."""
    import importlib

    text = "".join(json.dumps(row) + "\n" for row in rows).encode()
    path.write_bytes(importlib.import_module(_PACKED[path.suffix]).compress(text))


def _library_rows(data: Path, split: str) -> int:
    """How many rows the datasets library itself reads for ``split`` of ``data``."""
    import tempfile

    import datasets

    with tempfile.TemporaryDirectory() as cache:
        return len(datasets.load_dataset(str(data), split=split, cache_dir=cache))


@settings(max_examples=8, deadline=None)
@given(plain=st.lists(_FIXED_TASK, min_size=1, max_size=5),
       packed=st.lists(_FIXED_TASK, min_size=1, max_size=5),
       ending=st.sampled_from(sorted(_PACKED)))
def test_plain_and_compressed_files_of_one_format_are_read_as_one_split(plain, packed,
                                                                        ending):
    """``test.jsonl`` beside ``test-more.jsonl.gz`` (other rows): the datasets library reads
    both as split 'test' (by the format under the compression), and check refused the split
    as read from files it did not read, in its own words ("and check read test.jsonl";
    sweep 50 B-W8). Generated rows: check counts the library's rows, names the compressed
    file's by file:line, and compares both files as any two of a split."""
    import tempfile

    from tunedsl.data.as_read import refuse_a_split_read_twice, refuse_rows_read_otherwise
    from tunedsl.data.quality import located_rows, scan

    packed = [{**row, "q": row["q"] + 100} for row in packed]  # (no row of the other file)
    with tempfile.TemporaryDirectory() as folder:
        data = _split_folder(Path(folder) / "data", test__jsonl=plain)
        _packed(data / f"test-more.jsonl{ending}", packed)
        dataset = Dataset(str(data), split="test")
        assert _library_rows(data, "test") == len(plain) + len(packed)
        refuse_rows_read_otherwise(dataset, None, "eval_dataset")
        assert scan(dataset, ["q"]).rows == len(plain) + len(packed)
        assert next(located_rows(dataset))[0] == f"{data}/test-more.jsonl{ending}:1"
        assert refuse_a_split_read_twice(dataset, None, "eval_dataset") == [
            f"{data}/test-more.jsonl{ending}", f"{data}/test.jsonl"]


@pytest.mark.parametrize("ending", sorted(_PACKED))
def test_a_compressed_copy_of_a_split_s_file_is_told_it_holds_the_same_rows(tmp_path,
                                                                           ending):
    """A ``test.jsonl.gz`` of ``test.jsonl``'s rows (reversed) was refused as read from a
    file check did not read (sweep 50 B-W8); the library reads both, every task twice,
    which is what the line says."""
    from tunedsl.errors import DatasetError

    data = _split_folder(tmp_path / "data", test__jsonl=_ROWS)
    _packed(data / f"test.jsonl{ending}", _ROWS[::-1])
    assert _library_rows(data, "test") == 2 * len(_ROWS)
    with pytest.raises(DatasetError) as refused:
        Dataset(str(data), split="test").preview(2)
    assert str(refused.value) == (
        f"dataset: test.jsonl and test.jsonl{ending} hold the same rows (a copy, or the data "
        f"in two formats), and the datasets library reads both as {data}'s split 'test', so "
        f"every task would be read twice; move one out of the folder")


@pytest.mark.parametrize("other", ["test-more.csv", "test-more.csv.gz"])
def test_a_split_of_two_formats_is_refused_compressed_or_not(tmp_path, other):
    """``test-more.csv.gz`` beside ``test.jsonl``: the library reads the folder's most common
    format alone, and the CSV's rows were left out without a word (its format was taken
    from ``.gz``, no format); said as of ``test-more.csv``."""
    import gzip

    from tunedsl.errors import DatasetError

    data = _split_folder(tmp_path / "data", test__jsonl=_ROWS[:3])
    text = b"question,answer\n9+1=,10\n"
    (data / other).write_bytes(gzip.compress(text) if other.endswith(".gz") else text)
    assert _library_rows(data, "test") == 3  # (the CSV's row left out)
    with pytest.raises(DatasetError) as refused:
        Dataset(str(data), split="test").preview(2)
    assert str(refused.value) == (
        f"dataset: {data} holds data files of 2 formats ({other}, test.jsonl), and only one "
        f"format of a folder is read (the rest would be left out without a word); keep one "
        f"format in it")


@pytest.mark.parametrize("given", ["folder", "file"])
def test_a_file_compressed_with_lz4_without_its_package_is_named_with_the_fix(tmp_path,
                                                                              given):
    """``train.jsonl.lz4`` without the lz4 package: "cannot read ... Compression type lz4 not
    supported", no file, no fix (sweep 50 A-W2); given alone, "cannot tell the format".
    (The library refuses by the ending before reading a byte.)"""
    import importlib.util

    from tunedsl.errors import DatasetError

    if importlib.util.find_spec("lz4") is not None:
        pytest.skip("the lz4 package is installed here")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl.lz4").write_bytes(b"\x04\x22\x4d\x18")
    path = data if given == "folder" else data / "train.jsonl.lz4"
    with pytest.raises(DatasetError) as refused:
        list(rows(Dataset(str(path), split="train"), label="train_dataset"))
    file = data / "train.jsonl.lz4"
    assert str(refused.value) == (
        f"train_dataset: {file} is compressed with lz4, which the datasets library reads with "
        f"the lz4 package, not installed here; install it (pip install lz4), or decompress "
        f"the file (lz4 -d --rm {file})")


def test_big_files_are_compared_by_a_sample_of_their_rows(tmp_path, monkeypatch):
    """Past `_KEPT` different rows a file keeps a sample of its rows' digests (8 bytes
    each), chosen by digest, so alike in both files whatever their order: a big reversed
    copy is refused, said as a share, and big files of other rows are read."""
    from tunedsl.data import as_read
    from tunedsl.errors import DatasetError

    monkeypatch.setattr(as_read, "_KEPT", 64)
    rows = [{"q": i} for i in range(2000)]
    data = _split_folder(tmp_path / "data", train__jsonl=rows,
                         train_old__jsonl=rows[::-1][:1500] + [{"x": i} for i in range(500)])
    count, limit, kept = as_read._row_digests(str(data / "train.jsonl"), "t")
    assert count == 2000 and limit < 1 << 64 and len(kept) <= 64
    with pytest.raises(DatasetError) as refused:
        as_read.refuse_a_split_read_twice(Dataset(str(data), split="train"), None, "t")
    said = re.fullmatch(
        rf"t: train.jsonl and train_old.jsonl share about (\d+)% of the rows of train.jsonl "
        rf"\(by a sample of its rows\), and the datasets library reads both as "
        rf"{re.escape(str(data))}'s split 'train', so each of those tasks would be read "
        rf"twice; remove the older copy, or move it out of the folder", str(refused.value))
    assert said is not None and 50 <= int(said.group(1)) <= 90  # (1,500 of 2,000: 75%)
    other = _split_folder(tmp_path / "other", train__jsonl=rows,
                          train_b__jsonl=[{"x": i} for i in range(2000)])
    assert len(as_read.refuse_a_split_read_twice(Dataset(str(other), split="train"), None,
                                                 "t")) == 2


def test_a_pattern_inside_a_folder_whose_name_holds_a_bracket_names_that_folder(
        tmp_path, monkeypatch):
    """``br[1]/*.jsonl``, a folder named with ``[`` that is there: its ``[`` was taken for
    the pattern and the folder above it named (sweep 49 A-W2)."""
    from tunedsl.errors import DatasetError

    monkeypatch.chdir(tmp_path)
    _split_folder(tmp_path / "br[1]", train__jsonl=_ROWS[:2])
    with pytest.raises(DatasetError) as refused:
        stream(Dataset("br[1]/*.jsonl", split="train"), label="train_dataset")
    assert str(refused.value) == (
        "train_dataset: path br[1]/*.jsonl holds the pattern '*', and a dataset's path is read "
        "as a folder, a file or a hub id, not as a pattern; give the folder, br[1] (its file "
        "named after the split, train.jsonl, is read as split 'train'), or one file")


@pytest.mark.parametrize("path, char, ending", [
    ("data/*.jsonl", "*", ".jsonl"), ("data/train-?.csv", "?", ".csv"),
    ("./data/[t]rain.jsonl", "[", ".jsonl"), ("data/train*", "*", ".jsonl"),
    ("{tmp}/data/*.json", "*", ".json")])
def test_a_path_holding_a_pattern_is_refused_as_one(tmp_path, monkeypatch, path, char,
                                                    ending):
    """``Dataset("data/*.jsonl")`` was said to be a hub id that the hub (switched off, or
    not answering) would not give (sweep 48 A-W3): a pattern whose folder is here is said
    as one, with the folder to give; one whose folder is not is a hub id as before."""
    from tunedsl.errors import DatasetError

    monkeypatch.chdir(tmp_path)
    _split_folder(tmp_path / "data", train__jsonl=_ROWS[:2])
    path = path.format(tmp=tmp_path)
    with pytest.raises(DatasetError) as refused:
        stream(Dataset(path, split="train"), label="train_dataset")
    folder = path[:path.index(char)].rsplit("/", 1)[0]
    assert str(refused.value) == (
        f"train_dataset: path {path} holds the pattern {char!r}, and a dataset's path is read "
        f"as a folder, a file or a hub id, not as a pattern; give the folder, {folder} (its "
        f"file named after the split, train{ending}, is read as split 'train'), or one file")
    with pytest.raises(DatasetError) as refused:
        stream(Dataset("nowhere/*.jsonl", split="train"), label="train_dataset")
    assert str(refused.value) == (
        "train_dataset: nowhere/*.jsonl is not a local path, and the Hugging Face hub is "
        "switched off here (HF_HUB_OFFLINE); give a local folder or file")


@pytest.mark.parametrize("path, char", [("g[2]", "["), ("g?1?/train.jsonl", "?")])
def test_a_pattern_under_a_folder_of_no_data_is_told_the_rule_not_that_folder(
        tmp_path, monkeypatch, path, char):
    """``g[2]`` in a folder holding no data (a model's folder below it) was told "give the
    folder, . (its file named after the split, train.jsonl, ...)", and ``.`` was then
    refused too (sweep 50 A-W5): the rule is said, and that the folder holds no data."""
    from tunedsl.errors import DatasetError

    monkeypatch.chdir(tmp_path)
    _split_folder(tmp_path / "g[1]", train__jsonl=_ROWS[:2])
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(DatasetError) as refused:
        stream(Dataset(path, split="train"), label="train_dataset")
    assert str(refused.value) == (
        f"train_dataset: path {path} holds the pattern {char!r}, and a dataset's path is read "
        f"as a folder, a file or a hub id, not as a pattern, and . holds no data files; give "
        f"the folder that holds the data (a file named after the split, train.jsonl, is read "
        f"as split 'train'), or one file")


def _defined_in(folder: Path, path: str) -> Dataset:
    """``Dataset(path)`` as a module in ``folder`` defines it (its paths read beside it)."""
    found: dict = {}
    exec(compile(f"d = Dataset({path!r}, split='train')", str(folder / "exp.py"), "exec"),
         {"Dataset": Dataset}, found)
    return found["d"]


@settings(max_examples=25, deadline=None)
@given(name=st.text(alphabet="abcxyz_-", min_size=1, max_size=8),
       below=st.sampled_from(["", "sub/", "sub/deeper/"]), beside=st.booleans())
def test_a_missing_file_under_a_folder_that_is_here_is_said_not_to_exist(name, below,
                                                                         beside):
    """``data/trian.jsonl``, a typo beside a ``data`` folder, and ``data/sub/x.jsonl`` (two
    ``/``: no hub id) were read as hub ids, "download the dataset" (sweep 50 A-W3). A
    path whose first folder is here (beside the defining file, or in the working folder)
    is local: said not to exist, with what its deepest folder here holds."""
    import tempfile

    from tunedsl.errors import DatasetError

    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder) / "project"
        data = _split_folder(project / "data", train__jsonl=_ROWS[:2], test__jsonl=_ROWS[2:4])
        path = f"data/{below}{name}.jsonl"
        before = os.getcwd()
        os.chdir(project if not beside else folder)  # (beside: not in the working folder)
        try:
            with pytest.raises(DatasetError) as refused:
                stream(_defined_in(project, path), label="train_dataset")
        finally:
            os.chdir(before)
        assert data.is_dir()
        assert str(refused.value) == (
            f"train_dataset: path {path} does not exist (data holds test.jsonl, train.jsonl); "
            f"fix the path")


def test_a_missing_path_names_an_empty_folder_and_keeps_the_hub_for_one_name(tmp_path,
                                                                             monkeypatch):
    """The deepest folder here is named, an empty one as empty; a hub id of one ``/``
    whose first part is no folder here is still read from the hub."""
    from tunedsl.errors import DatasetError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "empty").mkdir(parents=True)
    for path, said in [
            ("data/empty/x/train.jsonl", "path data/empty/x/train.jsonl does not exist "
             "(data/empty is empty); fix the path"),
            ("./data/trian.jsonl", "path ./data/trian.jsonl does not exist (./data holds "
             "empty/); fix the path"),
            ("openai/gsm8k", "openai/gsm8k is not a local path, and the Hugging Face hub is "
             "switched off here (HF_HUB_OFFLINE); give a local folder or file")]:
        with pytest.raises(DatasetError) as refused:
            stream(Dataset(path, split="train"), label="train_dataset")
        assert str(refused.value) == f"train_dataset: {said}"


@pytest.mark.parametrize("split", ["test[:2]", "test[10%:]", " test [ :2 ] "])
def test_a_slice_of_a_split_is_told_it_is_not_read_from_a_stream(tmp_path, split):
    """datasets' slice of a split, which its streamed datasets refuse as "Bad split", was
    said as a split the folder lacks (sweep 49's known list); a slice of a split the folder
    lacks is still said so."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train", "test"):
        (data / f"{name}.jsonl").write_text('{"q": "1"}\n')
    assert read_refusal(data, split) == (
        f"train_dataset: {data}: split {split!r} is a slice, and tunedsl reads datasets as "
        f"streams, which the datasets library does not slice; give split 'test', and take its "
        f"first N tasks with -n N (eval, preview)")
    assert read_refusal(data, "tset[:2]") == (
        f"train_dataset: {data} has no split 'tset[:2]' (it has: train, test); give one of "
        f"those as the split")


def read_refusal(data, split):
    from tunedsl.errors import DatasetError

    with pytest.raises(DatasetError) as caught:
        list(rows(Dataset(str(data), split=split), label="train_dataset"))
    return str(caught.value)


@pytest.mark.parametrize("ending", sorted(_PACKED))
def test_a_compressed_json_file_holding_json_lines_is_read_as_a_plain_one(tmp_path, ending):
    """``train.json.gz`` holding JSON Lines, which the datasets library reads (and tunedsl a
    plain ``train.json`` holding them), was refused: "cannot be read as json compressed with
    gz (Extra data: line 2 column 1 (char 34)); write it again, or remove it" (sweep 51
    A-W7). Read as a plain one is, its lines are named as a plain one's are."""
    import importlib

    data = tmp_path / "data"
    data.mkdir()
    _packed(data / f"train.json{ending}", _ROWS[:3])
    assert _library_rows(data, "train") == 3
    done = cli("preview", "examples.arith.experiment:Arith", "--set",
               f"train_dataset.path={data}", "-n", "3")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == _ROWS[:3]
    (data / f"train.json{ending}").unlink()
    broken = [json.dumps(row) + "\n" for row in _ROWS[:2]] + ['{"question": "2+1=",\n']
    (data / f"train.json{ending}").write_bytes(
        importlib.import_module(_PACKED[ending]).compress("".join(broken).encode()))
    done = cli("preview", "examples.arith.experiment:Arith", "--set",
               f"train_dataset.path={data}", "-n", "3")
    assert (done.returncode, done.stderr) == (2, (
        f"Error: train_dataset: {data}/train.json{ending}:3: not a JSON line (Expecting "
        f"property name enclosed in double quotes); fix or delete that line\n"))


@pytest.mark.parametrize("answers, where, said", [
    ([1, "2"], 2, "reads 'answer' as 2, and the file holds '2'; line 1 of the same file "
                  "holds 'answer' as an integer (1) and this line as text"),
    # the library types the column by the later row, and reads the first otherwise
    (["1", 2], 1, "reads 'answer' as 1, and the file holds '1'; line 2 of the same file "
                  "holds 'answer' as an integer (2) and this line as text"),
])
def test_a_column_whose_rows_in_one_file_mix_types_is_said_of_that_file(tmp_path, answers,
                                                                         where, said):
    """One file whose rows hold a column as a number, then as text, was said as files of a
    folder differing: "it reads every file of a folder with the columns and types of its
    first (train.jsonl): give every file the same keys" (sweep 51 A-W10)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(
        json.dumps({"question": f"q{at}", "answer": answer}) + "\n"
        for at, answer in enumerate(answers, start=1)))
    done = cli("preview", "examples.arith.experiment:Arith", "--set",
               f"train_dataset.path={data}")
    assert (done.returncode, done.stderr) == (2, (
        f"Error: train_dataset: {data}/train.jsonl:{where}: the datasets library (through "
        f"which eval, a local run and Trinity read the data) {said}, and the library reads a "
        f"column as one type: give 'answer' values of one type in every row\n"))
