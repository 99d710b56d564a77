"""The command-buffer model on metal-sim (csrc/backend/metal/launcher.h): ops only encode; a decoder
forward commits one command buffer — MoE layers included while T·top_k <= 16 (decode: the experts run
gathered on the device); a longer MoE prefill adds one per MoE layer, whose routing the host reads to
size the grouped expert dispatches. Nothing is left pending; results equal the CPU backend. Fails when
metal-sim is not built.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import metal_sim, ops
from markbase.testing import make_checkpoint, tiny_config


@pytest.fixture(scope="module", params=["e2b", "26b"])
def checkpoint(request, tmp_path_factory):
    assert mb._core.metal_sim_built(), "metal-sim is not built (clang 22 or newer is needed at build time)"
    d = make_checkpoint(tmp_path_factory.mktemp(request.param), family=request.param, dtype="f32")
    return request.param, d


def committed_during(fn):
    before = metal_sim.command_buffers_committed()
    result = fn()
    assert metal_sim.pending() == 0, "a forward returned with dispatches still encoded"
    return metal_sim.command_buffers_committed() - before, result


def test_one_command_buffer_per_forward(checkpoint):
    family, path = checkpoint
    text = tiny_config(family)["text_config"]
    moe_layers = text["num_hidden_layers"] if family == "26b" else 0
    top_k = text.get("top_k_experts") or 0
    sim = mb.load(path, device="metal-sim").session()
    cpu = mb.load(path, device="cpu").session()
    prompt = [2] + list(range(10, 22))  # 13 tokens: 26 MoE rows > 16, the grouped path
    n, logits = committed_during(lambda: sim.prefill(prompt))
    assert n == 1 + moe_layers, f"{family} prefill committed {n} command buffers"
    want = cpu.prefill(prompt)
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    short = [30, 31, 32]  # 6 MoE rows: gathered
    assert not top_k or len(short) * top_k <= 16
    n, logits = committed_during(lambda: sim.prefill(short))
    assert n == 1, f"{family} short prefill committed {n} command buffers"
    want = cpu.prefill(short)
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    for tok in (20, 21, 22):
        n, logits = committed_during(lambda: sim.decode(tok))
        assert n == 1, f"{family} decode committed {n} command buffers"
        want = cpu.decode(tok)
        np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_op_binding_waits_for_its_command_buffer():
    # A Python op call returns finished results: one command buffer per call, nothing left pending.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    n, y = committed_during(lambda: ops.softmax(x, device="metal-sim").numpy())
    assert n == 1
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6)


def test_fault_surfaces_at_synchronize_and_leaves_the_launcher_usable():
    # A kernel fault is found while the command buffer runs: the call raises DeviceError naming the kernel,
    # nothing stays encoded, and the next command buffer runs normally.
    args = np.array([4, 0], np.uint32).tobytes()  # TestArgs{n, m}
    with pytest.raises(mb.DeviceError, match="test_fault_write_past_end"):
        metal_sim.run_test_kernel("test_fault_write_past_end", [np.zeros(4, np.float32)], [1], [32], args=args)
    assert metal_sim.pending() == 0
    n, y = committed_during(lambda: ops.softmax(np.zeros((1, 2), np.float32), device="metal-sim").numpy())
    assert n == 1 and np.allclose(y, 0.5)


def test_dispatches_run_in_order_at_synchronize():
    # Encoded work does nothing until synchronize(); then each dispatch sees the ones before it.
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    z = np.zeros(32, np.float32)
    metal_sim.encode_test_kernel("test_barrier_rotate", [x, y], [1], [32], read_only=[0])
    metal_sim.encode_test_kernel("test_barrier_rotate", [y, z], [1], [32], read_only=[0])
    assert metal_sim.pending() == 2 and not y.any() and not z.any()
    metal_sim.synchronize()
    assert metal_sim.pending() == 0
    np.testing.assert_array_equal(z, np.roll(x, -2))


def test_host_write_to_a_queued_input_is_caught():
    # The rule a real GPU needs (launcher.h): the host must not write memory a queued dispatch reads
    # before synchronize(). The sim hashes inputs when encoding and reports the race when running.
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    metal_sim.encode_test_kernel("test_barrier_rotate", [x, y], [1], [32], read_only=[0])
    x[5] = -1.0  # the host writes the input while the dispatch is queued
    with pytest.raises(mb.DeviceError, match=r"kernel 'test_barrier_rotate': buffer\(0\) changed between encoding and "
                                             r"execution.*the host wrote memory a queued dispatch reads"):
        metal_sim.synchronize()
    assert metal_sim.pending() == 0
