"""Secrets stay out of everything tracekit writes; nothing read from disk is unpickled or
evaluated; the bootstrap never activates outside a tracekit run."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability._programs import clean_env, launch_cmd, run, server_cmd, write_server
from tracekit.collectors.redact import REDACTED, redact_argv, redact_value
from tracekit.launch.env import BOOTSTRAP_DIR
from tracekit.store.reader import read_table

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-tracekitTEST0123456789abcdefXYZ"
HF_TOKEN = "hf_tracekitTEST0123456789abcdefXYZ"
PASSWORD = "correct-horse-battery-staple-77"
ENV_KEY = "vllm-env-secret-4242"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--api-key", "abc"], ["--api-key", REDACTED]),
        (["--api-key=abc"], [f"--api-key={REDACTED}"]),
        (["--hf_token", "t", "--port", "30000"], ["--hf_token", REDACTED, "--port", "30000"]),
        (["--password"], ["--password"]),  # no value to hide
        (["--password", "--next"], ["--password", "--next"]),
        # configuration that only mentions tokens stays: diffs need it
        (["--speculative-num-draft-tokens", "4"], ["--speculative-num-draft-tokens", "4"]),
        (["--speculative-token-map", "m.pt"], ["--speculative-token-map", "m.pt"]),
        (["--max-prefill-tokens", "8192"], ["--max-prefill-tokens", "8192"]),
        (["--model", "https://me:pw@host/m"], ["--model", f"https://me:{REDACTED}@host/m"]),
        ([HF_TOKEN], [REDACTED]),
        ([f"--header=Bearer {API_KEY}"], [f"--header=Bearer {REDACTED}"]),
        (["python", "-m", "sglang.launch_server"], ["python", "-m", "sglang.launch_server"]),
    ],
)
def test_redact_argv_known_answers(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_redact_value_keeps_plain_values() -> None:
    assert redact_value("/usr/lib:/opt/lib") == "/usr/lib:/opt/lib"
    assert redact_value("tcp://10.0.0.1:29500") == "tcp://10.0.0.1:29500"
    assert redact_value("redis://u:p4ss@h:6379/0") == f"redis://u:{REDACTED}@h:6379/0"


def _all_text(root: Path) -> str:
    """Every byte tracekit wrote under `root` that is not Parquet (read below), as text."""
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace")
        for p in root.rglob("*")
        if p.is_file() and p.suffix != ".parquet"
    )


def test_secrets_in_the_command_line_and_environment_are_never_written(tmp_path: Path) -> None:
    # GIVEN a server started with credentials on its command line and in its environment
    server = write_server(tmp_path / "srv")
    cmd = [
        *server_cmd(server, 2, 4),
        "--api-key",
        API_KEY,
        f"--hf-token={HF_TOKEN}",
        "--db",
        f"postgres://svc:{PASSWORD}@db:5432/x",
    ]
    out = tmp_path / "runs"
    # WHEN it runs under tracekit and a report is written
    res = run(
        launch_cmd(server, out, "secret", cmd),
        server,
        VLLM_API_KEY=ENV_KEY,
        NCCL_DEBUG_TOKEN=ENV_KEY,
        MASTER_ADDR=f"https://svc:{PASSWORD}@10.1.2.3",
    )
    assert res.returncode == 0, res.stderr
    run_dir = out / "secret"
    rep = subprocess.run(
        [sys.executable, "-m", "tracekit", "report", str(run_dir), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert rep.returncode == 0, rep.stderr
    summary = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    # THEN no secret is anywhere: raw files, run.json, the manifests table, report, output
    manifests = read_table(run_dir, "manifests")
    table_text = json.dumps(manifests.rows())
    written = "\n".join(
        [
            _all_text(run_dir),
            table_text,
            (tmp_path / "r.html").read_text(),
            res.stdout,
            res.stderr,
            summary.stdout,
        ]
    )
    for secret in (API_KEY, HF_TOKEN, PASSWORD, ENV_KEY):
        assert secret not in written
    # while the rest of the command line is kept, and the redaction is visible
    argv = manifests.filter(manifests["key"] == "argv")["value"].to_list()
    assert argv
    assert all("--api-key <redacted>" in a and "server.py" in a for a in argv)
    env = dict(
        manifests.filter(manifests["section"] == "env").select("key", "value").unique().rows()
    )
    assert env["VLLM_API_KEY"] == REDACTED
    assert env["MASTER_ADDR"] == f"https://svc:{REDACTED}@10.1.2.3"
    assert json.loads((run_dir / "run.json").read_text())["command"][-5:] == [
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--db",
        f"postgres://svc:{REDACTED}@db:5432/x",
    ]


# -- no pickle / eval of anything read from disk -------------------------------------------

SOURCE_DIRS = ("tracekit", "collectors", "analyzers")
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "marshal", "shelve", "jsonpickle"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}


def _unsafe_uses(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names if a.name in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module in UNSAFE_MODULES:
            found.append(f"{where} from {node.module} import")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in UNSAFE_CALLS:
                found.append(f"{where} {func.id}()")
            elif isinstance(func, ast.Attribute):
                owner = func.value.id if isinstance(func.value, ast.Name) else ""
                if func.attr in {"load", "loads", "Unpickler"} and owner in UNSAFE_MODULES:
                    found.append(f"{where} {owner}.{func.attr}()")
                if owner == "torch" and func.attr == "load":
                    found.append(f"{where} torch.load()")  # unpickles
                if owner == "yaml" and func.attr in {"load", "unsafe_load", "full_load"}:
                    found.append(f"{where} yaml.{func.attr}()")
                if func.attr in {"read_pickle", "load"} and any(
                    kw.arg == "allow_pickle" for kw in node.keywords
                ):
                    found.append(f"{where} {func.attr}(allow_pickle=...)")
    return found


def test_no_pickle_or_eval_anywhere_in_the_package() -> None:
    files = [p for d in SOURCE_DIRS for p in (REPO / d).rglob("*.py")]
    assert len(files) > 40  # the scan sees the whole package
    found = [use for f in files for use in _unsafe_uses(f)]
    assert found == []


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    # negative control: each unsafe pattern in a file is reported
    path = tmp_path / "bad.py"
    path.write_text(
        "import pickle\nfrom marshal import loads\nimport numpy as np\n"
        "x = pickle.loads(open('f','rb').read())\neval('1+1')\nexec('y=1')\n"
        "np.load('a.npy', allow_pickle=True)\ntorch.load('w.pt')\n"
    )
    found = _unsafe_uses(path, tmp_path)
    assert len(found) == 7, found


# -- the bootstrap outside a tracekit run ---------------------------------------------------

PROBE = (
    "import json, sys; "
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tracekit'))))"
)


@pytest.mark.parametrize(
    "env_extra",
    [
        {},  # PYTHONPATH left over in a shell after a run
        {"TRACEKIT_RUN_DIR": ""},
        {"TRACEKIT_RUN_DIR": "{run}", "TRACEKIT_DISABLE": "1"},
    ],
)
def test_bootstrap_stays_inactive_outside_a_run(tmp_path: Path, env_extra: dict[str, str]) -> None:
    env = clean_env()
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR)
    env.update({k: v.format(run=tmp_path / "run") for k, v in env_extra.items()})
    res = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(res.stdout) == []  # not one tracekit module imported
    assert res.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written anywhere


def test_nothing_activates_without_the_launchers_pythonpath(tmp_path: Path) -> None:
    # GIVEN the installed package and a leftover TRACEKIT_RUN_DIR, but not the launcher's
    # PYTHONPATH: no sitecustomize or .pth of tracekit's may run at interpreter start-up
    env = clean_env()
    env.pop("PYTHONPATH", None)
    env["TRACEKIT_RUN_DIR"] = str(tmp_path / "run")
    res = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(res.stdout) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []
