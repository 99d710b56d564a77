"""A quick check that an installed markbase computes correctly on this machine: a handful of ops on every
device this build offers, against float64 numpy references written here, then (with --demo) the demo.

Used by the wheel builds (cibuildwheel's test step, scripts/wheel-check) where the test suite is not
installed: `python -m markbase.testing.smoke [--demo]`. Exits non-zero with the failing case named.
Tolerance: 1e-5 of the output's largest magnitude (f32 math over at most a few thousand terms).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import markbase as mb
from markbase._core import ops

TOL = 1e-5


def _cases(rng: np.random.Generator):
    """(name, run(device) -> np.ndarray, reference float64 array)"""
    for K in (7, 64, 4097):  # a tail shorter than a vector, a whole number of vectors, a long odd row
        x = rng.normal(0, 1, (3, K)).astype(np.float32)
        w = rng.normal(1, 0.5, K).astype(np.float32)
        x64 = x.astype(np.float64)
        rms = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + np.float64(np.float32(1e-6)))
        yield f"rms_norm K={K}", (lambda d, x=x, w=w: ops.rms_norm(x, w, eps=1e-6, device=d)), rms * w
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        yield f"softmax K={K}", (lambda d, x=x: ops.softmax(x, device=d)), e / e.sum(axis=-1, keepdims=True)
    for M, K, N in ((1, 64, 33), (5, 96, 40), (32, 130, 70)):  # decode rows (GEMV) and a prefill block (GEMM)
        x = rng.normal(0, 1, (M, K)).astype(np.float32)
        w = rng.normal(0, 1, (N, K)).astype(np.float32)
        b = rng.normal(0, 1, N).astype(np.float32)
        ref = x.astype(np.float64) @ w.astype(np.float64).T + b
        yield f"linear {M}x{K}x{N}", (lambda d, x=x, w=w, b=b: ops.linear(x, w, b, device=d)), ref
    x = rng.normal(0, 2, (4, 300)).astype(np.float32)
    x64 = x.astype(np.float64)
    gelu = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    yield "gelu_tanh", (lambda d: ops.gelu_tanh(x, device=d)), gelu


def check_ops(devices: list[str]) -> list[str]:
    """Runs every case on every device; returns the failures (empty: all passed)."""
    failures = []
    for device in devices:
        for name, run, ref in _cases(np.random.default_rng(0)):
            got = np.asarray(run(device), dtype=np.float64)
            err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
            if got.shape != ref.shape or not np.isfinite(got).all() or err > TOL:
                failures.append(f"{name} on {device}: shape {got.shape} vs {ref.shape}, relative error {err:.2e}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m markbase.testing.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="also run `markbase demo` in this process")
    args = parser.parse_args(argv)
    devices = mb.devices()
    failures = check_ops(devices)
    for f in failures:
        print("FAIL", f)
    print(f"markbase {mb.__version__}: ops smoke test on {', '.join(devices)}: "
          f"{'FAILED' if failures else 'passed'}")
    if failures:
        return 1
    if args.demo:
        from markbase.cli import main as cli_main

        return cli_main(["demo"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
