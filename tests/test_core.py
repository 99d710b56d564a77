"""Tests of the core: version, devices, error classes, Tensor (numpy exchange, dtype conversion, views,
lifetime, read-only memory), Arena and the thread pool. Expected values come from numpy or from
independent bit-level implementations written here, never from markbase itself."""

import gc
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import markbase as mb
from markbase import _core

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, env_extra=None, args=None):
    """Runs a fresh interpreter that imports the same markbase as this test session."""
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(mb.__file__)))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MARKBASE_NUM_THREADS", None)
    for name, value in (env_extra or {}).items():  # None: unset
        env.pop(name, None) if value is None else env.__setitem__(name, value)
    cmd = [sys.executable] + (args if args is not None else ["-c", code])
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------------------------- package, errors

def pyproject_version():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    try:
        import tomllib
        return tomllib.loads(text)["project"]["version"]
    except ImportError:  # Python 3.10
        return re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S).group(1)


def test_version_matches_pyproject():
    assert mb.__version__ == pyproject_version()
    assert _core.__version__ == mb.__version__


def test_devices_contains_cpu():
    devs = mb.devices()
    assert isinstance(devs, list) and "cpu" in devs
    # Preference order: a real GPU first, then cpu; metal-sim (a simulator for testing) comes after cpu.
    assert devs.index("cpu") == len([d for d in devs if d == "metal"])
    assert all(d in ("metal", "cpu", "metal-sim") for d in devs)


def test_cli_version():
    res = run_python(None, args=["-m", "markbase", "--version"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"markbase {pyproject_version()}"


def test_cli_devices():
    res = run_python(None, args=["-m", "markbase", "devices"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == mb.devices()


SUBCLASSES = [mb.CheckpointError, mb.ConfigError, mb.InputError, mb.DeviceError]


@pytest.mark.parametrize("cls", SUBCLASSES, ids=lambda c: c.__name__)
def test_error_subclasses(cls):
    assert issubclass(cls, mb.MarkbaseError) and cls is not mb.MarkbaseError
    assert issubclass(mb.MarkbaseError, Exception)
    with pytest.raises(mb.MarkbaseError):
        raise cls("raised from Python")
    try:
        raise cls("message kept")
    except mb.MarkbaseError as e:
        assert type(e) is cls and "message kept" in str(e)


def test_errors_from_cpp_keep_their_class():
    # InputError, DeviceError and the base class, thrown in C++, arrive as the matching Python classes,
    # each catchable as MarkbaseError.
    with pytest.raises(mb.MarkbaseError) as e:
        mb.Tensor.empty([2], "f64")
    assert type(e.value) is mb.InputError and "f64" in str(e.value)
    with pytest.raises(mb.MarkbaseError) as e:
        _core.ops.relu(np.ones(2, np.float32), device="no-such-device")
    assert type(e.value) is mb.DeviceError
    with pytest.raises(mb.MarkbaseError) as e:
        _core.Arena(64).tensor([1000], "f32")
    assert type(e.value) is mb.MarkbaseError


# --------------------------------------------------------------------------------- Tensor <-> numpy

ZERO_COPY = [("f32", np.float32), ("f16", np.float16), ("i32", np.int32), ("i64", np.int64), ("u8", np.uint8),
             ("bool", np.bool_)]


@pytest.mark.parametrize("name,np_dtype", ZERO_COPY)
def test_zero_copy_from_numpy(name, np_dtype):
    a = (np.arange(24) % 7).astype(np_dtype).reshape(4, 6)
    t = mb.Tensor(a)
    assert t.dtype == name and t.shape == (4, 6) and t.kind == "external" and t.writable
    assert t.data_ptr() == a.ctypes.data
    v = t.numpy()
    assert v.dtype == np_dtype and v.ctypes.data == a.ctypes.data and np.shares_memory(v, a)
    a[1, 2] = 1  # numpy -> tensor
    assert v[1, 2] == 1
    v[3, 5] = 0  # tensor -> numpy
    assert a[3, 5] == 0
    a[2, 2] = 1
    assert np.asarray(memoryview(t))[2, 2] == 1  # buffer protocol sees the same memory


def test_bf16_from_uint16_is_zero_copy():
    bits = np.array([[0x3F80, 0xC000], [0x7F80, 0x0001]], np.uint16)
    t = mb.Tensor(bits, dtype="bf16")
    assert t.dtype == "bf16" and t.data_ptr() == bits.ctypes.data
    np.testing.assert_array_equal(t.to_float32(), np.array([[1.0, -2.0], [np.inf, 2.0**-133]], np.float32))
    bits[0, 0] = 0x4040  # 3.0
    assert t.to_float32()[0, 0] == 3.0


def f32_to_bf16_independent(f):
    """bf16 bits of float32 values, round to nearest even, written as the textbook rule (independent of
    markbase and of tests/parity.py): keep the top 16 bits, round up when the dropped half is above
    0x8000, or exactly 0x8000 with an odd kept part; a carry ripples into the exponent (→ Inf at the top)."""
    u = np.ascontiguousarray(f, np.float32).view(np.uint32)
    kept, dropped = u >> 16, u & 0xFFFF
    up = (dropped > 0x8000) | ((dropped == 0x8000) & ((kept & 1) == 1))
    return (kept + up).astype(np.uint16)


def conversion_probe_bits(seed=0):
    """float32 bit patterns: random over the whole space (NaN, Inf, subnormals, huge values) plus exact
    bf16 and f16 ties, f16 subnormal / overflow boundaries and special values."""
    r = np.random.default_rng(seed)
    parts = [r.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)]
    # bf16 ties: dropped half exactly 0x8000, kept part odd and even.
    parts.append((r.integers(0, 2**16, size=20_000, dtype=np.uint32) << 16) | 0x8000)
    # f16-range values (2^-27 .. 2^17), and exact f16 ties (13 dropped mantissa bits = 0x1000) in the
    # normal range (f32 exponents 113..142).
    exp = r.integers(100, 145, size=50_000, dtype=np.uint32)
    mant = r.integers(0, 2**23, size=50_000, dtype=np.uint32)
    sign = r.integers(0, 2, size=50_000, dtype=np.uint32) << 31
    parts.append(sign | (exp << 23) | mant)
    tie_exp = r.integers(113, 143, size=20_000, dtype=np.uint32)
    parts.append(sign[:20_000] | (tie_exp << 23) | (mant[:20_000] & ~np.uint32(0x1FFF)) | 0x1000)
    # f16 subnormal ties: odd multiples of 2^-25 up to 2^-14.
    k = np.arange(1, 2**11, 2, dtype=np.float64)
    parts.append((k * 2.0**-25).astype(np.float32).view(np.uint32))
    # f32 subnormals.
    parts.append(r.integers(1, 2**23, size=5_000, dtype=np.uint32))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.996, 65520, -65520, 65536,
                         2.0**-24, 2.0**-25, np.nextafter(np.float32(2.0**-25), np.float32(1)), 2.0**-14,
                         2.0**-14 - 2.0**-25, 3.4028235e38, -3.4028235e38, 1.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8],
                        np.float32).view(np.uint32)
    nans = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0x7FFFFFFF, 0x7F80FFFF, 0x7F810000], np.uint32)
    parts += [specials, nans]
    return np.concatenate(parts).astype(np.uint32)


def test_bf16_conversion_round_to_nearest_even():
    u = conversion_probe_bits(1)
    f = u.view(np.float32)
    t = mb.Tensor(f, dtype="bf16")
    assert t.dtype == "bf16"
    got = t.numpy()
    assert got.dtype == np.uint16
    nan = np.isnan(f)
    want = f32_to_bf16_independent(f)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, f"{bad.size} bf16 mismatches, first: f32 bits {u[bad[0]]:#010x} -> {got[bad[0]]:#06x}, want {want[bad[0]]:#06x}"
    # NaN stays NaN (never Inf, even when the payload lives only in the dropped bits), sign kept, and the
    # kept payload with the quiet bit forced.
    g = got[nan]
    assert ((g & 0x7F80) == 0x7F80).all() and ((g & 0x007F) != 0).all(), "a NaN converted to a non-NaN"
    np.testing.assert_array_equal(g & 0x8000, (u[nan] >> 16) & 0x8000)
    np.testing.assert_array_equal(g, ((u[nan] >> 16) | 0x40).astype(np.uint16))
    # Back to f32: exact (bf16 is the top half of an f32).
    back = t.to_float32()
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back.view(np.uint32), got.astype(np.uint32) << 16)


def test_f16_conversion_matches_numpy():
    u = conversion_probe_bits(2)
    f = u.view(np.float32)
    t = mb.Tensor(f).to("f16")
    assert t.dtype == "f16"
    got = t.numpy()
    assert got.dtype == np.float16
    with np.errstate(over="ignore", invalid="ignore"):
        want = f.astype(np.float16)
    g, w = got.view(np.uint16), want.view(np.uint16)
    nan = np.isnan(f)
    bad = np.flatnonzero((g != w) & ~nan)
    assert bad.size == 0, f"{bad.size} f16 mismatches, first: f32 {f[bad[0]]!r} ({u[bad[0]]:#010x}) -> {g[bad[0]]:#06x}, numpy {w[bad[0]]:#06x}"
    # NaN payloads are not part of the contract (markbase makes one quiet NaN); NaN-ness and sign are.
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(g[nan] & 0x8000, w[nan] & 0x8000)
    # Overflow and underflow really were exercised.
    assert np.isinf(got[np.isfinite(f)]).any() and (got[(f != 0) & np.isfinite(f)] == 0).any()
    assert (np.abs(got[np.isfinite(got)]) < 2.0**-14).any(), "no f16 subnormal results in the probe"


def test_f16_to_f32_exhaustive():
    h = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = mb.Tensor(h).to("f32").numpy()
    want = h.astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    # ... and every finite f16 survives f16 -> f32 -> f16 unchanged.
    finite = h[np.isfinite(h)]
    back = mb.Tensor(finite.astype(np.float32)).to("f16").numpy()
    np.testing.assert_array_equal(back.view(np.uint16), finite.view(np.uint16))


def test_non_native_byte_order():
    # CORE BUG (see report): tensor_from_numpy maps dtypes by kind and size only, so a big-endian array
    # is wrapped zero-copy as if it were little-endian and every value is garbage.
    a = np.arange(1, 4, dtype=">f4")
    try:
        t = mb.Tensor(a)
    except mb.InputError:
        return  # refusing is acceptable
    np.testing.assert_array_equal(
        t.to_float32(), np.array([1, 2, 3], np.float32),
        err_msg="CORE BUG: a non-native byte-order numpy array is wrapped without byte swapping "
                "(csrc/bindings/core_py.cpp numpy_dtype() must reject or convert dtypes whose byteorder is not native)")


# --------------------------------------------------------------------------------------------- views

def check_view(t, want, what):
    got = t.numpy()
    assert t.shape == want.shape, what
    assert got.shape == want.shape and got.strides == want.strides, f"{what}: {got.strides} vs {want.strides}"
    if want.size:  # (an empty view's address means nothing; numpy does not offset it)
        assert got.ctypes.data == want.ctypes.data, f"{what}: not a view of the same memory"
        assert np.shares_memory(got, want), f"{what}: not a view"
    np.testing.assert_array_equal(got, want, err_msg=what)
    assert t.is_contiguous() == want.flags.c_contiguous, what


def test_views_match_numpy():
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    t = mb.Tensor(a)
    check_view(t.slice(2, 1, 3), a[:, :, 1:3], "slice")
    check_view(t.slice(3, -3, -1), a[..., -3:-1], "slice negative")
    check_view(t.slice(0, 1, 1), a[1:1], "empty slice")
    check_view(t.transpose(1, 3), a.swapaxes(1, 3), "transpose")
    check_view(t.transpose(-1, 0), a.swapaxes(-1, 0), "transpose negative dims")
    check_view(t.permute([2, 0, 3, 1]), a.transpose(2, 0, 3, 1), "permute")
    check_view(t.select(1, 2), a[:, 2], "select")
    check_view(t.select(-1, -1), a[..., -1], "select negative")
    check_view(t.reshape([6, -1]), a.reshape(6, -1), "reshape -1")
    check_view(t.reshape([120]), a.reshape(120), "reshape flat")
    check_view(t.slice(0, 1, 2).reshape([3, 20]), a[1:2].reshape(3, 20), "reshape of a contiguous slice")
    check_view(t.permute([3, 2, 1, 0]).slice(0, 1, 4).select(2, 1), a.transpose(3, 2, 1, 0)[1:4, :, 1], "chain")
    # Writes through a view reach the base memory.
    v = t.transpose(0, 3).select(0, 4).numpy()  # a[:, :, :, 4].T-ish view
    v[...] = -1
    assert (a[..., 4] == -1).all()


def test_view_errors():
    t = mb.Tensor(np.zeros((4, 6), np.float32))
    for bad in (lambda: t.transpose(0, 1).reshape([24]),      # non-contiguous reshape
                lambda: t.slice(1, 0, 3).reshape([12]),
                lambda: t.reshape([5, 5]),
                lambda: t.reshape([-1, -1]),
                lambda: t.slice(0, 2, 5),
                lambda: t.slice(0, 3, 2),
                lambda: t.select(1, 6),
                lambda: t.transpose(0, 2),
                lambda: t.permute([0, 0])):
        with pytest.raises(mb.InputError):
            bad()
    with pytest.raises(mb.InputError, match="not contiguous"):
        t.transpose(0, 1).reshape([24])


def test_numpy_keeps_memory_alive():
    t = mb.Tensor(np.arange(2048, dtype=np.float32)).to("f16")  # an owned tensor (converted copy)
    assert t.kind == "owned"
    a = t.numpy()
    del t
    gc.collect()
    junk = [mb.Tensor.zeros([4096], "f16") for _ in range(8)]  # reuse freed memory if it was freed
    for j in junk:
        j.numpy()[:] = 7
    np.testing.assert_array_equal(a, np.arange(2048).astype(np.float16))
    # Arena tensors: the numpy view outlives both the tensor and the Python Arena object.
    arena = _core.Arena(1 << 16)
    at = arena.tensor([256], "f32")
    at.numpy()[:] = np.arange(256)
    view = at.numpy()
    del at, arena
    gc.collect()
    np.testing.assert_array_equal(view, np.arange(256, dtype=np.float32))
    # A Tensor keeps the numpy array it wraps alive.
    src = np.arange(1000, dtype=np.int64)
    wrapped = mb.Tensor(src)
    del src
    gc.collect()
    np.testing.assert_array_equal(wrapped.numpy(), np.arange(1000))


def test_read_only_stays_read_only():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    a.flags.writeable = False
    t = mb.Tensor(a)
    assert not t.writable
    views = [t, t.slice(0, 1, 3), t.transpose(0, 1), t.select(0, 1), t.permute([1, 0]), t.reshape([12]),
             t.to("f32"), t.contiguous()]
    for v in views:
        assert not v.writable
        n = v.numpy()
        assert not n.flags.writeable
        with pytest.raises(ValueError):
            n[...] = 0
        with pytest.raises(ValueError):
            n.setflags(write=True)
        assert memoryview(v).readonly
    with pytest.raises(mb.InputError, match="read-only"):
        _core.ops.relu(np.ones((3, 4), np.float32), out=t)
    bits = np.zeros(4, np.uint16)
    bits.flags.writeable = False
    assert not mb.Tensor(bits, dtype="bf16").writable
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4))


# ----------------------------------------------------------------------------------------- huge pages

HUGE_PAGES_CHILD = r"""
from markbase import _core

MiB = 1 << 20


def vm_flags_at(address):
    # The VmFlags of the mapping holding `address` in /proc/self/smaps ("hg": advised for huge pages).
    inside = False
    for line in open("/proc/self/smaps", encoding="ascii", errors="replace"):
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


keep = []  # every block stays alive: memory once advised keeps its flag when reused
# First, before anything in this process was advised: off, and below the threshold, plain 64-byte blocks.
for mode, size in [(0, 4 * MiB + 64), (0, 64 * MiB), (1, 4 * MiB - 64)]:
    _core._set_huge_pages(mode)
    blocks = [_core.Tensor.zeros([size], "u8") for _ in range(4)]
    keep += blocks
    assert all(b.data_ptr() % 64 == 0 for b in blocks)
    assert any(b.data_ptr() % (2 * MiB) for b in blocks), f"huge pages {mode}, {size} bytes: 2 MiB aligned"
    assert not any("hg" in vm_flags_at(b.data_ptr()) for b in blocks), f"huge pages {mode}, {size} bytes: advised"
_core._set_huge_pages(1)
big = _core.Tensor.zeros([4 * MiB + 64], "u8")
assert big.data_ptr() % (2 * MiB) == 0, f"a 4 MiB block at {big.data_ptr():#x} is not 2 MiB aligned"
assert "hg" in vm_flags_at(big.data_ptr()), "the block was not advised for huge pages"
assert "hg" in vm_flags_at(big.data_ptr() + 4 * MiB - 1), "the advice must cover every whole 2 MiB page"
assert "hg" not in vm_flags_at(big.data_ptr() + 4 * MiB), "the tail past the last whole 2 MiB page is advised"
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are a Linux feature")
def test_large_host_blocks_ask_for_huge_pages():
    """Blocks of 4 MiB or more start on a 2 MiB boundary and their whole 2 MiB pages carry MADV_HUGEPAGE
    (smaps "hg"), the tail past them not; smaller blocks and _set_huge_pages(0) keep plain 64-byte aligned
    memory. In a fresh process: memory advised once keeps the flag when the allocator hands it out again."""
    r = run_python(HUGE_PAGES_CHILD, env_extra={"MARKBASE_HUGEPAGES": None})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("value, expected", [("0", False), ("off", False), ("1", True), (None, True)])
def test_huge_pages_env(value, expected):
    r = run_python("from markbase import _core; print(_core._huge_pages())", env_extra={"MARKBASE_HUGEPAGES": value})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(expected)


# --------------------------------------------------------------------------------------------- arena

def test_arena_alignment_mark_reset():
    arena = _core.Arena(4096)
    assert arena.capacity == 4096 and arena.used == 0
    assert _core.Arena(100).capacity % 64 == 0 and _core.Arena(100).capacity >= 100
    ptrs = []
    for shape, dt in [([3], "f32"), ([5], "bf16"), ([1], "u8"), ([7, 3], "i64"), ([0], "f32"), ([2], "f16")]:
        t = arena.tensor(shape, dt)
        assert t.kind == "arena" and t.shape == tuple(shape) and t.dtype == dt and t.is_contiguous()
        assert t.data_ptr() % 64 == 0, f"arena tensor {dt}{shape} at {t.data_ptr():#x} is not 64-byte aligned"
        ptrs.append(t.data_ptr())
    assert len(set(ptrs[:4])) == 4 and ptrs == sorted(ptrs), "allocations must be distinct and bump upwards"
    first = ptrs[0]
    m = arena.mark()
    assert m == arena.used
    a = arena.tensor([100], "f32")
    b = arena.tensor([10], "f32")
    assert b.data_ptr() >= a.data_ptr() + 400
    high = arena.high_water
    assert high == arena.used
    arena.reset(m)
    assert arena.used == m
    c = arena.tensor([100], "f32")
    assert c.data_ptr() == a.data_ptr(), "after reset(mark) the next allocation reuses the same memory"
    assert arena.high_water == high, "reset must not lower the high-water mark"
    arena.reset()
    assert arena.used == 0 and arena.tensor([1], "f32").data_ptr() == first
    with pytest.raises(mb.InputError):
        arena.reset(arena.used + 1)


def test_arena_exhaustion_names_sizes():
    arena = _core.Arena(4096)
    arena.tensor([100], "f32")  # 400 bytes -> next start at 448
    with pytest.raises(mb.MarkbaseError) as e:
        arena.tensor([1000], "f32")  # 4000 bytes, 3648 left
    msg = str(e.value)
    assert type(e.value) is mb.MarkbaseError
    assert "4000" in msg and "4096" in msg and "3648" in msg, msg
    assert arena.used == 400, "a failed allocation must not move the arena"
    arena.tensor([912], "f32")  # exactly the rest still fits
    assert arena.used == 4096


# ---------------------------------------------------------------------------------------- thread pool

def test_thread_pool_spreads_work_and_covers_every_item():
    n_threads = _core.num_threads()
    expected = int(os.environ.get("MARKBASE_NUM_THREADS") or (os.cpu_count() or 1))
    assert n_threads == expected
    distinct = set()
    for _ in range(10):  # the machine is shared: a busy moment can let the caller take every chunk
        ids = _core._parallel_thread_ids(64)
        assert len(ids) == 64 and min(ids) >= 0, f"items not covered: {[i for i, v in enumerate(ids) if v < 0]}"
        assert sorted(set(ids)) == list(range(len(set(ids)))) and len(set(ids)) <= n_threads
        distinct |= {len(set(ids))}
        if n_threads == 1 or max(distinct) > 1:
            break
    if n_threads >= 2:
        assert max(distinct) > 1, "parallel_for never used more than one thread in 10 tries"
    else:
        assert distinct == {1}
    assert _core._parallel_thread_ids(0) == []
    assert set(_core._parallel_thread_ids(5, 100)) == {0}, "one chunk (n <= grain) runs on the caller alone"


@pytest.mark.parametrize("value,expected", [("1", 1), ("3", 3), ("0", None), ("abc", None)])
def test_num_threads_env(value, expected):
    code = ("import markbase._core as c; ids = c._parallel_thread_ids(64); "
            "print(c.num_threads(), len(set(ids)), min(ids))")
    res = run_python(code, {"MARKBASE_NUM_THREADS": value})
    assert res.returncode == 0, res.stderr
    n, used, lowest = map(int, res.stdout.split())
    assert n == (expected if expected is not None else (os.cpu_count() or 1)), "invalid values fall back to all cores"
    assert lowest == 0 and used <= n
    if expected == 1:
        assert used == 1
