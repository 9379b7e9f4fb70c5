"""The allreduce implementation table: every family, parsed fields, user entries, unknowns."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.allreduce import implementation_labels, load_impl_table
from tracekit.errors import InputError


@pytest.mark.parametrize(
    ("name", "label"),
    [
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "nccl:RING/LL/bf16",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_f32_NVLS_TREE_SIMPLE(ncclDevKernelArgsStorage<4096ul>)",
            "nccl:NVLS_TREE/SIMPLE/f32",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_f16_TREE_LL128(ncclDevKernelArgsStorage<4096ul>)",
            "nccl:TREE/LL128/f16",
        ),
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "nccl:RING/LL/float",
        ),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "nccl:SendRecv/RING/SIMPLE/int8_t",
        ),
        ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "nccl"),
        ("ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16", "nccl_symmetric"),
        (
            "void cross_device_reduce_1stage<__nv_bfloat16, 8>(RankData*, RankSignals, Signal*, __nv_bfloat16*, int, int)",
            "custom_ar",
        ),
        ("void cross_device_reduce_2stage<float, 4>(RankData*)", "custom_ar"),
        ("void all_reduce_1shot_push_kernel<__nv_bfloat16, 8, true>(...)", "custom_ar_v2"),
        ("all_reduce_2shot_pull_kernel<half, 4, false>", "custom_ar_v2"),
        ("multimem_all_reduce_kernel<16>", "torch_symm_mem"),
        ("two_shot_all_reduce_kernel_inplace<float>", "torch_symm_mem"),
        (
            "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>()",
            "flashinfer",
        ),
        ("rcclGenericKernel<1>", "rccl"),
        ("gloo:all_reduce", "gloo"),
        # vLLM's CPU build (CpuCommunicator's shared-memory collectives)
        ("_C::shm_allreduce", "vllm_cpu_shm"),
        ("_C::shm_all_gather", "vllm_cpu_shm:all_gather"),
        ("_C::shm_gather", "vllm_cpu_shm:gather"),
        ("c10d::allreduce_", "c10d"),
        ("record_param_comms", "c10d"),
        ("quick_ar_kernel<bf16>", "unknown"),
        ("deep_ep::internode::dispatch<8>", "unknown"),
        ("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNT", None),
        ("cublasLt::splitKreduce_kernel<32, 16, int, float>", None),
        ("void at::native::reduce_kernel<512, 1>(...)", None),
        ("hipblasLt_gemm_kernel", None),
    ],
)
def test_classify(name: str, label: str | None) -> None:
    assert load_impl_table().classify(name) == label


def test_rocm_reports_rccl() -> None:
    name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    assert load_impl_table().classify(name, rocm=True) == "rccl:RING/LL/bf16"


def test_user_entries_come_first(tmp_path: Path) -> None:
    extra = tmp_path / "impl.toml"
    extra.write_text('[[impl]]\nfamily = "quick_ar"\npattern = "quick_ar_kernel"\n')
    assert load_impl_table(extra).classify("quick_ar_kernel<bf16>") == "quick_ar"


def test_bad_user_table(tmp_path: Path) -> None:
    extra = tmp_path / "impl.toml"
    extra.write_text('[[impl]]\nfamily = "x"\npattern = "("\n')
    with pytest.raises(InputError, match=r"impl.toml.*bad regex"):
        load_impl_table(extra)
    with pytest.raises(InputError, match="no such implementation table"):
        load_impl_table(tmp_path / "missing.toml")


def test_implementation_labels() -> None:
    # GIVEN four instances' communication intervals (and one compute interval, not counted)
    rows = [
        (0, True, "gloo"), (0, True, "c10d"), (0, True, "gloo"),  # c10d beside gloo: dropped
        (1, True, "c10d"),  # alone: kept
        (2, True, "nccl:RING/LL/bf16"), (2, True, "custom_ar"), (2, False, "compute"),
        (3, True, ""), (3, True, None),  # no label
        (None, True, "gloo"),  # no instance
    ]  # fmt: skip
    intervals = pl.DataFrame(rows, schema=["inst", "comm", "label"], orient="row")
    # THEN one label an instance: distinct, sorted, joined with +
    got = dict(implementation_labels(intervals).sort("inst").iter_rows())
    assert got == {0: "gloo", 1: "c10d", 2: "custom_ar+nccl:RING/LL/bf16", 3: None}
