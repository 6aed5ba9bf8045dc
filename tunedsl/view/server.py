"""Serve a `Viewer` over HTTP: the page at ``/`` and its data at ``/api/...``, read-only.

The standard library's threading HTTP server is enough here: one user, small JSON
answers, and nothing to install. Only GET and HEAD are answered; the page and its
script are served from the package, so nothing is fetched from the network.
"""

from __future__ import annotations

import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..data.json_text import dumps
from ..errors import TunedslError, exception_text
from .app import BadRequest, Viewer, page_html

#: The names this machine answers to on its loopback address.
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _handler(viewer: Viewer, host: str) -> type[BaseHTTPRequestHandler]:
    page = page_html().encode("utf-8")
    # Served on this machine only: a request naming another host is a web page that made
    # its own name resolve here (DNS rebinding), after the rollouts; answered on a loopback
    # address, only requests for this machine's names are.
    names = _LOOPBACK_NAMES | {host} if _loopback(host) else None

    class Handler(BaseHTTPRequestHandler):
        server_version = "tunedsl-view"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked = urlsplit(f"//{self.headers.get('Host', '')}").hostname or ""
            if names is not None and asked not in names:
                self._json(HTTPStatus.FORBIDDEN, {
                    "error": f"the viewer answers requests for this machine only (as "
                             f"http://127.0.0.1 or http://localhost), not for {asked!r}"})
                return
            url = urlsplit(self.path)
            if url.path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, "text/html; charset=utf-8", page)
                return
            if not url.path.startswith("/api/"):
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no page {url.path}"})
                return
            try:
                answer = viewer.answer(url.path[len("/api/"):], dict(parse_qsl(url.query)))
            except LookupError:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})
            except BadRequest as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            except TunedslError as exc:  # a file it shows went bad: said, the server goes on
                self._json(HTTPStatus.CONFLICT, {"error": str(exc)})
            except Exception as exc:  # a bug: one line to the page, no traceback in the terminal
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR,
                           {"error": f"internal error in tunedsl: {type(exc).__name__}: "
                                     f"{exception_text(exc)}"})
            else:
                self._json(HTTPStatus.OK, answer)

        def do_HEAD(self) -> None:  # noqa: N802
            self.do_GET()

        def _refuse(self) -> None:
            self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "the viewer is read-only"})

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

        def _json(self, status: HTTPStatus, value: Any) -> None:
            body = dumps(value).encode("utf-8")
            self._send(status, "application/json; charset=utf-8", body)

        def _send(self, status: HTTPStatus, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # a request log would bury the URL line the user needs

    return Handler


def make_server(viewer: Viewer, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server for ``viewer``, bound and ready (``serve_forever`` starts it); port 0 takes
    any free port (``server.server_address`` tells which)."""
    server = ThreadingHTTPServer((host, port), _handler(viewer, host))
    server.daemon_threads = True
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    """The address to open in a browser."""
    host, port = (str(part) for part in server.server_address[:2])
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (any 127.x address, ::1, localhost)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(viewer: Viewer, host: str, port: int, open_browser: bool) -> None:
    """Serve until Ctrl-C, printing the URL (and opening it unless told not to)."""
    server = make_server(viewer, host, port)
    url = url_of(server)
    print(f"serving {url}  (Ctrl-C to stop)", file=sys.stderr, flush=True)
    if not _loopback(host):
        print(f"note: {host} may be reachable from other machines; the page shows every "
              f"rollout it reads", file=sys.stderr)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
