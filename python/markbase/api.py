"""The public Python API: `markbase.load(path)` → Model (logits, sessions)."""

from __future__ import annotations

import os
from typing import Iterable

import numpy as np

from . import _core, args
from ._core import DeviceError, InputError
from .args import checked_call

_TORCH_LIKE_INT_KINDS = ("i", "u")
BLOCK_ID_LIMIT = 2**31  # block ids are int32: -1 (no block) or in [0, 2**31)


def _resolve_device(device: str) -> str:
    if not isinstance(device, str) or args.has_lone_surrogate(device):
        raise DeviceError(f"load: device must be a string such as 'auto' or 'cpu', got {args.shown(device)}")
    if device == "auto":
        return "cpu"
    _core.check_device(device)  # DeviceError: unknown (naming the registered devices), or why it cannot run here
    return device


def _as_ids(input_ids, vocab: int, what: str = "input_ids") -> np.ndarray:
    if isinstance(input_ids, (list, tuple)) and len(input_ids) and isinstance(input_ids[0], bool):
        raise InputError(f"{what} must be integers, got booleans")
    if isinstance(input_ids, (str, bytes, dict)):
        raise InputError(f"{what} must be a sequence of integer token ids, got {args.shown(input_ids)}")
    arr = args.array(input_ids, what, expected="a sequence of integer token ids")
    if arr.size == 0:
        raise InputError(f"{what} is empty")
    if arr.dtype.kind not in _TORCH_LIKE_INT_KINDS:
        raise InputError(f"{what} must be an array of integer token ids, got dtype {arr.dtype}")
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise InputError(f"{what} must be one sequence of token ids (shape [T] or [1, T]), got shape {arr.shape}")
    if arr.size == 0:
        raise InputError(f"{what} is empty")
    bad = np.flatnonzero((arr < 0) | (arr >= vocab))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{what}[{i}] = {int(arr[i])} is out of range for a vocabulary of {vocab} tokens")
    return arr.astype(np.int32)


class Session:
    """A KV-cached decoding session: prefill a prompt, then decode one token at a time (C++ runtime.Session)."""

    @checked_call
    def __init__(self, model: "Model", max_context: int):
        if not isinstance(model, Model):
            raise InputError(f"Session: model must be a markbase.Model, got {args.shown(model)}")
        self._model = model
        self._s = _core.gemma4.Session(model._core, args.integer(max_context, "session: max_context", 1,
                                                                 model.max_context))

    @property
    def position(self) -> int:
        """Tokens processed so far (the position the next token gets)."""
        return self._s.position

    @property
    def max_context(self) -> int:
        return self._s.max_context

    @checked_call
    def reset(self) -> None:
        self._s.reset()

    @checked_call
    def truncate(self, n: int) -> bool:
        """Rolls back to the first n tokens (e.g. to re-run a changed turn). False, with nothing changed,
        when a sliding-window cache no longer holds what position n needs; then reset() instead."""
        return bool(self._s.truncate(args.integer(n, "truncate: n", 0, self.position)))

    @checked_call
    def prefill(self, input_ids, all_logits: bool = False, images=None, videos=None, audio=None,
                max_soft_tokens: int | None = None, max_audio_s: float | None = None) -> np.ndarray:
        """Runs the prompt; returns float32 logits of the last position [vocab] (or [T, vocab] with all_logits).
        images / videos / audio (lists) fill, in order, the expanded placeholder runs the ids hold (each image's
        `<|image>` + n × `<|image|>` + `<image|>`, each clip's `<|audio>` + n × `<|audio|>` + `<audio|>`, as
        model.encode_prompt returns them); a count or length mismatch is an InputError. An audio entry is a
        path, bytes or (samples, sample_rate). Non-finite logits raise NumericsError."""
        from .preprocess.audio import check_max_audio_s

        ids = _as_ids(input_ids, self._model.config.text_config.vocab_size, "prefill: input_ids")
        all_logits = args.boolean(all_logits, "prefill: all_logits")
        images, videos = args.optional_list(images, "prefill: images"), args.optional_list(videos, "prefill: videos")
        audio = args.optional_list(audio, "prefill: audio")
        max_soft_tokens = _soft_token_budget(max_soft_tokens, "prefill: max_soft_tokens")
        check_max_audio_s(max_audio_s, "prefill: max_audio_s")
        m = self._model
        items = [m.media.image(src, max_soft_tokens, f"images[{i}]") for i, src in enumerate(images)]
        items += [m.media.video(src, max_soft_tokens, what=f"videos[{i}]") for i, src in enumerate(videos)]
        items += [m.media.audio(src, max_audio_s=max_audio_s, what=f"audio[{i}]") for i, src in enumerate(audio)]
        if items:  # without media, placeholder ids are embedded as pad, as transformers does
            return self._prefill_media(ids, items, 0, all_logits)
        logits = self._s.prefill(ids, all_logits)
        return logits if all_logits else logits[0]

    def _prefill_media(self, ids: np.ndarray, items, offset: int, all_logits: bool) -> np.ndarray:
        """Runs ids[offset:] (the session holds ids[:offset]) with the soft tokens of the media items filling
        their placeholder runs (items in prompt order; images to image runs, videos to video runs, clips to
        audio runs; an InputError on any mismatch). Only the items whose runs lie past offset are encoded."""
        from .media import Placement, block_ids, place

        m, cfg = self._model, self._model.config
        full = place(ids, items, m._placeholder_ids())
        tail = Placement([], [])
        for item, rows in zip(full.items, full.rows):
            if rows[-1][1] <= offset:
                continue  # already in the cache
            if rows[0][0] < offset:
                raise InputError(f"a prefill from position {offset} would split a {item.kind}'s placeholder runs")
            tail.items.append(item)
            tail.rows.append(rows)
        x = m._core.embed(ids[offset:])
        for item, rows in zip(tail.items, tail.rows):
            soft = m.media.encode(item)
            k = 0
            for s, e in rows:
                x[s - offset:e - offset] = soft[k:k + (e - s)]
                k += e - s
        logits = self._s.prefill_embeds(x, ids[offset:], block_ids(len(ids), tail, offset), all_logits)
        return logits if all_logits else logits[0]

    @checked_call
    def prefill_embeddings(self, embeddings, input_ids, block_ids=None, all_logits: bool = False) -> np.ndarray:
        """Runs caller-made embeddings [T, hidden] f32 (rows of model.embed(ids), some replaced by soft tokens)
        with their ids [T] (still needed for the per-layer embeddings). block_ids [T]: tokens sharing an id
        >= 0 attend to each other bidirectionally on models with use_bidirectional_attention == "vision"
        (one id per image / video frame), -1 elsewhere."""
        ids = _as_ids(input_ids, self._model.config.text_config.vocab_size, "prefill_embeddings: input_ids")
        hidden = self._model.config.text_config.hidden_size
        expected = f"f32 [{len(ids)}, {hidden}] (one row of hidden_size per token id)"
        x = args.array(embeddings, "prefill_embeddings: embeddings", kinds="fiu", expected=expected)
        if x.shape != (len(ids), hidden):
            raise InputError(f"prefill_embeddings: embeddings must be {expected}, got shape {list(x.shape)}")
        blocks = None if block_ids is None else _as_block_ids(block_ids, len(ids))
        all_logits = args.boolean(all_logits, "prefill_embeddings: all_logits")
        logits = self._s.prefill_embeds(np.ascontiguousarray(x, dtype=np.float32), ids, blocks, all_logits)
        return logits if all_logits else logits[0]

    @checked_call
    def decode(self, token_id: int) -> np.ndarray:
        """Feeds one token; returns float32 logits [vocab] for the next position. Costs one token's work."""
        return self._s.decode(self._token(token_id, "decode: token_id"))[0]

    @checked_call
    def sample(self, sampler) -> int:
        """The next token drawn by `sampler` (markbase._core.Sampler) from the last position's logits."""
        return int(self._s.sample(_as_sampler(sampler, "sample: sampler")))

    @checked_call
    def step(self, token_id: int, sampler) -> int:
        """Feeds token_id and returns the next token drawn by `sampler`: the logits stay in C++."""
        token = self._token(token_id, "step: token_id")
        return int(self._s.step(token, _as_sampler(sampler, "step: sampler")))

    def _token(self, token_id, what: str) -> int:
        return args.integer(token_id, what, 0, self._model.config.text_config.vocab_size - 1)


def _as_sampler(sampler, what: str):
    if not isinstance(sampler, _core.Sampler):
        raise InputError(f"{what} must be a markbase._core.Sampler, got {args.shown(sampler)}")
    return sampler


def _as_block_ids(block_ids, length: int) -> np.ndarray:
    """block_ids as the C++ side takes them: int32 [length], each -1 or a block number."""
    what = "prefill_embeddings: block_ids"
    blocks = args.array(block_ids, what, kinds="iu")
    if blocks.shape != (length,):
        raise InputError(f"{what} must have shape [{length}] (one per token id), got {list(blocks.shape)}")
    bad = np.flatnonzero((blocks < -1) | (blocks >= BLOCK_ID_LIMIT))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{what}[{i}] = {int(blocks[i])} is not -1 or a block number in [0, 2**31)")
    return np.ascontiguousarray(blocks, dtype=np.int32)


def _soft_token_budget(max_soft_tokens, what: str) -> int | None:
    """None (the checkpoint's default) or a supported image / frame budget."""
    from .preprocess.image import SUPPORTED_SOFT_TOKENS

    return None if max_soft_tokens is None else args.one_of(max_soft_tokens, what, SUPPORTED_SOFT_TOKENS)


class Model:
    """A loaded Gemma 4 checkpoint (text decoder on the chosen device)."""

    def __init__(self, path: str, core_model, report):
        self.path = path
        self._core = core_model
        self.config = core_model.config
        self.device = core_model.device
        self.max_context = core_model.max_context
        self.prefill_chunk = core_model.prefill_chunk  # prompt tokens per forward
        self.precision = ("fast" if core_model.int8_activations else
                          "auto" if core_model.reduced_precision else "f32")  # see load()
        self.validation = report
        self._tokenizer = None
        self._media = None

    @checked_call
    def memory_plan(self) -> dict:
        """What this model needs in memory, as planned at load (markbase/memory.py): mapped and quantized
        weights, one session's KV cache at max_context (bytes per token, sliding rings), activations, the
        total, and the memory that was available (None: unknown). Each further session adds its own KV
        cache and activations: see check_sessions."""
        return self._memory_plan.as_dict()

    def check_sessions(self, n: int, context: int | None = None, what: str = "sessions",
                       batch_rows: int | None = None, penalties: bool = False) -> dict:
        """Whether n sessions of `context` tokens each (default max_context), `batch_rows` of them decoding
        together (default n; 0: none), fit beside the model in the memory available at load: their figures
        (markbase/memory.py SessionsNeed.as_dict), or a ConfigError stating the numbers, headed by `what`.
        penalties: the generating sequences' samplers keep per-token tables (repetition / presence /
        frequency penalties). A server checks its --max-batch sessions plus its prompt cache this way at
        startup: check_sessions(max_batch + prompt_cache, what=..., batch_rows=max_batch, penalties=True)."""
        from .memory import check_sessions

        context = self.max_context if context is None else context
        for name, value, low in (("n", n, 1), ("context", context, 1), ("batch_rows", batch_rows, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise InputError(f"check_sessions: {name} must be an integer >= {low}, got {value!r}")
        if context > self.max_context:
            raise InputError(f"check_sessions: context must be at most max_context {self.max_context}, got {context}")
        rows = n if batch_rows is None else min(batch_rows, n)
        return check_sessions(self._memory_plan, self._core, {context: n}, what, rows, bool(penalties)).as_dict()

    @property
    def check_finite(self) -> bool:
        """True when MARKBASE_CHECK_FINITE=1 was set at load: every forward then raises NumericsError at the
        first NaN / Inf, naming the layer, intermediate and op (see trace_nonfinite)."""
        return bool(self._core.check_finite)

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer (tokenizer.json + chat template), loaded on first use."""
        if self._tokenizer is None:
            from .tokenizer import Tokenizer

            self._tokenizer = Tokenizer(self.path)
        return self._tokenizer

    @property
    def modalities(self) -> set[str]:
        """Input media this checkpoint carries encoders for (text always)."""
        out = {"text"}
        if self.config.vision_config is not None:
            out |= {"image", "video"}
        if self.config.audio_config is not None:
            out.add("audio")
        return out

    @property
    def generation_defaults(self) -> dict:
        from .generate import generation_defaults

        return generation_defaults(self.path, self.config)

    @checked_call
    def encode_prompt(self, prompt_or_messages, system: str | None = None, **template_kwargs) -> list[int]:
        """Token ids for a raw text prompt (one <bos> added) or chat messages (through the chat template).
        Image and video parts are preprocessed to know their soft-token counts: each `<|image|>` comes back
        expanded to `<|image>` + n × `<|image|>` + `<image|>` (video: a run per frame), as
        `logits(ids, images=...)` and `Session.prefill(ids, images=...)` take them."""
        return self._prompt(prompt_or_messages, system=system, **template_kwargs).ids

    def _prompt(self, prompt_or_messages, system: str | None = None, **template_kwargs):
        """A Prompt: the token ids and the preprocessed media items, in order."""
        from .generate import Prompt
        from .media import expand, media_parts

        system = args.optional_text(system, "system")
        for key, value in template_kwargs.items():
            args.reject_surrogates(value, key)
        tok = self.tokenizer
        if isinstance(prompt_or_messages, str):
            args.text(prompt_or_messages, "prompt")
            if not prompt_or_messages.strip():
                raise InputError("the prompt is empty")
            if system is not None:
                return self._prompt([{"role": "system", "content": system},
                                     {"role": "user", "content": prompt_or_messages}], **template_kwargs)
            tok.check_fits(prompt_or_messages, self.max_context)
            return Prompt(tok.encode(prompt_or_messages, add_special_tokens=True), [])
        messages = list(prompt_or_messages) if isinstance(prompt_or_messages, (list, tuple)) else prompt_or_messages
        args.reject_surrogates(messages, "messages")
        if system is not None and isinstance(messages, list):
            messages = [{"role": "system", "content": system}] + messages
        text = tok.apply_chat_template(messages, add_generation_prompt=True, allowed_media=self.modalities,
                                       **template_kwargs)
        items = [self.media.from_part(part, where) for where, part in media_parts(messages)]
        if items or any(p in text for p in ("<|image|>", "<|video|>", "<|audio|>")):
            text = expand(text, items, self._media_tokens())
        tok.check_fits(text, self.max_context)
        ids = tok.encode(text, add_special_tokens=False)
        ids = ids if ids and ids[0] == tok.bos_id else [tok.bos_id] + ids
        return Prompt(ids, items)

    def _placeholder_ids(self) -> dict[str, int]:
        """The placeholder token id of each media kind (config.json)."""
        c = self.config
        return {"image": c.image_token_id, "video": c.video_token_id, "audio": c.audio_token_id}

    def _media_tokens(self) -> dict[str, str]:
        """The token strings of the image / video / audio placeholders and the image and audio delimiters."""
        tok, c = self.tokenizer, self.config
        out = {}
        for name, i in (("image", c.image_token_id), ("video", c.video_token_id), ("audio", c.audio_token_id),
                        ("boi", c.boi_token_id), ("eoi", c.eoi_token_id), ("boa", c.boa_token_id),
                        ("eoa", c.eoa_token_index)):
            t = tok.id_to_token(i)
            if t is None:
                raise InputError(f"the tokenizer has no token for id {i} ({name}_token_id in config.json)")
            out[name] = t
        return out

    @property
    def media(self):
        """The checkpoint's image / video / audio preprocessing (markbase.media.MediaProcessor)."""
        if self._media is None:
            from .media import MediaProcessor

            self._media = MediaProcessor(self)
        return self._media

    @checked_call
    def encode_image(self, image, max_soft_tokens: int | None = None) -> np.ndarray:
        """An image's soft tokens, float32 [n, hidden]: what replaces its placeholders in a prompt.
        max_soft_tokens: the budget (70, 140, 280, 560 or 1120; default processor_config.json's or 280)."""
        budget = _soft_token_budget(max_soft_tokens, "encode_image: max_soft_tokens")
        return self.media.encode(self.media.image(image, budget)).copy()

    @checked_call
    def encode_video(self, video, max_soft_tokens: int | None = None, num_frames: int | None = None,
                     fps: float | None = None, video_fps: float | None = None) -> np.ndarray:
        """A video's soft tokens, float32 [frames · n, hidden] (its sampled frames in order; 70 per frame by
        default). video: a file path or bytes (PyAV), a list of images or a uint8 [T, H, W, 3] array."""
        from .preprocess.video import check_sampling

        budget = _soft_token_budget(max_soft_tokens, "encode_video: max_soft_tokens")
        num_frames, fps, video_fps = check_sampling(num_frames, fps, video_fps, "encode_video")
        return self.media.encode(self.media.video(video, budget, num_frames, fps, video_fps)).copy()

    @checked_call
    def encode_audio(self, audio, sample_rate=None, max_audio_s: float | None = None) -> np.ndarray:
        """A clip's soft tokens, float32 [n, hidden] (25 per second): what replaces its placeholders in a prompt.
        audio: a path (WAV, FLAC, OGG, MP3, ...), bytes, a URL, a numpy array with sample_rate, or
        (samples, sample_rate). Clips longer than max_audio_s (default 30 s) are refused."""
        return self.media.encode(self.media.audio(audio, sample_rate, max_audio_s)).copy()

    @checked_call
    def generate(self, prompt_or_messages, *, max_new_tokens: int | None = None, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, min_p: float | None = None,
                 repetition_penalty: float | None = None, presence_penalty: float | None = None,
                 frequency_penalty: float | None = None, seed: int | None = None, stop=None,
                 stream: bool = False, system: str | None = None, enable_thinking: bool | None = None,
                 tools: list | None = None):
        """Generates from a raw text prompt or chat messages.

        stream=True: an iterator of text pieces whose final item is a GenerationResult (token ids, finish
        reason, timings). stream=False: the GenerationResult. Sampling defaults come from
        generation_config.json; temperature=0 is greedy.
        """
        from .generate import run_generation

        stream = args.boolean(stream, "generate: stream")
        prompt, opts = self._prepare(prompt_or_messages, system, enable_thinking, tools, dict(
            max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, seed=seed, stop=stop))
        gen = run_generation(self, self.session(), prompt, opts)
        if stream:
            return gen
        result = None
        for item in gen:
            result = item
        return result

    @checked_call
    def generate_batch(self, prompts, *, max_new_tokens: int | None = None, temperature: float | None = None,
                       top_k: int | None = None, top_p: float | None = None, min_p: float | None = None,
                       repetition_penalty: float | None = None, presence_penalty: float | None = None,
                       frequency_penalty: float | None = None, seed: int | None = None, stop=None,
                       system: str | None = None, enable_thinking: bool | None = None,
                       tools: list | None = None) -> list:
        """Generates for several prompts (raw strings or chat message lists) together, for offline batch jobs:
        each prompt is prefilled into its own session, then every unfinished sequence advances by one
        batched decode step per token (each weight read once for all of them). Returns one GenerationResult
        per prompt, in order. The options apply to every prompt; seed s gives prompt i the seed s + i
        (modulo 2**64: seeds are integers in [0, 2**64)).
        Each prompt's output equals generate()'s for it alone, bit for bit (greedy, or sampled with its seed):
        a batched step computes every sequence as it would alone (tests/generation/test_batch.py)."""
        from .generate import SequenceRun, run_batch

        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)) or not prompts:
            raise InputError("generate_batch: prompts must be a non-empty list of prompts (strings or message lists)")
        seed = None if seed is None else args.seed(seed)
        prepared = [self.prepare(p, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                 min_p=min_p, repetition_penalty=repetition_penalty,
                                 presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                                 seed=None if seed is None else args.nth_seed(seed, i), stop=stop, system=system,
                                 enable_thinking=enable_thinking, tools=tools)
                    for i, p in enumerate(prompts)]
        contexts = self._check_batch_memory(prepared)
        runs = [SequenceRun(self, self.session(c), prompt, opts) for (prompt, opts), c in zip(prepared, contexts)]
        return run_batch(self, runs)

    def _check_batch_memory(self, prepared) -> list[int]:
        """Each (prompt, options)'s session context (its prompt and max_new_tokens, within max_context), once
        the sessions of all of them and their batched step are known to fit in memory (InputError if not)."""
        from collections import Counter

        from .memory import check_sessions

        contexts = [min(len(prompt.ids) + opts.max_new_tokens, self.max_context) for prompt, opts in prepared]
        penalties = any(o.repetition_penalty != 1 or o.presence_penalty or o.frequency_penalty for _, o in prepared)
        check_sessions(self._memory_plan, self._core, Counter(contexts), f"generate_batch of {len(prepared)} prompts",
                       batch_rows=len(prepared), penalties=penalties, error=InputError)
        return contexts

    @checked_call
    def start_sequence(self, prompt_or_messages, *, system: str | None = None, enable_thinking: bool | None = None,
                       tools: list | None = None, **sampling):
        """A prefilled SequenceRun in a new session (generate.py): what generate, generate_batch and the
        server's batching worker advance token by token. sampling: generate()'s sampling keywords."""
        from .generate import SequenceRun

        prompt, opts = self.prepare(prompt_or_messages, system=system, enable_thinking=enable_thinking, tools=tools,
                                    **sampling)
        return SequenceRun(self, self.session(), prompt, opts)

    @checked_call
    def prepare(self, prompt_or_messages, *, system: str | None = None, enable_thinking: bool | None = None,
                tools: list | None = None, **sampling):
        """(Prompt, SamplingOptions) of one generation, nothing run yet (a SequenceRun takes them, in a new
        session or one that already holds a prefix of the prompt). InputError when the prompt leaves no room."""
        return self._prepare(prompt_or_messages, system, enable_thinking, tools, sampling)

    def _prepare(self, prompt_or_messages, system, enable_thinking, tools, sampling: dict):
        from .generate import check_template_options, resolve_options

        template_kwargs = check_template_options(enable_thinking, tools, "generate")
        prompt = self._prompt(prompt_or_messages, system=system, **template_kwargs)
        opts = resolve_options(self.generation_defaults, **sampling)
        if len(prompt.ids) >= self.max_context:
            raise InputError(f"context limit: the prompt has {len(prompt.ids)} tokens, max_context is {self.max_context}")
        return prompt, opts

    @checked_call
    def chat(self, messages, **options) -> str:
        """The model's answer to a conversation in the transformers chat format (thought channel removed).
        options: generate()'s keywords but stream (chat returns the whole answer)."""
        if "stream" in options:
            raise InputError("chat: stream is not an option of chat, which returns the answer's text; use "
                             "generate(messages, stream=True) to stream")
        return self.generate(messages, **options).text

    @checked_call
    def new_chat(self, system: str | None = None, **options):
        """A multi-turn Chat that keeps its KV cache between turns (`chat.send(text)` → answer)."""
        from .generate import Chat

        return Chat(self, system=system, **options)

    @checked_call
    def session(self, max_context: int | None = None) -> Session:
        return Session(self, self.max_context if max_context is None else max_context)

    @checked_call
    def embed(self, input_ids) -> np.ndarray:
        """Token embeddings float32 [T, hidden]: E[ids] * sqrt(hidden), image / audio / video placeholder ids
        embedded as the pad id (as transformers does). Rows can be replaced by soft tokens and the result
        run with Session.prefill_embeddings."""
        return self._core.embed(_as_ids(input_ids, self.config.text_config.vocab_size, "embed: input_ids"))

    @checked_call
    def trace_nonfinite(self, inputs):
        """Runs a forward (from an empty cache) over `inputs` (token ids, a prompt string or chat messages)
        checking every op's output, and reports the first NaN / Inf: `report.where` reads e.g.
        "layer 17, attn_out (op attention, backend metal-sim)", `report.inputs` has the statistics of that
        op's inputs (a weight named as in the checkpoint). A falsy report means the forward stayed finite.
        Setting MARKBASE_CHECK_FINITE=1 before `load` makes every forward raise NumericsError this way."""
        if isinstance(inputs, (str, list, tuple)) and (isinstance(inputs, str) or (inputs and isinstance(inputs[0], dict))):
            ids = self.encode_prompt(inputs)
        else:
            ids = inputs
        ids = _as_ids(ids, self.config.text_config.vocab_size, "trace_nonfinite: inputs")
        if len(ids) > self.max_context:
            raise InputError(f"context limit: {len(ids)} tokens > max_context {self.max_context}")
        return self._core.trace_nonfinite(ids)

    @checked_call
    def logits(self, input_ids, images=None, videos=None, audio=None, max_soft_tokens: int | None = None,
               max_audio_s: float | None = None) -> np.ndarray:
        """Full forward from an empty cache: float32 logits [T, vocab]. images / videos / audio fill, in order,
        the expanded placeholder runs input_ids hold (as encode_prompt returns them)."""
        ids = _as_ids(input_ids, self.config.text_config.vocab_size, "logits: input_ids")
        if len(ids) > self.max_context:
            raise InputError(f"context limit: {len(ids)} tokens > max_context {self.max_context}")
        return Session(self, max(len(ids), 1)).prefill(ids, all_logits=True, images=images, videos=videos, audio=audio,
                                                         max_soft_tokens=max_soft_tokens, max_audio_s=max_audio_s)

    def __repr__(self) -> str:
        return f"markbase.Model({self.config.family}, {self.path!r}, device={self.device!r})"


def _preload(ckpt, names: list[str], progress: bool | None) -> None:
    """Touches every page of the text weights so the first token does not pay the disk reads, with a
    progress bar on a terminal for large checkpoints."""
    from .validate import _Progress

    spans = []
    for n in names:
        lo, hi = ckpt.offsets(n)
        spans.append((n, hi - lo))
    bar = _Progress(sum(b for _, b in spans), "loading", progress)
    for n, nbytes in spans:
        arr = ckpt[n]
        flat = arr.reshape(-1).view(np.uint8) if arr.size else arr
        if flat.size:
            int(flat[::4096].sum())  # one byte per page
        bar.advance(nbytes)


_QUANTIZE_BITS = {None: 0, "q8": 8, "q4": 4}


@checked_call
def load(path: str | os.PathLike, device: str = "auto", dtype: str = "auto", max_context: int | None = None,
         prefill_chunk: int = 512, preload: bool = False, progress: bool | None = None,
         quantize: str | None = None, group_size: int = 64, precision: str = "auto",
         embedding_bits: int = 8) -> Model:
    """Loads a Gemma 4 checkpoint directory (config.json + safetensors, as published).

    The checkpoint is validated against its config's weight table first: a missing, misshapen or
    unreadable tensor raises CheckpointError listing every finding. Weights are memory-mapped.
    dtype: "auto" / "f32" compute in f32 (bf16 and f16 weights are read in place, math in f32).
    max_context: the longest sequence a session may hold (default: the config's max_position_embeddings, or
    the longest whose KV cache fits in the memory available; a max_context that does not fit is a
    ConfigError stating the numbers: see memory_plan()).
    prefill_chunk: prompts are processed in chunks of at most this many tokens (bounds activation memory; each
    chunk reads every weight once, so longer chunks prefill faster: E2B bf16 512 vs 256 tokens, +5-13% at +80 MB).
    preload: read every text weight page now (with a progress bar on a terminal for checkpoints over 1 GB)
    instead of on first use.
    quantize: "q8" / "q4" quantizes the decoder's attention, MLP and expert matrices at load to 8 / 4 bits
    (MLX's affine format, groups of `group_size` = 32, 64 or 128) and the tied embedding / LM head to 8
    bits (`embedding_bits=4`: to 4 bits, as the mlx-community 4-bit uploads hold it — at q4 an eighth fewer
    bytes per decode step, for a measured loss of quality: README, quantized weights); norms, the router,
    the PLE projections and the PLE table stay as stored, and so do the vision and audio encoders. Each
    source matrix leaves memory once quantized. Checkpoints stored MLX-quantized load as they are, without
    this option.
    precision: "auto" computes in f32 except the CPU products with quantized weights — decode on AVX2 and
    AVX-512 VNNI, prefill on AVX-512 VNNI — whose activations are rounded per group to 16-bit integers (each
    moves by at most 2^-16 of its group's largest magnitude, far below the 4- / 8-bit weights' own rounding)
    for about 1.2-1.3x the speed, and the text decoder's CPU products with bf16 weights on CPUs where
    vdpbf16ps beats an f32 FMA (AMD Zen 4 / 5 with AVX512_BF16), which round x to bf16 and sum the exact
    bf16 products in f32 (~2x the prefill speed, a lighter decode GEMV; the MoE router and the encoders stay f32); "f32" keeps every product in f32 (exact to
    transformers run in f32 on the same / dequantized weights; the oracle tests use it). "fast" is "auto"
    plus 8-bit activations (dx = max|x_g| / 127, as llama.cpp) in the decode GEMV with 4-bit weights on
    AVX2 and AVX-512 VNNI: faster 4-bit decode, each input moved by up to 2^-8 of its group's largest (README:
    precision policy).
    """
    from .io import open_checkpoint
    from .models.gemma4.weights import text_prefix
    from .validate import require_valid

    path = args.path(path, "load: path")
    args.one_of(dtype, "load: dtype (activations are f32)", ("auto", "f32"))
    device = _resolve_device(device)
    prefill_chunk = args.integer(prefill_chunk, "load: prefill_chunk", 1, args.C_INT_MAX)
    preload = args.boolean(preload, "load: preload")
    progress = None if progress is None else args.boolean(progress, "load: progress")
    quantize = args.one_of(quantize, "load: quantize", tuple(_QUANTIZE_BITS))
    group_size = args.one_of(group_size, "load: group_size", (32, 64, 128))
    precision = args.one_of(precision, "load: precision", ("auto", "fast", "f32"))
    embedding_bits = args.one_of(embedding_bits, "load: embedding_bits", (4, 8))
    if embedding_bits != 8 and quantize is None:
        raise InputError("load: embedding_bits applies to load-time quantization: give quantize='q8' or 'q4' too")
    report = require_valid(path)
    from .models.gemma4 import load_config

    cfg = load_config(path)
    limit = cfg.text_config.max_position_embeddings
    if max_context is not None:
        max_context = args.integer(max_context, "load: max_context (at most max_position_embeddings)", 1, limit)
    # Memory bounds before anything is allocated: a max_context whose KV cache does not fit is refused
    # with the numbers; without one, the longest that fits (markbase/memory.py).
    from .memory import choose_max_context, plan_for

    plan = plan_for(path, cfg, prefill_chunk, _QUANTIZE_BITS[quantize], max_context or limit)
    max_context = choose_max_context(plan, limit, max_context)
    if preload:
        # The PLE table is gathered row by row, never read whole: leave it to the page cache.
        ckpt = open_checkpoint(path)
        prefix = text_prefix(cfg)
        _preload(ckpt, sorted(n for n in ckpt.keys() if n.startswith(prefix) and "embed_tokens_per_layer" not in n),
                 progress)
    core = _core.gemma4.Model.load(path, device, max_context, prefill_chunk, _QUANTIZE_BITS[quantize], group_size,
                                   precision in ("auto", "fast"), precision == "fast", embedding_bits)
    model = Model(path, core, report)
    model._memory_plan = plan
    return model
