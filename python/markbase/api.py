"""The public Python API: `markbase.load(path)` → Model (logits, sessions)."""

from __future__ import annotations

import math
import os
from typing import Iterable

import numpy as np

from . import _core
from ._core import CheckpointError, DeviceError, InputError, MarkbaseError

_TORCH_LIKE_INT_KINDS = ("i", "u")


def _round_to_dtype(value: float, dtype: str) -> float:
    """`value` as the checkpoint's storage dtype would hold it (transformers casts embed_scale to it)."""
    f = np.float32(value)
    if dtype == "BF16":
        bits = np.array([f], np.float32).view(np.uint32)[0]
        bits = (int(bits) + 0x7FFF + ((int(bits) >> 16) & 1)) >> 16 << 16
        return float(np.array([bits], np.uint32).view(np.float32)[0])
    if dtype == "F16":
        return float(np.float16(f))
    return float(f)


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
    arr = np.asarray(input_ids)
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
    """A KV-cached decoding session: prefill a prompt, then decode one token at a time."""

    def __init__(self, model: "Model", max_context: int):
        self._model = model
        self._s = _core.gemma4.DecoderSession(model._text, max_context)

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

    def _run(self, ids: np.ndarray, all_logits: bool) -> np.ndarray:
        if self.position + len(ids) > self.max_context:
            raise InputError(f"context limit: {self.position} tokens in the session + {len(ids)} new > max_context "
                             f"{self.max_context}")
        logits = self._s.forward(ids, all_logits).numpy()
        if not np.isfinite(logits).all():
            raise MarkbaseError("the forward pass produced NaN/Inf logits; the checkpoint may hold non-finite "
                                f"weights (run `markbase validate {self._model.path}`)")
        return logits

    def prefill(self, input_ids, all_logits: bool = False) -> np.ndarray:
        """Runs the prompt; returns float32 logits of the last position [vocab] (or [T, vocab] with all_logits)."""
        ids = _as_ids(input_ids, self._model.config.text.vocab_size)
        logits = self._run(ids, all_logits)
        return logits if all_logits else logits[0]

    def decode(self, token_id: int) -> np.ndarray:
        """Feeds one token; returns float32 logits [vocab] for the next position. Costs one token's work."""
        if isinstance(token_id, (bool, np.bool_)) or not isinstance(token_id, (int, np.integer)):
            raise InputError(f"decode: token_id must be an integer, got {type(token_id).__name__}")
        ids = _as_ids(np.array([int(token_id)]), self._model.config.text.vocab_size, "token_id")
        return self._run(ids, False)[0]


class Model:
    """A loaded Gemma 4 checkpoint (text decoder on the chosen device)."""

    def __init__(self, path: str, config, text_model, device: str, max_context: int, report):
        self.path = path
        self.config = config
        self.device = device
        self.max_context = max_context
        self.validation = report
        self._text = text_model
        self._tokenizer = None

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
        if self.config.vision is not None:
            out |= {"image", "video"}
        if self.config.audio is not None:
            out.add("audio")
        return out

    @property
    def generation_defaults(self) -> dict:
        from .generate import generation_defaults

        return generation_defaults(self.path, self.config)

    def encode_prompt(self, prompt_or_messages, system: str | None = None, **template_kwargs) -> list[int]:
        """Token ids for a raw text prompt (one <bos> added) or chat messages (through the chat template)."""
        tok = self.tokenizer
        if isinstance(prompt_or_messages, str):
            if not prompt_or_messages.strip():
                raise InputError("the prompt is empty")
            if system is not None:
                return self.encode_prompt([{"role": "system", "content": system},
                                           {"role": "user", "content": prompt_or_messages}], **template_kwargs)
            return tok.encode(prompt_or_messages, add_special_tokens=True)
        messages = list(prompt_or_messages) if isinstance(prompt_or_messages, (list, tuple)) else prompt_or_messages
        if system is not None and isinstance(messages, list):
            messages = [{"role": "system", "content": system}] + messages
        text = tok.apply_chat_template(messages, add_generation_prompt=True, allowed_media=self.modalities,
                                       **template_kwargs)
        for kind in ("image", "audio", "video"):
            if f"<|{kind}|>" in text:
                raise InputError(f"{kind} inputs are not supported by this markbase build yet (text only)")
        ids = tok.encode(text, add_special_tokens=False)
        return ids if ids and ids[0] == tok.bos_id else [tok.bos_id] + ids

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
        from .generate import resolve_options, run_generation

        template_kwargs = {k: v for k, v in (("enable_thinking", enable_thinking), ("tools", tools)) if v is not None}
        ids = self.encode_prompt(prompt_or_messages, system=system, **template_kwargs)
        opts = resolve_options(self.generation_defaults, max_new_tokens=max_new_tokens, temperature=temperature,
                               top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                               presence_penalty=presence_penalty, frequency_penalty=frequency_penalty, seed=seed,
                               stop=stop)
        if len(ids) >= self.max_context:
            raise InputError(f"context limit: the prompt has {len(ids)} tokens, max_context is {self.max_context}")
        gen = run_generation(self, self.session(), ids, opts)
        if stream:
            return gen
        result = None
        for item in gen:
            result = item
        return result

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

    def logits(self, input_ids) -> np.ndarray:
        """Full forward from an empty cache: float32 logits [T, vocab]."""
        ids = _as_ids(input_ids, self.config.text.vocab_size)
        if len(ids) > self.max_context:
            raise InputError(f"context limit: {len(ids)} tokens > max_context {self.max_context}")
        return Session(self, max(len(ids), 1)).prefill(ids, all_logits=True)

    def __repr__(self) -> str:
        return f"markbase.Model({self.config.family}, {self.path!r}, device={self.device!r})"


def _text_config(cfg, dtypes: dict[str, str], max_context: int):
    t = cfg.text
    c = _core.gemma4.TextConfig()
    c.vocab, c.hidden, c.num_layers, c.num_heads = t.vocab_size, t.hidden_size, t.num_hidden_layers, t.num_attention_heads
    c.window = t.sliding_window
    c.eps = t.rms_norm_eps
    c.final_softcap = t.final_logit_softcapping or 0.0
    c.embed_scale = _round_to_dtype(math.sqrt(t.hidden_size), dtypes["embed_tokens.weight"])
    c.ple_dim = t.hidden_size_per_layer_input
    if t.has_ple:
        c.ple_embed_scale = _round_to_dtype(math.sqrt(t.hidden_size_per_layer_input), dtypes["embed_tokens_per_layer.weight"])
    c.moe = t.enable_moe_block
    c.num_experts, c.top_k, c.moe_intermediate = t.num_experts, t.top_k_experts, t.moe_intermediate_size
    c.max_context = max_context
    layers = []
    for L in t.layers:
        lc = _core.gemma4.LayerConfig()
        lc.index, lc.sliding, lc.head_dim, lc.num_kv_heads = L.index, L.is_sliding, L.head_dim, L.num_kv_heads
        lc.intermediate, lc.kv_source, lc.has_v_proj = L.intermediate_size, L.kv_source, L.has_v_proj
        lc.kv_mode = {None: _core.gemma4.KvMode.own, "store": _core.gemma4.KvMode.store,
                      "reuse": _core.gemma4.KvMode.reuse}[L.kv_mode]
        lc.rope_kind, lc.rope_theta, lc.rope_partial = L.rope.kind, L.rope.theta, L.rope.partial_rotary_factor
        layers.append(lc)
    c.layers = layers
    return c


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


def load(path: str | os.PathLike, device: str = "auto", dtype: str = "auto", max_context: int | None = None,
         prefill_chunk: int = 256, preload: bool = False, progress: bool | None = None) -> Model:
    """Loads a Gemma 4 checkpoint directory (config.json + safetensors, as published).

    The checkpoint is validated against its config's weight table first: a missing, misshapen or
    unreadable tensor raises CheckpointError listing every finding. Weights are memory-mapped.
    dtype: "auto" / "f32" compute in f32 (bf16 and f16 weights are read in place, math in f32).
    max_context: the longest sequence a session may hold (default: the config's max_position_embeddings).
    prefill_chunk: prompts are processed in chunks of at most this many tokens (bounds activation memory).
    preload: read every text weight page now (with a progress bar on a terminal for checkpoints over 1 GB)
    instead of on first use.
    """
    from .io import open_checkpoint
    from .models.gemma4 import weight_table
    from .models.gemma4.weights import text_prefix
    from .validate import require_valid

    path = os.fspath(path)
    if dtype not in ("auto", "f32"):
        raise InputError(f"load: dtype '{dtype}' is not supported yet (auto or f32: activations in f32)")
    device = _resolve_device(device)
    report = require_valid(path)
    from .models.gemma4 import load_config

    cfg = load_config(path)
    limit = cfg.text.max_position_embeddings
    if max_context is None:
        max_context = limit
    if isinstance(max_context, bool) or not isinstance(max_context, int) or not 1 <= max_context <= limit:
        raise InputError(f"load: max_context must be an integer in [1, {limit}] (max_position_embeddings), got {max_context!r}")
    if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1:
        raise InputError(f"load: prefill_chunk must be a positive integer, got {prefill_chunk!r}")
    ckpt = open_checkpoint(path)
    prefix = text_prefix(cfg)
    weights: dict[str, object] = {}
    dtypes: dict[str, str] = {}
    keys = set(ckpt.keys())
    for spec in weight_table(cfg):
        if spec.component != "text" or not spec.required:
            continue
        stored = next((n for n in (spec.name, *spec.aliases) if n in keys), None)
        if stored is None:
            raise CheckpointError(f"{path}: tensor {spec.name} is missing")
        short = spec.name[len(prefix):]
        weights[short] = ckpt.tensor(stored)
        dtypes[short] = ckpt.dtype(stored)
    if preload:
        # The PLE table is gathered row by row, never read whole: leave it to the page cache.
        _preload(ckpt, sorted(n for n in keys if n.startswith(prefix) and "embed_tokens_per_layer" not in n), progress)
    tcfg = _text_config(cfg, dtypes, max_context)
    tcfg.max_chunk = prefill_chunk
    text = _core.gemma4.TextModel(tcfg, weights, device)
    return Model(path, cfg, text, device, max_context, report)
