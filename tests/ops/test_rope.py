"""Parity grid for rope, rope_2d and rope_inv_freq (thresholds: tests/parity.py), plus comparisons with
transformers' own Gemma 4 rotary classes (test_*_matches_transformers_*; they need torch and transformers
and fail, never skip, without them).

Large angles. ang = f32(pos) · inv_freq is one f32 multiply (as in HF), so it differs from the exact
pos · inv_freq by up to 2^-24·|ang| (half an ulp): at pos 131072 and inv_freq 1 that is ~7.8e-3 rad, and
cos / sin move by as much. That is not kernel error (HF rounds the same way), so the numpy references
below start from the same f32-rounded angle (numpy's f32 multiply is the same correctly rounded IEEE
operation) and only evaluate cos / sin and the rotation in float64. What remains — f32 cos / sin
(≤ 1 ulp) and the f32 products — fits the default f32 thresholds at every position.
test_rope_large_angle_bound checks the stated 2^-24·|ang| bound against a float64-angle reference.
"""

import math

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, HEAD_DIMS, assert_close, device_vs_reference, rng, round_to, tensor, to_f64
from references.rope import POSITIONS, TABLES, unrotated_dims, vision_positions


def inv_freq_np(theta, denom, count):
    """transformers' f32 procedure: e = f32(2j) / f32(denom); θ^e rounded to f32; 1 / that in f32.

    θ^e is evaluated in float64 and rounded once (the correctly rounded f32 power)."""
    e = (2 * np.arange(count)).astype(np.float32) / np.float32(denom)
    pw = np.power(np.float64(np.float32(theta)), e.astype(np.float64)).astype(np.float32)
    return np.float32(1) / pw


def f32_angles(pos, inv):
    """[len(pos), len(inv)] angles exactly as the kernel (and HF) form them: f32(pos) · inv in f32."""
    return np.asarray(pos).astype(np.float32)[:, None] * np.asarray(inv, np.float32)[None, :]


def rotate_np(x, ang, start, n):
    """Half-split rotation of x[..., start : start + 2n] by ang [T, n] (float64), HF's x·cos + rotate_half(x)·sin."""
    c = np.cos(ang.astype(np.float64))[:, None, :]
    s = np.sin(ang.astype(np.float64))[:, None, :]
    a = x[..., start:start + n].copy()
    b = x[..., start + n:start + 2 * n].copy()
    x[..., start:start + n] = a * c - b * s
    x[..., start + n:start + 2 * n] = b * c + a * s
    return x


def rope_np(x, pos, inv):
    return rotate_np(np.array(x, dtype=np.float64), f32_angles(pos, inv), 0, len(inv))


def rope_2d_np(x, pos, theta):
    d = x.shape[-1]
    half, q = d // 2, d // 4
    inv = inv_freq_np(theta, half, q)
    y = np.array(x, dtype=np.float64)
    rotate_np(y, f32_angles(pos[:, 0], inv), 0, q)     # first half of each head ↔ x (column), spec §9.19
    rotate_np(y, f32_angles(pos[:, 1], inv), half, q)  # second half ↔ y (row)
    return y


@pytest.mark.parametrize("kind", sorted(TABLES))
@pytest.mark.parametrize("H", [1, 3, 8])
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rope_parity(dtype, d, H, kind, device):
    inv = TABLES[kind](d)
    x = rng(d * 10 + H).normal(size=(len(POSITIONS), H, d)).astype(np.float32)
    xt = tensor(x, dtype)
    what = f"rope {kind} {dtype} d={d} H={H}"
    fast, ref = device_vs_reference(lambda **kw: ops.rope(xt, POSITIONS, inv, **kw), x.shape, dtype, device, what)
    assert_close(ref, rope_np(round_to(x, dtype), POSITIONS, inv), dtype, what=f"{what}: reference vs numpy")
    keep = unrotated_dims(inv, d)
    for got, name in [(fast, device), (ref, "reference")]:
        np.testing.assert_array_equal(to_f64(got)[..., keep], round_to(x, dtype)[..., keep],
                                      err_msg=f"{what}: {name} changed a dim it must pass through")


@pytest.mark.parametrize("pdtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rope_explicit_positions(dtype, pdtype, device):
    # Any order, repeats, negatives, up to ±262144; an odd head dim with a partial rotation (1 dim passes).
    pos = np.array([262144, 5, 5, -3, 0, 131071, -262144, 17, 5, 200000], dtype=pdtype)
    inv = ops.rope_inv_freq("default", 64, 1e4)
    x = rng(11).normal(size=(len(pos), 2, 67)).astype(np.float32)
    xt = tensor(x, dtype)
    _, ref = device_vs_reference(lambda **kw: ops.rope(xt, pos, inv, **kw), x.shape, dtype, device,
                                 f"rope positions {dtype} {pdtype.__name__}")
    assert_close(ref, rope_np(round_to(x, dtype), pos, inv), dtype, what="rope positions: reference vs numpy")
    # Equal positions give equal rotations (rows 1, 2 and 8 share position 5 and get the same x here).
    x[2] = x[1]
    x[8] = x[1]
    y = ops.rope(tensor(x, dtype), pos, inv, device=device).to_float32()
    np.testing.assert_array_equal(y[2], y[1])
    np.testing.assert_array_equal(y[8], y[1])


@pytest.mark.parametrize("reference", [False, True])
def test_rope_large_angle_bound(reference):
    """Against exact float64 angles the only extra error is the f32 angle rounding: |Δang| ≤ 2^-24·|ang|.

    A rotation by an angle off by δ moves each (a, b) pair by at most |δ|·‖(a, b)‖ ≤ |δ|·√2·max|out|,
    so atol (relative to max|out|) = √2·2^-24·max|ang| + the ordinary f32 threshold."""
    pos = np.array([131072, 131071, 100003, 99999, 65536], np.int64)
    inv = ops.rope_inv_freq("default", 256, 1e4)
    x = rng(12).normal(size=(len(pos), 2, 256)).astype(np.float32)
    y = ops.rope(x, pos, inv, reference=reference)
    ang64 = pos.astype(np.float64)[:, None] * inv.astype(np.float64)[None, :]
    want = rotate_np(x.astype(np.float64), ang64, 0, len(inv))
    bound = math.sqrt(2) * 2.0**-24 * float(np.max(np.abs(ang64)))
    assert_close(y, want, "f32", atol=bound + 1e-6, what="rope vs float64 angles")
    # The bound is not vacuous: the f32 angles really differ from the float64 ones at these positions.
    assert np.max(np.abs(f32_angles(pos, inv) - ang64)) > 1e-4


@pytest.mark.parametrize("layout", ["sliced", "transposed"])
def test_rope_strided_x(layout, device):
    T, H, d = 9, 3, 128
    inv = ops.rope_inv_freq("proportional", d, 1e6, 0.25)
    r = rng(13)
    if layout == "sliced":  # x is the middle of a wider row, e.g. one part of a fused projection
        x = r.normal(size=(T, H, d + 40)).astype(np.float32)[:, :, 24:24 + d]
    else:  # [H, T, d] seen as [T, H, d]
        x = r.normal(size=(H, T, d)).astype(np.float32).transpose(1, 0, 2)
    xt = mb.Tensor(x)
    assert not xt.is_contiguous()
    _, ref = device_vs_reference(lambda **kw: ops.rope(xt, POSITIONS, inv, **kw), x.shape, "f32", device, f"rope {layout}")
    assert_close(ref, rope_np(x, POSITIONS, inv), "f32", what=f"rope {layout}: reference vs numpy")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("reference", [False, True])
def test_rope_in_place(dtype, reference):
    x = rng(14).normal(size=(len(POSITIONS), 4, 72)).astype(np.float32)
    inv = ops.rope_inv_freq("default", 72, 1e4, 0.5)
    want = ops.rope(tensor(x, dtype), POSITIONS, inv, reference=reference).to_float32()
    xt = tensor(x, dtype)
    ops.rope(xt, POSITIONS, inv, out=xt, reference=reference)
    np.testing.assert_array_equal(xt.to_float32(), want)
    pos2 = np.stack([POSITIONS, POSITIONS[::-1]], axis=1)
    want2 = ops.rope_2d(tensor(x, dtype), pos2, 100.0, reference=reference).to_float32()
    xt = tensor(x, dtype)
    ops.rope_2d(xt, pos2, 100.0, out=xt, reference=reference)
    np.testing.assert_array_equal(xt.to_float32(), want2)


# ---- rope_inv_freq ----------------------------------------------------------------------------------

def formula_rtol(theta):
    """The exponent e = 2j/r ≤ 1 is rounded to f32 first (as transformers does): |δe| ≤ 2^-24·e, which moves
    θ^-e by the relative amount |δe|·ln θ ≤ 2^-24·ln θ; plus rounding of the power and the reciprocal."""
    return 2.0**-24 * (math.log(theta) + 4)


@pytest.mark.parametrize("theta, d, p", [(1e4, 256, 1.0), (1e4, 64, 1.0), (1e4, 72, 1.0), (1e6, 512, 1.0),
                                         (100.0, 32, 1.0), (100.0, 36, 1.0), (1e4, 128, 0.5), (5e5, 256, 0.25)])
def test_inv_freq_default(theta, d, p):
    got = ops.rope_inv_freq("default", d, theta, p)
    r = int(d * p)
    assert got.dtype == np.float32 and got.shape == (r // 2,)
    # Bit-exact against the f32 procedure written out in numpy ...
    np.testing.assert_array_equal(got.view(np.int32), inv_freq_np(theta, r, r // 2).view(np.int32))
    # ... and close to the plain formula θ^(−2j/r) in float64 (see formula_rtol).
    assert_close(got, theta ** (-2.0 * np.arange(r // 2) / r), "f32", rtol=formula_rtol(theta), atol=0)


@pytest.mark.parametrize("theta, d, p", [(1e6, 512, 0.25), (1e6, 256, 0.25), (1e4, 128, 0.5), (1e4, 64, 1.0),
                                         (1e6, 72, 0.25)])
def test_inv_freq_proportional(theta, d, p):
    got = ops.rope_inv_freq("proportional", d, theta, p)
    n_rot = int(p * d // 2)
    assert got.dtype == np.float32 and got.shape == (d // 2,)
    # Exponent denominator is the FULL head dim (spec §2.4, §9.5), then zeros ("nope" angles).
    np.testing.assert_array_equal(got[:n_rot].view(np.int32), inv_freq_np(theta, d, n_rot).view(np.int32))
    assert_close(got[:n_rot], theta ** (-2.0 * np.arange(n_rot) / d), "f32", rtol=formula_rtol(theta), atol=0)
    assert np.all(got[n_rot:] == 0)
    if (theta, d, p) == (1e6, 512, 0.25):  # Gemma 4 full-attention layers
        assert n_rot == 64 and got[63] > 0 and got[64] == 0


# ---- rope_2d ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("H", [1, 3, 8])
@pytest.mark.parametrize("d", [64, 72])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rope_2d_parity(dtype, d, H, device):
    pos = vision_positions(np.int64)
    x = rng(d + H).normal(size=(len(pos), H, d)).astype(np.float32)
    xt = tensor(x, dtype)
    what = f"rope_2d {dtype} d={d} H={H}"
    _, ref = device_vs_reference(lambda **kw: ops.rope_2d(xt, pos, 100.0, **kw), x.shape, dtype, device, what)
    assert_close(ref, rope_2d_np(round_to(x, dtype), pos, 100.0), dtype, what=f"{what}: reference vs numpy")


@pytest.mark.parametrize("pdtype", [np.int32, np.int64])
def test_rope_2d_positions_and_theta(pdtype, device):
    # Large and negative coordinates, another θ, and a strided view of the positions ((y, x) columns swapped).
    r = rng(15)
    yx = r.integers(-50, 4000, size=(23, 2)).astype(pdtype)
    pos = yx[:, ::-1]
    x = r.normal(size=(23, 2, 64)).astype(np.float32)
    fast = ops.rope_2d(x, pos, 1e4, device=device)
    ref = ops.rope_2d(x, pos, 1e4, reference=True)
    assert_close(fast, ref, "f32", what=f"rope_2d: {device} vs reference")
    assert_close(ref, rope_2d_np(x, np.ascontiguousarray(pos), 1e4), "f32", what="rope_2d: reference vs numpy")


# ---- bad input -------------------------------------------------------------------------------------

X3 = np.ones((4, 2, 8), np.float32)
P4 = np.arange(4, dtype=np.int64)
INV4 = np.ones(4, np.float32)
P2D = np.zeros((4, 2), np.int32)


@pytest.mark.parametrize("call, op, operand", [
    (lambda: ops.rope(np.ones((4, 8), np.float32), P4, INV4), "rope", "x"),
    (lambda: ops.rope(np.ones((4, 2, 8), np.int32), P4, INV4), "rope", "x"),
    (lambda: ops.rope(np.ones((4, 2, 16), np.float32)[:, :, ::2], P4, INV4), "rope", "x"),
    (lambda: ops.rope(X3, np.arange(5), INV4), "rope", "positions"),
    (lambda: ops.rope(X3, P4.reshape(4, 1), INV4), "rope", "positions"),
    (lambda: ops.rope(X3, P4.astype(np.float32), INV4), "rope", "positions"),
    (lambda: ops.rope(X3, P4, np.ones(5, np.float32)), "rope", "inv_freq"),   # d_rot 10 > d 8
    (lambda: ops.rope(X3, P4, np.ones(0, np.float32)), "rope", "inv_freq"),
    (lambda: ops.rope(X3, P4, np.ones(4, np.float16)), "rope", "inv_freq"),
    (lambda: ops.rope(X3, P4, np.ones(4, np.float64)), "rope", "inv_freq"),
    (lambda: ops.rope(X3, P4, np.ones((2, 2), np.float32)), "rope", "inv_freq"),
    (lambda: ops.rope(X3, P4, INV4, out=np.ones((4, 8, 2), np.float32)), "rope", "out"),
    (lambda: ops.rope_inv_freq("default", 63, 1e4), "rope_inv_freq", "head_dim"),       # odd d_rot
    (lambda: ops.rope_inv_freq("default", 64, 1e4, 0.3), "rope_inv_freq", "d_rot"),     # int(19.2) = 19: odd
    (lambda: ops.rope_inv_freq("proportional", 0, 1e4), "rope_inv_freq", "head_dim"),
    (lambda: ops.rope_inv_freq("default", 64, -1.0), "rope_inv_freq", "theta"),
    (lambda: ops.rope_inv_freq("default", 64, 1e4, 1.5), "rope_inv_freq", "partial_rotary_factor"),
    (lambda: ops.rope_inv_freq("yarn", 64, 1e4), "rope_inv_freq", "kind"),
    (lambda: ops.rope_2d(np.ones((4, 2, 66), np.float32), P2D, 100.0), "rope_2d", "x"),  # d/2 odd
    (lambda: ops.rope_2d(np.ones((4, 66), np.float32), P2D, 100.0), "rope_2d", "x"),
    (lambda: ops.rope_2d(X3, np.zeros((4, 3), np.int32), 100.0), "rope_2d", "positions"),
    (lambda: ops.rope_2d(X3, np.zeros((5, 2), np.int32), 100.0), "rope_2d", "positions"),
    (lambda: ops.rope_2d(X3, np.zeros(4, np.int32), 100.0), "rope_2d", "positions"),
    (lambda: ops.rope_2d(X3, P2D, 0.0), "rope_2d", "theta"),
    (lambda: ops.rope_2d(X3, P2D, 100.0, out=np.ones((4, 2, 8), np.float16)), "rope_2d", "out"),
])
def test_bad_input(call, op, operand):
    with pytest.raises(mb.InputError, match=rf"^{op}: .*{operand}"):
        call()


def test_partial_alias_rejected():
    t = mb.Tensor(np.zeros((5, 2, 8), np.float32))
    with pytest.raises(mb.InputError, match="rope: out overlaps input x"):
        ops.rope(t.slice(0, 0, 4), P4, INV4, out=t.slice(0, 1, 5))


# ---- against transformers 5.23.0 ------------------------------------------------------------------

def ulps(a, b):
    """Distance in f32 ulps between two arrays of non-negative floats."""
    return np.abs(np.asarray(a, np.float32).view(np.int32).astype(np.int64)
                  - np.asarray(b, np.float32).view(np.int32).astype(np.int64))


def check_table_vs_hf(ours, hf, what):
    """Our table is the correctly rounded f32 procedure; torch's f32 pow (SLEEF, ≤ 1 ulp) can be one ulp off
    in a few entries, which then propagates through the reciprocal. Require ≤ 1 ulp everywhere and
    bit equality in all but max(2, 5 %) of the entries (transformers 5.23.0 / torch 2.13 on AVX2: 1 per table)."""
    assert ours.shape == hf.shape, what
    u = ulps(ours, hf)
    assert u.max() <= 1, f"{what}: inv_freq differs from transformers by {u.max()} ulp at {np.argmax(u)}"
    assert np.sum(u != 0) <= max(2, len(u) // 20), f"{what}: {np.sum(u != 0)} of {len(u)} inv_freq entries differ"


def table_angle_bound(pos, ours, hf):
    """max |Δangle| caused by differing table entries: |pos|·|Δinv| plus one f32 rounding of each angle."""
    differ = ours != hf
    if not differ.any():
        return 0.0
    p = np.abs(np.asarray(pos, np.float64))[:, None]
    a = p * np.maximum(np.abs(ours[differ]), np.abs(hf[differ])).astype(np.float64)[None, :]
    return float(np.max(p * np.abs(ours[differ].astype(np.float64) - hf[differ]) + 2.0**-23 * a))


def test_rope_matches_transformers_text():
    import torch
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding, apply_rotary_pos_emb

    cfg = Gemma4TextConfig()
    emb = Gemma4TextRotaryEmbedding(cfg)
    g = torch.Generator().manual_seed(0)
    pos = torch.tensor([[0, 1, 17, 1000, 8191, 32767, 131072]])
    for layer_type, kind in [("sliding_attention", "default"), ("full_attention", "proportional")]:
        rp = cfg.rope_parameters[layer_type]
        d = cfg.per_layer_config[layer_type].head_dim
        assert rp["rope_type"] == kind
        assert (d, rp["rope_theta"], rp.get("partial_rotary_factor", 1.0)) == \
            {"default": (256, 1e4, 1.0), "proportional": (512, 1e6, 0.25)}[kind]
        ours = ops.rope_inv_freq(kind, d, rp["rope_theta"], rp.get("partial_rotary_factor", 1.0))
        hf = getattr(emb, f"{layer_type}_inv_freq").numpy()
        check_table_vs_hf(ours, hf, layer_type)

        H = 3
        x = torch.randn(1, H, pos.shape[1], d, generator=g)  # HF layout [B, H, T, d]
        cos, sin = emb(x, pos, layer_type)
        want = apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)[0].permute(1, 0, 2).numpy()  # [T, H, d]
        x_thd = np.ascontiguousarray(x[0].permute(1, 0, 2).numpy())
        p = pos[0].numpy()
        # With HF's own table only the cos / sin implementations differ (≤ 1 ulp each): f32 thresholds.
        assert_close(ops.rope(x_thd, p, hf, reference=True), want, "f32", what=f"{layer_type}: rope with HF table")
        assert_close(ops.rope(x_thd, p, hf), want, "f32", what=f"{layer_type}: fast rope with HF table")
        # With our table, entries one ulp apart shift those angles; bound as in test_rope_large_angle_bound.
        atol = math.sqrt(2) * table_angle_bound(p, ours, hf) + 1e-6
        assert_close(ops.rope(x_thd, p, ours), want, "f32", atol=atol, what=f"{layer_type}: rope with our table")


def test_rope_2d_matches_transformers_vision():
    import torch
    from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4VisionRotaryEmbedding, apply_multidimensional_rope

    g = torch.Generator().manual_seed(1)
    pos = torch.from_numpy(vision_positions(np.int64))[None]  # [1, N, 2] as (x, y)
    for d in (64, 72):
        vc = Gemma4VisionConfig(head_dim=d)
        theta = vc.rope_parameters["rope_theta"]
        assert theta == 100.0
        emb = Gemma4VisionRotaryEmbedding(vc)
        ours = ops.rope_inv_freq("default", d // 2, theta)
        hf = emb.inv_freq.numpy()
        check_table_vs_hf(ours, hf, f"vision d={d}")

        x = torch.randn(1, pos.shape[1], 3, d, generator=g)  # [B, N, H, d]
        cos, sin = emb(x, pos)
        want = apply_multidimensional_rope(x, cos, sin, pos)[0].numpy()
        atol = math.sqrt(2) * table_angle_bound(pos[0].numpy().ravel(), ours, hf) + 1e-6
        for reference in (False, True):
            got = ops.rope_2d(x[0].numpy(), pos[0].numpy(), theta, reference=reference)
            assert_close(got, want, "f32", atol=atol, what=f"vision d={d} reference={reference}")
