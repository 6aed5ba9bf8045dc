"""An HTTP client for the openai package whose connections follow the running event loop.

Pooled connections belong to the event loop that opened them. A synchronous agent that a
workflow runs in a thread (``asyncio.to_thread(lambda: asyncio.run(agent(...)))``) calls
the endpoint from a loop of its own, and every request on the first loop's connections
then fails with asyncio's "attached to a different loop". Under the openai client, every
method (``chat.completions.create`` and ``parse``, ``models.list``, ``responses``,
``embeddings``, raw and streaming responses, copies made with ``with_options``) sends its
request through the one HTTP client it was given, so the choice of connections is made
there, once, for all of them.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from typing import Any


@functools.lru_cache(maxsize=1)
def _client_class() -> type:
    """`LoopBoundHttpClient`, made on the HTTP client class the installed openai package
    takes (``httpx2`` since openai 3, ``httpx`` before) when first needed."""
    try:
        from httpx2 import AsyncClient, ConnectError, ConnectTimeout, RemoteProtocolError
    except ImportError:  # pragma: no cover - an older openai
        from httpx import (  # type: ignore[assignment]
            AsyncClient,
            ConnectError,
            ConnectTimeout,
            RemoteProtocolError,
        )

    class LoopBoundHttpClient(AsyncClient):
        """Sends each request through the running event loop's own client (see
        `loop_bound_http_client`)."""

        def __init__(self, *, timeout: float) -> None:
            super().__init__(timeout=timeout)
            self._timeout_seconds = timeout
            self._home: Any = _running_loop()
            self._by_loop: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

        def _here(self) -> Any:
            loop = asyncio.get_running_loop()
            client = self._by_loop.get(loop)
            if client is None:
                if self._home is None and threading.current_thread() is threading.main_thread():
                    self._home = loop
                client = self._by_loop[loop] = (_first if loop is self._home else _another)(
                    self._timeout_seconds)
            return client

        async def send(self, request: Any, **options: Any) -> Any:
            try:
                return await self._here().send(request, **options)
            except ConnectTimeout as exc:
                # The openai package's aiohttp transport maps every aiohttp connection error
                # to a ConnectTimeout, which the client says as "Request timed out.": a
                # server that closed the connection read as a timeout (an AgentScope agent
                # failed so after its retries; sweep 50 B-W7). Said as what it was.
                cause = exc.__cause__
                if cause is None or isinstance(cause, TimeoutError) or \
                        type(cause).__module__.split(".")[0] != "aiohttp":
                    raise
                closed = type(cause).__name__ == "ServerDisconnectedError"
                raise (RemoteProtocolError if closed else ConnectError)(
                    str(cause) or type(cause).__name__, request=request) from cause

        async def aclose(self) -> None:
            """Close the running loop's connections (another loop's cannot be closed from
            here: they go with their loop) and this client."""
            client = self._by_loop.pop(asyncio.get_running_loop(), None)
            if client is not None:
                await client.aclose()
            await super().aclose()

    return LoopBoundHttpClient


def _running_loop() -> Any:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _first(timeout: float) -> Any:
    """The home loop's client: the openai package's aiohttp one, whose pool stays fast
    under high concurrency, when its extra is installed. (Only there: an aiohttp session
    left open when its loop ends warns, and a thread's loop ends with no word to it.)"""
    import openai

    try:
        return openai.DefaultAioHttpClient(timeout=timeout)
    except (AttributeError, ImportError, RuntimeError):
        return _another(timeout)


def _another(timeout: float) -> Any:
    import openai

    return openai.DefaultAsyncHttpxClient(timeout=timeout)


def loop_bound_http_client(*, timeout: float) -> Any:
    """An HTTP client for ``openai.AsyncOpenAI(http_client=...)`` that sends each request
    through connections of the running event loop: the home loop's (the one running where
    it is made, else the first of the main thread's to send) from the openai package's
    aiohttp client, any other loop's from a client of its own, made on first use there and
    dropped with that loop."""
    return _client_class()(timeout=timeout)
