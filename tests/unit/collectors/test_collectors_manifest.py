from __future__ import annotations

from tracekit.collectors.manifest import REDACTED, collect, filtered_env


def test_env_is_filtered_and_secrets_redacted() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_TOKEN": "hf_secret",
        "VLLM_API_KEY": "sk-123",
        "SGLANG_SECRET_THING": "s",
        "NCCL_IB_PASSWORD": "p",
        "MASTER_ADDR": "10.0.0.1",
        "RANK": "3",
        "PYTHONPATH": "/x",
        "HOME": "/root",
        "OMP_NUM_THREADS": "1",
    }
    out = filtered_env(env)
    assert out == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "MASTER_ADDR": "10.0.0.1",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_PASSWORD": REDACTED,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": "/x",
        "RANK": "3",
        "SGLANG_SECRET_THING": REDACTED,
        "VLLM_API_KEY": REDACTED,
    }
    assert "hf_secret" not in str(out)


def test_collect_sections() -> None:
    m = collect(
        package="tracekit", rank_info={"dist_rank": 2, "dist_world_size": 4, "env_local_rank": 2}
    )
    assert set(m) == {"process", "distributed", "device", "versions", "env", "packages"}
    assert m["distributed"]["rank"] == "2"
    assert m["distributed"]["world_size"] == "4"
    assert m["process"]["local_rank"] == "2"
    assert m["versions"]["python"].count(".") == 2
    assert "tracekit" in m["versions"]
    # tracekit itself is a git checkout on the development machines
    assert m["packages"].get("tracekit")
