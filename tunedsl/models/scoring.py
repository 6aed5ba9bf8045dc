"""A teacher at an endpoint: the log-probs it gives token sequences, over the OpenAI
completions protocol.

``on_policy_distill`` needs the teacher's log-prob of each token the student sampled. A
local teacher runs its own passes; one at an endpoint is asked with the protocol's
``echo`` and ``logprobs``: the prompt is the token ids themselves (a list of ids is a
prompt in the protocol, so no text is re-tokenized), ``echo`` returns the prompt's tokens
with the log-prob of each given the ones before, and one request carries a whole batch
of sequences (a list of prompts). vLLM's and SGLang's OpenAI servers answer it; the served
model must read token ids as the student does (the same tokenizer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..data.json_text import is_count
from ..errors import RunError

#: What a teacher endpoint must answer, for the messages.
PROTOCOL = "completions with echo and logprobs over token-id prompts (vLLM's OpenAI server does)"


async def endpoint_logprobs(client: Any, model: str, name: str,
                            sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
                            ) -> list[list[float]]:
    """The teacher's log-prob of each reply token of each ``(prompt ids, reply ids)``
    sequence, from one request to ``client`` (an ``openai.AsyncOpenAI``) for ``model``;
    ``name`` is the auxiliary model's, for errors.

    Raises:
        RunError: the endpoint failed, or answered without a log-prob for every token.
    """
    if not sequences:
        return []
    import openai

    prompts = [[*prompt, *reply] for prompt, reply in sequences]
    said = f"auxiliary_models.{name}: the teacher's endpoint"
    try:
        completion = await client.completions.create(
            model=model, prompt=prompts, echo=True, logprobs=0, max_tokens=1,
            temperature=1.0)
    except (openai.APIError, ValueError) as exc:  # ValueError: a body that is not JSON
        raise RunError(f"{said} did not score the student's tokens ({type(exc).__name__}: "
                       f"{' '.join(str(exc).split())[:200]}); it must answer "
                       f"{PROTOCOL}") from None
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or \
            not all(is_count(getattr(choice, "index", None)) for choice in choices):
        raise RunError(f"{said} answered without a list of numbered choices; it must answer "
                       f"{PROTOCOL}")
    scores = []
    ordered = sorted(choices, key=lambda choice: choice.index)
    for number, ((prompt, reply), choice) in enumerate(zip(sequences, ordered), start=1):
        logprobs = getattr(choice, "logprobs", None)
        found = getattr(logprobs, "token_logprobs", None) if logprobs is not None else None
        wanted = found[len(prompt):len(prompt) + len(reply)] if isinstance(found, list) \
            else []
        if len(wanted) != len(reply) or any(score is None for score in wanted):
            raise RunError(f"{said} answered without a log-prob for each of the student's "
                           f"tokens; it must answer {PROTOCOL}")
        odd = next(((index, score) for index, score in enumerate(wanted, start=1)
                    if not is_log_prob(score)), None)
        if odd is not None:  # trained on, a string failed deep in the loss and +50 did not
            raise RunError(f"{said} answered {odd[1]!r} as the log-prob of token {odd[0]} "
                           f"of sequence {number}, where a log-prob is a finite number at "
                           f"most 0; it must answer {PROTOCOL}")
        scores.append([float(score) for score in wanted])
    if len(scores) != len(sequences):
        raise RunError(f"{said} answered {len(choices)} of {len(sequences)} sequences; it "
                       f"must answer {PROTOCOL}")
    return scores


#: How far above 0 a log-prob may round (a probability of 1 in float32 and back).
_ROUNDING = 1e-4


def is_log_prob(value: Any) -> bool:
    """Whether ``value`` is a log-prob: a finite number, at most 0 (give or take rounding)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value <= _ROUNDING
