"""Datasets of conversations, what supervised fine-tuning (``sft``, alone or as a warm-up
before RL) learns from: their shape, checked before a run on every backend.

A row holds a ``messages`` column of chat messages, as Trinity-RFT's SFT reader takes them
(``buffer/schema/formatter.py``, ``SFTFormatter`` with ``prompt_type: messages``): a list
of ``{"role", "content"}`` objects, or that list as JSON text, the last message the
assistant's. SFT learns that last reply, every message before it being the prompt; an
optional ``tools`` column holds the tools the chat template shows.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import DatasetError, did_you_mean
from .as_read import refuse_rows_read_otherwise
from .quality import MAX_ROWS, located_rows

#: The column of messages (Trinity's ``format.messages_key``, which tunedsl writes).
MESSAGES_KEY = "messages"
#: The column of tools (Trinity's default ``format.tools_key``).
TOOLS_KEY = "tools"
ROLES = ("system", "user", "assistant", "tool")
#: How many bad rows a refusal names (the rest are counted).
SHOWN = 3


def conversation(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A row's messages (decoded when stored as JSON text); the row passed
    `conversation_problem`."""
    messages = row[MESSAGES_KEY]
    return json.loads(messages) if isinstance(messages, str) else messages


def conversation_problem(row: dict[str, Any]) -> str | None:
    """What keeps a row from being a conversation SFT can learn from, or None."""
    if MESSAGES_KEY not in row:
        return (f"no {MESSAGES_KEY!r} column{did_you_mean(MESSAGES_KEY, tuple(row))}; its "
                f"keys are {', '.join(map(str, row)) or 'none'}")
    messages = row[MESSAGES_KEY]
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError as exc:
            return f"{MESSAGES_KEY!r} is text but not JSON ({exc.msg})"
    if not isinstance(messages, list) or not messages:
        return f"{MESSAGES_KEY!r} must be a non-empty list of chat messages (got {messages!r})"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return (f"message {index} must be an object with a role of "
                    f"{', '.join(ROLES)} (got {message!r})")
        calls = tool_calls_problem(message)
        if calls is not None:
            return f"message {index} ({message['role']}) {calls}"
        content = message.get("content")
        if isinstance(content, list):  # OpenAI's content parts: the template wants one text
            return (f"message {index} ({message['role']}) has its content as a list of "
                    f"parts; give the text as one string (SFT's chat template reads text)")
        if not isinstance(content, str) and not (content is None and message.get("tool_calls")):
            return f"message {index} ({message['role']}) has no text content (got {content!r})"
    if messages[-1]["role"] != "assistant":
        return (f"the last message is the {messages[-1]['role']}'s; SFT learns the last "
                f"message, which must be the assistant's reply")
    if len(messages) < 2:
        return "the assistant's reply has no message before it to answer"
    return tools_problem(row.get(TOOLS_KEY))


#: A tool call as chat templates read it (OpenAI's shape; arguments as JSON text or an object).
CALL_SHAPE = '{"type": "function", "function": {"name": "...", "arguments": "{...}"}}'


def tool_calls_problem(message: dict[str, Any]) -> str | None:
    """What keeps a message's ``tool_calls`` from being calls a chat template renders, or
    None. A template loops over the list and prints each call's function name and
    arguments: text, or a call without them, came out as garbage or a template error."""
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if message["role"] != "assistant":
        return "has 'tool_calls'; only the assistant's messages call tools"
    import reprlib

    if not isinstance(calls, list):
        return f"'tool_calls' must be a list of calls like {CALL_SHAPE} (got {reprlib.repr(calls)})"
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if (not isinstance(function, dict) or not isinstance(function.get("name"), str)
                or not function["name"]
                or not isinstance(function.get("arguments"), (str, dict))):
            return (f"tool call {number} must be like {CALL_SHAPE} (got "
                    f"{reprlib.repr(call)})")
    return None


def tools(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A row's tools (decoded when stored as JSON text, as Trinity's ``SFTFormatter`` reads
    them); the row passed `conversation_problem`."""
    found = row.get(TOOLS_KEY)
    if isinstance(found, str):
        return json.loads(found) if found else None
    return found


def tools_problem(found: Any) -> str | None:
    """What keeps a ``tools`` value from being tools a chat template shows, or None."""
    if isinstance(found, str):
        if not found:
            return None
        try:
            found = json.loads(found)
        except json.JSONDecodeError as exc:
            return (f"{TOOLS_KEY!r} is text but not JSON ({exc.msg}); give a list of tool "
                    f"objects, or that list as JSON text")
    if found is None or (isinstance(found, list) and all(isinstance(t, dict) for t in found)):
        return None
    import reprlib

    return (f"{TOOLS_KEY!r} must be a list of tool objects, or that list as JSON text (got "
            f"{reprlib.repr(found)})")


def check_conversations(dataset: Any, section: str, batch_size: int) -> tuple[str, int | None]:
    """Read a dataset of conversations in one streamed pass (up to `MAX_ROWS`) and check
    every row; return a report line and the row count (None when there are more).

    Raises:
        DatasetError: naming the first bad rows (file:line) and what is wrong with each.
    """
    refuse_rows_read_otherwise(dataset, None, section)
    where = f"{dataset.path} (split {dataset.split!r})"
    problems: list[str] = []
    bad, count, truncated = 0, 0, False
    for at, row in located_rows(dataset, label=section):
        if count == MAX_ROWS:
            truncated = True
            break
        count += 1
        problem = conversation_problem(row)
        if problem is not None:
            bad += 1
            if len(problems) < SHOWN:
                problems.append(f"{section}: {at}: {problem}")
    if problems:
        more = f" ({bad - len(problems)} more rows like these)" if bad > len(problems) else ""
        raise DatasetError("\n".join([*problems[:-1], problems[-1] + more]))
    if not count:
        raise DatasetError(f"{section}: {where} has no rows; point it at a dataset of "
                           f"conversations")
    if count < batch_size:
        raise DatasetError(f"{section}: {where} has {count} conversations, fewer than a "
                           f"step's batch_size = {batch_size}; lower batch_size or add "
                           f"conversations")
    read = f"the first {count}" if truncated else f"{count}"
    return (f"{section}: {where}: {read} conversations readable, each ending in the "
            f"assistant's reply to learn"), None if truncated else count
