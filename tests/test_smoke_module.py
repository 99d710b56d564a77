"""markbase.testing.smoke, the wheels' own test step: passes on every device here and names a broken op."""

import numpy as np

import markbase as mb
from markbase.testing import smoke


def test_smoke_passes_on_every_device():
    assert smoke.check_ops(mb.devices()) == []


def test_smoke_names_a_wrong_op(monkeypatch):
    real = smoke.ops.softmax
    monkeypatch.setattr(smoke.ops, "softmax", lambda x, device: np.asarray(real(x, device=device)) * 1.001)
    failures = smoke.check_ops(["cpu"])
    assert failures and all(f.startswith("softmax") and "on cpu" in f for f in failures), failures
