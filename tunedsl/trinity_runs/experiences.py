"""The experiences a Trinity run's explorer saved in ``buffer/``, found, read and grouped
into rollouts for ``tunedsl view``'s Trinity source (`trinity_run`).

The experiences are read as the experience pipeline saves them before its operators run
(``data_processor.experience_pipeline.save_input``, on by default): the SQLite database
``buffer/explorer_output.db`` (table ``pipeline_input`` and its ``pipeline_input_blob``,
blobs in Trinity's ``Experience.serialize`` format, read with ``sqlite3`` and Trinity's
own ``Experience.deserialize``), or a JSON Lines file when ``input_save_path`` names one
(lines are ``Experience.to_dict()``, read without Trinity). The config's
``input_save_path`` is read first, then ``buffer/explorer_output.db``; only when neither
exists are other experience stores in ``buffer/`` (``*.jsonl`` whose lines have an
``eid``, ``*.db`` tables with an ``_blob`` twin) read, so one experience is never shown
twice from two stores.

Experiences become rollouts: one rollout is one ``(eid.batch, eid.task, eid.run)``,
its calls the experiences in ``eid.step`` order, then stored order (a multi-turn
workflow, tunedsl's included, emits one experience per model call, in call order;
tunedsl does not set ``eid.step``). A rollout's reward is its last experience's; its
metrics those of all its experiences, later ones winning (tunedsl puts the user's
metrics on the last). ``step`` is ``eid.batch`` (the explorer step) when it is a
number; ``group`` is ``eid.task`` (the task's place in its batch); ``task_index`` is
the task's row in its dataset where Trinity recorded it (``info["task_index"]
["index"]``, set by its workflow runner), else ``eid.task``. ``task`` is None: Trinity
keeps no task data with its experiences.

Eval experiences: Trinity 0.6.0 sends only training batches through the experience
pipeline, so eval rollouts (``eid.batch`` like ``"3/eval"``) never reach ``buffer/``;
only their metrics do (``eval/...`` curves). Should a store hold experiences whose
batch is not a number, they are shown with ``step`` None, after the numbered steps.

A step explored twice (a run resumed from an earlier checkpoint appends to the same
store) shows its later experiences only; a summary row counts those set aside.

Failed runs leave no experiences in Trinity, so no entry is an error. Advantages are
empty: the pipeline saves its input before the advantage is computed.

Trinity is imported only to decode a SQLite store.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..data.jsonl_index import JsonLines
from ..dsl.trinity_fields import NO_MODEL_CALL
from ..errors import DatasetError
from ..runs.run_files import BUFFER_DIR, EXPLORER_OUTPUT_DB
from .config import config_value


def read_experiences(path: Path, config: dict[str, Any],
                     notes: list[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    """Every saved experience as an ``Experience.to_dict()``-shaped dict, in stored order,
    from the one store that holds the pipeline's input (see the module docstring)."""
    stores = _experience_stores(path, config)
    counts = []
    for store in stores:
        count = 0
        reader = _read_db(store, notes) if store.suffix == ".db" else _read_jsonl(store)
        for experience in reader:
            count += 1
            yield experience
        counts.append(f"{_shown(store, path)} ({count})")
    notes.append(("experiences from", ", ".join(counts) if counts else "none saved"))


def _experience_stores(path: Path, config: dict[str, Any]) -> list[Path]:
    """The files holding the explorer's experiences, most specific first: the config's
    ``input_save_path``, else the default database, else any store in ``buffer/``."""
    saved = config_value(config, "data_processor.experience_pipeline.input_save_path")
    if isinstance(saved, str) and saved:
        file = Path(saved.split("sqlite:///", 1)[1] if saved.startswith("sqlite:///")
                    else saved)
        if not file.is_absolute():
            file = path / file
        if file.is_file():
            return [file]
    if (path / EXPLORER_OUTPUT_DB).is_file():
        return [path / EXPLORER_OUTPUT_DB]
    buffer = path / BUFFER_DIR
    if not buffer.is_dir():
        return []
    return sorted(child for child in buffer.iterdir()
                  if child.suffix == ".db" or (child.suffix == ".jsonl"
                                               and _holds_experiences(child)))


def _shown(file: Path, root: Path) -> str:
    """``file`` relative to the run directory where it is inside it."""
    try:
        return str(file.relative_to(root))
    except ValueError:
        return str(file)


def _holds_experiences(file: Path) -> bool:
    """Whether a ``.jsonl`` in ``buffer/`` holds experiences: its first line has an
    ``eid`` (a taskset copy or other file there is left alone). A first line that is not
    JSON counts as one, so its error is reported rather than the file silently skipped."""
    try:
        with open(file, "rb") as handle:
            for line in handle:
                if line.strip():
                    try:
                        value = json.loads(line)
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        return True
                    return isinstance(value, dict) and "eid" in value
    except OSError:
        return False
    return False


def _read_jsonl(file: Path) -> Iterator[dict[str, Any]]:
    """The experiences of a JSON Lines store (``FileStorage`` writes one
    ``Experience.to_dict()`` per line)."""
    for number, _, value in JsonLines(file).scan():
        if not isinstance(value, dict) or not isinstance(value.get("eid"), dict):
            raise DatasetError(f"{file}:{number}: not a Trinity experience (it needs an "
                               f"eid); was this file written by Trinity's buffer?")
        yield value


def _experience_tables(connection: sqlite3.Connection) -> list[str]:
    """Tables that hold experiences: a table ``T`` with a ``T_blob`` twin, the layout
    Trinity's ``SQLExperienceStorage`` creates (``pipeline_input`` in the default db)."""
    names = {row[0] for row in
             connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return sorted(name for name in names if f"{name}_blob" in names)


def _read_db(file: Path, notes: list[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    """The experiences of a SQLite store as ``to_dict()`` s (`db_experiences`). Without
    Trinity a note says so and nothing is read."""
    try:
        import trinity.common.experience  # noqa: F401
    except Exception as exc:  # not installed, or its torch stack fails to import
        notes.append((f"experiences ({file.name})",
                      f"not read: it needs trinity-rft to decode ({type(exc).__name__}: "
                      f"{' '.join(str(exc).split())})"))
        return
    for experience in db_experiences(file):
        yield experience.to_dict()


def db_experiences(file: Path) -> Iterator[Any]:
    """Every experience of a SQLite store (Trinity's ``SQLExperienceStorage`` layout), in
    insertion order, as Trinity's own ``Experience`` (tensors included), decoded by its
    ``Experience.deserialize``; the meta row's reward replaces the blob's, as Trinity's
    readers do (``to_experience``).

    Raises:
        DatasetError: the file cannot be read as such a store, or a row does not decode.
        ImportError: trinity-rft is not installed.
    """
    connection = _open_read_only(file)
    try:
        for table in _experience_tables(connection):
            rows = connection.execute(
                f'SELECT m.id, m.reward, b.experience_bytes FROM "{table}" m '
                f'JOIN "{table}_blob" b ON b.id = m.id ORDER BY m.id')
            for row_id, reward, blob in rows:
                yield _decoded(blob, reward, f"{file}: {table} row {row_id}")
    except sqlite3.Error as exc:
        raise DatasetError(f"{file}: cannot read it as Trinity's SQLite buffer: "
                           f"{exc}") from None
    finally:
        connection.close()


def _decoded(blob: bytes, reward: float | None, where: str) -> Any:
    """One stored blob as Trinity's ``Experience``, with its meta row's reward."""
    from trinity.common.experience import Experience

    try:
        experience = Experience.deserialize(blob)
    except Exception as exc:
        raise DatasetError(f"{where}: not a Trinity experience ({type(exc).__name__}: "
                           f"{exc})") from None
    if reward is not None:
        experience.reward = reward
    return experience


def _open_read_only(file: Path) -> sqlite3.Connection:
    """``file`` opened read-only: a reader must never create, lock for writing or migrate a
    run's database."""
    try:
        return sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise DatasetError(f"{file}: cannot open it as SQLite: {exc}") from None


# ---------------------------------------------------------------------------------------
# experiences -> rollouts


def _int_or_none(value: Any) -> int | None:
    """An int id (or its text) as an int, anything else as None: an ``eid.batch`` gives
    its explorer step this way, while eval batches (``"<step>/<taskset>"``) have none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _order(value: Any) -> tuple[int, Any]:
    """A sort key that puts numbers (in numeric order) before text, so mixed ids sort."""
    number = _int_or_none(value)
    return (0, number) if number is not None else (1, str(value))


def latest_batches(experiences: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The experiences without those of a batch written again later, and how many went.

    The pipeline saves a step's experiences in one write, so a batch's experiences sit
    together in a store; a batch found again after another one is a step explored
    again (a run resumed from an earlier checkpoint appends to the same store). Its
    later block replaces the earlier, as a re-run rollout does in eval results, rather
    than doubling each rollout's calls.
    """
    blocks: list[tuple[str, list[dict[str, Any]]]] = []
    for experience in experiences:
        batch = str(experience["eid"].get("batch"))
        if not blocks or blocks[-1][0] != batch:
            blocks.append((batch, []))
        blocks[-1][1].append(experience)
    last = {batch: place for place, (batch, _) in enumerate(blocks)}
    kept = [experience for place, (batch, block) in enumerate(blocks) if last[batch] == place
            for experience in block]
    return kept, len(experiences) - len(kept)


def group_rollouts(experiences: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Experiences grouped into rollouts, in display order (step, group, run)."""
    groups: dict[tuple[str, str, str], list[tuple[int, dict[str, Any]]]] = {}
    for place, experience in enumerate(experiences):
        eid = experience["eid"]
        key = (str(eid.get("batch")), str(eid.get("task")), str(eid.get("run")))
        groups.setdefault(key, []).append((place, experience))
    rollouts = []
    for members in groups.values():
        # eid.step orders a workflow's turns where it sets it; stored order breaks ties.
        members.sort(key=lambda member: (_int_or_none(member[1]["eid"].get("step")) or 0,
                                         member[0]))
        calls = [experience for _, experience in members]
        first, last = calls[0], calls[-1]
        eid = first["eid"]
        metrics: dict[str, Any] = {}
        for experience in calls:
            metrics.update(experience.get("metrics") or {})
        # A rollout that made no model call left only tunedsl's placeholder: no call to
        # show, its reward in its metrics.
        calls = [e for e in calls if not (e.get("info") or {}).get(NO_MODEL_CALL)]
        reward = last.get("reward") if calls else metrics.get("reward")
        task_index = config_value(first.get("info"), "task_index.index")
        rollouts.append({
            "step": _int_or_none(eid.get("batch")), "batch": eid.get("batch"),
            "group": _int_or_none(eid.get("task")),
            "task_index": (task_index if isinstance(task_index, int)
                           else _int_or_none(eid.get("task"))),
            "run": _int_or_none(eid.get("run")), "reward": reward,
            "metrics": metrics, "calls": [_call(experience) for experience in calls],
        })
    rollouts.sort(key=lambda r: (r["step"] is None, r["step"] or 0, _order(r["batch"]),
                                 _order(r["group"]), _order(r["run"])))
    return rollouts


def _call(experience: dict[str, Any]) -> dict[str, Any]:
    """One experience as a call in `ModelCall.to_json`'s shape.

    ``messages`` holds the conversation up to the model's reply (Trinity's chat
    workflows store it with the reply last); where only ``prompt_text`` was kept (a
    prompt already templated into text) it is one message of role ``"prompt"``.
    Experiences recorded from the OpenAI API (tunedsl's workflow) keep neither: only the
    reply's text is there.
    """
    messages = list(experience.get("messages") or [])
    reply_message: dict[str, Any] = {}
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        reply_message = messages.pop()
    if not messages and experience.get("prompt_text"):
        messages = [{"role": "prompt", "content": experience["prompt_text"]}]
    reply = reply_message.get("content")
    if not isinstance(reply, str):  # a tool-call-only reply has null content
        reply = experience.get("response_text") or ""
    tool_calls = []
    for call in reply_message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments", "{}")
        tool_calls.append({"id": call.get("id", ""), "name": function.get("name", ""),
                           "arguments": arguments if isinstance(arguments, str)
                           else json.dumps(arguments, ensure_ascii=False)})
    # Trinity keeps no finish reason; a response cut at the length limit is marked so.
    finish_reason = (experience.get("info") or {}).get("finish_reason")
    if finish_reason is None and experience.get("truncate_status") == "response_truncated":
        finish_reason = "length"
    return {
        "messages": messages, "reply": reply, "tool_calls": tool_calls,
        "reasoning": reply_message.get("reasoning_content"), "finish_reason": finish_reason,
        "prompt_tokens": experience.get("prompt_length"),
        "completion_tokens": experience.get("response_length"),
        "sampling": {"tools": experience["tools"]} if experience.get("tools") else {},
    }  # fmt: skip
