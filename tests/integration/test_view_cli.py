"""`tracekit view`: serves exactly one file on loopback to ui.perfetto.dev, then exits."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from tests.outputs_synth import make_run
from tracekit.cli import cli
from tracekit.export.serve import make_server, trace_url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Viewer:
    def __init__(self, target: Path, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tracekit",
                "view",
                str(target),
                "--port",
                str(port),
                "--no-open",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def request(
        self, method: str, path: str, *, host: str | None = None, body: bytes | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or f"127.0.0.1:{self.port}")
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def raw(self, request_line: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(
                request_line + b"\r\nHost: 127.0.0.1:" + str(self.port).encode() + b"\r\n\r\n"
            )
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out

    def stop(self) -> tuple[int, str]:
        try:
            _, err = self.proc.communicate(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return self.proc.returncode, err


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    make_run(run, ranks=1, cycles=2)
    (run / "secret.txt").write_text("do not serve me")
    r = subprocess.run(
        [sys.executable, "-m", "tracekit", "perfetto", str(run)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return run / "tracekit.pftrace"


def test_serves_only_the_file_then_exits(trace: Path) -> None:
    # GIVEN a viewer on a free port
    v = Viewer(trace.parent, _free_port())
    try:
        assert v.url == trace_url("tracekit.pftrace", v.port)
        assert v.url.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")
        # WHEN anything but the file is asked for
        probes = [
            "/",
            "/secret.txt",
            "/../secret.txt",
            "/..%2fsecret.txt",
            "/%2e%2e/secret.txt",
            "/%2E%2E%2Fsecret.txt",
            "/run/tracekit.pftrace",
            f"/{trace.parent}/secret.txt",
            "//etc/passwd",
            "/etc/passwd",
            "/tracekit.pftrace/..",
            "/tracekit.pftrace%00.txt",
            "/TRACEKIT.PFTRACE",
        ]
        for path in probes:
            status, _, body = v.request("GET", path)
            # THEN 404 and nothing of the directory
            assert status == 404, path
            assert b"do not serve me" not in body
            assert b"tracekit.pftrace" not in body
        assert v.request("POST", f"/{trace.name}", body=b"x")[0] == 405
        assert v.request("HEAD", f"/{trace.name}")[0] == 405
        # absolute-form request line and a foreign Host header (DNS rebinding) are refused
        assert v.raw(b"GET http://127.0.0.1/etc/passwd HTTP/1.1").startswith(b"HTTP/1.0 404")
        assert v.request("GET", f"/{trace.name}", host=f"evil.example:{v.port}")[0] == 403
        assert v.proc.poll() is None  # still waiting for the real fetch
        # WHEN the UI fetches the file
        status, headers, body = v.request("GET", f"/{quote(trace.name)}?cache=1")
        # THEN the bytes come with the UI's CORS header and the server stops
        assert status == 200
        assert body == trace.read_bytes()
        assert headers["access-control-allow-origin"] == "https://ui.perfetto.dev"
        assert headers["cache-control"] == "no-cache"
    finally:
        code, err = v.stop()
    assert code == 0, err
    assert "stopped serving" in err
    assert "Traceback" not in err


def test_binds_loopback_only(trace: Path) -> None:
    server = make_server(trace, 0, log=lambda _: None)
    try:
        assert server.server_address[0] == "127.0.0.1"
        # a non-loopback address of this machine, when it has one, must not reach it
        try:
            other = socket.gethostbyname(socket.gethostname())
        except OSError:
            other = "127.0.0.1"
        if not other.startswith("127."):
            with socket.socket() as s:
                s.settimeout(2)
                assert s.connect_ex((other, server.server_address[1])) != 0
    finally:
        server.server_close()


def test_port_in_use_is_one_line_exit_2(trace: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "tracekit",
                "view",
                str(trace),
                "--port",
                str(port),
                "--no-open",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert r.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_ctrl_c_stops_without_traceback(trace: Path) -> None:
    v = Viewer(trace, _free_port())
    v.proc.send_signal(signal.SIGINT)
    code, err = v.stop()
    assert code == 130
    assert "Traceback" not in err


def test_run_dir_without_trace_gets_one_written(tmp_path: Path) -> None:
    make_run(tmp_path / "run", ranks=1, cycles=1)
    v = Viewer(tmp_path / "run", _free_port())
    try:
        status, _, body = v.request("GET", "/tracekit.pftrace")
        assert status == 200
        assert body == (tmp_path / "run" / "tracekit.pftrace").read_bytes()
    finally:
        code, err = v.stop()
    assert code == 0, err
    assert "Wrote" in err


def test_missing_target_is_exit_2() -> None:
    result = CliRunner().invoke(cli, ["view", "/nonexistent/run", "--no-open"])
    assert result.exit_code == 2
    assert "no such file or run directory" in result.output
