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

from collections.abc import Sequence
from typing import Any

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
    try:
        completion = await client.completions.create(
            model=model, prompt=prompts, echo=True, logprobs=0, max_tokens=1,
            temperature=1.0)
    except openai.APIError as exc:
        raise RunError(f"auxiliary_models.{name}: the teacher's endpoint did not score the "
                       f"student's tokens ({type(exc).__name__}: {exc}); it must answer "
                       f"{PROTOCOL}") from None
    choices = sorted(completion.choices, key=lambda choice: choice.index)
    scores = []
    for (prompt, reply), choice in zip(sequences, choices):
        found = (choice.logprobs.token_logprobs or []) if choice.logprobs else []
        wanted = found[len(prompt):len(prompt) + len(reply)]
        if len(wanted) != len(reply) or any(score is None for score in wanted):
            raise RunError(f"auxiliary_models.{name}: the teacher's endpoint answered without "
                           f"a log-prob for each of the student's tokens; it must answer "
                           f"{PROTOCOL}")
        scores.append([float(score) for score in wanted])
    if len(scores) != len(sequences):
        raise RunError(f"auxiliary_models.{name}: the teacher's endpoint answered "
                       f"{len(choices)} of {len(sequences)} sequences; it must answer "
                       f"{PROTOCOL}")
    return scores
