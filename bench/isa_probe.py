"""Peak multiply-add rate of each vector dot-product instruction on one core of this machine:
`PYTHONPATH=python python3 bench/isa_probe.py`. The figures behind the CPU kernels' choice of instruction
(f32 FMA for bf16 / f32 weights, 16-bit integer pairs for quantized weights under precision="auto"); a
diagnostic, not a benchmark of markbase. Each instruction runs in a loop of 12 independent accumulators
(throughput, not latency), best of three; AMX's tdpbf16ps (where Linux grants the tiles) in a loop of four
independent 16 × 16 accumulator tiles."""

import markbase


def main():
    best: dict[str, float] = {}
    for _ in range(3):
        for name, gmacs in markbase._core._isa_rates(0.5):
            best[name] = max(best.get(name, 0.0), gmacs)
    f32 = best.get("vfmadd231ps zmm (f32)") or best.get("vfmadd231ps ymm (f32)") or 0.0
    print(f"{'instruction':32} {'GMAC/s (1 core)':>16} {'vs best f32 FMA':>16}")
    for name, gmacs in best.items():
        if gmacs == 0.0:
            print(f"{name:32} {'not on this CPU':>16}")
        else:
            print(f"{name:32} {gmacs:16.1f} {gmacs / f32 if f32 else float('nan'):15.2f}x")


if __name__ == "__main__":
    main()
