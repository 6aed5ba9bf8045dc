"""Text that no UTF-8 file, request or tokenizer holds: lone surrogates.

JSON's ``\\ud800`` escape without its pair reads as one, and so does every byte that is not
UTF-8 in a command-line argument or an environment variable (Python decodes them with
``surrogateescape``). Each reader refuses them where they enter, by this one test.
"""

from __future__ import annotations

import re

#: A UTF-16 surrogate code point, which UTF-8 cannot encode.
SURROGATE = re.compile("[\ud800-\udfff]")


def holds_a_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate."""
    return SURROGATE.search(text) is not None
