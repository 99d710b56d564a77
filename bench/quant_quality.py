"""Quality of 8- and 4-bit weights, measured on the transformers-built tiny oracle checkpoints (random
weights, so these are worst-case-ish numbers: a random model amplifies every perturbation).

For each family: the f32 model greedily generates 256 tokens after the oracle prompt; the quantized
model (load(..., quantize="q8" / "q4")) reads the same sequence (teacher forcing), and we report
  - rel: max |Δlogits| / max |logits| over all positions,
  - top-1: the fraction of the 256 positions where its argmax equals the f32 model's,
  - KL: mean KL(p_f32 || p_quant) per position, in nats.
The same f32 weights rounded to bf16 (the published checkpoints' precision) are shown as a yardstick.
"q4-fast" is q4 under precision="fast" (8-bit activations in the decode GEMV with 4-bit weights): its
logits come from teacher-forced decode steps (prefill rows do not take x8), and the row "q4-dec" gives
q4 "auto" the same way, the figure to compare it with. "q4-e4" is q4 with the tied embedding / LM head at
4 bits too (embedding_bits=4) instead of 8.
Run: `PYTHONPATH=python:tests python3 bench/quant_quality.py [--variants q4,q4-e4]` (builds the oracle
cache if missing).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import markbase as mb  # noqa: E402
from oracle.families import FAMILIES, build_all, prompt_ids  # noqa: E402

STEPS = 256


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def greedy(model, ids, steps):
    sess = model.session()
    logits = sess.prefill(ids)
    out = []
    for _ in range(steps):
        out.append(int(np.argmax(logits)))
        logits = sess.decode(out[-1])
    return np.array(out)


def decode_logits(model, ids, seq):
    """Logits of prefill(ids) and then of decode(t) for each later token of seq but the last: [steps, V]."""
    sess = model.session()
    out = [sess.prefill(ids)]
    out += [sess.decode(int(t)) for t in seq[len(ids):-1]]
    return np.stack([np.asarray(o).ravel() for o in out])


def main():
    import argparse

    ap = argparse.ArgumentParser(description="quality of 8- and 4-bit weights on the oracle checkpoints")
    ap.add_argument("--variants", default="bf16,q8,q4,q4-dec,q4-fast,q4-e4", help="comma-separated rows")
    wanted = ap.parse_args().variants.split(",")
    dirs = build_all()
    print(f"{'family':8} {'bits':>7} {'rel':>8} {'top-1':>7} {'KL':>9}")
    for family in FAMILIES:
        ckpt = os.path.join(dirs[family], "f32")
        base = mb.load(ckpt)
        ids = prompt_ids()
        seq = np.concatenate([ids, greedy(base, ids, STEPS)])
        ref = base.logits(seq)[len(ids) - 1: -1]  # the logits that chose each generated token
        lp_ref = log_softmax(ref.astype(np.float64))
        variants = {"bf16": lambda: mb.load(os.path.join(dirs[family], "bf16")),  # yardstick: bf16 rounding alone
                    "q8": lambda: mb.load(ckpt, quantize="q8"), "q4": lambda: mb.load(ckpt, quantize="q4"),
                    "q4-dec": lambda: mb.load(ckpt, quantize="q4"),
                    "q4-fast": lambda: mb.load(ckpt, quantize="q4", precision="fast"),
                    "q4-e4": lambda: mb.load(ckpt, quantize="q4", embedding_bits=4)}
        for q, load in variants.items():
            if q not in wanted:
                continue
            model = load()
            got = decode_logits(model, ids, seq) if q in ("q4-dec", "q4-fast") else model.logits(seq)[len(ids) - 1: -1]
            rel = np.abs(got - ref).max() / np.abs(ref).max()
            top1 = float((got.argmax(-1) == ref.argmax(-1)).mean())
            kl = float((np.exp(lp_ref) * (lp_ref - log_softmax(got.astype(np.float64)))).sum(-1).mean())
            print(f"{family:8} {q:>7} {rel:8.3g} {top1:7.1%} {kl:9.2e}")


if __name__ == "__main__":
    main()
