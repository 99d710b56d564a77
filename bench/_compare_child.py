"""One measurement for bench/compare.py, run in a fresh process (so its peak RSS and load time are its own):
`python bench/_compare_child.py ENGINE WIDTH CHECKPOINT REPS THREADS` with ENGINE markbase | transformers.

Prints one JSON line: {"load_s", "prefill_128": [tok/s per rep], "prefill_512": [...], "decode": [...],
"decode_bytes"?} or {"unavailable": reason}. Every test runs once untimed first (warm-up: pages of the
mapped weights faulted in, buffers sized). Prefill: a fresh cache, T prompt tokens, last-position logits.
Decode: a fresh cache, a 128-token prompt (untimed), then DECODE_STEPS greedy (argmax) steps timed (the
warm-up: the prompt and WARMUP_STEPS steps).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

PROMPT = 128
PREFILL_LENGTHS = (128, 512)
DECODE_STEPS = 32
WARMUP_STEPS = 4  # the decode warm-up: the 128-token prompt and 4 steps
MAX_CONTEXT = 1024


def _ids(n: int) -> np.ndarray:
    return np.arange(2, 2 + n, dtype=np.int32)


def _timed_reps(fn, reps: int, warmup=None) -> list[float]:
    """fn() -> (tokens, seconds); one warm-up call (of `warmup`, if given), then tok/s of `reps` calls."""
    (warmup or fn)()
    out = []
    for _ in range(reps):
        tokens, seconds = fn()
        out.append(tokens / seconds)
    return out


# ----------------------------------------------------------------------------------------------- markbase

def _markbase(width: str, checkpoint: str, reps: int) -> dict:
    import inspect

    import markbase as mb

    kwargs = {}
    if width != "bf16":
        if "quantize" not in inspect.signature(mb.load).parameters:
            return {"unavailable": "quantize= not available"}
        quantize, *variants = width.split("-")
        kwargs["quantize"] = quantize
        if "fast" in variants:  # 8-bit activations in the 4-bit decode GEMV
            kwargs["precision"] = "fast"
        if "e4" in variants:  # the tied embedding / LM head at 4 bits too
            kwargs["embedding_bits"] = 4
    t0 = time.perf_counter()
    try:
        model = mb.load(checkpoint, max_context=MAX_CONTEXT, **kwargs)
    except TypeError as e:  # python/ knows quantize= but the built extension does not yet
        if kwargs:
            return {"unavailable": f"quantize= not available ({e})".splitlines()[0]}
        raise
    load_s = time.perf_counter() - t0

    def prefill(n):
        def run():
            sess = model.session()
            t = time.perf_counter()
            sess.prefill(_ids(n))
            return n, time.perf_counter() - t
        return run

    def decode(steps=DECODE_STEPS):
        sess = model.session()
        token = int(np.argmax(sess.prefill(_ids(PROMPT))))
        t = time.perf_counter()
        for _ in range(steps):
            token = int(np.argmax(sess.decode(token)))
        return steps, time.perf_counter() - t

    result = {"load_s": load_s}
    for n in PREFILL_LENGTHS:
        result[f"prefill_{n}"] = _timed_reps(prefill(n), reps)
    result["decode"] = _timed_reps(decode, reps, warmup=lambda: decode(WARMUP_STEPS))
    bytes_read = getattr(model._core, "decode_weight_bytes", None)  # absent from older builds
    if bytes_read is not None:
        result["decode_bytes"] = int(bytes_read)
    return result


# ------------------------------------------------------------------------------------------- transformers

def _load_transformers(checkpoint: str):
    """The text model in bfloat16: AutoModelForCausalLM, or the checkpoint's own class (the synthetic
    checkpoint declares Gemma4ForConditionalGeneration with no vision / audio parts)."""
    import torch
    import transformers

    try:
        return transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16)
    except (ValueError, KeyError, OSError):
        return transformers.Gemma4ForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.bfloat16)


def _transformers(width: str, checkpoint: str, reps: int, threads: int) -> dict:
    import torch

    if width != "bf16":
        return {"unavailable": "bf16 only"}
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = _load_transformers(checkpoint).eval()
    load_s = time.perf_counter() - t0

    def forward(ids, past=None):
        out = model(input_ids=torch.as_tensor(ids, dtype=torch.long)[None], past_key_values=past, use_cache=True,
                    logits_to_keep=1)
        return int(out.logits[0, -1].float().argmax()), out.past_key_values

    def prefill(n):
        def run():
            t = time.perf_counter()
            forward(_ids(n))
            return n, time.perf_counter() - t
        return run

    def decode(steps=DECODE_STEPS):
        token, past = forward(_ids(PROMPT))
        t = time.perf_counter()
        for _ in range(steps):
            token, past = forward([token], past)
        return steps, time.perf_counter() - t

    result = {"load_s": load_s, "class": type(model).__name__}
    with torch.inference_mode():
        for n in PREFILL_LENGTHS:
            result[f"prefill_{n}"] = _timed_reps(prefill(n), reps)
        result["decode"] = _timed_reps(decode, reps, warmup=lambda: decode(WARMUP_STEPS))
    return result


def main(argv: list[str]) -> None:
    engine, width, checkpoint, reps, threads = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    if engine == "markbase":
        result = _markbase(width, checkpoint, reps)
    elif engine == "transformers":
        result = _transformers(width, checkpoint, reps, threads)
    else:
        raise SystemExit(f"unknown engine {engine!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
