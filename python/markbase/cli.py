"""The `markbase` command line: run, chat, demo, validate, inspect, trace, quantize, serve, devices."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def _add_sampling(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling (defaults from the checkpoint's generation_config.json)")
    g.add_argument("--max-new-tokens", type=int, default=None, help="stop after this many new tokens (default 256)")
    g.add_argument("--temperature", type=float, default=None, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--repetition-penalty", type=float, default=None)
    g.add_argument("--presence-penalty", type=float, default=None)
    g.add_argument("--frequency-penalty", type=float, default=None)
    g.add_argument("--seed", type=int, default=None, help="seed of the sampler (same seed, same tokens)")
    g.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    g.add_argument("--thinking", action="store_true", help="enable the model's thinking mode")


def _sampling_kwargs(args) -> dict:
    return dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                min_p=args.min_p, repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
                frequency_penalty=args.frequency_penalty, seed=args.seed, stop=args.stop)


def build_parser() -> argparse.ArgumentParser:
    import markbase

    parser = argparse.ArgumentParser(prog="markbase", description="Native inference engine for Gemma 4 models.")
    parser.add_argument("--version", action="version", version=f"markbase {markbase.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="answer one prompt, streaming the text to stdout",
                         description="Answer one prompt with a checkpoint (through its chat template), streaming "
                                     "the answer to stdout.")
    run.add_argument("--model", required=True, help="checkpoint directory")
    run.add_argument("--prompt", required=True, help="the user message")
    run.add_argument("--system", default=None, help="a system message")
    run.add_argument("--device", default="auto", help="auto, cpu, metal or metal-sim")
    run.add_argument("--quantize", choices=("q8", "q4"), default=None,
                     help="quantize the decoder's matrices at load (MLX affine, groups of 64)")
    run.add_argument("--verbose", "-v", action="store_true", help="print timings and tokens/s to stderr")
    run.add_argument("--image", action="append", default=[], metavar="PATH_OR_URL",
                     help="an image to put before the prompt (repeatable; a path, an http(s) or data: URL)")
    run.add_argument("--video", action="append", default=[], metavar="PATH", help="a video (repeatable)")
    run.add_argument("--audio", action="append", default=[], metavar="PATH_OR_URL",
                     help="an audio clip to put before the prompt (repeatable; WAV, FLAC, OGG, MP3, ...: any rate, "
                          "resampled to 16 kHz; E2B, E4B and the 12B hear)")
    run.add_argument("--max-audio-s", type=float, default=None,
                     help="longest clip accepted, in seconds (default 30: the encoder's training length)")
    run.add_argument("--max-soft-tokens", type=int, default=None,
                     help="soft tokens per image / video frame: 70, 140, 280, 560 or 1120 (default: the checkpoint's)")
    _add_sampling(run)
    run.set_defaults(func=cmd_run)

    chat = sub.add_parser("chat", help="interactive multi-turn chat",
                          description="Interactive chat with a checkpoint. Commands: /reset (forget the "
                                      "conversation), /quit (or Ctrl-D).")
    chat.add_argument("--model", required=True, help="checkpoint directory")
    chat.add_argument("--system", default=None, help="a system message")
    chat.add_argument("--device", default="auto")
    chat.add_argument("--quantize", choices=("q8", "q4"), default=None,
                      help="quantize the decoder's matrices at load (MLX affine, groups of 64)")
    chat.add_argument("--verbose", "-v", action="store_true", help="print timings after each answer")
    _add_sampling(chat)
    chat.set_defaults(func=cmd_chat)

    demo = sub.add_parser("demo", help="build a tiny synthetic checkpoint and run a text, an image and an audio turn",
                          description="Build a tiny synthetic Gemma 4 checkpoint (random weights, no download) "
                                      "in a temporary folder, run a text turn, an image turn and (on families "
                                      "that hear) an audio turn through it and print stage timings.")
    demo.add_argument("--family", default="e2b", choices=["e2b", "e4b", "26b", "31b", "12b"])
    demo.add_argument("--prompt", default="Tell me a story about a robot.")
    demo.add_argument("--max-new-tokens", type=int, default=32)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--keep", metavar="DIR", default=None, help="write the checkpoint to DIR and keep it")
    demo.set_defaults(func=cmd_demo)

    v = sub.add_parser("validate", help="check a checkpoint directory for completeness and integrity",
                       description="Check a checkpoint against the weight table of its config.json: missing, "
                                   "unexpected and misshapen tensors, unreadable shards, NaN/Inf weights. "
                                   "Exits 0 when the checkpoint is sound, 1 otherwise.")
    v.add_argument("dir", help="checkpoint directory (config.json + *.safetensors)")
    v.add_argument("--no-values", action="store_true", help="skip the NaN/Inf scan of every weight")
    v.set_defaults(func=cmd_validate)

    ins = sub.add_parser("inspect", help="describe a checkpoint: family, parameters, dtypes, modalities",
                         description="Describe a checkpoint: family, parameters per component, dtypes, sizes, "
                                     "context length and the modalities it carries.")
    ins.add_argument("dir", help="checkpoint directory")
    ins.set_defaults(func=cmd_inspect)

    tr = sub.add_parser("trace", help="find the first NaN / Inf of a forward pass: layer, intermediate, op",
                        description="Run one forward over a prompt with every op's output checked, and report the "
                                    "first NaN / Inf: its layer, the named intermediate, the op and backend, and "
                                    "the statistics of that op's inputs. Exits 0 when the forward stays finite, "
                                    "1 when it does not.")
    tr.add_argument("dir", help="checkpoint directory")
    tr.add_argument("--prompt", default="Hello", help="user message (through the chat template)")
    tr.add_argument("--raw", action="store_true", help="tokenize the prompt as raw text, without the chat template")
    tr.add_argument("--device", default="auto")
    tr.set_defaults(func=cmd_trace)

    qz = sub.add_parser("quantize", help="write a checkpoint's 8- or 4-bit copy in MLX's quantized format",
                        description="Write DIR's quantized copy to OUT in MLX's affine format (as mlx-vlm's convert "
                                    "writes it; markbase loads it directly): the decoder's attention, MLP and expert "
                                    "matrices to --bits, the tied embedding / LM head to --embedding-bits and the PLE table to 8 bits; "
                                    "norms, router, PLE projections and the vision / audio encoders stay as stored.")
    qz.add_argument("dir", help="source checkpoint directory (bf16 / f16 / f32, as published)")
    qz.add_argument("out", help="output directory")
    qz.add_argument("--bits", type=int, choices=(4, 8), default=4)
    qz.add_argument("--group-size", type=int, choices=(32, 64, 128), default=64)
    qz.add_argument("--embedding-bits", type=int, choices=(4, 8), default=8,
                    help="the tied embedding / LM head (8: near-exact; 4: an eighth fewer bytes per 4-bit decode step)")
    qz.set_defaults(func=cmd_quantize)

    sv = sub.add_parser("serve", help="serve a model over the OpenAI HTTP API",
                        description="Serve DIR over the OpenAI HTTP API (POST /v1/chat/completions, /v1/completions, "
                                    "GET /v1/models, /health) with FastAPI + uvicorn (pip install markbase[serve]). "
                                    "Up to --max-batch requests decode together (continuous batching); up to "
                                    "--max-queue more wait, beyond that a 429.")
    sv.add_argument("--model", required=True, help="checkpoint directory")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--device", default="auto")
    sv.add_argument("--api-key", default=os.environ.get("MARKBASE_API_KEY"),
                    help="require 'Authorization: Bearer KEY' (default: $MARKBASE_API_KEY; none: open)")
    sv.add_argument("--model-id", default=None, help="the model name clients use (default: the directory's name)")
    sv.add_argument("--max-batch", type=int, default=8, help="requests decoded together (default 8)")
    sv.add_argument("--max-queue", type=int, default=64, help="requests that may wait (default 64)")
    sv.add_argument("--prompt-cache", type=int, default=4,
                    help="finished requests whose KV cache is kept for prompts sharing its prefix (default 4, 0 off)")
    sv.add_argument("--max-context", type=int, default=None, help="longest sequence (default: the config's)")
    sv.add_argument("--allow-media-dir", default=None,
                    help="image / audio parts may name files under this directory (default: data: URLs only)")
    sv.add_argument("--quantize", choices=("q8", "q4"), default=None,
                    help="quantize the decoder's matrices at load (MLX affine, groups of 64)")
    sv.add_argument("--max-body-bytes", type=int, default=None,
                    help="refuse request bodies over this many bytes, unread (default: the longest a request that "
                         "fits the context can be)")
    sv.set_defaults(func=cmd_serve)

    dev = sub.add_parser("devices", help="list the backends built into this installation",
                         description="List the backends built into this installation, in order of preference.")
    dev.set_defaults(func=cmd_devices)
    return parser


def _print_stats(result, load_s: float | None = None, file=sys.stderr) -> None:
    parts = []
    if load_s is not None:
        parts.append(f"load {load_s:.2f} s")
    if result.media:
        parts.append(f"{len(result.media)} media ({', '.join(f'{k} {n} tok' for k, n in zip(result.media, result.soft_tokens))}): "
                     f"preprocess {result.preprocess_s * 1000:.0f} ms, encode {result.encode_s * 1000:.0f} ms")
    parts += [f"prompt {result.prompt_tokens} tok", f"prefill {result.prefill_tokens_per_s:.1f} tok/s",
              f"first token {result.time_to_first_token_s * 1000:.0f} ms",
              f"decode {len(result.token_ids)} tok at {result.decode_tokens_per_s:.1f} tok/s",
              f"finish: {result.finish_reason}"]
    print("[" + ", ".join(parts) + "]", file=file)


def cmd_run(args) -> int:
    import markbase

    t0 = time.perf_counter()
    model = markbase.load(args.model, device=args.device, preload=sys.stderr.isatty() and not args.quantize,
                          quantize=args.quantize)
    load_s = time.perf_counter() - t0
    media = [{"type": "image", "image": p, "max_soft_tokens": args.max_soft_tokens} for p in args.image]
    media += [{"type": "video", "video": p, "max_soft_tokens": args.max_soft_tokens} for p in args.video]
    media += [{"type": "audio", "audio": p, "max_audio_s": args.max_audio_s} for p in args.audio]
    content = media + [{"type": "text", "text": args.prompt}] if media else args.prompt
    messages = [{"role": "user", "content": content}]
    result = _print_stream(model.generate(messages, system=args.system, stream=True,
                                          enable_thinking=True if args.thinking else None, **_sampling_kwargs(args)))
    sys.stdout.write("\n")
    if args.verbose:
        _print_stats(result, load_s)
    return 0


def _print_stream(pieces):
    """Writes a generation stream's text pieces to stdout as they come; returns its final GenerationResult."""
    result = None
    for piece in pieces:
        if isinstance(piece, str):
            sys.stdout.write(piece)
            sys.stdout.flush()
        else:
            result = piece
    return result


def cmd_chat(args) -> int:
    import markbase

    model = markbase.load(args.model, device=args.device, preload=sys.stderr.isatty() and not args.quantize,
                          quantize=args.quantize)
    options = {k: v for k, v in _sampling_kwargs(args).items() if v is not None}
    if args.thinking:
        options["enable_thinking"] = True
    chat = model.new_chat(system=args.system, **options)
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"markbase chat with {model.config.family} ({args.model}). /reset to start over, /quit or Ctrl-D to leave.")
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        if line in ("/quit", "/exit"):
            break
        if line == "/reset":
            chat.reset()
            print("[conversation reset]")
            continue
        try:
            result = _print_stream(chat.send(line, stream=True))
        except KeyboardInterrupt:  # Ctrl-C stops this answer (the turn is taken back), not the chat
            sys.stdout.write("\n[interrupted]\n")
            sys.stdout.flush()
            continue
        sys.stdout.write("\n")
        sys.stdout.flush()
        if args.verbose:
            _print_stats(result)
    return 0


def cmd_demo(args) -> int:
    import markbase
    from markbase.testing import make_checkpoint

    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="markbase-demo-") as tmp:
        d = args.keep or os.path.join(tmp, f"gemma4-{args.family}-tiny")
        t = time.perf_counter()
        make_checkpoint(d, family=args.family, size="tiny", dtype="bf16", seed=args.seed)
        rows.append(("build synthetic checkpoint", f"{time.perf_counter() - t:.2f} s", f"{args.family}, bf16, tiny"))
        t = time.perf_counter()
        report = markbase.validate(d)
        rows.append(("validate", f"{time.perf_counter() - t:.2f} s", "ok" if report.ok else "PROBLEMS"))
        t = time.perf_counter()
        model = markbase.load(d)
        rows.append(("load", f"{time.perf_counter() - t:.2f} s", f"device {model.device}"))
        rows += _demo_turn(model, args, "text", args.prompt, args.prompt)
        if "image" in model.modalities:
            image = _demo_image()
            prompt = "What is in this picture?"
            rows += _demo_turn(model, args, "image turn", f"[image {image.shape[1]}×{image.shape[0]}] {prompt}",
                               [{"type": "image", "image": image}, {"type": "text", "text": prompt}])
        if "audio" in model.modalities:
            tone, rate = _demo_tone()
            prompt = "Transcribe this."
            rows += _demo_turn(model, args, "audio turn", f"[audio {len(tone) / rate:.1f} s, 440 Hz tone] {prompt}",
                               [{"type": "audio", "audio": (tone, rate)}, {"type": "text", "text": prompt}])
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'stage':<{w0}}  {'time':>{w1}}  detail")
    for stage, tm, detail in rows:
        print(f"{stage:<{w0}}  {tm:>{w1}}  {detail}")
    print("(random weights: the text is noise; the numbers show the engine working end to end)")
    return 0


def _demo_turn(model, args, label: str, shown: str, content) -> list[tuple[str, str, str]]:
    """Runs one chat turn of the demo, streaming it; the timing rows of its stages."""
    print(f"user> {shown}")
    sys.stdout.write("model> ")
    result = _print_stream(model.generate([{"role": "user", "content": content}], max_new_tokens=args.max_new_tokens,
                                          seed=args.seed, stream=True))
    sys.stdout.write("\n\n")
    rows = []
    for kind, n, pre, enc in zip(result.media, result.soft_tokens, result.media_preprocess_s, result.media_encode_s):
        if kind == "audio":
            rows.append(("audio features", f"{pre * 1000:.1f} ms", f"decode, resample, log-mel → {n} soft tokens"))
            rows.append(("audio encode", f"{enc * 1000:.1f} ms", "audio tower + embed_audio"))
        else:
            rows.append((f"{kind} preprocess", f"{pre * 1000:.1f} ms", f"→ {n} soft tokens"))
            rows.append((f"{kind} encode", f"{enc * 1000:.1f} ms", "vision encoder + embedder"))
    rows.append((f"prefill ({label})", f"{result.prefill_s * 1000:.1f} ms",
                 f"{result.prefill_tokens} tok, {result.prefill_tokens_per_s:.1f} tok/s"))
    if not result.media:
        rows.append(("first token", f"{result.time_to_first_token_s * 1000:.1f} ms", ""))
    rows.append((f"decode ({label})", f"{result.decode_s * 1000:.1f} ms",
                 f"{len(result.token_ids)} tok, {result.decode_tokens_per_s:.1f} tok/s ({result.finish_reason})"))
    return rows


def _demo_tone():
    """A 2-second 440 Hz tone with a slow tremolo at 44.1 kHz (resampled to 16 kHz by the loader)."""
    import numpy as np

    rate = 44100
    t = np.arange(2 * rate) / rate
    return (0.4 * np.sin(2 * np.pi * 440 * t) * (0.75 + 0.25 * np.sin(2 * np.pi * 2 * t))).astype(np.float32), rate


def _demo_image():
    """A synthetic 320×240 picture (gradient, disc, bars): no download needed."""
    import numpy as np

    y, x = np.mgrid[0:240, 0:320]
    img = np.stack([x * 255 // 319, y * 255 // 239, np.full_like(x, 96)], axis=-1).astype(np.uint8)
    img[(x - 200) ** 2 + (y - 110) ** 2 < 50 ** 2] = (250, 220, 40)
    img[180:220, 30:290:20] = (20, 20, 20)
    return img


def cmd_inspect(args) -> int:
    import numpy as np

    from markbase.io import open_checkpoint
    from markbase.models.gemma4 import load_config, weight_table

    cfg = load_config(args.dir)
    ckpt = open_checkpoint(args.dir)
    by_name = {a: s for s in weight_table(cfg) for a in (s.name, *s.aliases)}
    params: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    dtypes: dict[str, set] = {}
    for name in ckpt.keys():
        comp = by_name[name].component if name in by_name else "unknown"
        n = int(np.prod(ckpt.shape(name), dtype=np.int64))
        params[comp] = params.get(comp, 0) + n
        lo, hi = ckpt.offsets(name)
        nbytes[comp] = nbytes.get(comp, 0) + (hi - lo)
        dtypes.setdefault(comp, set()).add(ckpt.dtype(name))
    t = cfg.text_config
    modalities = ["text"] + (["image", "video"] if cfg.vision_config is not None else []) + (
        ["audio"] if cfg.audio_config is not None else [])
    print(f"checkpoint   {args.dir}")
    print(f"family       {cfg.family} (model_type {cfg.model_type})")
    print(f"modalities   {', '.join(modalities)}")
    print(f"context      {t.max_position_embeddings} tokens, sliding window {t.sliding_window}")
    print(f"text         {t.num_hidden_layers} layers, hidden {t.hidden_size}, {t.num_attention_heads} heads, "
          f"vocab {t.vocab_size}" + (f", MoE {t.num_experts}x top-{t.top_k_experts}" if t.enable_moe_block else "")
          + (f", PLE {t.hidden_size_per_layer_input}" if t.has_ple else "")
          + (f", KV sharing {t.num_kv_shared_layers} layers" if t.num_kv_shared_layers else ""))
    print(f"files        {len(ckpt.files())} safetensors file(s)")
    print(f"{'component':<14}{'parameters':>16}{'size':>12}  dtypes")
    for comp in sorted(params, key=lambda c: -params[c]):
        print(f"{comp:<14}{params[comp]:>16,}{nbytes[comp] / 1e6:>10.1f} MB  {', '.join(sorted(dtypes[comp]))}")
    print(f"{'total':<14}{sum(params.values()):>16,}{sum(nbytes.values()) / 1e6:>10.1f} MB")
    return 0


def cmd_trace(args) -> int:
    import markbase

    model = markbase.load(args.dir, device=args.device)
    prompt = args.prompt if args.raw else [{"role": "user", "content": args.prompt}]
    report = model.trace_nonfinite(prompt)
    if not report:
        print(f"no NaN or Inf in the forward pass ({len(model.encode_prompt(prompt))} tokens, device {model.device})")
        return 0
    print(str(report))
    return 1


def cmd_devices(args) -> int:
    import markbase

    print("\n".join(markbase.devices()))
    return 0


def cmd_validate(args) -> int:
    import markbase

    report = markbase.validate(args.dir, scan_values=not args.no_values)
    sys.stdout.write(str(report))
    return 0 if report.ok else 1


def cmd_serve(args) -> int:
    import markbase

    try:
        from .serve import serve
    except ImportError as e:
        raise markbase.InputError(f"markbase serve needs FastAPI and uvicorn: pip install 'markbase[serve]' ({e})") from None
    if args.prompt_cache < 0:
        raise markbase.InputError(f"--prompt-cache must be >= 0, got {args.prompt_cache}")
    if args.max_queue < 1 or args.max_batch < 1:
        raise markbase.InputError(f"--max-queue and --max-batch must be at least 1, got {args.max_queue}, {args.max_batch}")
    if args.max_body_bytes is not None and args.max_body_bytes < 1:
        raise markbase.InputError(f"--max-body-bytes must be at least 1, got {args.max_body_bytes}")
    return serve(args.model, host=args.host, port=args.port, device=args.device, api_key=args.api_key,
                 model_id=args.model_id, max_queue=args.max_queue, max_batch=args.max_batch,
                 prompt_cache=args.prompt_cache, allow_media_dir=args.allow_media_dir, max_context=args.max_context,
                 quantize=args.quantize, max_body_bytes=args.max_body_bytes)


def cmd_quantize(args) -> int:
    import time

    from .mlx_format import quantize_checkpoint

    t0 = time.perf_counter()
    counts = quantize_checkpoint(args.dir, args.out, bits=args.bits, group_size=args.group_size,
                                 embedding_bits=args.embedding_bits)
    print(f"wrote {args.out}: {counts['quantized']} matrices quantized ({args.bits}-bit, groups of {args.group_size}), "
          f"{counts['kept']} tensors kept, {counts['bytes'] / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    import markbase

    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except markbase.MarkbaseError as e:
        print(f"markbase: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
