"""metal-sim's full checks (MARKBASE_SIM_CHECKS=full, the default): each planted kernel of
metal/tests/sim_checks.metal breaks one GPU rule that a CPU run hides — a threadgroup-memory race, a
missing (or memory-less) barrier, an uninitialised threadgroup read, a divergent simd_sum, a divergent
simdgroup_matrix load. Under full checks each is a DeviceError naming the kernel, the threadgroup, the
threads, the threadgroup array and byte, and the source lines; under basic checks the same kernel runs to
the end without a word, which is what the checks are for. The correct variants pass under full checks."""

import re
import struct
from pathlib import Path

import numpy as np
import pytest

import markbase as mb

from .sim import DeviceError, run

SOURCE = Path(__file__).resolve().parents[2] / "metal" / "tests" / "sim_checks.metal"


def line_of(tag: str) -> str:
    """'metal/tests/sim_checks.metal:N' of the line carrying `// @tag` (no line numbers in the tests)."""
    for n, text in enumerate(SOURCE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"// @{tag}"):
            return f"metal/tests/sim_checks.metal:{n}"
    raise AssertionError(f"no // @{tag} in {SOURCE}")


def args(mode: int, n: int = 0) -> bytes:
    """struct CheckArgs { uint mode; uint n; }."""
    return struct.pack("<II", mode, n)


def data(n=256):
    return np.arange(1, n + 1, dtype=np.float32), np.zeros(n, np.float32)


@pytest.fixture(params=["full", "default"])
def full_checks(request, monkeypatch):
    """Full checks, set explicitly or by leaving the variable unset (the default)."""
    if request.param == "full":
        monkeypatch.setenv("MARKBASE_SIM_CHECKS", "full")
    else:
        monkeypatch.delenv("MARKBASE_SIM_CHECKS", raising=False)


@pytest.fixture
def basic_checks(monkeypatch):
    monkeypatch.setenv("MARKBASE_SIM_CHECKS", "basic")


def expect(message_parts):
    """A regex matching all parts in order."""
    return ".*".join(re.escape(p) for p in message_parts)


# ---- race ----

def test_race_is_reported(full_checks):
    x, y = data()
    with pytest.raises(DeviceError, match=expect([
            "kernel 'test_check_race', threadgroup (0, 0, 0)", "threadgroup-memory race on byte 0 of threadgroup array 'slots'",
            "thread (1, 0, 0) reads it at " + line_of("race-read"), "thread (0, 0, 0) wrote it at " + line_of("race-write"),
            "no threadgroup_barrier(mem_flags::mem_threadgroup) between them"])):
        run("test_check_race", [x[:64], y[:64]], [2], [32])


def test_race_goes_unseen_without_the_checks(basic_checks):
    x, y = data(64)
    run("test_check_race", [x, y], [2], [32])
    # The fibers' fixed order makes the racy read look right on the CPU: the checks are what catch it.
    assert y[1] == x[0] and y[33] == x[32]


# ---- missing barrier (none, or one that does not order threadgroup memory) ----

@pytest.mark.parametrize("mode", [0, 1], ids=["no-barrier", "mem_device-barrier"])
def test_missing_barrier_is_reported(full_checks, mode):
    x, y = data(64)
    with pytest.raises(DeviceError, match=expect([
            "kernel 'test_check_tree_sum', threadgroup (0, 0, 0): threadgroup-memory race on byte ",
            "of threadgroup array 'partial' (1024 bytes)", line_of("tree-sum"), line_of("tree-sum"),
            "no threadgroup_barrier(mem_flags::mem_threadgroup) between them"])):
        run("test_check_tree_sum", [x, y], [1], [64], args=args(mode))


@pytest.mark.parametrize("mode", [0, 1], ids=["no-barrier", "mem_device-barrier"])
def test_missing_barrier_goes_unseen_without_the_checks(basic_checks, mode):
    x, y = data(64)
    run("test_check_tree_sum", [x, y], [1], [64], args=args(mode))


def test_tree_sum_with_barriers_passes(full_checks):
    x, y = data(128)
    run("test_check_tree_sum", [x, y], [2], [64], args=args(2))
    assert y[0] == x[:64].sum() and y[1] == x[64:].sum()


# ---- uninitialised threadgroup memory ----

def test_uninitialised_read_is_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=expect([
            "kernel 'test_check_uninitialised', threadgroup (0, 0, 0): thread (0, 0, 0) reads byte 252 of threadgroup "
            "array 'tile' (1024 bytes) at " + line_of("uninitialised-read"), "which no thread of the threadgroup has written"])):
        run("test_check_uninitialised", [x, y], [1], [64], args=args(0, 60))


def test_fully_written_tile_passes(full_checks):
    x, y = data(64)
    run("test_check_uninitialised", [x, y], [1], [64], args=args(0, 64))
    np.testing.assert_array_equal(y, x[::-1])


def test_uninitialised_read_goes_unseen_without_the_checks(basic_checks):
    x, y = data(64)
    run("test_check_uninitialised", [x, y], [1], [64], args=args(0, 60))
    assert np.isnan(y[:4]).all()  # the sim's fill: silent garbage without the checks


def test_uninitialised_again_in_the_next_group(full_checks):
    """What earlier threadgroups wrote does not initialise a later group's memory (the sim reuses one
    arena per OS thread): groups 0-6 fill the whole tile, group 7 only 60 of 64 slots."""
    x, y = data(8 * 64)
    with pytest.raises(DeviceError, match=r"threadgroup \(7, 0, 0\): thread \(0, 0, 0\) reads byte 252 of threadgroup "
                                          r"array 'tile'"):
        run("test_check_uninitialised", [x, y], [8], [64], args=args(7, 60))


# ---- divergent simdgroup calls ----

def test_divergent_simd_sum_is_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=expect([
            "kernel 'test_check_divergent_simd_sum', threadgroup (0, 0, 0): a simd_* function at " + line_of("divergent-sum"),
            "was reached by lanes 0-15 of simdgroup 0 only: lanes 16-31 took part in earlier simdgroup calls and returned "
            "without reaching it"])):
        run("test_check_divergent_simd_sum", [x, y], [1], [64], args=args(0, 16))


def test_simd_calls_at_two_sites_are_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=expect([
            "divergent simdgroup calls: lane 0 of simdgroup 0 (thread (0, 0, 0)) reached a simd_* function at "
            + line_of("divergent-sum"), "while lane 31 waits at a simd_* function at " + line_of("divergent-max")])):
        run("test_check_divergent_simd_sum", [x, y], [1], [64], args=args(1, 31))


def test_divergent_simd_sum_goes_unseen_without_the_checks(basic_checks):
    x, y = data(64)
    for mode in (0, 1):
        run("test_check_divergent_simd_sum", [x, y], [1], [64], args=args(mode, 16))


def test_uniform_simd_sum_passes(full_checks):
    x, y = data(64)
    run("test_check_divergent_simd_sum", [x, y], [1], [64], args=args(2))
    first = x[:32].sum() * 32 + np.arange(32).sum()
    np.testing.assert_array_equal(y[:32], np.full(32, first, np.float32))


def test_divergent_matrix_load_is_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError) as err:
        run("test_check_divergent_matrix_load", [x, y], [1], [32], args=args(0, 16))
    message = str(err.value)
    # Which side arrives first depends on the schedule; both calls are named.
    assert "kernel 'test_check_divergent_matrix_load', threadgroup (0, 0, 0): divergent simdgroup calls" in message
    assert re.search(r"reached a simdgroup_matrix operation at .* wait", message)
    assert line_of("divergent-load") + ":" in message and line_of("matrix-store") + ":" in message


def test_divergent_matrix_load_goes_unseen_without_the_checks(basic_checks):
    x, y = data(64)
    run("test_check_divergent_matrix_load", [x, y], [1], [32], args=args(0, 16))


def test_uniform_matrix_load_passes(full_checks):
    x, y = data(128)
    run("test_check_divergent_matrix_load", [x, y], [1], [64], args=args(2))
    np.testing.assert_array_equal(y[:64], x[:64])
    np.testing.assert_array_equal(y[64:], x[:64])


def test_matrix_op_in_a_partial_simdgroup_is_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=r"simdgroup_matrix operation at .* reached by lanes 0-15 of simdgroup 0 "
                                          r"\(16 threads\); all 32 lanes"):
        run("test_check_divergent_matrix_load", [x, y], [1], [16], args=args(2))


# ---- threadgroup memory shared within a simdgroup ----

def test_simdgroup_barrier_with_threadgroup_memory_orders(full_checks):
    x, y = data(64)
    run("test_check_simd_exchange", [x, y], [1], [64], args=args(2))
    np.testing.assert_array_equal(y, x[np.arange(64) ^ 1])


def test_simdgroup_barrier_without_memory_flag_is_a_race(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=expect([
            "threadgroup-memory race on byte", "of threadgroup array 'slots'", "reads it at " + line_of("simd-read"),
            "wrote it at " + line_of("simd-write"), "nor a simdgroup_barrier(mem_flags::mem_threadgroup): the threads share a "
            "simdgroup"])):
        run("test_check_simd_exchange", [x, y], [1], [64], args=args(1))


def test_no_barrier_at_all_reads_unwritten_memory(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=r"thread \(0, 0, 0\) reads byte 4 of threadgroup array 'slots'.*no thread"):
        run("test_check_simd_exchange", [x, y], [1], [64], args=args(0))


# ---- what is exempt or fine ----

def test_atomics_and_matrix_tiles_through_threadgroup_memory_pass(full_checks):
    """Threadgroup atomics from every thread with no barrier between them are not races; simdgroup_store
    into threadgroup memory then simdgroup_barrier(mem_threadgroup) then simdgroup_load is ordered."""
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64 * 4, np.float32)
    count = np.zeros(2, np.uint32)
    run("test_ok_atomics_and_matrix", [x, y, count], [2], [128])
    np.testing.assert_array_equal(count, [128, 128])
    for s in range(4):
        np.testing.assert_array_equal(y[64 * s:64 * (s + 1)].reshape(8, 8), x.reshape(8, 8).T)


@pytest.mark.parametrize("transpose", [False, True])
def test_matrix_load_reads_the_block_at_its_origin_and_pitch(full_checks, transpose):
    """simdgroup_load from threadgroup memory copies the 8 source rows whole (one check per row): the values
    are those of the 8x8 block at (column 1, row 2) of the pitch-12 tile, transposed when asked."""
    x = np.arange(1, 121, dtype=np.float32)
    y = np.zeros(64, np.float32)
    run("test_check_matrix_load", [x, y], [1], [64], args=args(2, int(transpose)))
    block = x.reshape(10, 12)[2:10, 1:9]
    np.testing.assert_array_equal(y.reshape(8, 8), block.T if transpose else block)


# A lane of simdgroup 1 (the scheduler picks which one continues first after the collective load step).
SIMDGROUP_1_THREAD = r"thread \((3[2-9]|[45][0-9]|6[0-3]), 0, 0\) "


def test_matrix_load_racing_the_tile_write_is_reported(full_checks):
    x, y = np.arange(1, 121, dtype=np.float32), np.zeros(64, np.float32)
    # Element (2, 1) of the tile, byte 4 * (2 * 12 + 1) = 100, is the first the load reads; lane 25 wrote it.
    with pytest.raises(DeviceError, match=(
            expect(["threadgroup-memory race on byte 100 of threadgroup array 'tile'"]) + ".*" + SIMDGROUP_1_THREAD
            + expect(["reads it at " + line_of("matrix-tile-load"), "thread (25, 0, 0) wrote it at "
                      + line_of("matrix-tile-write")]))):
        run("test_check_matrix_load", [x, y], [1], [64], args=args(1))


def test_matrix_load_of_an_unwritten_element_is_reported(full_checks):
    x, y = np.arange(1, 121, dtype=np.float32), np.zeros(64, np.float32)
    # Element (5, 4) of the tile: byte 4 * (5 * 12 + 4) = 256, in the 4th source row of the block.
    with pytest.raises(DeviceError, match=SIMDGROUP_1_THREAD + expect([
            "reads byte 256 of threadgroup array 'tile' (480 bytes) at " + line_of("matrix-tile-load"),
            "which no thread of the threadgroup has written"])):
        run("test_check_matrix_load", [x, y], [1], [64], args=args(0))


def test_matrix_load_problems_go_unseen_without_the_checks(basic_checks):
    x, y = np.arange(1, 121, dtype=np.float32), np.zeros(64, np.float32)
    run("test_check_matrix_load", [x, y], [1], [64], args=args(1))
    run("test_check_matrix_load", [x, y], [1], [64], args=args(0))


def test_threadgroup_index_out_of_bounds_is_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=expect([
            "kernel 'test_check_tg_out_of_bounds'", "thread (32, 0, 0) writes 4 bytes at threadgroup offset 128 at "
            + line_of("oob-write"), "past the 128 bytes of threadgroup memory the kernel declared"])):
        run("test_check_tg_out_of_bounds", [x, y], [1], [64])


def test_bad_checks_value_is_refused(monkeypatch):
    monkeypatch.setenv("MARKBASE_SIM_CHECKS", "fulll")
    x, y = data(64)
    with pytest.raises(mb.InputError, match=r"MARKBASE_SIM_CHECKS must be 'full' or 'basic', got 'fulll'"):
        run("test_check_tree_sum", [x, y], [1], [64], args=args(2))


# ---- accesses to parts of a word (the shadow keeps one record per 4-byte word until one comes) ----

def test_race_on_one_byte_of_a_word_is_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError, match=expect([
            "kernel 'test_check_byte_race', threadgroup (0, 0, 0): threadgroup-memory race on byte 0 of threadgroup array "
            "'bytes' (64 bytes)", "thread (1, 0, 0) reads it at " + line_of("byte-read"),
            "thread (0, 0, 0) wrote it at " + line_of("byte-write")])):
        run("test_check_byte_race", [x, y], [1], [64], args=args(0))


def test_threads_writing_the_bytes_of_one_word_do_not_race(full_checks):
    x, y = data(64)
    run("test_check_byte_race", [x, y], [2], [32], args=args(2))
    np.testing.assert_array_equal(y[1:32], x[:31])
    np.testing.assert_array_equal(y[33:], x[32:63])


def test_unwritten_byte_of_a_half_written_word_is_reported(full_checks):
    x, y = data(64)
    with pytest.raises(DeviceError) as err:
        run("test_check_split_word", [x, y], [1], [64], args=args(0))
    # Which thread reads first after the barrier is the scheduler's choice; the byte must be its neighbour's top one.
    found = re.search(r"kernel 'test_check_split_word', threadgroup \(0, 0, 0\): thread \((\d+), 0, 0\) reads byte (\d+) "
                      r"of threadgroup array 'words' \(256 bytes\) at (\S+), which no thread of the threadgroup has written",
                      str(err.value))
    assert found, str(err.value)
    thread, byte, where = int(found[1]), int(found[2]), found[3]
    assert byte == 4 * ((thread + 1) % 64) + 3 and where == line_of("split-read")


def test_word_written_whole_then_in_part_reads_back(full_checks):
    """A word's top byte, written whole before its low half is written again, reads back in each group."""
    x, y = data(128)
    run("test_check_split_word", [x, y], [2], [64], args=args(2))
    np.testing.assert_array_equal(y, np.concatenate([np.roll(x[:64], -1), np.roll(x[64:], -1)]))
