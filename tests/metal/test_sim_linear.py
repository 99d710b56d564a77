"""Linear parity on metal-sim: the Metal kernels (metal/linear.metal) against the CPU scalar reference,
with the threshold of tests/ops/test_linear.py.

Threshold (as tests/ops/test_linear.py, whose docstring derives it): per element
|got − want| ≤ rtol·|want| + 4·sqrt(K+1)·u·S, u = 2^-24, S = Σ_k |x_k·w_k| + |b|, rtol 2^-23 (f32 out) or
2^-7 (bf16 out: two correctly rounded results of slightly different f32 sums differ by ≤ 1 ulp).
The kernels sum in another order than the reference (lane partial sums, k tiles, 8x8 matrix products),
which that bound covers; a missing or doubled product (~S/K) is far above it.

Variants (csrc/backend/metal/linear_dispatch.h): M <= 4 runs `matvec`; larger M runs `simdmm` (simdgroup_matrix)
or, with MARKBASE_METAL_LINEAR=portable, the portable `tiled` kernel. Both prefill variants are tested.
"""

import numpy as np
import pytest

import markbase as mb
from markbase import _core
from markbase._core import ops
from parity import run_guarded, tensor, to_f64
from references.linear import W_DTYPES, X_DTYPES, assert_linear_close, make_inputs, numpy_linear

from .sim import require_sim

DEVICE = "metal-sim"

# Decode (matvec, M <= 4): K and N in {1, 3, 31, 32, 33, 257, 4097} (odd / even / lane tails), M up to 4.
MATVEC_SHAPES = [(1, 1, 1), (1, 4097, 33), (1, 33, 4097), (2, 32, 3), (3, 257, 31), (4, 31, 257)]
# Prefill (tiles of 32 x 32 outputs): exact tiles, row / column / k tails, several k-steps, N = 1.
PREFILL_SHAPES = [(5, 33, 31), (33, 257, 32), (33, 3, 257), (64, 32, 64), (40, 65, 70), (33, 1031, 1), (7, 1, 33)]
PREFILL_VARIANTS = ["simdgroup", "portable"]


def error_scale(x, w, b, x_dtype, w_dtype, b_dtype):
    """S = |x|·|w|ᵀ + |b| from the dtype-rounded inputs (the scale of the rounding-error bound)."""
    return numpy_linear(x, w, b, x_dtype, w_dtype, b_dtype)[1]


def check_parity(M, K, N, x_dtype, w_dtype, with_bias, b_dtype=None, what=""):
    x, w, b = make_inputs(M, K, N, with_bias)
    b_dtype = b_dtype or w_dtype  # a checkpoint stores bias and weight alike
    xt, wt = tensor(x, x_dtype), tensor(w, w_dtype)
    bt = tensor(b, b_dtype) if b is not None else None
    what = f"linear {what} x={x_dtype} w={w_dtype} bias={b_dtype if with_bias else None} M={M} K={K} N={N}"
    sim = run_guarded(lambda out: ops.linear(xt, wt, bt, out=out, device=DEVICE), (M, N), x_dtype, what)
    ref = run_guarded(lambda out: ops.linear(xt, wt, bt, out=out, reference=True), (M, N), x_dtype, what)
    assert_linear_close(sim, ref, error_scale(x, w, b, x_dtype, w_dtype, b_dtype), K, x_dtype,
                        f"{what}: metal-sim vs reference")


@pytest.fixture(params=PREFILL_VARIANTS)
def prefill_variant(request, monkeypatch):
    monkeypatch.setenv("MARKBASE_METAL_LINEAR", request.param)
    return request.param


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("w_dtype", W_DTYPES)
@pytest.mark.parametrize("x_dtype", X_DTYPES)
@pytest.mark.parametrize("M,K,N", MATVEC_SHAPES)
def test_linear_matvec_parity(M, K, N, x_dtype, w_dtype, with_bias):
    require_sim()
    check_parity(M, K, N, x_dtype, w_dtype, with_bias, what="matvec")


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("w_dtype", W_DTYPES)
@pytest.mark.parametrize("x_dtype", X_DTYPES)
@pytest.mark.parametrize("M,K,N", PREFILL_SHAPES)
def test_linear_prefill_parity(M, K, N, x_dtype, w_dtype, with_bias, prefill_variant):
    require_sim()
    check_parity(M, K, N, x_dtype, w_dtype, with_bias, what=prefill_variant)


@pytest.mark.parametrize("b_dtype", W_DTYPES)
@pytest.mark.parametrize("w_dtype", W_DTYPES)
@pytest.mark.parametrize("M", [3, 9])
def test_linear_bias_dtypes(M, w_dtype, b_dtype, prefill_variant):
    # Every (w, bias) storage pair, e.g. an f32 bias with bf16 weights; M = 3 matvec, M = 9 prefill.
    require_sim()
    check_parity(M, 37, 11, "bf16", w_dtype, True, b_dtype=b_dtype, what=f"{prefill_variant}/bias")


def test_linear_leading_dims(prefill_variant):
    # x: [2, 3, K] -> out [2, 3, N] (M = 6 rows: a prefill kernel) and [1, 1, K] (matvec).
    require_sim()
    for shape in [(2, 3), (1, 1)]:
        M = int(np.prod(shape))
        x, w, b = make_inputs(M, 40, 19, True, seed=3)
        xt = tensor(x.reshape(*shape, 40), "bf16")
        sim = ops.linear(xt, tensor(w, "bf16"), tensor(b, "f32"), device=DEVICE)
        ref = ops.linear(xt, tensor(w, "bf16"), tensor(b, "f32"), reference=True)
        assert sim.shape == (*shape, 19) and sim.dtype == "bf16"
        assert_linear_close(to_f64(sim).reshape(M, 19), to_f64(ref).reshape(M, 19),
                            error_scale(x, w, b, "bf16", "bf16", "f32"), 40, "bf16", f"3-d x {shape}")


def test_linear_readonly_weights(prefill_variant):
    # Weights are read-only views of a mapped checkpoint; the kernels bind them read-only.
    require_sim()
    for M in (2, 8):
        x, w, _ = make_inputs(M, 65, 9, False)
        wt = tensor(w, "bf16").numpy()
        wt.setflags(write=False)
        w_ro = mb.Tensor(wt, dtype="bf16")
        assert not w_ro.writable
        sim = ops.linear(x, w_ro, device=DEVICE)
        ref = ops.linear(x, w_ro, reference=True)
        assert_linear_close(sim, ref, error_scale(x, w, None, "f32", "bf16", None), 65, "f32", f"read-only w M={M}")


@pytest.mark.parametrize("M", [1, 4, 5, 40])
def test_linear_nan_propagates(M, prefill_variant):
    require_sim()
    x = np.ones((M, 20), np.float32)
    w = np.ones((9, 20), np.float32)
    x[M - 1, 17] = np.nan
    out = ops.linear(x, w, device=DEVICE).numpy()
    assert np.isnan(out[M - 1]).all() and np.isfinite(out[: M - 1]).all()
    x[M - 1, 17] = 1.0
    w[4, 3] = np.inf
    w[4, 5] = -np.inf
    out = ops.linear(x, w, device=DEVICE).numpy()
    assert np.isnan(out[:, 4]).all() and np.isfinite(np.delete(out, 4, axis=1)).all()


def test_linear_variant_is_read_from_the_environment(monkeypatch):
    # The override really reaches the dispatch (so the portable runs above ran the tiled kernel)...
    require_sim()
    monkeypatch.setenv("MARKBASE_METAL_LINEAR", "bogus")
    with pytest.raises(mb.InputError, match="MARKBASE_METAL_LINEAR"):
        ops.linear(np.ones((8, 4), np.float32), np.ones((3, 4), np.float32), device=DEVICE)
    # ... and decode shapes always take matvec.
    ops.linear(np.ones((4, 4), np.float32), np.ones((3, 4), np.float32), device=DEVICE)
    names = set(_core.metal_sim.kernels())
    for variant in ("matvec", "simdmm", "tiled"):
        for xd in X_DTYPES:
            for wd in W_DTYPES:
                for bd in W_DTYPES:
                    assert f"linear_{variant}_{xd}_{wd}_{bd}" in names


def test_linear_bad_input_is_still_an_input_error():
    require_sim()
    with pytest.raises(mb.InputError, match="linear: "):
        ops.linear(np.ones((2, 5), np.float32), np.ones((3, 4), np.float32), device=DEVICE)
