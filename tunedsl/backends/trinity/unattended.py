"""Trinity-RFT's validators run with nobody at the keyboard."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def unattended(quiet: bool = True) -> Iterator[None]:
    """Run Trinity's validators with nobody at the keyboard.

    Trinity's GPU memory check asks "continue training? [y/n]" on a terminal and waits
    30 s when it fails (only where CUDA is visible); with stdin no terminal it goes on at
    once, as it would after the wait. ``quiet`` also silences its logs (it shouts "NO GPU
    DETECTED" on every CPU machine) and the deprecation warnings of the libraries it calls
    (the Tinker SDK's FutureWarning, with Trinity's file:line and source line, which the
    user can do nothing about); a rejection still reaches the user as the exception's
    message.
    """
    stdin = sys.stdin
    sys.stdin = io.StringIO()
    if quiet:
        logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        sys.stdin = stdin
        if quiet:
            logging.disable(logging.NOTSET)
