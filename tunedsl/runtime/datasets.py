"""Reading task datasets with ``datasets`` (imported here, never by ``import tunedsl``).

A dataset is any record with ``path``, ``name``, ``split`` and ``defined_in`` (a
`tunedsl.Dataset`); this module does not import the record class, because
``Dataset.preview`` calls into it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

from ..config.paths import beside
from ..errors import DatasetError

#: ``datasets`` builder names by file extension, for a dataset given as one file.
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv",
             ".tsv": "csv", ".txt": "text", ".arrow": "arrow"}


def _looks_local(path: str) -> bool:
    return os.path.isabs(path) or path.startswith((".", "~")) or os.path.exists(path)


def stream(dataset: Any, split: str | None = None, label: str = "dataset") -> Any:
    """An iterable over the rows of ``dataset``, streamed, not loaded whole."""
    import logging

    from datasets import load_dataset

    # datasets logs a failed parse before raising; tunedsl reports it in one line instead.
    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    split = split or dataset.split
    path = os.path.expanduser(dataset.path)
    path = beside(path, dataset.defined_in)  # relative to the file that built the Dataset
    if _looks_local(path) and not os.path.exists(path):
        raise DatasetError(f"{label}: path {dataset.path} does not exist; fix the path, or give "
                           f"a Hugging Face hub id such as 'openai/gsm8k'")
    if not _looks_local(path):
        _check_hub_reachable(path, label)
    try:
        if os.path.isfile(path):
            builder = _BUILDERS.get(os.path.splitext(path)[1].lower())
            if builder is None:
                raise DatasetError(f"{label}: cannot tell the format of {path}; use one of "
                                   f"{', '.join(sorted(_BUILDERS))}")
            return load_dataset(builder, data_files={split: path}, split=split, streaming=True)
        return load_dataset(path, name=dataset.name, split=split, streaming=True)
    except DatasetError:
        raise
    except StopIteration:  # datasets infers columns from a first row an empty file lacks
        return iter(())
    except Exception as exc:  # datasets raises many types for one cause: it cannot read this
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetError(f"{label}: cannot read {dataset.path} (split {split!r}): {reason}") \
            from None


def _check_hub_reachable(path: str, label: str) -> None:
    """A hub id is read from the Hugging Face hub: say at once when that cannot work,
    rather than after the hub client's retries (half a minute without a network)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise DatasetError(f"{label}: {path} is not a local path, and the Hugging Face hub is "
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
    iterator = iter(itertools.islice(stream(dataset, split, label), limit))
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            return
        except Exception as exc:  # pyarrow and datasets raise many types for a bad file
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DatasetError(f"{label}: cannot read {dataset.path} (split "
                               f"{split or dataset.split!r}): {reason}") from None
        yield dict(row)


def first_rows(dataset: Any, n: int, split: str | None = None,
               label: str = "dataset") -> list[dict[str, Any]]:
    """The first ``n`` rows of a dataset, streaming."""
    return list(rows(dataset, split, label, limit=n))
