"""API keys: text given where an environment variable's name belongs that is most likely
the key itself, which tunedsl never shows again (in an error, a config or a report)."""

from __future__ import annotations

import re

#: How API keys and tokens begin (OpenAI's and others', Hugging Face's, GitHub's, AWS's,
#: Google's, Slack's, GitLab's, Groq's, Perplexity's, Cerebras's, Fireworks', NVIDIA's,
#: Replicate's).
_KEY_PREFIXES = ("sk-", "sk_", "hf_", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "xai-",
                 "AKIA", "ASIA", "AIza", "xoxb-", "xoxp-", "glpat-", "gsk_", "pplx-", "csk-",
                 "fw_", "nvapi-", "r8_", "pk-")


def looks_like_a_key(text: str) -> bool:
    """Whether ``text``, given where an environment variable's name belongs, is most likely
    the key itself: a token's prefix, a ``NAME=value``, over 64 characters, 32 or more of
    lower case and digits mixed (random tokens are so, variables' names are not), or 24
    or more of upper case, lower case and digits with no ``_`` between words (Mistral's
    and DeepInfra's keys)."""
    lower, digit = any(c.islower() for c in text), any(c.isdigit() for c in text)
    return (text.startswith(_KEY_PREFIXES) or "=" in text or len(text) > 64
            or (len(text) >= 32 and lower and digit)
            or (len(text) >= 24 and lower and digit and any(c.isupper() for c in text)
                and "_" not in text))


#: A run of text a key is made of (between the marks around it: ``[``, ``"``, ``/``).
_TOKEN = re.compile(r"[A-Za-z0-9_\-]+")


def without_keys(text: str) -> str:
    """``text`` with each run of it that looks like a key (`looks_like_a_key`) left out, as
    an error quoting what was given shows it."""
    return _TOKEN.sub(lambda found: "<a key, not shown>" if looks_like_a_key(found[0])
                      and not found[0].isdigit() else found[0], text)  # (a number is none)
