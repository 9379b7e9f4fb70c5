"""`--keep SIZE` parsing and what `launch` passes to the ranks (issue 17)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.cli._sizes import parse_size
from tracekit.collectors import phasemap
from tracekit.collectors import runtime as rt
from tracekit.errors import InputError
from tracekit.launch.env import build_env
from tracekit.launch.options import LaunchOptions


def test_parse_size() -> None:
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("500 MB") == 500 * 10**6
    assert parse_size("64KiB") == 65536
    assert parse_size("1.5g") == 1_500_000_000
    assert parse_size("4096") == 4096
    for bad in ("two", "5 parsecs", "0", "-1GB"):
        with pytest.raises(InputError, match=r"expected a size|more than 0"):
            parse_size(bad, option="--keep")


def test_keep_reaches_every_rank_through_the_environment(tmp_path: Path) -> None:
    pmap = phasemap.load(phasemap.builtin_path("demo"))
    opts = LaunchOptions(
        command=["true"], phasemap_path=phasemap.builtin_path("demo"),
        keep_bytes=2 * 10**9, keep_seconds=86400.0,
    )  # fmt: skip
    env = build_env(tmp_path, opts, pmap, tmp_path / "phasemap.toml")
    assert env[rt.ENV_KEEP_BYTES] == "2000000000"
    assert env[rt.ENV_KEEP_SECONDS] == "86400.0"
    plain = build_env(tmp_path, LaunchOptions(["true"], opts.phasemap_path), pmap, tmp_path / "p")
    assert rt.ENV_KEEP_BYTES not in plain or plain[rt.ENV_KEEP_BYTES] == os.environ.get(
        rt.ENV_KEEP_BYTES
    )


def test_bad_keep_is_one_line_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["launch", "--keep", "lots", "--out", str(tmp_path), "--", "true"]
    )
    assert res.exit_code == 2
    assert "--keep 'lots': expected a size such as 2GB" in res.output


def test_metrics_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = CliRunner().invoke(
            cli, ["launch", "--metrics-port", str(port), "--out", str(tmp_path), "--", "true"]
        )
    assert res.exit_code == 2, res.output
    assert f"--metrics-port {port}: cannot serve on 127.0.0.1:{port}" in res.output
    # nothing ran: no half-made run directory is left behind
    assert list(tmp_path.iterdir()) == []
