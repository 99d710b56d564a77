"""Reference for quantized loading: the oracle family's f32 checkpoint with every matrix that
`load(..., quantize=q4|q8)` quantizes replaced by its dequantized values (quantized the same way: MLX's
algorithm, groups of 64, scales in the checkpoint's f32), run by transformers (eager, f32). The engine's
quantized model must then agree with transformers to f32 rounding: what quantization loses is in both,
so any disagreement is the engine's."""

import json
import os
import shutil

import numpy as np

from oracle import binding
from oracle.cache_lock import built_once
from oracle.families import GREEDY_TOKENS, load_transformers, prompt_ids
from oracle.float64 import float64_math

CACHE_VERSION = "quantized-v2"  # v2: float64 logits of the exactly dequantized weights
GROUP = 64


def quantized_bits(spec, bits: int, table_bits: int = 8) -> int:
    """The bits load(quantize=..., embedding_bits=table_bits) gives this weight-table entry (0: kept as stored)."""
    if not spec.linear or not spec.shape or spec.shape[-1] % GROUP:
        return 0
    return {"matrix": bits, "table": table_bits}.get(spec.quant, 0)


def dequantized(w: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """w [.., K] f32 through MLX-affine quantization and back, row by row as the loader does: (f32, float64).
    The f32 values are s·q + b rounded to f32; the float64 ones are exact — what the engine's quantized kernels
    multiply (s·Σq·x + b·Σx per group), so the float64 reference is the same model to the last bit."""
    from markbase._core import Tensor, ops

    flat = np.ascontiguousarray(w.reshape(-1, w.shape[-1]), np.float32)
    q, s, b = ops.quantize(Tensor(flat), bits=bits, group_size=GROUP, scale_dtype="f32")
    f32 = ops.dequantize(q, s, b, bits=bits, group_size=GROUP).numpy().reshape(w.shape)
    ones, zeros = (Tensor(np.ones(s.numpy().shape, np.float32)), Tensor(np.zeros(s.numpy().shape, np.float32)))
    levels = ops.dequantize(q, ones, zeros, bits=bits, group_size=GROUP).numpy().astype(np.float64)  # q exactly
    per_group = lambda a: np.repeat(a.numpy().astype(np.float64), GROUP, axis=-1)  # noqa: E731
    f64 = levels * per_group(s) + per_group(b)
    return f32, f64.reshape(w.shape)


@built_once(lambda family_dir, bits, table_bits: os.path.join(family_dir, f"quantized-q{bits}-e{table_bits}"))
def build(family_dir: str, bits: int, table_bits: int = 8) -> str:
    """family_dir/quantized-v1-q{bits}[-e{table_bits}]/: f32/ (the dequantized checkpoint) and reference.npz
    (table_bits: the tied embedding / LM head's bits, load's embedding_bits)."""
    import torch
    from safetensors.numpy import load_file, save_file

    from markbase.models.gemma4 import load_config, weight_table

    out = os.path.join(family_dir, f"{CACHE_VERSION}-q{bits}" + (f"-e{table_bits}" if table_bits != 8 else ""))
    if os.path.exists(os.path.join(out, "reference.npz")):
        return out
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    src = os.path.join(family_dir, "f32")
    os.makedirs(os.path.join(tmp, "f32"))
    for fname in os.listdir(src):
        if not fname.endswith(".safetensors") and os.path.isfile(os.path.join(src, fname)):
            shutil.copy2(os.path.join(src, fname), os.path.join(tmp, "f32", fname))
    plan = {}
    for spec in weight_table(load_config(src)):
        for n in (spec.name, *spec.aliases):
            plan[n] = quantized_bits(spec, bits, table_bits)
    exact = {}  # name -> the float64 dequantized values
    for fname in sorted(f for f in os.listdir(src) if f.endswith(".safetensors")):
        tensors = load_file(os.path.join(src, fname))
        for name, w in tensors.items():
            if plan.get(name):
                tensors[name], exact[name] = dequantized(w, plan[name])
        save_file(tensors, os.path.join(tmp, "f32", fname), metadata={"format": "pt"})
    _, ref = load_transformers(tmp)
    # a prompt whose logits f32 summation order alone moves by at most binding.MAX_SPREAD on this quantized model
    seed = binding.well_conditioned_seed(ref, lambda s: ref(torch.tensor(prompt_ids(s))[None]).logits[0].detach().numpy(),
                                         0, "prompt")
    ids = prompt_ids(seed)
    with torch.no_grad():
        logits = ref(torch.tensor(ids)[None]).logits[0].float().numpy()
        gen = ref.generate(torch.tensor(ids)[None], max_new_tokens=GREEDY_TOKENS, do_sample=False,
                           eos_token_id=None, pad_token_id=0)[0, len(ids):].numpy()
    with float64_math(), torch.no_grad():
        _, ref64 = load_transformers(tmp, "float64")
        params = dict(ref64.named_parameters())
        assert set(exact) <= set(params), sorted(set(exact) - set(params))[:4]
        for name, w in exact.items():
            params[name].copy_(torch.from_numpy(w))
        logits64 = ref64(torch.tensor(ids)[None]).logits[0].numpy()
    np.savez(os.path.join(tmp, "reference.npz"), ids=ids, logits=logits, greedy=gen, logits_f64=logits64)
    with open(os.path.join(tmp, "quantized.json"), "w") as f:
        json.dump({"bits": bits, "table_bits": table_bits, "group_size": GROUP, "version": CACHE_VERSION}, f)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out


def with_mlx_ple_table(src, dst, bits, dense=False):
    """A copy of MLX checkpoint `src` whose PLE table mlx quantized at `bits` in groups of 32 (the tiny E4B's
    rows of 96 values), declared in config.json as mlx-vlm writes a per-module width; dense=True stores
    mx.dequantize's f32 values of that table instead (its dense twin). Returns the table's stored name."""
    import mlx.core as mx
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    tensors = load_file(path)
    name = next(n for n in tensors if n.endswith("embed_tokens_per_layer.weight"))
    base = name[: -len(".weight")]
    table = tensors[name].astype(np.float32)
    assert table.shape[1] % 32 == 0 and base + ".scales" not in tensors
    wq, ws, wb = mx.quantize(mx.array(table), group_size=32, bits=bits)
    if dense:
        tensors[name] = np.array(mx.dequantize(wq, ws, wb, group_size=32, bits=bits)).astype(np.float32)
    else:
        tensors[name], tensors[base + ".scales"], tensors[base + ".biases"] = np.array(wq), np.array(ws), np.array(wb)
        cfg = json.load(open(os.path.join(dst, "config.json")))
        for key in ("quantization", "quantization_config"):
            cfg[key][base] = {"group_size": 32, "bits": bits}
        json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
    save_file(tensors, path)
    return name
