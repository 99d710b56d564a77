"""The 26B-A4B (MoE) decoding at real size with 4-bit weights, next to its bytes-per-token roofline.

    PYTHONPATH=python python3 bench/moe_decode.py [--reps 6] [--steps 16] [--threads 2]

Opt-in, never part of the tests; a diagnostic that reports, never asserts. The checkpoint is the real-size
26B-A4B text decoder with random weights, written once directly in MLX's 4-bit format
(`markbase.testing.make_checkpoint(..., family="26b", size="real", bits=4, text_only=True)`: ~14 GB under
.bench-cache/26b-real-q4-text, about a minute) and loaded mapped, as an mlx-community upload would be.
Before loading, the checkpoint's files are evicted from the page cache and read back sequentially
(bench/_page_cache.py).
Measured in one process: load time; a 128-token prompt (untimed); then --reps runs of --steps greedy decode
steps, each run's tok/s; peak RSS. Roofline: the weight bytes a decode step reads as the model holds them
(Model.decode_weight_bytes: attention, the dense MLP, the routed 8 of 128 experts, the 8-bit LM head; not the
gathered tables) over the best read bandwidth bench/yardstick.py measures right after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
CACHE = os.environ.get("MARKBASE_BENCH_DIR") or os.path.join(os.path.dirname(BENCH), ".bench-cache")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint", default=os.path.join(CACHE, "26b-real-q4-text"))
    args = ap.parse_args(argv)
    os.environ["MARKBASE_NUM_THREADS"] = str(args.threads)  # before markbase starts its pool

    import numpy as np

    import markbase as mb
    import _page_cache
    import yardstick

    if not os.path.exists(os.path.join(args.checkpoint, "config.json")):
        from markbase.testing import make_checkpoint

        print(f"writing the real-size 26B-A4B text decoder in 4 bits to {args.checkpoint} (~14 GB)", flush=True)
        make_checkpoint(args.checkpoint, family="26b", size="real", bits=4, text_only=True)
    # Used in place from the mapping, and decode routes to experts the warm-up never touched: evicted and read
    # back first, so timed steps neither fault pages in from disk nor meet pages cached in small folios.
    shards = sorted(os.path.join(args.checkpoint, f) for f in os.listdir(args.checkpoint) if f.endswith(".safetensors"))
    _page_cache.evict(shards, read_back=True)
    t0 = time.perf_counter()
    model = mb.load(args.checkpoint, max_context=1024)
    load_s = time.perf_counter() - t0
    rates = []
    for _ in range(args.reps):
        session = model.session()
        token = int(np.argmax(session.prefill(np.arange(2, 130))))
        token = int(np.argmax(session.decode(token)))  # the first step after a prefill is not timed
        t = time.perf_counter()
        for _ in range(args.steps):
            token = int(np.argmax(session.decode(token)))
        rates.append(args.steps / (time.perf_counter() - t))
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    step_bytes = model._core.decode_weight_bytes
    bw = yardstick.read_bandwidth(seconds=4.0, threads=args.threads)
    tok_s = statistics.median(rates)
    print(f"26B-A4B 4-bit, {args.threads} threads: decode {tok_s:.2f} tok/s [{min(rates):.2f}-{max(rates):.2f}] over "
          f"{args.reps} x {args.steps} steps after a 128-token prompt; {step_bytes / 1e9:.2f} GB read per token = "
          f"{tok_s * step_bytes / 1e9:.1f} GB/s, {tok_s * step_bytes / 1e9 / bw['best']:.0%} of the read roofline "
          f"(best {bw['best']:.1f} GB/s, median {bw['median']:.1f}: {bw['best'] * 1e9 / step_bytes:.1f} tok/s); "
          f"peak RSS {rss_gb:.2f} GB; load {load_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
