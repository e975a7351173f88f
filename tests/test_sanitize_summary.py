# ruff: noqa: E501 (verbatim compute-sanitizer lines)
"""scripts/sanitize_summary.py: which kernel a compute-sanitizer report names (a report inside
liger_cpp's kernels must count as ours, never as "elsewhere": the 'in block (x,y,z)' of a thread's
position is not a kernel name)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("sanitize_summary", ROOT / "scripts" / "sanitize_summary.py")
ss = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ss)

MEMCHECK_OURS = """========= Invalid __shared__ write of size 16 bytes
=========     at void liger_cpp::kernels::<unnamed>::ce_smem_kernel<__nv_bfloat16, (bool)1, (bool)0>(liger_cpp::kernels::CeRowsArgs, int)+0x3170
=========     by thread (0,0,0) in block (4,0,0)
=========     Cluster needs to have at least 2 blocks
"""
INITCHECK_ATEN = """========= Uninitialized __global__ memory read of size 4 bytes
=========     at void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)>(int, T1)+0x830
=========     by thread (1,0,0) in block (8,0,0)
"""
RACECHECK_CUBLAS = """========= Error: Race reported between Read access at nvjet_sm90_tst_64x8_64x16_1x4_h_bz_splitK_NNT+0xb20
=========     and Write access at nvjet_sm90_tst_64x8_64x16_1x4_h_bz_splitK_NNT+0x2f00 [144 hazards]
"""


def test_kernel_names():
    assert ss.kernel_of(MEMCHECK_OURS) == "liger_cpp::kernels::"
    assert ss.kernel_of(INITCHECK_ATEN) == "at::native::unrolled_elementwise_kernel"
    assert ss.kernel_of(RACECHECK_CUBLAS) == "nvjet_sm90_tst_64x8_64x16_1x4_h_bz_splitK_NNT"


def test_reports_counted_by_owner(tmp_path):
    log = tmp_path / "sanitize-memcheck-0.log"
    body = "\n=========\n".join([MEMCHECK_OURS, INITCHECK_ATEN, RACECHECK_CUBLAS])
    log.write_text("ran grpo\n" + body + "\n=========\n========= ERROR SUMMARY: 3 errors\n")
    tool, ran, summary, ours, other = ss.scan(str(log))
    assert (tool, ran, ours) == ("memcheck", 1, 1)
    assert summary == ["ERROR SUMMARY: 3 errors"]
    assert other == {
        "at::native::unrolled_elementwise_kernel": 1,
        "nvjet_sm90_tst_64x8_64x16_1x4_h_bz_splitK_NNT": 1,
    }
