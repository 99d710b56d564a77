"""Generation: sampling loop with stop conditions, streaming text, timings, and multi-turn chats."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from . import _core, args
from ._core import CheckpointError, InputError
from .files import CHECKPOINT_JSON_MAX_BYTES, read_checkpoint_file
from .tokenizer import split_thinking

_UNSET = object()


@dataclass
class GenerationResult:
    """The final item of a stream (and the return value without streaming)."""
    text: str                       # the answer (thought channel removed)
    thinking: str | None            # the `<|channel>thought …` block, if the model wrote one
    raw_text: str                   # everything generated, as decoded
    token_ids: list[int]            # generated ids (the stop token excluded)
    prompt_tokens: int
    finish_reason: str              # "eos" | "stop" | "length" | "context"
    stop: str | int | None          # the eos id or stop string that ended generation
    prefill_s: float = 0.0
    decode_s: float = 0.0
    time_to_first_token_s: float = 0.0
    prefill_tokens: int = 0         # tokens actually prefilled (a chat turn reuses its cache)
    media: list[str] = field(default_factory=list)        # "image" / "video" / "audio" of each item the prompt holds
    soft_tokens: list[int] = field(default_factory=list)  # soft tokens of each of those items
    preprocess_s: float = 0.0       # media loading and preprocessing (all items): resize + patch, log-mel
    encode_s: float = 0.0           # encoder time (items encoded for this turn)
    media_preprocess_s: list[float] = field(default_factory=list)  # per item, as media
    media_encode_s: list[float] = field(default_factory=list)      # per item: 0 when its soft tokens were reused

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prefill_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        n = max(len(self.token_ids) - 1, 0)
        return n / self.decode_s if self.decode_s > 0 else 0.0

    def __str__(self) -> str:
        return self.text


@dataclass
class SamplingOptions:
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = 0
    stop: list[str] = field(default_factory=list)
    eos_ids: list[int] = field(default_factory=list)


GENERATION_CONFIG = "generation_config.json"
# generate()'s sampling keywords (SamplingOptions' fields a caller sets; eos_ids come from the checkpoint)
SAMPLING_KEYWORDS = ("max_new_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                     "presence_penalty", "frequency_penalty", "seed", "stop")
TEMPLATE_KEYWORDS = ("enable_thinking", "tools")  # chat-template options a Chat keeps for every turn


def generation_defaults(path: str, config) -> dict:
    """Defaults from generation_config.json (do_sample false → greedy), eos ids from it or config.json.
    The file is optional and, as in transformers (whose loader falls back to defaults), ignored when it is
    not JSON. JSON that is not an object, or a key read here holding a wrong type or range, is a
    CheckpointError naming the file and the key (transformers cannot load such a file either)."""
    out: dict = {"eos_ids": list(config.eos_token_id) or [1]}
    p = os.path.join(path, GENERATION_CONFIG)
    if not os.path.exists(p):
        return out
    try:
        g = json.loads(read_checkpoint_file(p, CHECKPOINT_JSON_MAX_BYTES))  # CheckpointError: not a regular file
    except ValueError:  # not JSON (or not UTF-8): the defaults
        return out
    if not isinstance(g, dict):
        raise CheckpointError(f"{p}: the top level must be a JSON object, got {type(g).__name__}")
    eos = g.get("eos_token_id")
    if eos is not None:
        out["eos_ids"] = eos if isinstance(eos, list) else [eos]
        if not all(args.is_int(e) and 0 <= e < args.TOKEN_ID_LIMIT for e in out["eos_ids"]):
            raise CheckpointError(f"{p}: eos_token_id must be a token id or a list of them, got {args.shown(eos)}")
    do_sample = g.get("do_sample")
    if do_sample is not None and not isinstance(do_sample, bool):
        raise CheckpointError(f"{p}: do_sample must be true or false, got {args.shown(do_sample)}")
    if do_sample is False:
        out["temperature"] = 0.0
    else:
        out.update({k: g[k] for k in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")
                    if g.get(k) is not None})
    if g.get("max_new_tokens") is not None:
        out["max_new_tokens"] = g["max_new_tokens"]
    try:
        _checked(SamplingOptions(**out))
    except InputError as e:  # the checkpoint's value, not the caller's
        raise CheckpointError(f"{p}: {e}") from None
    return out


def resolve_options(defaults: dict, **given) -> SamplingOptions:
    """Sampling options: the checkpoint's defaults, then the caller's (None: the default). Every value is
    checked here, in Python, so an unknown keyword or a wrong type or range is an InputError naming the
    argument (never a TypeError from the bindings, never a NaN reaching the sampler)."""
    args.keywords(given, SAMPLING_KEYWORDS, "generation options")
    opts = SamplingOptions(**{k: v for k, v in defaults.items() if k in SamplingOptions.__dataclass_fields__})
    for key, value in given.items():
        if value is not None and value is not _UNSET:
            setattr(opts, key, value)
    return _checked(opts)


def _checked(opts: SamplingOptions) -> SamplingOptions:
    """opts with every field checked (InputError naming it) and held as the sampler takes it."""
    opts.max_new_tokens = args.integer(opts.max_new_tokens, "max_new_tokens", lo=1)
    opts.temperature = args.real(opts.temperature, "temperature", lo=0)
    opts.top_p = args.real(opts.top_p, "top_p", 0, 1, lo_open=True)
    opts.top_k = args.integer(opts.top_k, "top_k", 0, args.C_INT_MAX)
    opts.min_p = args.real(opts.min_p, "min_p", 0, 1, hi_open=True)
    opts.repetition_penalty = args.real(opts.repetition_penalty, "repetition_penalty", lo=0, lo_open=True)
    opts.presence_penalty = args.real(opts.presence_penalty, "presence_penalty")
    opts.frequency_penalty = args.real(opts.frequency_penalty, "frequency_penalty")
    opts.seed = args.seed(opts.seed)
    if not isinstance(opts.eos_ids, (list, tuple)):
        raise InputError(f"eos_ids must be a list of token ids, got {args.shown(opts.eos_ids)}")
    opts.eos_ids = [args.integer(e, "eos_ids", 0, args.TOKEN_ID_LIMIT - 1) for e in opts.eos_ids]
    if isinstance(opts.stop, str):
        opts.stop = [opts.stop]
    if not isinstance(opts.stop, (list, tuple)) or not all(isinstance(s, str) and s for s in opts.stop):
        raise InputError(f"stop must be a string or a list of non-empty strings, got {args.shown(opts.stop)}")
    opts.stop = list(opts.stop)
    return opts


class _StopScanner:
    """Finds stop strings in streamed text, also across token boundaries, holding back possible prefixes."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.pending = ""

    def feed(self, piece: str) -> tuple[str, str | None]:
        """Returns (text safe to emit, the stop string hit or None)."""
        self.pending += piece
        hit, at = None, -1
        for s in self.stops:
            i = self.pending.find(s)
            if i >= 0 and (at < 0 or i < at):
                hit, at = s, i
        if hit is not None:
            out, self.pending = self.pending[:at], ""
            return out, hit
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[:len(self.pending) - hold]
        self.pending = self.pending[len(out):]
        return out, None

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


@dataclass
class Prompt:
    """Token ids with their media items (preprocessed images / videos / audio clips, in prompt order)."""
    ids: list[int]
    media: list = field(default_factory=list)

    def keys(self, token_ids: dict[str, int]) -> list:
        """Per position what the cache holds there: the token id, or (media content hash, row) for a soft
        token, so a cached prefix is reused only where the same image sits."""
        from .media import place

        out: list = list(self.ids)
        if self.media:
            placement = place(np.asarray(self.ids), self.media, token_ids)
            for item, rows in zip(placement.items, placement.rows):
                key = item.key
                k = 0
                for s, e in rows:
                    for p in range(s, e):
                        out[p] = (key, k)
                        k += 1
        return out


class SequenceRun:
    """One sequence being generated: prefills its prompt into `session` (which already holds
    ids[:reuse_prefix]), then takes the sampled tokens one at a time (`advance`), tracking stops, the
    streamed text and the timings. run_generation drives one; Model.generate_batch drives several with
    one batched decode step for all of them."""

    def __init__(self, model, session, prompt: "Prompt | list[int]", opts: SamplingOptions, reuse_prefix: int = 0,
                 prefill: bool = True):
        """prefill=False leaves a text prompt's tokens for prefill_step (a server interleaves them with the
        running sequences' decode steps); a prompt with media is always prefilled here, whole."""
        if not isinstance(prompt, Prompt):
            prompt = Prompt(list(prompt))
        self.prompt, self.opts, self.session = prompt, opts, session
        prompt_ids = prompt.ids
        self.sampler = _core.Sampler(temperature=float(opts.temperature), top_k=int(opts.top_k), top_p=float(opts.top_p),
                                     min_p=float(opts.min_p), repetition_penalty=float(opts.repetition_penalty),
                                     presence_penalty=float(opts.presence_penalty),
                                     frequency_penalty=float(opts.frequency_penalty), seed=int(opts.seed))
        self.sampler.observe_prompt(np.asarray(prompt_ids, np.int32))
        self.eos = set(opts.eos_ids)
        self.t0 = time.perf_counter()
        new = prompt_ids[reuse_prefix:]
        self.prefill_tokens = len(new)
        if session.position + len(new) >= session.max_context:
            raise InputError(f"context limit: the prompt needs {session.position + len(new)} of {session.max_context} "
                             f"positions and leaves no room to generate")
        encode0 = [it.encode_s for it in prompt.media]
        self._pending = np.asarray(new, np.int32)  # prompt tokens not prefilled yet
        if prompt.media:
            session._prefill_media(np.asarray(prompt_ids, np.int32), prompt.media, reuse_prefix, False)
            self._pending = self._pending[:0]
        elif prefill:
            session.prefill(self._pending)
            self._pending = self._pending[:0]
        self.item_encode_s = [it.encode_s - e0 for it, e0 in zip(prompt.media, encode0)]
        self.encode_s = sum(self.item_encode_s)
        self.prefill_s = time.perf_counter() - self.t0 - self.encode_s
        self.stream = model.tokenizer.stream()
        self.stops = _StopScanner(opts.stop)
        self.generated: list[int] = []
        self.raw: list[str] = []
        self.finish, self.stop_hit = "length", None
        self.ttft = 0.0
        self.done = False
        self.t_decode = 0.0  # set by first_token
        self.decode_s = 0.0

    @property
    def prefilled(self) -> bool:
        return len(self._pending) == 0

    def prefill_step(self, max_tokens: int) -> bool:
        """Prefills up to max_tokens more prompt tokens (prefill=False); True once the whole prompt is in."""
        if self._pending.size:
            t = time.perf_counter()
            self.session.prefill(self._pending[:max_tokens])
            self._pending = self._pending[max_tokens:]
            self.prefill_s += time.perf_counter() - t
        return self.prefilled

    def first_token(self) -> int:
        """The first token, sampled from the prompt's last logits (the prompt prefilled)."""
        self.t_decode = time.perf_counter()
        return self.session.sample(self.sampler)

    def advance(self, token: int) -> str:
        """Takes the sampled `token`: returns the text it releases; `done` turns true when generation ends
        (this token was eos, completed a stop string, or reached the length or context limit). While not
        done, `token` is what the next decode step feeds."""
        if not self.generated and not self.ttft:
            self.ttft = time.perf_counter() - self.t0
        if token in self.eos:
            self.finish, self.stop_hit = "eos", token
            return self._end()
        self.generated.append(token)
        piece = self.stream.push(token)
        self.raw.append(piece)
        text, hit = self.stops.feed(piece)
        if hit is not None:
            self.finish, self.stop_hit = "stop", hit
            return text + self._end()
        if len(self.generated) >= self.opts.max_new_tokens:
            return text + self._end()
        if self.session.position + 1 > self.session.max_context:
            self.finish = "context"
            return text + self._end()
        return text

    def _end(self) -> str:
        self.done = True
        self.decode_s = time.perf_counter() - self.t_decode
        if self.finish == "stop":
            return ""
        tail = self.stream.flush()
        self.raw.append(tail)
        text, hit = self.stops.feed(tail)
        text += self.stops.flush() if hit is None else ""
        if hit is not None:
            self.finish, self.stop_hit = "stop", hit
        return text

    def result(self) -> GenerationResult:
        raw_text = "".join(self.raw)
        if self.finish == "stop":
            raw_text = raw_text[: raw_text.find(self.stop_hit)] if self.stop_hit in raw_text else raw_text
        thinking, answer = split_thinking(raw_text)
        media = self.prompt.media
        return GenerationResult(text=answer, thinking=thinking, raw_text=raw_text, token_ids=self.generated,
                                prompt_tokens=len(self.prompt.ids), finish_reason=self.finish, stop=self.stop_hit,
                                prefill_s=self.prefill_s, decode_s=self.decode_s, time_to_first_token_s=self.ttft,
                                prefill_tokens=self.prefill_tokens, media=[it.kind for it in media],
                                soft_tokens=[it.tokens for it in media],
                                preprocess_s=sum(it.preprocess_s for it in media), encode_s=self.encode_s,
                                media_preprocess_s=[it.preprocess_s for it in media],
                                media_encode_s=self.item_encode_s)


def run_generation(model, session, prompt: "Prompt | list[int]", opts: SamplingOptions, reuse_prefix: int = 0
                   ) -> Iterator[str | GenerationResult]:
    """Prefills the prompt's ids[reuse_prefix:] into `session` (which already holds the prefix), with the
    soft tokens of its media items placed there, then samples."""
    run = SequenceRun(model, session, prompt, opts, reuse_prefix)
    token = run.first_token()  # from the prompt's last logits; each step below samples in C++
    while True:
        text = run.advance(token)
        if text:
            yield text
        if run.done:
            break
        token = session.step(token, run.sampler)
    yield run.result()


def run_batch(model, runs: list[SequenceRun]) -> list[GenerationResult]:
    """Generates every run to its end, all active sequences advancing together: one batched decode step
    (the weights read once) per token position, each sequence sampled by its own sampler."""
    tokens = [run.first_token() for run in runs]
    active = []
    for run, token in zip(runs, tokens):
        run.advance(token)
        if not run.done:
            active.append((run, token))
    while active:
        nxt = _core.gemma4.step_batch([r.session._s for r, _ in active], np.array([t for _, t in active], np.int32),
                                      [r.sampler for r, _ in active])
        still = []
        for (run, _), token in zip(active, nxt):
            run.advance(int(token))
            if not run.done:
                still.append((run, int(token)))
        active = still
    return [run.result() for run in runs]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Chat:
    """A multi-turn conversation that keeps its KV cache between turns.

    Each turn renders and tokenises the whole conversation with the checkpoint's chat template, exactly as
    a fresh run would, and keeps the longest prefix of those ids that the cache already holds (earlier
    prompts, and the model's own tokens where they equal the new tokenisation); the cache is rolled back
    to that prefix (or restarted when the session cannot truncate) and only the rest is prefilled. The
    answer therefore equals a fresh run over the whole conversation.

    One turn at a time: while a streamed turn is open (not exhausted or closed), or a turn runs in another
    thread, send and reset refuse with an InputError, since a second turn would interleave its messages and
    rewrite the cache the open one decodes from.
    """

    def __init__(self, model, messages: list[dict] | None = None, system: str | None = None, **options):
        args.keywords(options, SAMPLING_KEYWORDS + TEMPLATE_KEYWORDS, "new_chat")
        self.model = model
        self.messages: list[dict] = args.optional_list(messages, "new_chat: messages")
        if system is not None:
            self.messages.insert(0, {"role": "system", "content": args.text(system, "new_chat: system")})
        self.template_kwargs = check_template_options(options.pop("enable_thinking", None),
                                                      options.pop("tools", None), "new_chat")
        resolve_options(model.generation_defaults, **options)  # a bad option fails here, not at the first turn
        self.options = options
        self.session = model.session()
        self._fed: list = []   # what the session's cache holds per position (Prompt.keys)
        self.last: GenerationResult | None = None
        self._turn_open = threading.Lock()  # held from send until its turn ends (stream exhausted or closed)
        self._open_turn_streams = False     # what the open turn is: a stream, or a send running in a thread

    def _refuse_while_open(self, what: str) -> None:
        if self._open_turn_streams:
            raise InputError(f"{what}: the previous streamed turn is still open: exhaust or close() its stream "
                             f"first (two open turns would interleave their messages and share one cache)")
        raise InputError(f"{what}: this chat is in use by another thread (a turn is running)")

    def reset(self) -> None:
        """Forgets every turn (keeps a leading system message)."""
        if self._turn_open.locked():
            self._refuse_while_open("Chat.reset")
        self.messages = [m for m in self.messages[:1] if m.get("role") in ("system", "developer")]
        self.session.reset()
        self._fed = []

    @args.checked_call
    def send(self, content, stream: bool = False, **options):
        """Adds a user turn and generates the answer: a string, or with stream=True a TurnStream of pieces
        whose final item is the GenerationResult. A turn that does not complete (Ctrl-C, an error, a stream
        closed early) leaves no trace: its user message is taken back, and the next turn rolls the cache back
        to what the conversation holds. options: generate()'s sampling keywords, for this turn."""
        stream = args.boolean(stream, "Chat.send: stream")
        args.keywords(options, SAMPLING_KEYWORDS, "Chat.send")
        if not self._turn_open.acquire(blocking=False):
            self._refuse_while_open("Chat.send")
        self._open_turn_streams = stream
        turn = TurnStream(self._turn(content, {**self.options, **options}), self._turn_open.release)
        if stream:
            return turn
        with turn:
            result = None
            for item in turn:
                result = item
        return result.text

    def _turn(self, content, options: dict):
        self.messages.append({"role": "user", "content": content})
        try:
            yield from self._run_turn(options)
        except BaseException:  # KeyboardInterrupt, GeneratorExit, errors: the turn is taken back
            # The session may hold this turn's prompt and part of an answer beyond _fed: the next turn's
            # common prefix with _fed (which ends before them) truncates it back.
            if self.messages and self.messages[-1].get("role") == "user":
                self.messages.pop()
            raise

    def _run_turn(self, options: dict):
        model = self.model
        opts = resolve_options(model.generation_defaults, **options)
        prompt = model._prompt(self.messages, **self.template_kwargs)  # as a fresh run tokenises it
        ids = prompt.ids
        keys = prompt.keys(model._placeholder_ids())
        reuse = min(_common_prefix(self._fed, keys), len(ids) - 1)
        if reuse < self.session.position and not self.session.truncate(reuse):
            self.session.reset()
            reuse = 0
        result = None
        for item in run_generation(model, self.session, prompt, opts, reuse_prefix=reuse):
            result = item
            yield item
        generated = result.token_ids
        # Every generated token but the last went through the model (after eos, which `generated` leaves
        # out, all of them did); the next turn prefills whatever of its tokenisation the cache lacks.
        self._fed = keys + (generated if result.finish_reason == "eos" else generated[:-1])
        content = model.tokenizer.decode(generated)
        self.messages.append({"role": "assistant", "content": content if result.finish_reason != "stop"
                              else result.raw_text})
        self.last = result


class TurnStream:
    """The pieces of a streamed Chat turn, its final item the GenerationResult. The turn ends, and the chat
    takes another, once this is exhausted or closed (close(), the end of a with-block, or dropping it)."""

    def __init__(self, pieces, release):
        self._pieces = pieces
        self._release = release

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._pieces)
        except BaseException:  # the end, an error or Ctrl-C: the turn is over either way
            self.close()
            raise

    def close(self) -> None:
        """Ends the turn (a turn closed before its end is taken back) and frees the chat for the next one."""
        self._pieces.close()
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> "TurnStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_release", None) is not None:
            self.close()


def check_template_options(enable_thinking, tools, what: str) -> dict:
    """The chat-template keywords given (enable_thinking: a bool, tools: a list of tool schemas)."""
    out = {}
    if enable_thinking is not None:
        out["enable_thinking"] = args.boolean(enable_thinking, f"{what}: enable_thinking")
    if tools is not None:
        out["tools"] = args.optional_list(tools, f"{what}: tools")
    return out
