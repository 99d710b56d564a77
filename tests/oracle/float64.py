"""transformers in float64 all the way through: the oracle's yardstick.

Loading a model with dtype=torch.float64 is not enough: Gemma 4's modeling code casts to float32 on purpose
in places (RMSNorm's `hidden_states.float()`, the audio attention's projections, softmax(dtype=float32), the
router's softmax, RoPE angles via `.to(dtype=torch.float)`, the vision pooler). Those would put f32 rounding
into the reference, shared with transformers-f32's run, and make its error look smaller than it is. Inside
`float64_math()` every such cast yields float64 instead.
"""

from __future__ import annotations

import contextlib

import numpy as np


@contextlib.contextmanager
def float64_math():
    import torch
    import torch.nn.functional as F

    orig_float, orig_to, orig_softmax, orig_tsoftmax = torch.Tensor.float, torch.Tensor.to, F.softmax, torch.softmax

    def widen(dtype):
        return torch.float64 if dtype == torch.float32 else dtype

    def to(self, *args, **kwargs):
        args = tuple(widen(a) if isinstance(a, torch.dtype) else a for a in args)
        if "dtype" in kwargs:
            kwargs["dtype"] = widen(kwargs["dtype"])
        return orig_to(self, *args, **kwargs)

    def softmax(x, *args, dtype=None, **kwargs):
        return orig_softmax(x, *args, dtype=widen(dtype) if dtype is not None else None, **kwargs)

    def tsoftmax(x, *args, dtype=None, **kwargs):
        return orig_tsoftmax(x, *args, dtype=widen(dtype) if dtype is not None else None, **kwargs)

    torch.Tensor.float = torch.Tensor.double
    torch.Tensor.to = to
    F.softmax = softmax
    torch.softmax = tsoftmax
    try:
        yield
    finally:
        torch.Tensor.float, torch.Tensor.to, F.softmax, torch.softmax = orig_float, orig_to, orig_softmax, orig_tsoftmax


def build_with_float64(out: str, references, family_dir: str, same=lambda key: False) -> str:
    """Writes `out` (an .npz) once: `references(cfg, model, greedy, seeds)` on transformers-f32 (greedy tokens
    included, prompt seeds searched and returned as data["seeds"], a dict), then in float64 with the same seeds;
    the float64 results join as `<key>_f64`, but for the prompts' ids and the keys `same(key)` names (inputs both
    runs share)."""
    import os

    from .families import load_transformers

    if os.path.exists(out):
        return out
    data = references(*load_transformers(family_dir), greedy=True, seeds=None)
    seeds = data.pop("seeds")
    with float64_math():
        f64 = references(*load_transformers(family_dir, "float64"), greedy=False, seeds=seeds)
    data.update({f"{k}_f64": v for k, v in f64.items() if k != "seeds" and not k.endswith("_ids") and not same(k)})
    data["seeds"] = np.array(list(seeds.values()))
    tmp = out + ".tmp.npz"
    np.savez(tmp, **data)
    os.replace(tmp, out)
    return out
