"""Backends are additive, and the op observer sees every op.

tests/backends/toy/toy_backend.cpp registers device "toy" (built in by CMake's MARKBASE_TEST_BACKENDS,
default ON): a backend that runs each op with the cpu backend's kernels and counts the ops it ran. Adding
it edited no op front door (csrc/ops/), no model code (csrc/models/, csrc/runtime/), no binding and no
registry: its folder and the CMake option that compiles it are the whole change. So a whole model on
device="toy" must give the cpu logits bit for bit, with every op having gone through the toy backend.
"""

import numpy as np
import pytest

import markbase as mb
from markbase import _core
from markbase.testing import make_checkpoint

assert hasattr(_core, "_toy"), "built without MARKBASE_TEST_BACKENDS=ON: tests/backends/ is not compiled in"
toy = _core._toy


def test_toy_runs_by_name_but_is_not_offered():
    assert "toy" not in mb.devices()
    _core.check_device("toy")
    with pytest.raises(mb.DeviceError, match=r"unknown device 'cuda' \(expected .*cpu"):
        _core.check_device("cuda")


@pytest.mark.parametrize("family", ["e2b", "26b"])
def test_model_on_toy_equals_cpu(tmp_path, family):
    path = make_checkpoint(tmp_path / family, family=family, dtype="f32")
    ids = [2, 105, 1645, 77, 300, 9, 41]
    cpu = mb.load(path, device="cpu")
    toy.reset()
    on_toy = mb.load(path, device="toy")
    np.testing.assert_array_equal(on_toy.logits(ids), cpu.logits(ids))
    # Decode too (one token: MoE takes the gathered path).
    sess_cpu, sess_toy = cpu.session(), on_toy.session()
    sess_cpu.prefill(ids)
    sess_toy.prefill(ids)
    np.testing.assert_array_equal(sess_toy.decode(5), sess_cpu.decode(5))

    counts = toy.op_counts()
    for op in ("embedding", "linear", "rms_norm", "rope", "attention", "copy", "gelu_tanh", "mul", "add"):
        assert counts.get(op, 0) > 0, (op, counts)
    if family == "26b":
        for op in ("topk", "route_weights", "linear_gathered", "index_add"):
            assert counts.get(op, 0) > 0, (op, counts)
    assert counts["synchronize"] > 0  # the model's command scopes synchronize the backend they run on


def test_reference_runs_use_the_cpu_reference_kernels_on_any_device():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    toy.reset()
    got = _core.ops.softmax(x, device="toy", reference=True).numpy()
    np.testing.assert_array_equal(got, _core.ops.softmax(x, reference=True).numpy())
    assert "softmax" not in toy.op_counts()


def test_op_observer_is_told_every_op():
    x = np.ones((2, 3), np.float32)
    w = np.ones((4, 3), np.float32)
    toy.start_recording()
    try:
        _core.ops.linear(x, w)
        _core.ops.linear(x, w, reference=True)
        _core.ops.concat([x, x], 0, device="toy")
        _core.ops.topk(w, 2)
        with pytest.raises(mb.InputError, match="linear: w"):
            _core.ops.linear(x, np.ones((4, 5), np.float32))  # rejected by the front door: never ran
    finally:
        records = toy.stop_recording()
    assert records == [
        ("linear", "cpu", [[2, 3], [4, 3], None], [[2, 4]]),  # None: no bias
        ("linear", "cpu-reference", [[2, 3], [4, 3], None], [[2, 4]]),
        ("concat", "toy", [[2, 3], [2, 3]], [[4, 3]]),
        ("topk", "cpu", [[4, 3]], [[4, 2], [4, 2]]),
    ]
    _core.ops.relu(x)
    assert toy.stop_recording() == []  # uninstalled: nothing more is recorded
