"""Serve one trace file to ui.perfetto.dev, the way Perfetto's `tools/open_trace_in_ui` does.

The UI may only fetch from `http://127.0.0.1:9001` (its content security policy allows that
port, the trace processor's RPC port). So: bind 127.0.0.1 only, answer `GET /<file name>` with
the file and `Access-Control-Allow-Origin: https://ui.perfetto.dev`, answer everything else
with an error (no listing, no other path, whatever its spelling), and stop once the file has
been sent in full.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

from tracekit.errors import PortInUseError

UI_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001
HOST = "127.0.0.1"


def trace_url(name: str, port: int = DEFAULT_PORT, origin: str = UI_ORIGIN) -> str:
    """The UI deep link that makes ui.perfetto.dev fetch `name` from this server."""
    return f"{origin}/#!/?url=http://{HOST}:{port}/{quote(name)}&referrer=tracekit"


@dataclass
class ServeResult:
    served: bool
    refused: int


class _Server(HTTPServer):
    allow_reuse_address = True
    file: Path
    served: bool
    refused: int
    log: Callable[[str], None]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "tracekit-view"
    sys_version = ""

    def log_message(self, format: str, *args: object) -> None:
        return  # one line per request is written by the handlers themselves

    def _allowed_host(self) -> bool:
        # DNS rebinding guard: a page from elsewhere that resolves its own name to 127.0.0.1
        # sends its own Host header; only the loopback names are ours.
        host = (self.headers.get("Host") or "").strip().lower()
        port = self.server.server_address[1]
        return host in {f"127.0.0.1:{port}", f"localhost:{port}"}

    def _is_the_file(self) -> bool:
        raw = self.path
        if not raw.startswith("/"):  # absolute-form (`GET http://host/x`) or `*`
            return False
        path = raw.split("?", 1)[0]
        decoded = unquote(path)
        return decoded == "/" + self.server.file.name and "\x00" not in decoded

    def _refuse(self, status: HTTPStatus) -> None:
        self.server.refused += 1
        self.server.log(
            f"refused {self.command} {self.path[:200]!r}: {status.value} {status.phrase}"
        )
        body = f"{status.value} {status.phrase}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if not self._allowed_host():
            self._refuse(HTTPStatus.FORBIDDEN)
            return
        if not self._is_the_file():
            self._refuse(HTTPStatus.NOT_FOUND)
            return
        path = self.server.file
        size = path.stat().st_size
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        with path.open("rb") as f:
            shutil.copyfileobj(f, self.wfile, 1 << 20)
        self.wfile.flush()
        self.server.served = True
        self.server.log(f"sent {path.name} ({size / 1e6:.1f} MB) to {self.client_address[0]}")

    def _not_allowed(self) -> None:
        self._refuse(HTTPStatus.METHOD_NOT_ALLOWED)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed


def make_server(
    file: Path, port: int = DEFAULT_PORT, log: Callable[[str], None] | None = None
) -> _Server:
    """A server bound to 127.0.0.1:`port` for `file` alone (port 0: any free port)."""
    try:
        server = _Server((HOST, port), _Handler)
    except OSError as exc:
        if exc.errno in (98, 48, 10048):  # EADDRINUSE on Linux, macOS, Windows
            msg = (
                f"port {port} on {HOST} is in use (a running `trace_processor server http` uses "
                f"it too); stop that program, or pass --port N (the public UI only fetches from {DEFAULT_PORT})"
            )
            raise PortInUseError(msg) from exc
        raise
    server.file = Path(file).resolve()
    server.served = False
    server.refused = 0
    server.log = log or (lambda line: print(line, file=sys.stderr))
    return server


def serve_until_fetched(server: _Server) -> ServeResult:
    """Handle requests until the file has been sent once; Ctrl-C stops it too (re-raised)."""
    try:
        while not server.served:
            server.handle_request()
    finally:
        server.server_close()
    return ServeResult(served=server.served, refused=server.refused)
