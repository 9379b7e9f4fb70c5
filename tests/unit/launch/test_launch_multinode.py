"""Which node a launcher is, from its options, the server's command line or the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.errors import CollectorError
from tracekit.launch.multinode import create_part_dir, detect

SGLANG = ["python", "-m", "sglang.launch_server", "--nnodes", "2", "--node-rank", "1", "--tp", "16"]


def test_options_win() -> None:
    assert detect(SGLANG, {}, node_rank=0, nnodes=2) == (0, 2, "options")


def test_sglang_and_torchrun_command_lines() -> None:
    assert detect(SGLANG, {}) == (1, 2, "command line")
    torchrun = ["torchrun", "--nnodes=1:4", "--node_rank=3", "train.py"]
    assert detect(torchrun, {}) == (3, 4, "command line")


def test_environment_and_one_node_runs() -> None:
    assert detect(["python", "x.py"], {"NODE_RANK": "1", "NNODES": "2"}) == (1, 2, "NODE_RANK")
    # a NODE_RANK left in a one-node environment changes nothing
    assert detect(["python", "x.py"], {"NODE_RANK": "0"}) == (None, None, "")
    assert detect(["python", "x.py"], {}) == (None, None, "")


def test_bad_node_numbers_are_one_line_errors() -> None:
    with pytest.raises(CollectorError, match="this node's rank is unknown"):
        detect(["python", "x.py", "--nnodes", "2"], {})
    with pytest.raises(CollectorError, match="not below the node count"):
        detect(["x"], {}, node_rank=2, nnodes=2)
    with pytest.raises(CollectorError, match="not a whole number"):
        detect(["x", "--node-rank", "a"], {"NNODES": "2"})


def test_part_dirs(tmp_path: Path) -> None:
    assert create_part_dir(tmp_path, "run", 1) == tmp_path / "run" / "parts" / "node-1"
    with pytest.raises(CollectorError, match="launched already"):
        create_part_dir(tmp_path, "run", 1)
    with pytest.raises(CollectorError, match="needs `--name NAME`"):
        create_part_dir(tmp_path, None, 0)
