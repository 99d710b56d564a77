"""Shared fixtures for the benchmarks (pytest-benchmark; run explicitly, e.g.
`PYTHONPATH=python python3 -m pytest bench/bench_linear.py`). Speed is reported, never asserted."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # bench/yardstick.py, importable without a package

# metal-sim's full checks (races, uninitialised reads, uniform simdgroup calls) are for the tests; a
# benchmark that runs metal-sim times the kernels, not the checker (metal/README.md).
os.environ.setdefault("MARKBASE_SIM_CHECKS", "basic")

_SUMMARY: list[str] = []
ROOT = os.environ.get("MARKBASE_BENCH_DIR") or os.path.join(os.path.dirname(os.path.dirname(__file__)), ".bench-cache")


@pytest.fixture(scope="session")
def encoders_model():
    """The real-size E2B vision and audio towers (random bf16 weights, ~1 GB written to ROOT the first time)
    on a small text stack: the encoder benchmarks' checkpoint."""
    import markbase as mb
    from markbase.testing import make_checkpoint

    d = os.path.join(ROOT, "e2b-encoders-bf16")
    if not os.path.exists(os.path.join(d, "generation_config.json")):
        make_checkpoint(d, family="e2b", size="encoders", dtype="bf16")
    return mb.load(d)


@pytest.fixture(scope="session")
def memory_bandwidth():
    """Main-memory READ bandwidth measured now, in this run (bench/yardstick.py: many samples of two read
    probes over 4 s, as many threads as markbase's pool; the machine's bandwidth level changes from second
    to second, so the best sample is the roofline). Returns yardstick.read_bandwidth()'s dict of GB/s
    ("best", "median", "min", "n", per-probe bests) plus "read_pool" = "best", the key the benchmarks read."""
    import markbase
    from yardstick import read_bandwidth

    result = read_bandwidth(seconds=4.0, threads=markbase._core.num_threads())
    result["read_pool"] = result["best"]
    _SUMMARY.append(f"memory read bandwidth (1 GiB, {result['threads']} threads, {result['n']} samples over "
                    f"{result['seconds']:.0f} s): best {result['best']:.1f} GB/s, median {result['median']:.1f}, "
                    f"min {result['min']:.1f} (markbase probe best {result['markbase_best']:.1f}, "
                    f"numpy probe best {result['numpy_best']:.1f})")
    return result


@pytest.fixture(scope="session")
def gemm_peak():
    """The machine's GEMM peaks measured now (bench/yardstick.py gemm_peak: 512 × 2048 × 2048, markbase's pool's
    thread count): "best" (f32: markbase or OpenBLAS) and "bf16_best" (markbase's bf16 products, torch's bf16
    matmul or the f32 peak), GFLOP/s."""
    import markbase
    from yardstick import gemm_peak as measure

    result = measure(threads=markbase._core.num_threads())
    _SUMMARY.append(f"GEMM peak (512x2048x2048, {result['threads']} threads): f32 {result['best']:.0f} GFLOP/s "
                    f"(markbase {result['markbase']:.0f}, OpenBLAS {result['numpy']:.0f}); bf16 {result['bf16_best']:.0f} "
                    f"(markbase bf16 products {result['markbase_bf16']:.0f}, torch {result['torch_bf16']:.0f})")
    return result


@pytest.fixture(scope="session")
def summary():
    """Benchmarks append one-line results here; they are printed at the end of the run."""
    return _SUMMARY


def pytest_terminal_summary(terminalreporter):
    if _SUMMARY:
        terminalreporter.section("benchmark summary")
        for line in _SUMMARY:
            terminalreporter.write_line(line)
