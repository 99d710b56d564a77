#!/usr/bin/env python3
"""Decode speed of two or more markbase builds on the same checkpoint, measured in interleaved rounds in
one run (the machine's bandwidth flips between levels from one second to the next: only ratios within
one run mean anything).

    python3 bench/compare_builds.py --model .bench-cache/e2b-real-bf16-text \\
        --build before=/work/wt-base/python --build after=python [--rounds 4] [--tokens 16]

Each build runs in its own process (PYTHONPATH=<dir>): load, prefill a 128-token prompt, then decode
--tokens greedy tokens; a build with Session.step is also timed with C++ sampling. Prints per-build
medians with min/max, and each build's ratio to the first. Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
import numpy as np
import markbase as mb
model = mb.load(sys.argv[1], max_context=4096)
n = int(sys.argv[2])
out = {}
sess = model.session()
sess.prefill(np.arange(2, 130))
tok = 3
t0 = time.perf_counter()
for _ in range(n):
    tok = int(np.argmax(sess.decode(tok)))
out["decode (logits to Python)"] = n / (time.perf_counter() - t0)
if hasattr(mb.Session, "step"):
    from markbase import _core
    sampler = _core.Sampler(temperature=0.0)
    sess = model.session()
    sess.prefill(np.arange(2, 130))
    tok = sess.sample(sampler)
    t0 = time.perf_counter()
    for _ in range(n):
        tok = sess.step(tok, sampler)
    out["step (C++ sampling)"] = n / (time.perf_counter() - t0)
print(json.dumps(out))
"""


def run(pythonpath: str, model: str, tokens: int, env_extra: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(pythonpath), **env_extra)
    r = subprocess.run([sys.executable, "-c", CHILD, model, str(tokens)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"build {pythonpath} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--build", action="append", required=True, help="NAME=PYTHONPATH (NAME=PYTHONPATH:ENV=VALUE)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16)
    args = ap.parse_args()
    builds = []
    for spec in args.build:
        name, rest = spec.split("=", 1)
        path, *envs = rest.split(":")
        builds.append((name, path, dict(e.split("=", 1) for e in envs)))
    samples: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for name, path, env in (builds if r % 2 == 0 else builds[::-1]):  # alternate the order per round
            for what, v in run(path, args.model, args.tokens, env).items():
                samples.setdefault((name, what), []).append(v)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    first = None
    print(f"{'build':<12} {'loop':<28} {'median tok/s':>12} {'min':>7} {'max':>7} {'vs first':>9}")
    for (name, what), v in samples.items():
        med = statistics.median(v)
        first = first or med
        print(f"{name:<12} {what:<28} {med:>12.2f} {min(v):>7.2f} {max(v):>7.2f} {med / first:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
