"""The machine's speed limits, measured now: the rooflines every benchmark figure is compared against.

- `read_bandwidth(seconds, threads)`: streaming READ bandwidth of main memory (GB/s of bytes read from a
  1 GiB buffer, far beyond any cache) — the roofline of a memory-bound decode. The shared machine this runs
  on flips between bandwidth levels (~30 and ~48 GB/s) from one second to the next, so one number is not
  enough: many samples are taken over `seconds`, alternating two probes, and the best, median and minimum
  are reported. The probes: markbase's own (`markbase._core._memory_read_gbps`: every pool thread sums its
  slice of a freshly allocated buffer; it returns a best-of-repeats, so it is called with repeats=1, once
  per sample) and a numpy one (`threads` Python threads each `sum()` a slice of one persistent buffer;
  numpy releases the GIL inside the reduction).
- `gemm_peak(threads)`: f32 GEMM throughput (GFLOP/s) of x[M, K] · w[N, K]ᵀ, the best over several runs
  of markbase's own `ops.linear` and numpy/OpenBLAS `x @ w.T` on the same shapes — the roofline of a
  compute-bound prefill; and, for engines that multiply bf16 weights in bf16 (markbase's bf16 products,
  torch's bf16 matmuls, llama.cpp's BF16), a bf16 peak: the best of markbase's bf16-products `ops.linear`,
  torch's bf16 `linear` (oneDNN: AMX tiles where the CPU has them) when torch is installed, and the f32
  peak (bf16 can always be computed in f32), so no engine's bf16 prefill is measured against a slower limit.

Each measurement runs in a child Python process whose environment fixes the thread counts
(MARKBASE_NUM_THREADS, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS), since neither markbase's pool nor
OpenBLAS can change its size after start-up. No pytest dependency:
`PYTHONPATH=python python3 bench/yardstick.py [--seconds 4] [--threads 2]` prints both as JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BUFFER_BYTES = 1 << 30


def read_bandwidth(seconds: float = 4.0, threads: int = 2) -> dict:
    """Streaming read bandwidth in GB/s: {"best", "median", "min", "n", "markbase_best", "numpy_best",
    "seconds", "threads"}, over samples from both probes spread across `seconds`."""
    return _run_child("read", seconds=seconds, threads=threads)


def gemm_peak(threads: int = 2, M: int = 512, K: int = 2048, N: int = 2048, repeats: int = 5) -> dict:
    """f32 GEMM GFLOP/s of x[M, K] · w[N, K]ᵀ: {"best", "markbase", "numpy", "shape", "threads"}, each the
    best of `repeats` timed runs after a warm-up."""
    return _run_child("gemm", threads=threads, M=M, K=K, N=N, repeats=repeats)


# ---------------------------------------------------------------------------------------------- child side

def _run_child(probe: str, threads: int, **kwargs) -> dict:
    env = dict(os.environ, MARKBASE_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(_REPO, "python"), env.get("PYTHONPATH")) if p)
    args = json.dumps(dict(kwargs, threads=threads))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", probe, args], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _numpy_read_sample(buf, threads: int) -> float:
    """GB/s of one pass over buf, split into `threads` slices summed concurrently."""
    import numpy as np

    parts = np.array_split(buf, threads)
    workers = [threading.Thread(target=np.sum, args=(p,)) for p in parts]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return buf.nbytes / (time.perf_counter() - t0) / 1e9


def _measure_read(seconds: float, threads: int) -> dict:
    import numpy as np

    import markbase

    buf = np.ones(_BUFFER_BYTES // 8, np.uint64)  # written once: its pages are faulted in before timing
    samples = {"markbase": [], "numpy": []}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or not samples["markbase"]:
        # One markbase sample (it allocates and fills its own buffer each call, so it is the slow one),
        # then numpy samples for about as long, so both probes see the same stretch of machine time.
        t0 = time.perf_counter()
        samples["markbase"].append(markbase._core._memory_read_gbps(_BUFFER_BYTES, 1))
        spent = time.perf_counter() - t0
        t1 = time.perf_counter()
        while time.perf_counter() - t1 < spent and time.perf_counter() < deadline:
            samples["numpy"].append(_numpy_read_sample(buf, threads))
    every = samples["markbase"] + samples["numpy"]
    return {"best": max(every), "median": statistics.median(every), "min": min(every), "n": len(every),
            "markbase_best": max(samples["markbase"]),
            "numpy_best": max(samples["numpy"]) if samples["numpy"] else 0.0,
            "markbase_n": len(samples["markbase"]), "seconds": seconds, "threads": threads,
            "markbase_threads": markbase._core.num_threads()}


def _best_gflops(fn, flops: float, repeats: int) -> float:
    fn()  # warm-up: packing buffers, thread start-up, first-touch of the output
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return flops / best / 1e9


def _measure_gemm(threads: int, M: int, K: int, N: int, repeats: int) -> dict:
    import numpy as np

    import markbase
    from markbase._core import ops

    r = np.random.default_rng(0)
    x = r.standard_normal((M, K), dtype=np.float32)
    w = r.standard_normal((N, K), dtype=np.float32)
    flops = 2.0 * M * N * K
    xt, wt = markbase.Tensor(x), markbase.Tensor(w)
    out_mb = markbase.Tensor.empty([M, N], "f32")
    out_np = np.empty((M, N), np.float32)
    mb_gflops = _best_gflops(lambda: ops.linear(xt, wt, out=out_mb), flops, repeats)
    np_gflops = _best_gflops(lambda: np.matmul(x, w.T, out=out_np), flops, repeats)
    best = max(mb_gflops, np_gflops)
    w16 = markbase.Tensor(w, dtype="bf16")  # rounded to nearest-even
    mb_bf16 = _best_gflops(lambda: ops.linear(xt, w16, out=out_mb, bf16_products=True), flops, repeats)
    torch_bf16 = 0.0
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(threads)
        xb, wb = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(w).to(torch.bfloat16)
        torch_bf16 = _best_gflops(lambda: torch.nn.functional.linear(xb, wb), flops, repeats)
    return {"best": best, "markbase": mb_gflops, "numpy": np_gflops,
            "bf16_best": max(best, mb_bf16, torch_bf16), "markbase_bf16": mb_bf16, "torch_bf16": torch_bf16,
            "shape": [M, K, N], "threads": threads}


def _child_main(probe: str, args: str) -> None:
    kwargs = json.loads(args)
    result = _measure_read(**kwargs) if probe == "read" else _measure_gemm(**kwargs)
    print(json.dumps(result))


def main(argv=None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Measure memory read bandwidth and f32 GEMM peak now.")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    print(json.dumps({"read_bandwidth_GBps": read_bandwidth(a.seconds, a.threads),
                      "gemm_peak_GFLOPs": gemm_peak(a.threads)}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child_main(sys.argv[2], sys.argv[3])
    else:
        main()
