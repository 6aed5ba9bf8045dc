"""Turns of a multi-turn rollout: the reward each turn earned and the state it began in.

A workflow that acts in an environment marks the end of each turn on the trained model,
``model.end_turn(reward=..., state=...)``. The turn is every call the model answered since
the previous mark: its reward goes to its last call and its state to its first (the state
the agent acted on), which is how Trinity's GiGPO reads experiences (``step_reward`` and
``env_state_hash`` in ``Experience.info``, one experience per call).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs

#: The largest reward tunedsl takes, a rollout's or a turn's: the group's mean and spread
#: (float32 on Trinity) are computed from squares, which overflow for rewards near float's
#: limit.
LARGEST_REWARD = 1e15

#: A state's text kept as it is up to this length; a longer one is kept as its SHA-256
#: (grouping is the same: both are functions of the state), so a whole rendered board or
#: page does not ride along with every experience.
STATE_CHARACTERS = 256


@attrs.frozen
class Turn:
    """One marked turn.

    Attributes:
        calls: The calls the model had answered in the rollout when the turn ended.
        reward: The turn's own reward, or None.
        state: The turn's state key (text), or None.
    """

    calls: int
    reward: float | None
    state: str | None


@attrs.frozen
class CallTurns:
    """Per call of a rollout: its turn reward and state key.

    Attributes:
        rewards: Each call's reward (None for a call no turn rewarded), or None when no turn
            gave a reward.
        states: Each call's state key (None for a call that began no turn), or None when
            no turn gave a state.
    """

    rewards: tuple[float | None, ...] | None
    states: tuple[str | None, ...] | None


def state_key(state: Any) -> str:
    """``state`` as the text key GiGPO groups calls by: text as it is, other JSON data
    (numbers, lists, tuples, dicts) as canonical JSON; longer than `STATE_CHARACTERS`, its
    SHA-256.

    Raises:
        TypeError: anything else (a set, an object): there is no stable text for it.
    """
    if isinstance(state, str):
        text = state
    else:
        try:
            text = json.dumps(state, sort_keys=True, ensure_ascii=False, allow_nan=False,
                              separators=(",", ":"), default=_numpy_scalar)
        except RecursionError:
            raise TypeError("end_turn's state is nested too deep to make a key of; give "
                            "str(...) of a key that identifies it") from None
        except (TypeError, ValueError) as error:
            raise TypeError(f"end_turn's state must be text or JSON data (numbers, lists, "
                            f"tuples, dicts of them) that names the environment's state; got "
                            f"{type(state).__name__} ({error}): give str(...) of a key that "
                            f"identifies it") from None
    if len(text) <= STATE_CHARACTERS:
        return text
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _numpy_scalar(value: Any) -> Any:
    """A NumPy number (``np.int64(3)``) as the Python number it holds, for a state key."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def turn_reward(reward: Any) -> float:
    """``reward`` as a float.

    Raises:
        TypeError: not a number (a bool too: ``True`` is a forgotten float()).
        ValueError: not finite, or larger than `LARGEST_REWARD`.
    """
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
        raise TypeError(f"end_turn's reward must be a number; got {reward!r} (a "
                        f"{type(reward).__name__})" + (": write 1.0 or 0.0" if isinstance(
                            reward, bool) else ""))
    try:
        value = float(reward)
    except OverflowError:  # an int past float's range
        value = math.inf if cast(int, reward) > 0 else -math.inf
    if not math.isfinite(value):
        raise ValueError(f"end_turn's reward must be a finite number; got {value!r}")
    if abs(value) > LARGEST_REWARD:
        raise ValueError(f"end_turn's reward must be at most {LARGEST_REWARD:g} in size (larger "
                         f"ones overflow the group's statistics); got {value!r}: scale it down")
    return value


def per_call(turns: Sequence[Turn], calls: int) -> CallTurns:
    """``turns`` spread over a rollout's ``calls`` calls: a turn's reward on its last call,
    its state on its first (the state the agent acted on). A turn that made no call of its
    own adds its reward to the call before it (the first call, when none came before) and
    has no state, as no call acted on it; calls after the last turn belong to none. The
    rewards given add up to the same total whenever the rollout made a call."""
    rewards: list[float | None] = [None] * calls
    states: list[str | None] = [None] * calls
    start, early = 0, None
    for turn in turns:
        end = min(turn.calls, calls)
        if end > start:
            rewards[end - 1] = _added(rewards[end - 1], turn.reward)
            if turn.state is not None:
                states[start] = turn.state
            start = end
        elif start > 0:
            rewards[start - 1] = _added(rewards[start - 1], turn.reward)
        else:
            early = _added(early, turn.reward)
    if early is not None and calls > 0:
        rewards[0] = _added(rewards[0], early)
    return CallTurns(rewards=tuple(rewards) if any(r is not None for r in rewards) else None,
                     states=tuple(states) if any(s is not None for s in states) else None)


def turns_json(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """Turns as plain data, as eval results and ``rollouts.jsonl`` keep them."""
    return [attrs.asdict(turn) for turn in turns]


class TurnMarks:
    """The turns marked on a model, by `MarksTurns.end_turn`.

    Args:
        count_calls: The calls the model has answered so far.
    """

    def __init__(self, count_calls: Callable[[], int]) -> None:
        self._count_calls = count_calls
        self.turns: list[Turn] = []

    def end(self, reward: Any = None, state: Any = None) -> None:
        """Close the turn made of the calls answered since the previous mark."""
        self.turns.append(Turn(calls=self._count_calls(),
                               reward=None if reward is None else turn_reward(reward),
                               state=None if state is None else state_key(state)))

    def position(self) -> tuple[int, int]:
        """The turns marked and the calls answered so far, for `since`."""
        return len(self.turns), self._count_calls()

    def since(self, turns: int, calls: int) -> tuple[Turn, ...]:
        """The turns marked after the first ``turns``, counted from the call numbered
        ``calls`` (a model used for several rollouts keeps counting)."""
        return tuple(attrs.evolve(turn, calls=turn.calls - calls)
                     for turn in self.turns[turns:])


def _added(first: float | None, second: float | None) -> float | None:
    if first is None:
        return second
    return first if second is None else first + second


class MarksTurns:
    """`end_turn` for a chat model whose ``turns`` count its calls (mixed into each of
    tunedsl's models)."""

    turns: TurnMarks

    def end_turn(self, *, reward: float | None = None, state: Any = None) -> None:
        """End the workflow's current turn: the calls this model answered since the last
        ``end_turn`` (or since the rollout began).

        For agents acting in an environment over several turns: ``reward`` is what the turn
        earned (the environment's step reward) and ``state`` names the state the turn
        began in (the observation the agent acted on). ``gigpo`` compares turns that began
        in the same state across a task's rollouts; other algorithms train on the
        rollout's reward alone.

        Args:
            reward: The turn's own reward: a finite number, or None.
            state: A key of the turn's starting state: text, or JSON data (a tuple, a list,
                a number); longer than `STATE_CHARACTERS`, it is kept as its SHA-256.

        Raises:
            TypeError: the reward is not a number, or the state has no stable text.
            ValueError: the reward is not finite.
        """
        self.turns.end(reward, state)
