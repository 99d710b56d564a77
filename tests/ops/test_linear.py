"""Parity grid for linear: out = x · wᵀ + bias (see tests/parity.py for the harness).

Threshold. Every output is a dot product of length K accumulated in f32 (plus the bias). Rounding errors
in such a sum are bounded relative to S = Σ_k |x_k·w_k| + |b| (not relative to |out|, which cancellation
can make arbitrarily small): the worst case is ~K·u·S, and for errors of random sign, as here, they grow
like sqrt(K)·u·S (u = 2^-24, the f32 unit roundoff). We allow 4·sqrt(K+1)·u·S per element, which is well
above the error of any summation order yet far below what a missing or doubled term would cause
(~|x_k·w_k| ≈ S/K, at least 2.4e-4·S for K ≤ 4097, versus 4·64·u·S ≈ 1.5e-5·S).
bf16 outputs add one rounding to bf16: at most half an ulp against float64, and two correctly rounded
results of slightly different f32 sums can differ by one ulp; one ulp is ≤ 2^-7 relative, hence rtol 2^-7.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng, run_guarded, tensor, to_f64
from references.linear import W_DTYPES, X_DTYPES, assert_linear_close, make_inputs, numpy_linear

# (M, K, N): every M in {1, 3, 33} and every K, N in {1, 3, 31, 32, 33, 257, 4097} appears, plus the other
# x tile heights (M = 2, 4 decode; 6, 7 prefill with 2- and 3-row tail tiles) - not the full cross product.
SHAPES = [
    (1, 1, 1), (1, 4097, 257), (1, 33, 4097), (1, 32, 31),
    (3, 31, 33), (3, 257, 31), (3, 4097, 3), (3, 3, 32),
    (33, 3, 4097), (33, 32, 257), (33, 257, 32), (33, 4097, 1), (33, 1, 33),
    (2, 33, 31), (4, 31, 33), (6, 33, 31), (7, 257, 31),
]
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("w_dtype", W_DTYPES)
@pytest.mark.parametrize("x_dtype", X_DTYPES)
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_linear_parity(M, K, N, x_dtype, w_dtype, with_bias, device):
    x, w, b = make_inputs(M, K, N, with_bias)
    b_dtype = w_dtype  # a checkpoint stores bias and weight alike
    xt, wt = tensor(x, x_dtype), tensor(w, w_dtype)
    bt = tensor(b, b_dtype) if b is not None else None
    what = f"linear x={x_dtype} w={w_dtype} bias={with_bias} M={M} K={K} N={N}"
    fast = run_guarded(lambda out: ops.linear(xt, wt, bt, out=out, device=device), (M, N), x_dtype, what)
    ref = run_guarded(lambda out: ops.linear(xt, wt, bt, out=out, reference=True), (M, N), x_dtype, what)
    want, scale = numpy_linear(x, w, b, x_dtype, w_dtype, b_dtype)
    assert_linear_close(fast, ref, scale, K, x_dtype, f"{what}: {device} vs reference")
    assert_linear_close(ref, want, scale, K, x_dtype, f"{what}: reference vs numpy")


def test_linear_leading_dims_and_mixed_bias_dtype():
    # x: [2, 3, K] -> out [2, 3, N]; an f32 bias with bf16 weights.
    x, w, b = make_inputs(6, 40, 19, True, seed=3)
    xt = tensor(x.reshape(2, 3, 40), "bf16")
    fast = ops.linear(xt, tensor(w, "bf16"), tensor(b, "f32"))
    ref = ops.linear(xt, tensor(w, "bf16"), tensor(b, "f32"), reference=True)
    assert fast.shape == (2, 3, 19) and fast.dtype == "bf16"
    want, scale = numpy_linear(x, w, b, "bf16", "bf16", "f32")
    assert_linear_close(to_f64(fast).reshape(6, 19), want, scale, 40, "bf16", "3-d x fast")
    assert_linear_close(to_f64(ref).reshape(6, 19), want, scale, 40, "bf16", "3-d x reference")


def test_linear_readonly_weights():
    # Weights are read-only views of a mapped checkpoint; the kernel must accept them.
    x, w, _ = make_inputs(2, 65, 9, False)
    wt = tensor(w, "bf16").numpy()
    wt.setflags(write=False)
    w_ro = mb.Tensor(wt, dtype="bf16")
    assert not w_ro.writable
    want, scale = numpy_linear(x, w, None, "f32", "bf16", "f32")
    assert_linear_close(ops.linear(x, w_ro), want, scale, 65, "f32", "read-only w")


def test_linear_nan_propagates():
    x = np.ones((1, 20), np.float32)
    w = np.ones((9, 20), np.float32)
    x[0, 17] = np.nan  # in the scalar tail of an 8-wide vector loop
    for reference in (False, True):
        assert np.isnan(ops.linear(x, w, reference=reference).numpy()).all()
    x[0, 17] = 1.0
    w[4, 3] = np.inf
    w[4, 5] = -np.inf
    for reference in (False, True):
        out = ops.linear(x, w, reference=reference).numpy()
        assert np.isnan(out[0, 4]) and np.isfinite(np.delete(out, 4, axis=1)).all()


# Runs in a fresh process so the thread pool (and SIMD choice) follow the environment given.
_CHILD = r"""
import os, sys, time
import numpy as np
import markbase as mb
from markbase._core import ops, num_threads

def task_cpu_ticks():
    ticks = {}
    if not os.path.isdir("/proc/self/task"):  # not Linux: per-thread CPU time unavailable
        return None
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks

r = np.random.default_rng(5)
x = mb.Tensor(r.normal(size=(64, 1024)).astype(np.float32), dtype="bf16")
w = mb.Tensor(r.normal(size=(2048, 1024)).astype(np.float32), dtype="bf16")
out = ops.linear(x, w)  # also starts the pool
before = task_cpu_ticks()
busy = -1
for _ in range(60 if before is not None else 0):  # until two threads have been charged CPU time (10 ms ticks), at most ~60 calls
    ops.linear(x, w, out=out)
    after = task_cpu_ticks()
    busy = sum(1 for t, v in after.items() if v > before.get(t, 0))
    if busy >= 2:
        break
np.save(sys.argv[1], out.numpy())
print(num_threads(), busy)
"""


def _run_child(tmp_path, name, env_extra):
    env = dict(os.environ, **env_extra)
    path = tmp_path / f"{name}.npy"
    res = subprocess.run([sys.executable, "-c", _CHILD, str(path)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    threads, busy = (int(v) for v in res.stdout.split())
    return threads, busy, np.load(path)


def test_linear_uses_all_threads_and_is_deterministic(tmp_path):
    threads2, busy2, out2 = _run_child(tmp_path, "t2", {"MARKBASE_NUM_THREADS": "2"})
    threads1, busy1, out1 = _run_child(tmp_path, "t1", {"MARKBASE_NUM_THREADS": "1"})
    assert threads2 == 2 and threads1 == 1
    # With a 2-thread pool, a large linear must charge CPU time to both threads (the caller and a worker).
    # (busy = -1: no /proc, i.e. not Linux; then only the determinism below is checked.)
    assert busy2 >= 2 or (busy2 == -1 and not sys.platform.startswith("linux")), "the fast linear ran on one thread"
    # Blocks of w rows are fixed, not derived from the thread count, so the result is bit-identical.
    np.testing.assert_array_equal(out1, out2)


_FALLBACK_CHILD = r"""
import sys
import numpy as np
import markbase as mb
from markbase._core import ops
shapes = [(1, 33, 31), (3, 257, 9), (4, 31, 5), (33, 65, 31), (2, 3, 17)]
res = {}
for i, (M, K, N) in enumerate(shapes):
    for wd in ("f32", "bf16", "f16"):
        r = np.random.default_rng(i)
        x = mb.Tensor(r.normal(size=(M, K)).astype(np.float32), dtype="bf16")
        w = mb.Tensor(r.normal(size=(N, K)).astype(np.float32), dtype=wd)
        b = mb.Tensor(r.normal(size=(N,)).astype(np.float32))
        res[f"{i}_{wd}_fast"] = ops.linear(x, w, b).to_float32()
        res[f"{i}_{wd}_ref"] = ops.linear(x, w, b, reference=True).to_float32()
        res[f"{i}_{wd}_x"] = x.to_float32()
        res[f"{i}_{wd}_w"] = w.to_float32()
        res[f"{i}_{wd}_b"] = b.to_float32()
np.savez(sys.argv[1], **res)
"""


def test_linear_portable_fallback(tmp_path):
    # MARKBASE_SIMD=off selects the portable kernels (what non-AVX2 and ARM machines run).
    path = tmp_path / "fallback.npz"
    res = subprocess.run([sys.executable, "-c", _FALLBACK_CHILD, str(path)], env=dict(os.environ, MARKBASE_SIMD="off"),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    data = np.load(path)
    keys = sorted({k.rsplit("_", 1)[0] for k in data.files})
    for key in keys:
        x, w, b = (data[f"{key}_{s}"].astype(np.float64) for s in "xwb")
        scale = np.abs(x) @ np.abs(w).T + np.abs(b)
        assert_linear_close(data[f"{key}_fast"], data[f"{key}_ref"], scale, x.shape[1], "bf16", f"fallback {key}")
        assert_linear_close(data[f"{key}_ref"], x @ w.T + b, scale, x.shape[1], "bf16", f"fallback ref {key}")


_GEMM_CHILD = r"""
import sys
import numpy as np
import markbase as mb
from markbase._core import ops
res = {"simd": np.array(ops._gemm_simd())}
# M > 8 takes the blocked GEMM; edges of every tile size (12 × 32 and 6 × 16), k slices of 256, a 288-row task.
for i, (M, K, N) in enumerate([(9, 1, 1), (13, 257, 33), (33, 600, 200), (300, 70, 47), (25, 513, 64)]):
    r = np.random.default_rng(i)
    for wd in ("f32", "bf16"):
        x = r.normal(size=(M, K)).astype(np.float32)
        w = mb.Tensor(r.normal(size=(N, K)).astype(np.float32), dtype=wd)
        b = r.normal(size=(N,)).astype(np.float32)
        res[f"linear_{i}_{wd}"] = ops.linear(x, w, b).numpy()
# Unmasked attention over 40 queries: the logits and P·V GEMMs of the long-sequence path.
r = np.random.default_rng(9)
q, k, v = (r.normal(size=(40, 4, 64)).astype(np.float32) for _ in range(3))
pos = np.arange(40, dtype=np.int32)
res["attention"] = ops.attention(q, k[:, :2], v[:, :2], pos, pos, causal=False, scale=0.125).numpy()
np.savez(sys.argv[1], **res)
"""


def test_gemm_kernels_agree_bitwise(tmp_path):
    """The AVX-512 GEMM (12 × 32 tiles) and the AVX2 one (6 × 16) add the same products in the same order, so
    their outputs are bit-identical; MARKBASE_SIMD=avx2 runs the AVX2 kernel where AVX-512 would (on an
    AVX2-only machine both runs use AVX2 and this checks determinism across processes)."""
    outs = {}
    for name, env in (("default", {}), ("avx2", {"MARKBASE_SIMD": "avx2"})):
        path = tmp_path / f"{name}.npz"
        res = subprocess.run([sys.executable, "-c", _GEMM_CHILD, str(path)], env=dict(os.environ, **env),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        outs[name] = dict(np.load(path))
    if ops._gemm_simd() == "avx512":
        assert str(outs["default"]["simd"]) == "avx512" and str(outs["avx2"]["simd"]) == "avx2"
    for key, got in outs["default"].items():
        if key != "simd":
            np.testing.assert_array_equal(got, outs["avx2"][key], err_msg=key)


# (M, K, N) for bf16_products: more than 8 rows (the GEMM), K across one and several 512-long k slices and
# with a 16-wide tail, N across partial 32-column panels and 192-column tasks; M = 9 / 13 / 100 leave
# partial 12-row tiles.
# 600 and 1200 rows take the AMX kernel's second and third 576-row task; K = 2 and 66 pad k to whole 32-wide tiles.
BF16_SHAPES = [(9, 2, 1), (13, 66, 31), (12, 512, 32), (37, 1030, 200), (100, 2048, 33), (24, 96, 385),
               (600, 96, 70), (1200, 64, 33)]
# The bf16-products GEMM kernels: vdpbf16ps (AVX512_BF16) and, where Linux grants the tiles, AMX. A kernel this
# CPU lacks is skipped with the reason, so the summary shows what a run did not exercise.
BF16_GEMM_KERNELS = ["vdpbf16ps", "amx"]


@pytest.fixture
def bf16_products_on():
    """bf16 products wherever the CPU has them (the default rule takes them on AMD, or with AMX)."""
    ops._set_gemm_bf16_products(1)
    yield ops._gemm_bf16_supported()
    ops._set_gemm_bf16_products(-1)


@pytest.fixture(params=BF16_GEMM_KERNELS)
def bf16_gemm_kernel(request):
    """Each bf16-products GEMM kernel in turn (AMX switched off for vdpbf16ps); skipped where this CPU lacks it."""
    if not ops._gemm_bf16_supported():
        pytest.skip("this CPU has no AVX512_BF16: the bf16-products kernels (vdpbf16ps, AMX) cannot run")
    if request.param == "amx" and not ops._gemm_amx_supported():
        pytest.skip("this CPU (or its kernel) grants no AMX-BF16 tiles: the AMX GEMM cannot run")
    ops._set_gemm_amx(1 if request.param == "amx" else 0)
    assert ops._gemm_amx() == (request.param == "amx")
    yield request.param
    ops._set_gemm_amx(-1)


def _amx_granted_here() -> bool:
    """AMX-BF16 and AMX-TILE in /proc/cpuinfo, and Linux grants the tile data (arch_prctl
    ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked here independently of markbase."""
    import ctypes
    import platform
    if platform.machine() != "x86_64" or not os.path.exists("/proc/cpuinfo"):
        return False
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    if not {"amx_bf16", "amx_tile", "avx512_bf16"} <= set(flags):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
    return libc.syscall(sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0


def test_amx_taken_where_granted():
    """The AMX kernel is supported exactly where the CPU lists it and Linux grants the tiles (a VM can list
    amx_tile without granting it: then AMX instructions fault), and then it is the default."""
    assert ops._gemm_amx_supported() == _amx_granted_here()
    assert ops._gemm_amx() == ops._gemm_amx_supported()
    if ops._gemm_amx_supported():
        assert ops._gemm_bf16_products(), "with AMX the default rule takes bf16 products"


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("M,K,N", BF16_SHAPES)
def test_linear_bf16_products(M, K, N, with_bias, bf16_products_on, bf16_gemm_kernel):
    """bf16_products (precision="auto" for bf16 weights): x rounded to bf16 (nearest-even), then exact bf16
    products summed in f32 (vdpbf16ps, or TDPBF16PS on AMX tiles). Held to the f32 bound of a sum of those
    rounded products: the float64 product of bf16(x) and w, 4·sqrt(K+1)·u·S. The rounding of x must be there
    (it moves outputs by up to 2^-9·S, far beyond that bound); where the CPU has no AVX512_BF16 the
    permission changes nothing."""
    x, w, b = make_inputs(M, K, N, with_bias)
    wt, bt = tensor(w, "bf16"), (tensor(b, "f32") if b is not None else None)
    got = ops.linear(x, wt, bt, bf16_products=True)
    exact = ops.linear(x, wt, bt)
    want, scale = numpy_linear(x, w, b, "bf16", "bf16", "f32")
    assert_linear_close(got, want, scale, K, "f32", f"bf16 products M={M} K={K} N={N}")
    if K > 2:
        assert not np.array_equal(to_f64(got), to_f64(exact)), "bf16_products ignored: x was not rounded"


def test_linear_bf16_products_where_they_do_not_apply(bf16_products_on):
    """f32 weights and an odd K keep f32 products, bit for bit."""
    for M, K, N, w_dtype in ((20, 64, 40, "f32"), (20, 65, 40, "bf16"), (3, 65, 40, "bf16")):
        x, w, _ = make_inputs(M, K, N, False)
        wt = tensor(w, w_dtype)
        np.testing.assert_array_equal(to_f64(ops.linear(x, wt, bf16_products=True)), to_f64(ops.linear(x, wt)),
                                      err_msg=f"M={M} K={K} w={w_dtype}")


@pytest.mark.parametrize("M,K,N", [(1, 96, 40), (1, 1030, 300), (2, 62, 7), (3, 1536, 33), (8, 96, 1100)])
def test_linear_bf16_products_decode_rows(M, K, N, bf16_products_on):
    """Decode rows (≤ 8: the GEMV) multiply the same bf16 values as the GEMM: x rounded to bf16, vdpbf16ps
    over the weight rows (masked tails when K is not a multiple of 32), held to the same f32 bound against the
    float64 product of bf16(x) and w; unchanged where the CPU has no bf16 products."""
    x, w, b = make_inputs(M, K, N, True)
    wt, bt = tensor(w, "bf16"), tensor(b, "f32")
    if not bf16_products_on:
        pytest.skip("this CPU has no AVX512_BF16: the bf16-products decode GEMV cannot run")
    got = ops.linear(x, wt, bt, bf16_products=True)
    want, scale = numpy_linear(x, w, b, "bf16", "bf16", "f32")
    assert_linear_close(got, want, scale, K, "f32", f"bf16 products decode M={M} K={K} N={N}")
    assert not np.array_equal(to_f64(got), to_f64(ops.linear(x, wt, bt))), "x was not rounded"


def test_linear_bf16_products_non_finite(bf16_products_on, bf16_gemm_kernel):
    """NaN and infinity in x reach the outputs they feed, as in f32 (bf16 keeps both)."""
    x, w, _ = make_inputs(20, 64, 40, False)
    x[3, 5], x[7, 9] = np.nan, np.inf
    got = to_f64(ops.linear(x, tensor(w, "bf16"), bf16_products=True))
    assert np.isnan(got[3]).all() and not np.isfinite(got[7]).any()
    assert np.isfinite(np.delete(got, [3, 7], axis=0)).all()


def test_linear_bf16_products_no_stale_padding(bf16_products_on, bf16_gemm_kernel):
    """Scratch reused across calls holds no earlier operand where a later call pads: after a product whose
    weights hold infinity in columns 64-95, a product with K = 66 (padded to 96 on AMX tiles) stays finite and
    within the bound."""
    x, w, _ = make_inputs(40, 512, 64, False)
    w[:, 64:96] = np.inf
    assert not np.isfinite(to_f64(ops.linear(x, tensor(w, "bf16"), bf16_products=True))).all()
    x, w, _ = make_inputs(40, 66, 64, False, seed=5)
    got = ops.linear(x, tensor(w, "bf16"), bf16_products=True)
    assert np.isfinite(to_f64(got)).all()
    want, scale = numpy_linear(x, w, None, "bf16", "bf16", "f32")
    assert_linear_close(got, want, scale, 66, "f32", "bf16 products after a non-finite product")


def _f32(*shape):
    return np.ones(shape, np.float32)


@pytest.mark.parametrize("operand,call", [
    ("w", lambda: ops.linear(_f32(2, 5), _f32(3, 4))),                                   # K mismatch
    ("w", lambda: ops.linear(_f32(2, 5), _f32(5))),                                      # w not 2-d
    ("bias", lambda: ops.linear(_f32(2, 5), _f32(3, 5), _f32(4))),                       # bias length
    ("bias", lambda: ops.linear(_f32(2, 5), _f32(3, 5), _f32(1, 3))),                    # bias not 1-d
    ("x", lambda: ops.linear(np.ones((2, 5), np.float16), _f32(3, 5))),                  # x f16
    ("x", lambda: ops.linear(np.ones((2, 5), np.int32), _f32(3, 5))),                    # x int
    ("x", lambda: ops.linear(np.ones((2, 5), np.float64), _f32(3, 5))),                  # x float64
    ("w", lambda: ops.linear(_f32(2, 5), np.ones((3, 5), np.int32))),                    # w int
    ("bias", lambda: ops.linear(_f32(2, 5), _f32(3, 5), np.ones(3, np.int64))),          # bias int
    ("out", lambda: ops.linear(_f32(2, 5), _f32(3, 5), out=_f32(2, 4))),                 # out shape
    ("out", lambda: ops.linear(_f32(2, 5), _f32(3, 5), out=_f32(3, 2))),                 # out shape
    ("out", lambda: ops.linear(_f32(2, 5), _f32(3, 5), out=mb.Tensor(_f32(2, 3), dtype="bf16"))),  # out dtype
    ("x", lambda: ops.linear(_f32(2, 10)[:, ::2], _f32(3, 5))),                          # x strided
    ("w", lambda: ops.linear(_f32(2, 5), _f32(5, 3).T)),                                 # w transposed view
])
def test_linear_bad_input(operand, call):
    with pytest.raises(mb.InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith("linear: ") and (f" {operand} " in msg or f"'{operand}'" in msg), msg


def test_linear_out_may_not_alias():
    buf = np.zeros((4, 4), np.float32)
    t = mb.Tensor(buf)
    with pytest.raises(mb.InputError, match="linear: out overlaps input x"):
        ops.linear(t, np.ones((4, 4), np.float32), out=t)


# Row counts across every kernel boundary: one pass of 4 rows, two, the old GEMV limit (8), the GEMM sizes.
ROW_INVARIANT_M = [2, 3, 4, 5, 8, 9, 17]


@pytest.mark.parametrize("K", [200, 4100])  # K > 4096: on the CPU the stream kernel instead of the row kernel
@pytest.mark.parametrize("w_dtype,bf16_products", [("f32", False), ("bf16", False), ("bf16", True), ("f16", False)])
def test_linear_row_invariant(K, w_dtype, bf16_products, device):
    """row_invariant (a batched decode step): every row of out equals the product of that row alone, bit for
    bit, whatever the row count (CPU: the decode GEMV in passes of 4 rows, one accumulator layout; Metal:
    matvec in slabs of 4 rows). Without it more rows may take a GEMM, whose sums differ."""
    r = rng(K + len(w_dtype))
    x = r.normal(size=(max(ROW_INVARIANT_M), K)).astype(np.float32)
    wt, bt = tensor(r.normal(size=(24, K)).astype(np.float32), w_dtype), tensor(r.normal(size=24).astype(np.float32), "f32")
    kw = dict(device=device, bf16_products=bf16_products)
    alone = [to_f64(ops.linear(x[m:m + 1], wt, bt, **kw)) for m in range(len(x))]
    for M in ROW_INVARIANT_M:
        got = to_f64(ops.linear(x[:M], wt, bt, row_invariant=True, **kw))
        for m in range(M):
            assert np.array_equal(got[m], alone[m][0]), f"M={M} row {m}: {np.max(np.abs(got[m] - alone[m][0]))}"
        rev = to_f64(ops.linear(np.ascontiguousarray(x[:M][::-1]), wt, bt, row_invariant=True, **kw))
        assert np.array_equal(rev[::-1], got), f"M={M}: rows in reverse order"
