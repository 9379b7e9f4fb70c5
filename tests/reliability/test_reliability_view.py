"""`tracekit view`'s server against a wider set of hostile requests than its own tests: only
its one file, only on loopback, the CORS header only on that file and only for the Perfetto UI."""

from __future__ import annotations

import http.client
import threading
from pathlib import Path

import pytest

from tracekit.export.serve import UI_ORIGIN, make_server

PROBES = [
    "/%252e%252e%252fsecret.txt",  # double-encoded traversal
    "/..%5csecret.txt",  # encoded backslash
    "/..\\secret.txt",
    "/%c0%ae%c0%ae/secret.txt",  # overlong UTF-8 dots
    "/./trace.pftrace",
    "/trace.pftrace/",
    "/trace.pftrace/../secret.txt",
    "/%2Fetc%2Fpasswd",
    "/%2e%2e%2f%2e%2e%2fetc/passwd",
    "/trace.pftrace%2f..%2fsecret.txt",
    "/secret.txt#/trace.pftrace",
    "/?/trace.pftrace",
    "/link.pftrace",  # a symlink beside it pointing at the secret
]


@pytest.fixture
def served(tmp_path: Path) -> tuple[int, Path, threading.Thread, object]:
    d = tmp_path / "run"
    d.mkdir()
    trace = d / "trace.pftrace"
    trace.write_bytes(b"\x0a\x00PERFETTO-BYTES")
    (d / "secret.txt").write_text("TOP SECRET")
    (d / "link.pftrace").symlink_to(d / "secret.txt")
    server = make_server(trace, 0, log=lambda _line: None)
    port = server.server_address[1]

    def loop() -> None:
        while not server.served:
            server.handle_request()
        server.server_close()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return port, trace, t, server


def _get(port: int, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", f"127.0.0.1:{port}")
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def test_only_the_one_file_and_cors_only_for_the_ui(
    served: tuple[int, Path, threading.Thread, object],
) -> None:
    port, trace, thread, server = served
    assert server.server_address[0] == "127.0.0.1"  # type: ignore[attr-defined]
    for path in PROBES:
        status, headers, body = _get(port, path, Origin="https://evil.example")
        assert status in (400, 404), path
        assert b"TOP SECRET" not in body, path
        assert "access-control-allow-origin" not in headers, path
    # the file itself: the UI's origin and no other, whatever Origin the request claims
    status, headers, body = _get(port, "/trace.pftrace", Origin="https://evil.example")
    assert status == 200
    assert body == trace.read_bytes()
    assert headers["access-control-allow-origin"] == UI_ORIGIN == "https://ui.perfetto.dev"
    assert "access-control-allow-credentials" not in headers
    thread.join(timeout=10)
    assert not thread.is_alive()  # served once, then stopped
