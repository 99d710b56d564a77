"""The public Python API: `markbase.load(path)` → Model (logits, sessions)."""

from __future__ import annotations

import os
from typing import Iterable

import numpy as np

from . import _core
from ._core import DeviceError, InputError

_TORCH_LIKE_INT_KINDS = ("i", "u")


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cpu"
    if not isinstance(device, str):
        raise DeviceError(f"device must be a string such as 'auto' or 'cpu', got {device!r}")
    _core.check_device(device)  # DeviceError: unknown (naming the registered devices), or why it cannot run here
    return device


def _as_ids(input_ids, vocab: int, what: str = "input_ids") -> np.ndarray:
    if isinstance(input_ids, (list, tuple)) and len(input_ids) and isinstance(input_ids[0], bool):
        raise InputError(f"{what} must be integers, got booleans")
    try:
        arr = np.asarray(input_ids)
    except (ValueError, TypeError, OverflowError) as e:  # ragged nesting, unconvertible items
        raise InputError(f"{what} must be a sequence of integer token ids ({e})") from None
    if arr.size == 0:
        raise InputError(f"{what} is empty")
    if arr.dtype == object or arr.dtype.kind not in _TORCH_LIKE_INT_KINDS:
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

    def __init__(self, model: "Model", max_context: int):
        self._model = model
        self._s = _core.gemma4.Session(model._core, max_context)

    @property
    def position(self) -> int:
        """Tokens processed so far (the position the next token gets)."""
        return self._s.position

    @property
    def max_context(self) -> int:
        return self._s.max_context

    def reset(self) -> None:
        self._s.reset()

    def truncate(self, n: int) -> bool:
        """Rolls back to the first n tokens (e.g. to re-run a changed turn). False, with nothing changed,
        when a sliding-window cache no longer holds what position n needs; then reset() instead."""
        return bool(self._s.truncate(int(n)))

    def prefill(self, input_ids, all_logits: bool = False, images=None, videos=None, audio=None,
                max_soft_tokens: int | None = None, max_audio_s: float | None = None) -> np.ndarray:
        """Runs the prompt; returns float32 logits of the last position [vocab] (or [T, vocab] with all_logits).
        images / videos / audio (lists) fill, in order, the expanded placeholder runs the ids hold (each image's
        `<|image>` + n × `<|image|>` + `<image|>`, each clip's `<|audio>` + n × `<|audio|>` + `<audio|>`, as
        model.encode_prompt returns them); a count or length mismatch is an InputError. An audio entry is a
        path, bytes or (samples, sample_rate). Non-finite logits raise NumericsError."""
        ids = _as_ids(input_ids, self._model.config.text_config.vocab_size)
        m = self._model
        items = [m.media.image(src, max_soft_tokens, f"images[{i}]") for i, src in enumerate(images or [])]
        items += [m.media.video(src, max_soft_tokens, what=f"videos[{i}]") for i, src in enumerate(videos or [])]
        items += [m.media.audio(src, max_audio_s=max_audio_s, what=f"audio[{i}]") for i, src in enumerate(audio or [])]
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

    def prefill_embeddings(self, embeddings, input_ids, block_ids=None, all_logits: bool = False) -> np.ndarray:
        """Runs caller-made embeddings [T, hidden] f32 (rows of model.embed(ids), some replaced by soft tokens)
        with their ids [T] (still needed for the per-layer embeddings). block_ids [T]: tokens sharing an id
        >= 0 attend to each other bidirectionally on models with use_bidirectional_attention == "vision"
        (one id per image / video frame), -1 elsewhere."""
        ids = _as_ids(input_ids, self._model.config.text_config.vocab_size)
        x = np.ascontiguousarray(embeddings, dtype=np.float32)
        blocks = None if block_ids is None else np.ascontiguousarray(block_ids, dtype=np.int32)
        logits = self._s.prefill_embeds(x, ids, blocks, all_logits)
        return logits if all_logits else logits[0]

    def decode(self, token_id: int) -> np.ndarray:
        """Feeds one token; returns float32 logits [vocab] for the next position. Costs one token's work."""
        return self._s.decode(self._token(token_id, "token_id"))[0]

    def sample(self, sampler) -> int:
        """The next token drawn by `sampler` (markbase._core.Sampler) from the last position's logits."""
        return int(self._s.sample(sampler))

    def step(self, token_id: int, sampler) -> int:
        """Feeds token_id and returns the next token drawn by `sampler`: the logits stay in C++."""
        return int(self._s.step(self._token(token_id, "token_id"), sampler))

    def _token(self, token_id, what: str) -> int:
        if isinstance(token_id, (bool, np.bool_)) or not isinstance(token_id, (int, np.integer)):
            raise InputError(f"decode: {what} must be an integer, got {type(token_id).__name__}")
        return int(_as_ids(np.array([int(token_id)]), self._model.config.text_config.vocab_size, what)[0])


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

        tok = self.tokenizer
        if isinstance(prompt_or_messages, str):
            if not prompt_or_messages.strip():
                raise InputError("the prompt is empty")
            if system is not None:
                return self._prompt([{"role": "system", "content": system},
                                     {"role": "user", "content": prompt_or_messages}], **template_kwargs)
            tok.check_fits(prompt_or_messages, self.max_context)
            return Prompt(tok.encode(prompt_or_messages, add_special_tokens=True), [])
        messages = list(prompt_or_messages) if isinstance(prompt_or_messages, (list, tuple)) else prompt_or_messages
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

    def encode_image(self, image, max_soft_tokens: int | None = None) -> np.ndarray:
        """An image's soft tokens, float32 [n, hidden]: what replaces its placeholders in a prompt.
        max_soft_tokens: the budget (70, 140, 280, 560 or 1120; default processor_config.json's or 280)."""
        return self.media.encode(self.media.image(image, max_soft_tokens)).copy()

    def encode_video(self, video, max_soft_tokens: int | None = None, num_frames: int | None = None,
                     fps: float | None = None, video_fps: float | None = None) -> np.ndarray:
        """A video's soft tokens, float32 [frames · n, hidden] (its sampled frames in order; 70 per frame by
        default). video: a file path or bytes (PyAV), a list of images or a uint8 [T, H, W, 3] array."""
        return self.media.encode(self.media.video(video, max_soft_tokens, num_frames, fps, video_fps)).copy()

    def encode_audio(self, audio, sample_rate=None, max_audio_s: float | None = None) -> np.ndarray:
        """A clip's soft tokens, float32 [n, hidden] (25 per second): what replaces its placeholders in a prompt.
        audio: a path (WAV, FLAC, OGG, MP3, ...), bytes, a URL, a numpy array with sample_rate, or
        (samples, sample_rate). Clips longer than max_audio_s (default 30 s) are refused."""
        return self.media.encode(self.media.audio(audio, sample_rate, max_audio_s)).copy()

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

    def generate_batch(self, prompts, *, max_new_tokens: int | None = None, temperature: float | None = None,
                       top_k: int | None = None, top_p: float | None = None, min_p: float | None = None,
                       repetition_penalty: float | None = None, presence_penalty: float | None = None,
                       frequency_penalty: float | None = None, seed: int | None = None, stop=None,
                       system: str | None = None, enable_thinking: bool | None = None,
                       tools: list | None = None) -> list:
        """Generates for several prompts (raw strings or chat message lists) together, for offline batch jobs:
        each prompt is prefilled into its own session, then every unfinished sequence advances by one
        batched decode step per token (each weight read once for all of them). Returns one GenerationResult
        per prompt, in order. The options apply to every prompt; seed s gives prompt i the seed s + i.
        Each prompt's output equals generate()'s for it alone, bit for bit (greedy, or sampled with its seed):
        a batched step computes every sequence as it would alone (tests/generation/test_batch.py)."""
        from .generate import SequenceRun, run_batch

        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)) or not prompts:
            raise InputError("generate_batch: prompts must be a non-empty list of prompts (strings or message lists)")
        prepared = [self.prepare(p, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                 min_p=min_p, repetition_penalty=repetition_penalty,
                                 presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                                 seed=None if seed is None else int(seed) + i, stop=stop, system=system,
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

    def start_sequence(self, prompt_or_messages, *, system: str | None = None, enable_thinking: bool | None = None,
                       tools: list | None = None, **sampling):
        """A prefilled SequenceRun in a new session (generate.py): what generate, generate_batch and the
        server's batching worker advance token by token. sampling: generate()'s sampling keywords."""
        from .generate import SequenceRun

        prompt, opts = self.prepare(prompt_or_messages, system=system, enable_thinking=enable_thinking, tools=tools,
                                    **sampling)
        return SequenceRun(self, self.session(), prompt, opts)

    def prepare(self, prompt_or_messages, *, system: str | None = None, enable_thinking: bool | None = None,
                tools: list | None = None, **sampling):
        """(Prompt, SamplingOptions) of one generation, nothing run yet (a SequenceRun takes them, in a new
        session or one that already holds a prefix of the prompt). InputError when the prompt leaves no room."""
        return self._prepare(prompt_or_messages, system, enable_thinking, tools, sampling)

    def _prepare(self, prompt_or_messages, system, enable_thinking, tools, sampling: dict):
        from .generate import resolve_options

        template_kwargs = {k: v for k, v in (("enable_thinking", enable_thinking), ("tools", tools)) if v is not None}
        prompt = self._prompt(prompt_or_messages, system=system, **template_kwargs)
        opts = resolve_options(self.generation_defaults, **sampling)
        if len(prompt.ids) >= self.max_context:
            raise InputError(f"context limit: the prompt has {len(prompt.ids)} tokens, max_context is {self.max_context}")
        return prompt, opts

    def chat(self, messages, **options) -> str:
        """The model's answer to a conversation in the transformers chat format (thought channel removed)."""
        return self.generate(messages, **options).text

    def new_chat(self, system: str | None = None, **options):
        """A multi-turn Chat that keeps its KV cache between turns (`chat.send(text)` → answer)."""
        from .generate import Chat

        return Chat(self, system=system, **options)

    def session(self, max_context: int | None = None) -> Session:
        mc = self.max_context if max_context is None else int(max_context)
        if mc < 1 or mc > self.max_context:
            raise InputError(f"session: max_context must be in [1, {self.max_context}], got {max_context}")
        return Session(self, mc)

    def embed(self, input_ids) -> np.ndarray:
        """Token embeddings float32 [T, hidden]: E[ids] * sqrt(hidden), image / audio / video placeholder ids
        embedded as the pad id (as transformers does). Rows can be replaced by soft tokens and the result
        run with Session.prefill_embeddings."""
        return self._core.embed(_as_ids(input_ids, self.config.text_config.vocab_size))

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
        ids = _as_ids(ids, self.config.text_config.vocab_size)
        if len(ids) > self.max_context:
            raise InputError(f"context limit: {len(ids)} tokens > max_context {self.max_context}")
        return self._core.trace_nonfinite(ids)

    def logits(self, input_ids, images=None, videos=None, audio=None, max_soft_tokens: int | None = None,
               max_audio_s: float | None = None) -> np.ndarray:
        """Full forward from an empty cache: float32 logits [T, vocab]. images / videos / audio fill, in order,
        the expanded placeholder runs input_ids hold (as encode_prompt returns them)."""
        ids = _as_ids(input_ids, self.config.text_config.vocab_size)
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

    path = os.fspath(path)
    if dtype not in ("auto", "f32"):
        raise InputError(f"load: dtype '{dtype}' is not supported yet (auto or f32: activations in f32)")
    device = _resolve_device(device)
    report = require_valid(path)
    from .models.gemma4 import load_config

    cfg = load_config(path)
    limit = cfg.text_config.max_position_embeddings
    if max_context is not None and (isinstance(max_context, bool) or not isinstance(max_context, int)
                                    or not 1 <= max_context <= limit):
        raise InputError(f"load: max_context must be an integer in [1, {limit}] (max_position_embeddings), got {max_context!r}")
    if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1:
        raise InputError(f"load: prefill_chunk must be a positive integer, got {prefill_chunk!r}")
    if quantize not in _QUANTIZE_BITS:
        raise InputError(f"load: quantize must be None, 'q8' or 'q4', got {quantize!r}")
    if isinstance(group_size, bool) or group_size not in (32, 64, 128):
        raise InputError(f"load: group_size must be 32, 64 or 128, got {group_size!r}")
    if precision not in ("auto", "fast", "f32"):
        raise InputError(f"load: precision must be 'auto', 'fast' or 'f32', got {precision!r}")
    if isinstance(embedding_bits, bool) or embedding_bits not in (4, 8):
        raise InputError(f"load: embedding_bits must be 4 or 8, got {embedding_bits!r}")
    if embedding_bits != 8 and quantize is None:
        raise InputError("load: embedding_bits applies to load-time quantization: give quantize='q8' or 'q4' too")
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
