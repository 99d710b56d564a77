"""metal-sim catches what Metal would silently get wrong: each deliberately faulty kernel (or binding)
must raise markbase.DeviceError naming the kernel, the buffer and the byte offset."""

import numpy as np
import pytest

from .sim import DeviceError, require_sim, run, pack_args


def guarded(n, dtype=np.float32, guard=16):
    """A length-n view inside a larger NaN-filled buffer, so a write outside it would show."""
    buf = np.full(n + 2 * guard, np.nan, dtype)
    return buf, buf[guard:guard + n]


def assert_guards_intact(buf, guard=16):
    assert np.isnan(buf[:guard]).all() and np.isnan(buf[-guard:]).all(), "a write escaped the bound buffer"


def test_write_one_past_the_end():
    n = 100
    buf, y = guarded(n)
    with pytest.raises(DeviceError, match=r"kernel 'test_fault_write_past_end'.*out-of-bounds access to buffer\(0\) "
                                          r"at byte offset 400 \(4 bytes; the buffer has 400 bytes\)"):
        run("test_fault_write_past_end", [y], [1], [128], args=pack_args(n))
    assert_guards_intact(buf)


def test_read_before_the_start():
    n = 64
    x = np.ones(n, np.float32)
    y = np.zeros(n, np.float32)
    with pytest.raises(DeviceError, match=r"kernel 'test_fault_read_before_start'.*thread_position_in_grid \(0, 0, 0\).*"
                                          r"buffer\(0\) at byte offset -4"):
        run("test_fault_read_before_start", [x, y], [1], [64], args=pack_args(n), read_only=[0])


def test_write_into_a_read_only_binding():
    n, victim = 50, 7
    x = np.arange(n, dtype=np.float32) + 1
    before = x.copy()
    y = np.zeros(n, np.float32)
    with pytest.raises(DeviceError, match=r"kernel 'test_fault_write_input' wrote buffer\(0\) at byte offset 28, "
                                          r"but the dispatch bound it read-only"):
        run("test_fault_write_input", [x, y], [1], [64], args=pack_args(n, victim), read_only=[0])
    np.testing.assert_array_equal(x, before)  # the sim wrote a private copy, never the caller's input


def test_same_kernel_with_a_writable_binding_is_fine():
    # The kernel above is only wrong because of how it is bound: bound writable, it may write.
    n, victim = 50, 7
    x = np.arange(n, dtype=np.float32) + 1
    y = np.zeros(n, np.float32)
    run("test_fault_write_input", [x, y], [1], [64], args=pack_args(n, victim))
    assert x[victim] == 0 and y[victim] == victim + 1


def test_barrier_after_early_return():
    y = np.zeros(64, np.float32)
    with pytest.raises(DeviceError, match=r"kernel 'test_fault_barrier_after_return'.*threadgroup_barrier reached by "
                                          r"63 of 64 threads; 1 returned before reaching it"):
        run("test_fault_barrier_after_return", [y], [1], [64])


def test_threadgroup_memory_limit():
    y = np.zeros(32, np.float32)
    with pytest.raises(DeviceError, match=r"test_fault_threadgroup_too_large.*65536 bytes of threadgroup memory"):
        run("test_fault_threadgroup_too_large", [y], [1], [32])


@pytest.mark.parametrize("call, message", [
    (lambda: run("no_such_kernel", [], [1], [1]), r"no kernel named 'no_such_kernel'"),
    (lambda: run("test_barrier_rotate", [np.zeros(4, np.float32)], [1], [4]), r"takes 2 buffers"),
    (lambda: run("test_fault_write_past_end", [np.zeros(4, np.float32)], [1], [4], args=b"\0" * 4),
     r"expects 8 bytes of constant arguments at buffer\(1\), the dispatch passes 4"),
    (lambda: run("test_barrier_rotate", [np.zeros(4, np.float32), np.zeros(4, np.float32)], [1], [2048]),
     r"threadgroup of 2048x1x1 threads"),
])
def test_bad_dispatch(call, message):
    with pytest.raises(DeviceError, match=message):
        call()


def test_partially_overlapping_output():
    buf = np.zeros(80, np.float32)
    with pytest.raises(DeviceError, match=r"buffer\(0\) and buffer\(1\) partially overlap"):
        run("test_barrier_rotate", [buf[:64], buf[16:]], [1], [64], read_only=[0])


def test_unknown_kernel_is_a_device_error():
    require_sim()
    with pytest.raises(DeviceError, match="no_such_kernel"):
        run("no_such_kernel", [np.zeros(4, np.float32)], [1], [1])


def test_misaligned_vector_access():
    raw = np.arange(32, dtype=np.float32)
    skip = (-raw.ctypes.data % 16) // 4  # a view starting on a 16-byte boundary
    x = raw[skip:skip + 16]
    y = np.zeros((2, 4), np.float32)
    with pytest.raises(DeviceError, match=r"test_fault_misaligned_vector.*misaligned 16-byte access to buffer\(0\) at byte offset 4"):
        run("test_fault_misaligned_vector", [x, y], [1], [1], read_only=[0])
    np.testing.assert_array_equal(y[0], x[4:8])  # the aligned cast before it worked
