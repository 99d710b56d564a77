"""Where a decode step goes, op by op: `PYTHONPATH=python python3 bench/profile_decode.py CKPT [--quantize q4]
[--steps 8] [--precision fast]`. Prints the ops by total time (CPU backend: the wall time between consecutive ops,
attributed to the later one) and the share of the step. A diagnostic, not a benchmark."""

import argparse
import time

import numpy as np

import markbase as mb
from markbase import _core


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--quantize", default=None, choices=("q8", "q4"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--precision", default="auto", choices=("auto", "fast", "f32"))
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    model = mb.load(args.checkpoint, quantize=args.quantize, max_context=1024, precision=args.precision)
    sess = model.session()
    tok = int(np.argmax(sess.prefill(np.arange(2, 34))))
    tok = int(np.argmax(sess.decode(tok)))
    _core._op_profile_start()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        tok = int(np.argmax(sess.decode(tok)))
    wall = time.perf_counter() - t0
    entries = _core._op_profile_stop()
    print(f"{args.steps} decode steps, {wall / args.steps * 1e3:.1f} ms per step; "
          f"{sum(c for _, c, _ in entries) / args.steps:.0f} ops per step")
    for key, count, sec in entries[: args.top]:
        print(f"{sec / args.steps * 1e3:8.2f} ms/step {sec / wall:6.1%} {count // args.steps:5d}x  {key}")


if __name__ == "__main__":
    main()
