"""Shared by tests/ops/test_elementwise.py and tests/metal/test_sim_elementwise.py."""

import math

import numpy as np

from markbase._core import ops
from parity import rng


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


UNARY = {
    # name: (call(x, **kw), numpy float64 reference)
    "gelu_tanh": (lambda x, **kw: ops.gelu_tanh(x, **kw), gelu_tanh),
    "silu": (lambda x, **kw: ops.silu(x, **kw), lambda x: x / (1 + np.exp(-x))),
    "relu": (lambda x, **kw: ops.relu(x, **kw), lambda x: np.maximum(x, 0)),
    "sigmoid": (lambda x, **kw: ops.sigmoid(x, **kw), lambda x: 1 / (1 + np.exp(-x))),
    "softplus": (lambda x, **kw: ops.softplus(x, **kw), softplus),
    "softcap": (lambda x, **kw: ops.softcap(x, 3.5, **kw), lambda x: 3.5 * np.tanh(x / 3.5)),
    "clamp": (lambda x, **kw: ops.clamp(x, -1.25, 0.75, **kw), lambda x: np.clip(x, -1.25, 0.75)),
    "scale": (lambda x, **kw: ops.scale(x, 0.37, **kw), lambda x: x * np.float64(np.float32(0.37))),
}


def binary_inputs(n, shape_b):
    """a [3, n] and b of the same shape ("same"), one row ("row", broadcast over a's rows) or one element."""
    r = rng(7)
    a = r.normal(size=(3, n)).astype(np.float32)
    b = {"same": r.normal(size=(3, n)), "row": r.normal(size=(n,)), "scalar": r.normal(size=(1,))}[shape_b].astype(np.float32)
    return a, b
