"""Shared fixtures for the benchmarks (pytest-benchmark; run explicitly, e.g.
`PYTHONPATH=python python3 -m pytest bench/bench_linear.py`). Speed is reported, never asserted."""

import os
import threading
import time

import numpy as np
import pytest

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


def _copy_seconds(src: np.ndarray, dst: np.ndarray, threads: int) -> float:
    """Seconds for one copy of src into dst, split into `threads` contiguous parts copied concurrently."""
    parts = np.array_split(np.arange(len(src)), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]

    def work(b, e):
        np.copyto(dst[b:e], src[b:e])  # numpy releases the GIL for large copies

    ts = [threading.Thread(target=work, args=be) for be in bounds]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


@pytest.fixture(scope="session")
def memory_bandwidth():
    """Main-memory bandwidth measured now, in this run: copy of a 512 MB array (far beyond any cache),
    counting bytes read + bytes written, best of 5, with 1 and 2 copying threads. Returns a dict of GB/s;
    "best" is the roofline the benchmarks compare against."""
    n = 512 << 20
    src = np.ones(n // 4, np.float32)
    dst = np.empty_like(src)
    dst[:] = 0.0  # fault the pages in before timing
    result = {}
    for threads in (1, 2):
        best = min(_copy_seconds(src, dst, threads) for _ in range(5))
        result[f"copy_{threads}t"] = 2 * n / best / 1e9
    # Read-only bandwidth through markbase's own pool (decode streams weights: reads dominate).
    import markbase

    result["read_pool"] = markbase._core._memory_read_gbps(1 << 30, 5)
    result["best"] = max(result.values())
    _SUMMARY.append("memory bandwidth (512 MB numpy copy, read+write bytes): " +
                    ", ".join(f"{k} {v:.1f} GB/s" for k, v in result.items()))
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
