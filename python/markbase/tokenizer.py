"""The checkpoint's tokenizer (`tokenizer.json` through the `tokenizers` library) and chat template."""

from __future__ import annotations

import functools
import json
import os
from typing import Iterable

from . import args
from ._core import CheckpointError, InputError
from .chat_template import check_messages, render
from .files import CHECKPOINT_JSON_MAX_BYTES, TEMPLATE_MAX_BYTES, TOKENIZER_JSON_MAX_BYTES, read_checkpoint_text

BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"
TURN_END = "<turn|>"
CHANNEL_OPEN, CHANNEL_CLOSE = "<|channel>", "<channel|>"


class Tokenizer:
    """encode / decode / streaming detokenisation / apply_chat_template for a checkpoint directory."""

    def __init__(self, directory: str | os.PathLike):
        from tokenizers import Tokenizer as HFTokenizer

        d = os.fspath(directory)
        path = os.path.join(d, "tokenizer.json")
        if not os.path.exists(path):
            raise CheckpointError(f"{d}: no tokenizer.json (text prompts need the checkpoint's tokenizer)")
        text = read_checkpoint_text(path, TOKENIZER_JSON_MAX_BYTES)  # a regular file, size-capped
        try:
            self._tok = HFTokenizer.from_str(text)
        except Exception as e:  # noqa: BLE001 - the library raises plain Exceptions
            raise CheckpointError(f"{path}: unreadable tokenizer ({e})") from None
        self.config: dict = {}
        cfg_path = os.path.join(d, "tokenizer_config.json")
        if os.path.exists(cfg_path):
            try:
                self.config = json.loads(read_checkpoint_text(cfg_path, CHECKPOINT_JSON_MAX_BYTES))
            except ValueError as e:
                raise CheckpointError(f"{cfg_path}: not valid JSON ({e})") from None
            if not isinstance(self.config, dict):
                raise CheckpointError(f"{cfg_path}: the top level must be a JSON object, got {type(self.config).__name__}")
        self.chat_template: str | None = None
        jinja_path = os.path.join(d, "chat_template.jinja")
        if os.path.exists(jinja_path):
            self.chat_template = read_checkpoint_text(jinja_path, TEMPLATE_MAX_BYTES)
        elif isinstance(self.config.get("chat_template"), str):
            self.chat_template = self.config["chat_template"]
        self.bos_token = self._token_text("bos_token", BOS)
        self.eos_token = self._token_text("eos_token", EOS)
        self.pad_token = self._token_text("pad_token", PAD)
        self.bos_id = self._tok.token_to_id(self.bos_token)
        if self.bos_id is None:
            raise CheckpointError(f"{path}: the vocabulary has no {self.bos_token} token")
        self.eos_id = self._tok.token_to_id(self.eos_token)

    def _token_text(self, key: str, default: str) -> str:
        v = self.config.get(key, default)
        if isinstance(v, dict):  # AddedToken serialisation
            v = v.get("content", default)
        return v if isinstance(v, str) else default

    @property
    def vocab_size(self) -> int:
        """Largest id + 1 (ids may be sparse: never assume every id below it exists)."""
        return max(self._tok.get_vocab(with_added_tokens=True).values()) + 1

    @functools.cached_property
    def max_token_bytes(self) -> int:
        """UTF-8 bytes of the vocabulary's longest token: no token stands for more bytes of (normalized) text."""
        return max(len(t.encode("utf-8", "surrogatepass")) for t in self._tok.get_vocab(with_added_tokens=True))

    def check_fits(self, text: str, max_tokens: int, what: str = "the prompt") -> None:
        """InputError ("context limit: ...") when `text` has more bytes than max_tokens tokens can cover, before
        it is tokenized: a text of b bytes has at least b / max_token_bytes tokens. Bounds a request's memory
        whatever its length (tokenizing takes ~100 bytes per token)."""
        normalizer = self._tok.normalizer
        if normalizer is not None and type(normalizer).__name__ != "Replace":  # may shrink text: measure it normalized
            text = normalizer.normalize_str(text)
        nbytes = len(text.encode("utf-8", "surrogatepass"))
        if nbytes > max_tokens * self.max_token_bytes:
            raise InputError(f"context limit: {what} has {nbytes} bytes, more than {max_tokens} tokens can hold "
                             f"(at most {self.max_token_bytes} bytes each); it cannot fit max_context {max_tokens}")

    @args.checked_call
    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(args.text(token, "token_to_id: token"))

    @args.checked_call
    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(args.integer(i, "id_to_token: i", 0, args.TOKEN_ID_LIMIT - 1))

    @args.checked_call
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids; with add_special_tokens, exactly one <bos> leads (never two)."""
        args.text(text, "encode: text")
        add_special_tokens = args.boolean(add_special_tokens, "encode: add_special_tokens")
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_special_tokens:
            while ids and ids[0] == self.bos_id:
                ids = ids[1:]
            ids = [self.bos_id] + ids
        return ids

    @args.checked_call
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(_token_ids(ids, "decode: ids"),
                                skip_special_tokens=args.boolean(skip_special_tokens, "decode: skip_special_tokens"))

    @args.checked_call
    def stream(self, skip_special_tokens: bool = False) -> "StreamDecoder":
        return StreamDecoder(self, args.boolean(skip_special_tokens, "stream: skip_special_tokens"))

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tools: list | None = None,
                            allowed_media: set[str] | None = None, **kwargs) -> str:
        """Renders the checkpoint's chat template exactly as transformers' apply_chat_template(tokenize=False)."""
        if self.chat_template is None:
            raise CheckpointError("this checkpoint has no chat template (chat_template.jinja or tokenizer_config.json)")
        msgs = check_messages(messages, allowed_media)
        specials = {k: self._token_text(k, "") for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        return render(self.chat_template, msgs, add_generation_prompt=add_generation_prompt, tools=tools,
                      special_tokens=specials, **kwargs)


def _token_ids(ids, what: str) -> list[int]:
    """ids (any iterable of integers) as the list of ints the tokenizers library takes (u32 ids)."""
    if isinstance(ids, (str, bytes, dict)):
        raise InputError(f"{what} must be a sequence of integer token ids, got {args.shown(ids)}")
    try:
        items = list(ids)
    except TypeError:
        raise InputError(f"{what} must be a sequence of integer token ids, got {args.shown(ids)}") from None
    for k, i in enumerate(items):
        if not args.is_int(i) or not 0 <= i < args.TOKEN_ID_LIMIT:
            raise InputError(f"{what}[{k}] must be a token id (an integer in [0, 2**32)), got {args.shown(i)}")
    return [int(i) for i in items]


class StreamDecoder:
    """Incremental detokenisation that never emits broken UTF-8 and never takes text back.

    Text is emitted only once decoding more tokens can no longer change it: the pending tokens are
    decoded together with a few tokens of already-emitted context, and a trailing U+FFFD (an incomplete
    byte-fallback sequence) holds the output back until the character completes.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self._t = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0  # start of the context window in _ids
        self._read = 0    # tokens already turned into emitted text

    @args.checked_call
    def push(self, token_id: int) -> str:
        self._ids.append(args.integer(token_id, "push: token_id", 0, args.TOKEN_ID_LIMIT - 1))
        prefix_text = self._t.decode(self._ids[self._prefix:self._read], self._skip)
        new_text = self._t.decode(self._ids[self._prefix:], self._skip)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd") and new_text.startswith(prefix_text):
            out = new_text[len(prefix_text):]
            self._prefix = self._read
            self._read = len(self._ids)
            return out
        return ""

    def flush(self) -> str:
        """Whatever is still held back at the end of generation (may include U+FFFD for broken bytes)."""
        prefix_text = self._t.decode(self._ids[self._prefix:self._read], self._skip)
        new_text = self._t.decode(self._ids[self._prefix:], self._skip)
        self._prefix = self._read = len(self._ids)
        return new_text[len(prefix_text):] if new_text.startswith(prefix_text) else ""


def split_thinking(text: str) -> tuple[str | None, str]:
    """Separates a `<|channel>thought … <channel|>` block from the answer: (thinking or None, answer)."""
    start = text.find(CHANNEL_OPEN)
    if start < 0:
        return None, text
    end = text.find(CHANNEL_CLOSE, start)
    body = text[start + len(CHANNEL_OPEN):] if end < 0 else text[start + len(CHANNEL_OPEN):end]
    rest = text[:start] + ("" if end < 0 else text[end + len(CHANNEL_CLOSE):])
    if body.startswith("thought"):
        body = body[len("thought"):]
    return body.strip("\n"), rest.strip()
