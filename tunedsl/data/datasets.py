"""Reading task datasets with ``datasets`` (imported here, never by ``import tunedsl``).

A dataset is any record with ``path``, ``name``, ``split`` and ``defined_in`` (a
`tunedsl.Dataset`); this module does not import the record class, because
``Dataset.preview`` calls into it.

A local JSON Lines file whose rows all have the same shape is read with the standard
library instead (`plain_jsonl_rows`): the same rows ``datasets`` yields, without the
80 MB that importing it with pyarrow and pandas adds to a process.
"""

from __future__ import annotations

import atexit
import gc
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..access import looping_link_problem, where_a_broken_link_leads
from ..config.paths import local_path
from ..errors import DatasetError
from ..lfs import is_git_lfs_pointer, pointer_problem
from ..wording import shown_path
from .compressed import MODULES, OPTIONAL, kind, opened
from .csv_files import csv_problem
from .json_files import (
    ARROW_NESTING,
    DuplicateKey,
    NotJsonConstant,
    beyond_the_reader,
    constant_problem,
    duplicate_problem,
    json_files,
    json_problem,
    library_file,
    lone_surrogate,
    nesting,
    non_finite,
    refuse_constant,
    refuse_odd_blank,
    split_files,
    surrogate_problem,
    task_row,
    unique_keys,
)

#: ``datasets`` builder names by file extension, for a dataset given as one file.
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv",
             ".tsv": "csv", ".txt": "text", ".arrow": "arrow"}


#: Split files of a folder that ``datasets`` reads as that split and no other.
_SPLIT_FILES = ("train.jsonl", "validation.jsonl", "test.jsonl")
#: Endings of compressed files: the datasets library reads a data file through them, and
#: tunedsl writes none of its own files so.
COMPRESSED_ENDINGS = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")
#: Larger JSON Lines files stream through ``datasets`` (the standard library reads whole).
PLAIN_JSONL_BYTES = 16 * 2**20


def _looks_local(path: str, defined_in: str | None = None) -> bool:
    """Whether ``path`` is meant as a local one: it is there, absolute or ``./``-led, or its
    first folder is here (beside the file ``defined_in`` names, or in the working folder), or
    it has more than one ``/``, which no hub id has. A typo's ``data/trian.jsonl`` beside a
    ``data`` folder was read as a hub id, and told to download it (sweep 50 A-W3)."""
    if os.path.isabs(path) or path.startswith((".", "~")) or os.path.lexists(path):
        return True
    if "://" in path:  # a URL (file://data: said as one where the hub is asked)
        return False
    parts = path.split("/")
    return len(parts) > 2 or (len(parts) == 2 and _here(parts[0], defined_in) is not None)


def _here(given: str, defined_in: str | None) -> str | None:
    """``given``, a relative path, where it is: beside the file that named it, or in the
    working folder; None when in neither."""
    return next((found for found in (os.path.join(defined_in or "", given), given)
                 if os.path.lexists(found)), None)


def _missing_path(dataset: Any, label: str) -> DatasetError:
    """The line for a local path that is not there, naming what its deepest folder that is
    here holds (``data holds test.jsonl, train.jsonl``): a typo is seen in it."""
    written = str(dataset.path)
    parts = written.split("/")
    for depth in range(len(parts) - 1, 0, -1) if not os.path.isabs(written) else ():
        shown = "/".join(parts[:depth])
        found = _here(os.path.expanduser(shown), dataset.defined_in) \
            if shown.strip(".") else None
        if found is None or not os.path.isdir(found):
            continue
        if not os.access(found, os.R_OK | os.X_OK):  # (said without its names)
            break
        names = sorted(_names_in(found))
        held = (f"holds {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}"
                if names else "is empty")
        return DatasetError(f"{label}: path {written} does not exist ({shown} {held}); fix "
                            f"the path")
    return DatasetError(f"{label}: path {written} does not exist; fix the path, or give a "
                        f"Hugging Face hub id such as 'openai/gsm8k'")


def _is_blank(path: str) -> bool:
    """Whether a file holds nothing but white space (an empty CSV has no header for
    ``datasets`` to read columns from)."""
    if os.path.getsize(path) > 4096:
        return False
    with open(path, "rb") as handle:
        return not handle.read().strip()


def _has_data_files(folder: str, depth: int = 3) -> bool:
    """Whether a folder (or one below it, ``depth`` levels down) holds a file of a format
    ``datasets`` reads."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return True  # let datasets say what is wrong
    for entry in entries:  # datasets matches extensions case by case: .JSONL is not read
        name = entry.name
        for packed in COMPRESSED_ENDINGS:  # train.jsonl.gz is read as train.jsonl
            name = name.removesuffix(packed)
        if entry.is_file() and os.path.splitext(name)[1] in _BUILDERS:
            return True
        if depth and entry.is_dir() and not entry.name.startswith(".") and \
                _has_data_files(entry.path, depth - 1):
            return True
    return False


def _broken_link(folder: str) -> str | None:
    """A data file of ``folder`` that is a symbolic link to nothing (``datasets`` sees no
    file there), or None."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return None
    return next((entry.path for entry in entries if entry.is_symlink()
                 and not os.path.exists(entry.path)
                 and os.path.splitext(entry.name)[1].lower() in _BUILDERS), None)


def _names_in(path: str) -> list[str]:
    """The names in the folder ``path``, a folder's ending in ``/`` (none for a file, or a
    folder that cannot be read)."""
    try:
        return [entry.name + ("/" if entry.is_dir() else "") for entry in os.scandir(path)] \
        if os.path.isdir(path) else []
    except OSError:
        return []


def no_such_split(dataset: Any, split: str, splits: list[str], label: str) -> DatasetError:
    """The error for a ``split`` that ``dataset`` lacks, naming the ``splits`` it has (and,
    for a file named as the split, the split the library reads it as: ``dev.jsonl`` is its
    ``validation``)."""
    from datasets.data_files import SPLIT_KEYWORDS  # the library's names for each split

    path = local_path(dataset)
    layout = _layout_problem(path, split, label)
    if layout is not None:  # (why the library sees no such split)
        return layout
    named = sorted(name for name in _names_in(path)  # dev.jsonl, dev/, dev-00000-of-00001
                   if name.startswith(tuple(split + mark for mark in "/.-_")))
    read_as = next((str(name) for name, words in SPLIT_KEYWORDS.items()
                    if split.lower() in words), "")
    if named and not read_as:  # (my_test_set.jsonl: read as split 'test', by its word
        # between marks, as the library's patterns find it: sweep 49 A-W15)
        read_as = next((str(name) for name, words in SPLIT_KEYWORDS.items()
                        if any(re.search(rf"(^|[-._ 0-9]){re.escape(word)}([-._ 0-9]|$)",
                                         named[0]) for word in words)), "")
    if named and read_as in splits:
        return DatasetError(f"{label}: {dataset.path} has no split {split!r}: the datasets "
                            f"library reads {named[0]} as its split "
                            f"{read_as!r}; give split={read_as!r}")
    if named and not read_as:  # development.jsonl: a name the library reads as no split
        ending = named[0][len(split):]
        return DatasetError(f"{label}: {dataset.path} has no split {split!r}: the datasets "
                            f"library reads no split from {named[0]} (it knows a split by "
                            f"the words of its file name: {_split_words(SPLIT_KEYWORDS)}); "
                            f"rename it, e.g. validation{ending}, and give that split "
                            f"(split='validation')")
    sliced = re.fullmatch(r"\s*(\w[\w.-]*)\s*\[[^\]]*\]\s*", split)
    if sliced and sliced[1] in splits:  # (datasets' slice of a split: not of a stream)
        return DatasetError(f"{label}: {dataset.path}: split {split!r} is a slice, and "
                            f"tunedsl reads datasets as streams, which the datasets library "
                            f"does not slice; give split {sliced[1]!r}, and take its first N "
                            f"tasks with -n N (eval, preview)")
    return DatasetError(f"{label}: {dataset.path} has no split {split!r} (it has: "
                        f"{', '.join(splits)}); give one of those as the split")


def _split_words(keywords: Any) -> str:
    """The words the datasets library knows splits by, in its order: ``train, training, ...``."""
    return ", ".join(word for words in keywords.values() for word in words)


def _layout_problem(path: str, split: str, label: str) -> DatasetError | None:
    """What in a data folder makes the datasets library see no such split, or fail on it,
    where it says only that: a symbolic link to nothing (or to itself), a folder named as
    the split's data file."""
    broken = _broken_link(path) if os.path.isdir(path) else None
    if broken is not None:
        return DatasetError(f"{label}: {broken} is a symbolic link to "
                            f"{os.readlink(broken)}, {where_a_broken_link_leads(broken)}; "
                            f"point the link at the data, or remove it")
    named = os.path.join(path, split)
    folder = next((named + ext for ext in _BUILDERS if os.path.isdir(named + ext)), None)
    if folder is not None:  # (datasets sees no such split: say why, not "no split")
        return DatasetError(f"{label}: {folder} is a folder, not a data file; put the tasks "
                            f"in a file of that name")
    return None


def reason_of_failure(exc: Exception, dataset: Any, split: str, label: str,
                      path: str) -> DatasetError:
    """What a failure of ``datasets`` means for this dataset, in one line with the fix: a
    split or configuration it does not have, a folder without data files, else a line of
    the library's own message (a local JSON file's problem is named by file and line)."""
    import re

    message = str(exc)
    layout = _layout_problem(path, split, label)
    if layout is not None:
        return layout
    found = re.search(r"(?:Bad split: .*?\. Available splits|Unknown split .*?Should be one "
                      r"of):? \[(.*?)\]", message)
    if found:
        return no_such_split(dataset, split, [name.strip(" '\"")
                                              for name in found.group(1).split(",")], label)
    found = re.search(r"BuilderConfig '(.*?)' not found\. Available: \[(.*?)\]", message)
    if found:
        names = [name.strip(" '\"") for name in found.group(2).split(",")]
        fix = "it has only the default one, so remove name" if names == ["default"] else \
            f"it has: {', '.join(names)}; give one of those"
        return DatasetError(f"{label}: {dataset.path} has no configuration "
                            f"{found.group(1)!r} (the Dataset's name); {fix}")
    if os.path.isdir(path) and not _has_data_files(path):
        upper = sorted(name for name in _listed(path, label)
                       if os.path.splitext(name)[1].lower() in _BUILDERS
                       and os.path.isfile(os.path.join(path, name)))
        folders = sorted(name for name in _listed(path, label)
                         if os.path.splitext(name)[1].lower() in _BUILDERS
                         and os.path.isdir(os.path.join(path, name)))
        if folders:
            return DatasetError(f"{label}: {os.path.join(path, folders[0])} is a folder, not a "
                                f"data file; put the tasks in a file of that name")
        fix = (f"rename {upper[0]} to {os.path.splitext(upper[0])[0]}"
               f"{os.path.splitext(upper[0])[1].lower()} (the datasets library reads "
               f"extensions in lower case only)" if upper else
               "put the tasks in a file such as train.jsonl there, or point the path at the "
               "data")
        return DatasetError(f"{label}: the folder {dataset.path} holds no data files (one of "
                            f"{', '.join(sorted(_BUILDERS))}); {fix}")
    card = _card_problem(message, dataset, path, label)
    if card is not None:
        return card
    unpacked = _missing_compression(exc, path, split, label)
    if unpacked is not None:
        return unpacked
    if "Couldn't infer the same data file format for all splits" in message:
        # (train.txt beside test.jsonl: check_one_format leaves .txt files, notes as often)
        import re

        kinds = re.findall(r"NamedSplit\('([^']*)'\): \('(\w+)'", message)
        shown = ", ".join(f"{split_name}: {builder}" for split_name, builder in kinds)
        return DatasetError(f"{label}: {dataset.path}'s splits are files of different formats "
                            f"({shown or 'see its files'}), and the datasets library reads a "
                            f"folder's splits in one format; keep one format in it (a .txt "
                            f"file is read as lines of plain text)")
    if "saved using `save_to_disk`" in message:  # (one Dataset's: a DatasetDict's is read)
        return _one_saved_dataset(dataset.path, label)
    located = json_problem(local_path(dataset), split, label)
    if located is not None:
        return located
    cause: BaseException = exc
    while cause.__cause__ is not None and message.startswith("An error occurred while"):
        cause = cause.__cause__  # (DatasetGenerationError wraps the reader's own words)
        message = str(cause)
    reason = message.splitlines()[0] if message else type(exc).__name__
    return DatasetError(f"{label}: cannot read {dataset.path} (split {split!r}): {reason}")


def _missing_compression(exc: BaseException, path: str, split: str,
                         label: str) -> DatasetError | None:
    """A compressed file whose optional package (lz4, zstandard) is not installed, named
    with the fix, where the library says only "Compression type lz4 not supported"."""
    import re

    cause: BaseException | None = exc
    while cause is not None:  # (its words may be wrapped: "An error occurred while ...")
        found = re.search(r"Compression type (\w+) not supported", str(cause))
        if found is not None and found.group(1) in OPTIONAL:
            ending, package, tool = OPTIONAL[found.group(1)]
            files = split_files(path, split, (ending,)) if _looks_local(path) else []
            undo = f" ({tool} -d --rm {files[0]})" if files else ""  # (--rm: else both read)
            return DatasetError(f"{label}: {files[0] if files else 'a file of ' + path} is "
                                f"compressed with {found.group(1)}, which the datasets library "
                                f"reads with the {package} package, not installed here; "
                                f"install it (pip install {package}), or decompress the "
                                f"file{undo}")
        cause = cause.__cause__ or cause.__context__
    return None


def _card_problem(message: str, dataset: Any, path: str, label: str) -> DatasetError | None:
    """A folder's dataset card (``README.md``) the library could not follow, said of the
    card: front matter that is not YAML, a configured file that is not there, several
    configurations and no ``Dataset(name=...)``; None for any other failure."""
    import re

    card = os.path.join(path, "README.md")
    if not os.path.isdir(path) or not os.path.isfile(card):
        return None
    missing = re.search(r"Unable to find '(.*?)'", message)
    if missing:
        shown = os.path.relpath(missing.group(1), path)
        return DatasetError(f"{label}: {card}: its configs name the data file {shown}, which "
                            f"does not exist; fix the path in the card, or add the file")
    import yaml

    with open(card, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    front = re.match(r"---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
    if front is None:
        return None
    try:
        header = yaml.safe_load(front.group(1))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{card}:{mark.line + 2}" if mark is not None else card
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return DatasetError(f"{label}: {where}: the dataset card's header is not valid YAML "
                            f"({problem}); fix it, or remove the card")
    if "Config name is missing" in message and isinstance(header, dict):
        names = [str(config.get("config_name")) for config in header.get("configs") or ()
                 if isinstance(config, dict)]
        return DatasetError(f"{label}: {card} declares the configurations "
                            f"{', '.join(names)}; give one as Dataset(..., name=...)")
    return None


def plain_folder(path: str, name: str | None = None, label: str = "dataset") -> bool:
    """Whether the datasets library reads the folder at ``path`` as its files hold it: it
    holds only ``train``, ``validation`` or ``test`` ``.jsonl`` files (no card, no configs,
    no other files that patterns could match), each plain (`plain_jsonl_rows`), and every
    row of every one has the same shape, so reading each split with the first file's
    columns changes nothing.

    Raises:
        DatasetError: one of its files holds what no reader takes (a line nested past
            what a JSON reader goes, which crashes Arrow): every split's whole read meets
            it, as Trinity's does.
    """
    if name is not None or not os.path.isdir(path):
        return False
    entries = _listed(path, label)
    if not entries or not all(entry in _SPLIT_FILES and os.path.isfile(os.path.join(path, entry))
                              for entry in entries):
        return False
    shapes = set()
    for entry in entries:  # (a file's problem is said: a whole read of the folder meets it)
        found = plain_jsonl_rows(os.path.join(path, entry), label)
        if found is None:
            return False
        shapes.add(_shape(found[0]))
    return len(shapes) == 1


def _jsonl_file(dataset: Any, split: str) -> str | None:
    """The local JSON Lines file ``datasets`` reads for ``split`` when that is plain: the
    dataset is that file, or a folder holding only ``train``, ``validation`` or ``test``
    ``.jsonl`` files (no card, no configs, no other files that patterns could match)."""
    path = local_path(dataset)
    if os.path.isfile(path):
        return path if path.lower().endswith(".jsonl") else None
    if getattr(dataset, "name", None) is not None or not os.path.isdir(path):
        return None
    entries = _listed(path)
    if not entries or not all(entry in _SPLIT_FILES and os.path.isfile(os.path.join(path, entry))
                               for entry in entries):
        return None
    found = os.path.join(path, f"{split}.jsonl")
    return found if os.path.isfile(found) else None


#: Text Arrow's JSON reader (the datasets library's, and so Trinity's) may read as a
#: timestamp, which reaches a workflow as a datetime: ``2024-01-02``, ``2024-01-02T03:04``,
#: ``2024-01-02 03:04:05+01:00``. A file holding one is read by the datasets library, so
#: every command (and Trinity) hands the workflow the same value.
_MAYBE_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}|$)")


def _shape(value: Any) -> Any:
    """What Arrow would make of a JSON value: ``mixed`` where it would convert or refuse."""
    if isinstance(value, dict):
        return ("dict", tuple((key, _shape(item)) for key, item in value.items()))
    if isinstance(value, list):
        shapes = {_shape(item) for item in value}
        return ("list", shapes.pop() if len(shapes) == 1 else "mixed" if shapes else None)
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        return "mixed"  # beyond int64
    if isinstance(value, str) and _MAYBE_TIMESTAMP.match(value):
        return "mixed"  # Arrow may read it as a timestamp: a datetime on every backend
    return type(value).__name__


def _has_mixed(shape: Any) -> bool:
    return shape == "mixed" or (isinstance(shape, tuple) and any(map(_has_mixed, shape)))


def plain_jsonl_rows(path: str, label: str = "dataset") -> list[dict[str, Any]] | None:
    """The rows of a JSON Lines file as ``datasets`` yields them, when every row has the same
    keys in the same order and the same type for each value, nested ones included (Arrow's
    schema then changes nothing); None when it might (missing keys filled with None, ints
    widened to floats, ...), or the file is empty, large or not JSON Lines: ``datasets``
    reads it then, and reports what is wrong with it."""
    if os.path.getsize(path) > PLAIN_JSONL_BYTES:
        return None
    numbered, number = [], 0
    with open(path, encoding="utf-8") as handle:
        try:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    numbered.append((number, json.loads(line, parse_constant=refuse_constant,
                                                        object_pairs_hook=unique_keys)))
                else:
                    refuse_odd_blank(line, f"{path}:{number}")
        except NotJsonConstant as exc:
            raise DatasetError(f"{label}: {constant_problem(f'{path}:{number}', str(exc))}") \
                from None
        except DuplicateKey as exc:
            raise DatasetError(f"{label}: {duplicate_problem(f'{path}:{number}', str(exc))}") \
                from None
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            beyond = beyond_the_reader(exc, path, number)
            if beyond is not None:  # pyarrow would crash on it, or lose the integer
                raise DatasetError(f"{label}: {beyond}") from None
            return None  # not JSON, or not UTF-8: datasets reports it
    if not numbered:
        return None
    refuse_a_null_file(path, label)  # (null alone: said of the file, not of its row)
    for number, row in numbered:  # as every reader of a JSON file takes its rows
        task_row(f"{path}:{number}", row, label)
    found = [row for _, row in numbered]
    shape = _shape(found[0])
    if _has_mixed(shape) or any(_shape(row) != shape for row in found[1:]):
        return None
    return found


#: The split names a single file's own name may be (``data/test.jsonl``).
_SPLIT_NAMES = ("train", "validation", "valid", "dev", "test", "eval")


def _check_single_file_split(dataset: Any, split: str | None, label: str) -> None:
    """A single file is read whole whatever split is asked; when its name is another
    split's (``train.jsonl`` asked for ``test``, or a typo), say so rather than read it."""
    from ..dsl.setting import explicit_fields

    # A split asked for is a name: an empty one would be read as the dataset's own, and one
    # holding a path would reach a file outside the dataset's folder.
    if split is not None and (not split.strip() or split in (".", "..")
                              or any(mark in split for mark in "/\\")):
        raise DatasetError(f"{label}: split {split!r} is not a split's name; give one such as "
                           f"'train' or 'test'")
    path = local_path(dataset)
    asked = split or dataset.split
    if (split is None and "split" not in explicit_fields(dataset)) or not os.path.isfile(path):
        return
    stem = os.path.basename(path).split(".")[0].lower()
    if stem in _SPLIT_NAMES and stem != asked.lower():
        raise DatasetError(f"{label}: {dataset.path} is one file, read whole whatever the "
                           f"split, and its name says it is the {stem!r} split, not {asked!r}; "
                           f"give the {asked!r} file itself, or the folder that holds the "
                           f"split files")


def check_one_format(dataset: Any, path: str, label: str) -> None:
    """``datasets`` reads a folder's files of its most common format and ignores the rest:
    a folder of ``train.jsonl`` and ``train.csv`` would lose the CSV rows without a word."""
    if getattr(dataset, "name", None) is not None or not os.path.isdir(path):
        return
    formats: dict[str, list[str]] = {}
    for entry in sorted(_listed(path, label)):
        # a compressed file by the format under its compression, as the library picks its
        # reader (test-more.csv.gz beside test.jsonl was left out without a word)
        name = entry.lower()
        for packed in COMPRESSED_ENDINGS:
            name = name.removesuffix(packed)
        builder = _BUILDERS.get(os.path.splitext(name)[1])
        if builder not in (None, "text") and os.path.isfile(os.path.join(path, entry)) \
                and not library_file(os.path.join(path, entry)):
            formats.setdefault(builder, []).append(entry)
    if len(formats) > 1:
        shown = ", ".join(files[0] for files in formats.values())
        raise DatasetError(f"{label}: {dataset.path} holds data files of {len(formats)} "
                           f"formats ({shown}), and only one format of a folder is read (the "
                           f"rest would be left out without a word); keep one format in it")


def _one_saved_dataset(path: str, label: str) -> DatasetError:
    """The line for a folder holding one Dataset that ``save_to_disk`` wrote (not a
    DatasetDict's), which ``load_dataset`` does not read; a DatasetDict's split folder is
    told to give the DatasetDict's."""
    whole = os.path.dirname(os.path.normpath(path))
    if os.path.isfile(os.path.join(whole, "dataset_dict.json")):
        return DatasetError(f"{label}: {path} is one split's folder of a DatasetDict that "
                            f"save_to_disk wrote; give the DatasetDict's folder, {whole}, and "
                            f"the split by its name ({os.path.basename(os.path.normpath(path))!r})")
    return DatasetError(f"{label}: {path} is one Dataset that save_to_disk wrote, which the "
                        f"datasets library's load_dataset (Trinity's reader too) does not "
                        f"read; write its rows to a data file "
                        f"(load_from_disk(path).to_json('tasks/train.jsonl')) and give that, "
                        f"or save a DatasetDict of its splits")


def _arrow_files_named(folder: str) -> list[str]:
    """The ``.arrow`` files a saved Dataset's ``state.json`` names (``_data_files``); none
    when it cannot be read."""
    import json

    try:
        with open(os.path.join(folder, "state.json"), encoding="utf-8") as handle:
            files = json.load(handle).get("_data_files")
    except (OSError, ValueError, AttributeError):
        return []
    return [entry["filename"] for entry in files if isinstance(entry, dict)
            and isinstance(entry.get("filename"), str)] if isinstance(files, list) else []


def _refuse_a_saved_folder_the_library_misreads(path: str, label: str) -> None:
    """A folder ``save_to_disk`` wrote (a DatasetDict's ``dataset_dict.json`` and a folder
    of each split, or one Dataset's ``state.json``) keeps its rows in ``.arrow`` files: a
    copy that left them out was read by the datasets library's patterns as JSON data, its
    ``state.json`` taken for a task. One Dataset's folder, which ``load_dataset`` does not
    read, is refused whatever split is asked of it."""
    listed = set(_listed(path, label))
    if "dataset_dict.json" in listed:
        folders = sorted(name for name in listed if os.path.isfile(
            os.path.join(path, name, "state.json")))
    elif {"state.json", "dataset_info.json"} <= listed:
        if any(name.endswith(".arrow") for name in listed):  # (said before any split is
            raise _one_saved_dataset(path, label)  # asked for: "has no split 'test'" was)
        folders = [""]
    else:
        return
    for folder in folders:
        inside = os.path.join(path, folder)
        shown = os.path.join(path, folder) if folder else path
        if not any(name.endswith(".arrow") for name in _listed(inside, label)):
            raise DatasetError(f"{label}: {path} is a folder save_to_disk wrote, and "
                               f"{shown} holds none of its .arrow files, which keep the rows "
                               f"(a copy that left them out); copy the folder whole")
        named = _arrow_files_named(inside)
        missing = [name for name in named if not os.path.isfile(os.path.join(inside, name))]
        stale = sorted(name for name in _listed(inside, label)
                       if name.endswith(".arrow") and name not in named) if named else []
        if stale and not missing:  # (read with the rest: rows of an older save, no word)
            raise DatasetError(f"{label}: {path} is a folder save_to_disk wrote, and {shown} "
                               f"holds {stale[0]}"
                               + (f" and {len(stale) - 1} more" if len(stale) > 1 else "")
                               + ", which its state.json does not name (left by an earlier "
                               "save_to_disk: it does not remove old shards), yet would be "
                               f"read with the rest; remove {'them' if len(stale) > 1 else 'it'}"
                               ", or save into an empty folder")
        empty = next((name for name in named if os.path.isfile(os.path.join(inside, name))
                      and os.path.getsize(os.path.join(inside, name)) == 0), None)
        if empty is not None:  # (pyarrow's "File is too small: 0", naming no file)
            raise DatasetError(f"{label}: {os.path.join(shown, empty)} is empty (0 bytes), "
                               f"one of the .arrow files that keep the rows (a copy or a "
                               f"save cut short); copy the folder whole, or save it again")
        if missing:  # (the library reads the shards there are: rows dropped, no word)
            raise DatasetError(f"{label}: {path} is a folder save_to_disk wrote, and {shown} "
                               f"lacks {missing[0]}"
                               + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                               + ", one of the .arrow files its state.json names, which keep "
                               "the rows (a copy cut short); copy the folder whole")


def stream(dataset: Any, split: str | None = None, label: str = "dataset") -> Any:
    """An iterable over the rows of ``dataset``, streamed, not loaded whole."""
    import logging

    from ..interrupts import import_whole

    import_whole("datasets")
    from datasets import load_dataset

    # datasets logs a failed parse before raising; tunedsl reports it in one line instead.
    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    _check_single_file_split(dataset, split, label)
    split = split or dataset.split
    path = local_path(dataset)
    if os.path.islink(path) and not os.path.exists(path):
        raise DatasetError(f"{label}: path {dataset.path} is a symbolic link to "
                           f"{os.readlink(path)}, {where_a_broken_link_leads(path)}; fix the "
                           f"link, or give the data's own path")
    _refuse_a_pattern(dataset, path, split, label)
    loop = looping_link_problem(path) if not os.path.exists(path) else None
    if loop is not None:  # (a folder on its way: read as missing, or a hub id; sweep 49)
        raise DatasetError(f"{label}: {dataset.path}: {loop}; fix the link, or give the "
                           f"data's own path")
    if _looks_local(path, dataset.defined_in) and not os.path.exists(path):
        from ..access import searchable, unsearchable_folder

        folder = unsearchable_folder(path)  # (not missing: out of reach)
        if folder is not None:
            raise DatasetError(f"{label}: {path}: {folder} cannot be searched, so nothing in "
                               f"it can be read; {searchable(folder)}")
        raise _missing_path(dataset, label)
    if not _looks_local(path, dataset.defined_in):
        _check_hub_reachable(path, label)
    check_one_format(dataset, path, label)
    _refuse_lone_surrogates(path, split, label)
    refuse_unreadable_files(path, label)
    for file in split_files(path, split, (".csv", ".tsv")) if _looks_local(path) else []:
        problem = csv_problem(file, label)
        if problem is not None:
            raise problem
    try:
        if os.path.isfile(path):
            builder = _BUILDERS.get(kind(path)[0])  # (of a.jsonl.gz, .jsonl: datasets unpacks)
            if builder is None:
                raise DatasetError(f"{label}: cannot tell the format of {path}; use one of "
                                   f"{', '.join(sorted(_BUILDERS))}")
            if _is_blank(path):  # no rows; the check says so, as of an empty JSON Lines file
                return iter(())
            # a .tsv is read by the csv builder, which splits on commas unless told
            tabs = {"sep": "\t"} if path.lower().endswith(".tsv") else {}
            return load_dataset(builder, data_files={split: path}, split=split, streaming=True,
                                **tabs)
        return load_dataset(path, name=dataset.name, split=split, streaming=True)
    except DatasetError:
        raise
    except StopIteration:  # datasets infers columns from a first row an empty file lacks
        return iter(())
    except Exception as exc:  # datasets raises many types for one cause: it cannot read this
        raise reason_of_failure(exc, dataset, split, label, path) from None


def _refuse_a_pattern(dataset: Any, path: str, split: str, label: str) -> None:
    """Refuse a path holding a pattern (``data/*.jsonl``) whose folder is here: a path is
    read as a folder, a file or a hub id, and the pattern was said to be a hub id the hub
    did not answer for (sweep 48 A-W3). A path that is there (a file whose name holds
    ``[``) is left to its reader."""
    written = str(dataset.path)
    if not any(char in written for char in "*?[") or os.path.lexists(path):
        return

    def here(given: str) -> str | None:  # beside the file that named it, or here
        return _here(os.path.expanduser(given), dataset.defined_in)

    # the first part that holds a pattern and is no name here (a folder "br[1]" is one:
    # its pattern is what follows it; sweep 49 A-W2)
    shown = "/" if written.startswith("/") else ""
    for part in written.strip("/").split("/"):
        pattern = next((char for char in part if char in "*?["), None)
        step = os.path.join(shown, part)
        if pattern is not None and here(step) is None:
            break
        shown = step
    else:
        return
    shown = shown or "."
    found = here(shown)
    if found is None or not os.path.isdir(found):
        return
    ending = os.path.splitext(written)[1]
    ending = ending if ending in _BUILDERS else ".jsonl"
    said = (f"{label}: path {written} holds the pattern {pattern!r}, and a dataset's path is "
            f"read as a folder, a file or a hub id, not as a pattern")
    below = os.path.join(found, split)
    if not _has_data_files(found, 0) and not (os.path.isdir(below) and
                                              _has_data_files(below, 0)):
        # (".", told "give the folder, .", held no data of its own, a model's folder below
        # it: the rule said, not that folder; sweep 50 A-W5)
        raise DatasetError(f"{said}, and {shown} holds no data files; give the folder that "
                           f"holds the data (a file named after the split, {split}{ending}, is "
                           f"read as split {split!r}), or one file")
    raise DatasetError(f"{said}; give the folder, {shown} (its file named after the split, "
                       f"{split}{ending}, is read as split {split!r}), or one file")


#: JSON's escape of a UTF-16 surrogate (``\\ud800`` to ``\\udfff``), as bytes in a file.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _refuse_lone_surrogates(path: str, split: str, label: str) -> None:
    """A local JSON file whose rows hold a lone surrogate escape is refused by file and row,
    as JSON Lines files are: the datasets library drops the escape from a ``.json`` file's
    values without a word ("1+1=\\ud800" reaches the workflow as "1+1="). Only files
    holding such an escape at all (a scan of their bytes) are read to find the row."""
    for file in json_files(path, split) if _looks_local(path) else []:
        try:
            with open(file, "rb") as handle:
                if not any(_SURROGATE_ESCAPE.search(line) for line in handle):
                    continue
        except OSError:  # a dangling link, a folder named like data: the reader says which
            continue
        problem = json_problem(file, split, label)
        if problem is not None and "lone surrogate" in str(problem):
            raise problem


def refuse_unreadable_files(path: str, label: str) -> None:
    """Refuse a ``save_to_disk`` folder without its ``.arrow`` files, a local data file a
    clone without git-lfs left as a pointer (each reader
    would fail on it in its own words), and a JSON file (compressed or not) that holds
    nothing but ``null``: pyarrow's JSON reader crashes the process on it (a segmentation
    fault, no message), whichever split is read (a streamed read takes its columns from
    another split's first file)."""
    if not _looks_local(path) or not os.path.exists(path):
        return  # (a path out of reach or missing is said by the reader's own checks)
    if not os.path.isdir(path):
        _refuse_no_plain_file(path, label)
    if os.path.isdir(path):  # (its state.json would be read as a task)
        _refuse_a_saved_folder_the_library_misreads(path, label)
    files = [path] if os.path.isfile(path) else [
        os.path.join(folder, name) for folder, _, names in _walk_two_levels(path, label)
        for name in sorted(names) if not name.startswith(".")]
    for file in files:
        if kind(file)[0] in _BUILDERS:  # (a data file's)
            _refuse_no_plain_file(file, label)
            _refuse_unreadable(file, label)
        if kind(file)[0] in _BUILDERS and is_git_lfs_pointer(file):
            folder = path if file != path else os.path.dirname(path) or "."
            raise DatasetError(f"{label}: {pointer_problem(file, folder)}")
        refuse_a_null_file(file, label)
        _refuse_unreadable_parquet_features(file, label)


def _refuse_no_plain_file(file: str, label: str) -> None:
    """Refuse a data file that is no plain file: a named pipe (reading it waited, without
    a word, for a writer that never came), a socket, a device."""
    import stat

    try:
        mode = os.stat(file).st_mode
    except OSError:  # (gone, a dangling link: said by its reader)
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    what = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device")
    raise DatasetError(f"{label}: {file} is {what}, not a data file: reading it would wait for "
                       f"a writer; give a file that holds the tasks")


def _refuse_unreadable(file: str, label: str) -> None:
    """Refuse a data file this user cannot read (an internal error of the reader before)."""
    try:
        with open(file, "rb"):
            pass
    except PermissionError as exc:
        from ..access import permission_fix

        raise DatasetError(f"{label}: {file}: cannot read it ({exc.strerror}); "
                           f"{permission_fix(exc, file) or 'make it readable'}") from None
    except OSError:  # (a dangling link, a folder: its reader says which)
        pass


def _refused_listing(label: str) -> Callable[[OSError], None]:
    """``os.walk``'s ``onerror`` for a data folder: one it cannot list is refused (it was
    read as holding nothing, or an internal error)."""
    def refuse(exc: OSError) -> None:
        if isinstance(exc, PermissionError):
            from ..access import permission_fix

            fix = permission_fix(exc, exc.filename) or "make it readable"
            raise DatasetError(f"{label}: {exc.filename}: cannot list it ({exc.strerror}); "
                               f"{fix}") from None
    return refuse


def _listed(path: str, label: str = "dataset") -> list[str]:
    """The names in the data folder ``path``; one it cannot list is refused (an internal
    error of check and eval before), one gone meanwhile holds nothing."""
    try:
        return os.listdir(path)
    except PermissionError as exc:
        _refused_listing(label)(exc)
        raise  # (for the type checker: refused above)
    except OSError:
        return []


def _walk_two_levels(path: str, label: str = "dataset"
                     ) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` of a data folder and its subfolders (``train/``), not deeper."""
    for folder, folders, names in os.walk(path, onerror=_refused_listing(label)):
        if os.path.relpath(folder, path).count(os.sep) >= 1:
            folders.clear()
        yield folder, folders, names


def refuse_a_null_file(file: str, label: str) -> None:
    """Refuse ``file``, a JSON or JSON Lines file compressed or not, when it holds JSON
    ``null`` alone (`refuse_unreadable_files`); any other file is left to its reader."""
    form, packed = kind(file)
    if form not in (".json", ".jsonl") or (packed and packed not in MODULES):
        return
    try:
        if not packed and os.path.getsize(file) > 64:  # "null", a byte-order mark, space
            return
        with opened(file, packed) as handle:
            text = handle.read(80)
    except (OSError, EOFError, UnicodeDecodeError, ValueError, ImportError):
        return  # a dangling link, a damaged archive: its reader says which
    if text.strip() == "null":
        raise null_file_refusal(file, label)


def _refuse_unreadable_parquet_features(file: str, label: str) -> None:
    """Refuse a Parquet file whose ``huggingface`` schema metadata (the features the
    datasets library wrote) is not JSON: the library reads it for every file of the
    dataset, and its JSON error was blamed on another file of the folder. The footer alone
    is read; a file pyarrow cannot read is left to its reader."""
    if kind(file) != (".parquet", ""):
        return
    import json

    import pyarrow.parquet

    try:
        metadata = pyarrow.parquet.read_schema(file).metadata or {}
    except Exception:  # noqa: BLE001 - not Parquet, cut, unreadable: its reader says so
        return
    written = metadata.get(b"huggingface")
    if written is None:
        return
    try:
        json.loads(written)
    except ValueError as exc:
        raise DatasetError(
            f"{label}: {file}: its 'huggingface' schema metadata (the datasets library's "
            f"features) is not JSON ({exc}); write the file again without it, e.g. with "
            f"pyarrow: pq.write_table(table.replace_schema_metadata(None), ...)") from None


def null_file_refusal(file: str, label: str) -> DatasetError:
    """The one line for a data file holding JSON ``null`` alone."""
    return DatasetError(f"{label}: {file}:1: the file holds JSON null, not rows; a row must "
                        f"be a JSON object with the task's keys")


def _check_hub_reachable(path: str, label: str) -> None:
    """A hub id is read from the Hugging Face hub: say at once when that cannot work,
    rather than after the hub client's retries (half a minute without a network). A path
    inside a folder that cannot be searched reads as missing: said as that folder."""
    from ..access import searchable, unsearchable_folder

    if path.lower().startswith("file://"):  # (said to be a hub id before)
        raise DatasetError(f"{label}: path {path} is a file:// URL, which the datasets library "
                           f"reads as a hub id; give the path itself, {path[len('file://'):]}")
    variable = re.search(r"\$\{?([A-Za-z_]\w*)\}?", path)
    if variable is not None:  # a shell's $PWD, written where no shell reads it
        raise DatasetError(f"{label}: path {path} holds {variable.group(0)}, which is not "
                           f"expanded here (settings read ${{env:{variable.group(1)}}}, and "
                           f"Python code reads none); write the path itself")
    folder = unsearchable_folder(path)
    if folder is not None:  # (said to be a hub id before)
        raise DatasetError(f"{label}: {path}: {folder} cannot be searched, so nothing in it "
                           f"can be read; {searchable(folder)}")
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise DatasetError(f"{label}: {shown_path(path)} is not a local path, and the Hugging "
                           f"Face hub is "
                           f"switched off here (HF_HUB_OFFLINE); give a local folder or file")
    import httpx

    try:
        httpx.head(constants.ENDPOINT, timeout=5.0)
    except httpx.HTTPError as exc:
        raise DatasetError(f"{label}: {path} is not a local path, so it would be read from the "
                           f"Hugging Face hub ({constants.ENDPOINT}), which does not answer "
                           f"from here ({type(exc).__name__}); download the dataset and give "
                           f"its folder, or check the network") from None


def rows(dataset: Any, split: str | None = None, label: str = "dataset",
         limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a dataset, streamed; a row that cannot be read is a `DatasetError`."""
    _check_single_file_split(dataset, split, label)
    refuse_unreadable_files(local_path(dataset), label)
    if limit is not None:  # islice takes no more than sys.maxsize (-n 10**20: all rows)
        limit = min(limit, sys.maxsize)
    local = _jsonl_file(dataset, split or dataset.split)
    plain = plain_jsonl_rows(local, label) if local is not None else None
    if plain is not None and os.path.isdir(local_path(dataset)) and \
            not plain_folder(local_path(dataset), label=label):
        plain = None  # read with the first file's columns
    if plain is not None:
        yield from plain[:limit]
        return
    streamed = iter(stream(dataset, split, label))
    try:
        yield from _streamed_rows(itertools.islice(streamed, limit), dataset, split, label)
    finally:
        close = getattr(streamed, "close", None)
        if close is not None:
            close()
        _collected_before_exit()


def _collected_before_exit() -> None:
    """Collect garbage once as the process exits, while pyarrow still works: the datasets
    library's streamed Parquet reader holds pyarrow scanner threads in a reference cycle,
    and left for the interpreter's last collection, they outlived pyarrow's memory pools:
    the process aborted as it exited ("terminate called without an active exception",
    exit 134) after a preview's rows were written (huggingface/datasets#7566). Once, at
    exit: a collection with torch loaded takes a tenth of a second."""
    if not _COLLECTING_AT_EXIT:
        _COLLECTING_AT_EXIT.append(True)
        atexit.register(gc.collect)


_COLLECTING_AT_EXIT: list[bool] = []


def _streamed_rows(iterator: Iterator[dict[str, Any]], dataset: Any, split: str | None,
                   label: str) -> Iterator[dict[str, Any]]:
    """The rows ``iterator`` streams, each checked as `rows` says."""
    number = 0
    while True:
        try:
            row = next(iterator)
            number += 1
        except StopIteration:
            return
        except DatasetError:
            raise
        except Exception as exc:  # pyarrow and datasets raise many types for a bad file
            if "BatchSize must be greater than 0" in str(exc):
                return  # pyarrow's word for a Parquet file of no rows: none, as callers say
            raise reason_of_failure(exc, dataset, split or dataset.split, label,
                          local_path(dataset)) from None
        depth = nesting(row)
        if depth > ARROW_NESTING:  # streamed, Arrow read it; Trinity's reader (whole) fails
            raise DatasetError(f"{label}: {local_path(dataset)} row {number}: nested {depth} "
                               f"levels deep, past the {ARROW_NESTING} the datasets library "
                               f"(Trinity's reader too) takes; flatten it, or keep the deep "
                               f"part as JSON text")
        surrogate = lone_surrogate(row)
        if surrogate is not None:
            where = f"{local_path(dataset)} row {number}"
            raise DatasetError(f"{label}: {surrogate_problem(where, surrogate)}")
        endless = non_finite(row)
        if endless is not None:  # a Parquet column's inf or NaN: no results line holds it
            raise DatasetError(f"{label}: {local_path(dataset)} row {number}: {endless} is "
                               f"not a finite number, which no results file (JSON) can hold; "
                               f"make it null, or a number")
        yield dict(row)


def refuse_bad_first_rows(dataset: Any, split: str | None, label: str, count: int) -> None:
    """Refuse the first ``count`` rows of a local split's JSON files (compressed or not) as
    check refuses them (`task_row`: a row that is no object, ...), naming the file:line:
    streamed through the datasets library a ``null`` row is a row of nulls (``preview``)."""
    from .written import written_rows

    files = split_files(local_path(dataset), split or dataset.split,
                        tuple(f"{form}{packed}" for form in (".json", ".jsonl")
                              for packed in ("", *MODULES)))
    for file in files:  # (null alone: said of the file, as every reader says it)
        refuse_a_null_file(file, label)
    written = written_rows(files, label) if files else None
    for _ in itertools.islice(written or (), count):
        pass


def first_rows(dataset: Any, n: int, split: str | None = None,
               label: str = "dataset") -> list[dict[str, Any]]:
    """The first ``n`` rows of a dataset, streaming, refused as check refuses them."""
    refuse_unreadable_files(local_path(dataset), label)  # (before its rows are read again)
    try:
        found = list(rows(dataset, split, label, limit=n))
    except DatasetError:  # (a list row in a compressed file: said by pyarrow, "row 0")
        refuse_bad_first_rows(dataset, split, label, n)
        raise
    refuse_bad_first_rows(dataset, split, label, len(found))
    return found
