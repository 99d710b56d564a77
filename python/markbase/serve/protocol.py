"""The OpenAI request schemas markbase serves (pydantic), their translation into markbase's generate
arguments, and OpenAI's error JSON.

Every field of a request is checked before any work, and a bad one is a 400 whose message and `param`
name it by its JSON path (`messages[2].tool_calls[0].id`): its type, strings that are valid Unicode (no
lone surrogates), numbers that are finite, nesting at most MAX_DEPTH deep. Only what markbase implements is
accepted: a field it cannot honour (n > 1, logprobs, a JSON response_format, strict tools, a field it does
not know) is a 400 naming it, never silently ignored. Fields that do not change the output (user,
metadata, store, ...) are type-checked and ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .._core import InputError
from ..files import decode_data_url, read_media_file
from ..preprocess.audio import MAX_AUDIO_BYTES
from ..preprocess.image import MAX_IMAGE_BYTES
from .tool_calls import MAX_DEPTH, TOOL_NAME

_MEDIA_BYTES = {"image": MAX_IMAGE_BYTES, "audio": MAX_AUDIO_BYTES}  # one item of each kind


class ApiError(Exception):
    """An error answered as OpenAI's JSON: {"error": {"message", "type", "param", "code"}}."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             413: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable", 500: "server_error"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


# ------------------------------------------------------------------------------------ JSON paths and values


def invalid(where: str, what: str) -> ApiError:
    """A 400 for the field at JSON path `where`, its message `where: what`."""
    return ApiError(400, f"{where}: {what}", where or None)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def at(path: str, *keys: int | str) -> str:
    """The JSON path of the value reached by `keys` (array indices, object keys) from the one at `path`
    ("" = the body): at("messages", 2, "tool_calls") == "messages[2].tool_calls"."""
    for key in keys:
        if isinstance(key, int):
            path = f"{path}[{key}]"
        elif _IDENTIFIER.match(key):
            path = f"{path}.{key}" if path else key
        else:
            path = f"{path}[{json.dumps(key)}]"  # (ASCII: any character of the key is escaped)
    return path


def _kind(value: Any) -> str:
    """A JSON value's type, as an error message says it."""
    for types, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "an array"),
                        (dict, "an object")):
        if isinstance(value, types):
            return name
    return "null" if value is None else type(value).__name__


def _brief(value: Any) -> str:
    """A value quoted in an error message, cut short (a request may hold megabytes)."""
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else _kind(value)
    return text if len(text) <= 60 else text[:57] + "..."


def expected(where: str, what: str, value: Any) -> ApiError:
    return invalid(where, f"expected {what}, got {_kind(value)}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_scalar(value: Any, path: str, key: int | str | None = None) -> None:
    """Strings valid Unicode, numbers finite (Python's json reads NaN and Infinity, JSON has neither)."""
    if isinstance(value, str) and not value.isascii():
        bad = _SURROGATE.search(value)
        if bad:
            where = path if key is None else at(path, key)
            raise invalid(where, f"not valid Unicode: a lone surrogate \\u{ord(bad.group()):04x} at offset "
                                 f"{bad.start()}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise invalid(path if key is None else at(path, key), f"{value} is not a JSON number")


def check_json(root: Any, where: str = "") -> None:
    """Every string of `root` (object keys too) valid Unicode, every number finite, arrays and objects
    nested at most MAX_DEPTH deep. Iterative, so no body can exhaust the stack; error paths are built only
    for the culprit."""
    _check_scalar(root, where)
    if not isinstance(root, (dict, list)):
        return
    stack = [(where, iter(root.items() if isinstance(root, dict) else enumerate(root)))]
    while stack:
        path, items = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
            continue
        key, value = item
        if isinstance(key, str):
            _check_scalar(key, path, key)
        if isinstance(value, (dict, list)):
            if len(stack) >= MAX_DEPTH:
                raise invalid(at(path, key), f"nested more than {MAX_DEPTH} deep")
            stack.append((at(path, key), iter(value.items() if isinstance(value, dict) else enumerate(value))))
        else:
            _check_scalar(value, path, key)


def _object(value: Any, where: str, keys: set[str] | frozenset[str], required: tuple[str, ...] = ()) -> dict:
    """`value` an object with only `keys`, `required` among them."""
    if not isinstance(value, dict):
        raise expected(where, "an object", value)
    for key in value:
        if key not in keys:
            raise invalid(at(where, key), f"unknown field (expected {', '.join(sorted(keys))})")
    for key in required:
        if key not in value:
            raise invalid(at(where, key), "required")
    return value


def _string(value: Any, where: str, *, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise expected(where, "a string" + (" or null" if optional else ""), value)


def _tool_name(value: Any, where: str) -> None:
    _string(value, where)
    if not TOOL_NAME.fullmatch(value):
        raise invalid(where, f"{_brief(value)} is not a tool name (1 to 64 letters, digits, '_', '-' or '.')")


# --------------------------------------------------------------------------------------------- messages

ROLES = ("system", "developer", "user", "assistant", "tool")
# The fields of a message, by role; any other is a 400 (markbase would drop it unread).
_MESSAGE_FIELDS = {"system": {"role", "content"}, "developer": {"role", "content"}, "user": {"role", "content"},
                   "assistant": {"role", "content", "tool_calls", "reasoning_content", "refusal", "audio",
                                 "function_call", "annotations"},
                   "tool": {"role", "content", "tool_call_id", "name"}}
# Fields of an assistant message that a client echoes back from a response: accepted when empty.
# (reasoning_content is accepted and dropped: the chat template leaves earlier turns' thinking out.)
_ECHOED_WHEN_EMPTY = {"refusal": (None, ""), "audio": (None,), "function_call": (None,), "annotations": (None, [])}
# The content part types each role may send.
_PART_TYPES = {"user": ("text", "image_url", "input_audio")}
_PART_FIELDS = {"text": {"type", "text"}, "image_url": {"type", "image_url"}, "input_audio": {"type", "input_audio"}}


def _check_part(part: Any, where: str, role: str) -> None:
    kinds = _PART_TYPES.get(role, ("text",))
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in kinds:
        if not isinstance(part, dict):
            raise expected(where, "a content part object", part)
        raise invalid(at(where, "type"), f"unsupported content part type {_brief(kind)} in a {role} message "
                                         f"(expected {', '.join(kinds)})")
    _object(part, where, _PART_FIELDS[kind], required=(kind,))
    if kind == "text":
        _string(part["text"], at(where, "text"))
    elif kind == "image_url":
        image, url_at = part["image_url"], at(where, "image_url")
        if isinstance(image, dict):  # OpenAI's {"url": ..., "detail": ...}; a bare URL string is accepted too
            _object(image, url_at, {"url", "detail"}, required=("url",))
            if image.get("detail", "auto") != "auto":
                raise invalid(at(url_at, "detail"), "only 'auto' is supported (images are encoded at one size)")
            image, url_at = image["url"], at(url_at, "url")
        _string(image, url_at)
        if "\x00" in image:
            raise invalid(url_at, "a URL or path cannot contain a NUL character")
    else:
        audio = _object(part["input_audio"], at(where, "input_audio"), {"data", "format"}, required=("data",))
        _string(audio["data"], at(where, "input_audio", "data"))
        _string(audio.get("format"), at(where, "input_audio", "format"), optional=True)


def _check_content(content: Any, where: str, role: str) -> None:
    if isinstance(content, str) or (content is None and role == "assistant"):
        return
    if not isinstance(content, list):
        raise expected(where, "a string or an array of content parts" + (" or null" if role == "assistant" else ""),
                       content)
    for j, part in enumerate(content):
        _check_part(part, at(where, j), role)


def _check_tool_call(call: Any, where: str) -> None:
    _object(call, where, {"id", "type", "function"}, required=("function",))
    _string(call.get("id"), at(where, "id"), optional=True)
    if call.get("type", "function") != "function":
        raise invalid(at(where, "type"), f"expected \"function\", got {_brief(call['type'])}")
    fn = _object(call["function"], at(where, "function"), {"name", "arguments"}, required=("name",))
    _tool_name(fn["name"], at(where, "function", "name"))
    if not isinstance(fn.get("arguments", ""), (str, dict)):
        raise expected(at(where, "function", "arguments"), "a JSON object (as a string)", fn["arguments"])


def check_message(m: Any, where: str) -> None:
    if not isinstance(m, dict):
        raise expected(where, "a message object", m)
    role = m.get("role")
    if role not in ROLES:
        raise invalid(at(where, "role"), f"unknown role {_brief(role)} (expected {', '.join(ROLES)})")
    for key in m:
        if key not in _MESSAGE_FIELDS[role]:
            raise invalid(at(where, key), f"not supported in a {role} message")
    if "content" not in m and role != "assistant":
        raise invalid(at(where, "content"), "required")
    _check_content(m.get("content"), at(where, "content"), role)
    if role == "tool":
        _string(m.get("tool_call_id"), at(where, "tool_call_id"), optional=True)
        _string(m.get("name"), at(where, "name"), optional=True)
    if role == "assistant":
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise expected(at(where, "tool_calls"), "an array of tool calls", calls)
        for j, call in enumerate(calls or []):
            _check_tool_call(call, at(where, "tool_calls", j))
        _string(m.get("reasoning_content"), at(where, "reasoning_content"), optional=True)
        for key, empty in _ECHOED_WHEN_EMPTY.items():
            if key in m and m[key] not in empty:
                raise invalid(at(where, key), "not supported in a request (only as null)")


def check_messages(messages: Any) -> list:
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", f"expected a non-empty array of messages, got {_kind(messages)}"
                                  + (" (empty)" if messages == [] else ""))
    for i, m in enumerate(messages):
        check_message(m, at("messages", i))
    return messages


# ---------------------------------------------------------------------------------------------- tools


def check_tool_list(tools: Any) -> list | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise expected("tools", "an array of tools", tools)
    for j, tool in enumerate(tools):
        where = at("tools", j)
        _object(tool, where, {"type", "function"}, required=("type", "function"))
        if tool["type"] != "function":
            raise invalid(at(where, "type"), f"expected \"function\", got {_brief(tool['type'])}")
        fn = _object(tool["function"], at(where, "function"), {"name", "description", "parameters", "strict"},
                     required=("name",))
        _tool_name(fn["name"], at(where, "function", "name"))
        _string(fn.get("description"), at(where, "function", "description"), optional=True)
        if not isinstance(fn.get("parameters", {}), dict):
            raise expected(at(where, "function", "parameters"), "a JSON Schema object", fn["parameters"])
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise expected(at(where, "function", "strict"), "a boolean", strict)
        if strict:
            raise invalid(at(where, "function", "strict"), "strict tools are not supported (the output is not "
                                                           "constrained to the schema)")
    return tools


def check_tool_choice(choice: Any) -> str | None:
    if choice in (None, "auto", "none"):
        return choice
    if isinstance(choice, (str, dict)):
        raise invalid("tool_choice", "only 'auto' and 'none' are supported (the model decides whether to call)")
    raise expected("tool_choice", "'auto' or 'none'", choice)


def parse_arguments(args: Any, where: str) -> dict:
    """A tool call's arguments (a JSON object, usually as a string) as a dict."""
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except RecursionError:
            raise invalid(where, f"nested more than {MAX_DEPTH} deep") from None
        except ValueError as e:
            raise invalid(where, f"not valid JSON ({e})") from None
        check_json(args, where)
    if not isinstance(args, dict):
        raise expected(where, "a JSON object", args)
    return args


# ----------------------------------------------------------------------------------------- the requests


def _check_stop(stop: Any) -> Any:
    stops = [stop] if isinstance(stop, str) else stop
    if stop is not None and (not isinstance(stops, list) or len(stops) > 4
                             or not all(isinstance(s, str) and s for s in stops)):
        raise invalid("stop", "expected a non-empty string or an array of up to 4 of them")
    return stop


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    max_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = Field(default=None, ge=0, le=2)
    top_p: Optional[float] = Field(default=None, gt=0, le=1)
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = Field(default=None, ge=0, lt=2**63)
    stream: Optional[bool] = False
    stream_options: Optional[dict[str, bool]] = None
    presence_penalty: Optional[float] = Field(default=None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(default=None, ge=-2, le=2)
    # No effect on the output: type-checked, then ignored.
    user: Optional[str] = None
    metadata: Optional[dict[str, str]] = None
    store: Optional[bool] = None
    service_tier: Optional[str] = None
    # What markbase cannot honour: accepted only at the value that asks for nothing (check_common).
    n: Optional[int] = 1
    logprobs: Optional[Union[bool, int]] = None
    logit_bias: Any = None

    UNSUPPORTED: ClassVar[dict[str, tuple[tuple, str]]] = {
        "n": ((None, 1), "only n=1 is supported"),
        "logprobs": ((None, False, 0), "logprobs are not supported"),
        "logit_bias": ((None, {}), "logit_bias is not supported"),
    }

    @model_validator(mode="before")
    @classmethod
    def _check_body(cls, body: Any) -> Any:
        """Before any field: an object of known fields, its strings valid Unicode, its numbers finite."""
        if not isinstance(body, dict):
            raise ApiError(400, f"the request body must be a JSON object, got {_kind(body)}")
        check_json(body)
        for key in body:
            if key not in cls.model_fields:
                raise invalid(at("", key), "not a field this server supports")
        return body

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, stop: Any) -> Any:
        return _check_stop(stop)

    @field_validator("stream_options", mode="before")
    @classmethod
    def _stream_options(cls, options: Any) -> Any:
        if options is not None:
            _object(options, "stream_options", {"include_usage"})
        return options


class ChatRequest(_Request):
    messages: list[dict[str, Any]]
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[str] = None
    reasoning_effort: Optional[Literal["none", "minimal", "low", "medium", "high", "xhigh"]] = None
    chat_template_kwargs: Optional[dict[str, bool]] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    parallel_tool_calls: Optional[bool] = None
    top_logprobs: Optional[int] = None
    response_format: Any = None
    modalities: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    verbosity: Any = None
    functions: Any = None
    function_call: Any = None

    UNSUPPORTED: ClassVar[dict[str, tuple[tuple, str]]] = {
        **_Request.UNSUPPORTED,
        "top_logprobs": ((None, 0), "logprobs are not supported"),
        "parallel_tool_calls": ((None, True), "false is not supported (the model decides how many calls it makes)"),
        "response_format": ((None, {"type": "text"}), "only {\"type\": \"text\"} is supported (no JSON mode or "
                                                      "structured outputs)"),
        "modalities": ((None, ["text"]), "only [\"text\"] output is supported"),
        "audio": ((None,), "audio output is not supported"),
        "prediction": ((None,), "predicted outputs are not supported"),
        "web_search_options": ((None,), "web search is not supported"),
        "verbosity": ((None,), "verbosity is not supported"),
        "functions": ((None,), "the deprecated functions API is not supported; send tools"),
        "function_call": ((None,), "the deprecated functions API is not supported; send tool_choice"),
    }

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, messages: Any) -> Any:
        return check_messages(messages)

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, tools: Any) -> Any:
        return check_tool_list(tools)

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, choice: Any) -> Any:
        return check_tool_choice(choice)

    @field_validator("chat_template_kwargs", mode="before")
    @classmethod
    def _template_kwargs(cls, kwargs: Any) -> Any:
        if kwargs is not None:
            _object(kwargs, "chat_template_kwargs", {"enable_thinking"})
        return kwargs


class CompletionRequest(_Request):
    prompt: Union[str, list[str]]
    echo: Optional[bool] = False
    suffix: Optional[str] = None
    best_of: Optional[int] = None

    UNSUPPORTED: ClassVar[dict[str, tuple[tuple, str]]] = {
        **_Request.UNSUPPORTED,
        "suffix": ((None, ""), "suffix (insertion) is not supported"),
        "best_of": ((None, 1), "only best_of=1 is supported"),
    }

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, prompt: Any) -> Any:
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and prompt and not all(isinstance(p, str) for p in prompt):
            raise invalid("prompt", "token-id prompts are not supported; send the text")
        if not (isinstance(prompt, list) and len(prompt) == 1):
            raise invalid("prompt", f"expected one string, got {_kind(prompt)}"
                                    + (f" of {len(prompt)}" if isinstance(prompt, list) else ""))
        return prompt


def check_common(req: _Request) -> None:
    """A field markbase cannot honour, set to a value that asks for it, is a 400 naming the field."""
    for name, (neutral, why) in req.UNSUPPORTED.items():
        value = getattr(req, name)
        if not any(value == v and type(value) is type(v) for v in neutral):
            raise invalid(name, why)


def sampling_kwargs(req: _Request, max_tokens: int | None) -> dict:
    """markbase generate() keywords; seed absent → a fresh random seed (OpenAI's sampling is not
    reproducible unless a seed is given)."""
    seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(7), "little")
    out = dict(max_new_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, seed=seed,
               presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty)
    if req.stop is not None:
        out["stop"] = [req.stop] if isinstance(req.stop, str) else list(req.stop)
    return {k: v for k, v in out.items() if v is not None}


MAX_REQUEST_MEDIA_BYTES = 64 << 20  # all the media of one request together (files and data: URLs), decoded


class MediaPolicy:
    """Which image / audio sources a request may name: data: URLs always; local files only under
    `allowed_dir` (the operator's choice, --allow-media-dir); never remote URLs (the server does not fetch).

    A source is read when the request arrives and its bytes, not its path, go to the worker, so nothing that
    changes on disk while the request waits (a directory swapped for a symlink) can redirect the read. Files
    are opened through markbase/files.py: not through a symlink as last component, a regular file (a FIFO or
    a device is refused at once), under allowed_dir by the opened descriptor's own path, size-capped.
    Caps: each item its kind's (preprocess MAX_IMAGE_BYTES / MAX_AUDIO_BYTES), all of a request's media
    together max_request_bytes (counted by the RequestMedia that for_request() gives)."""

    def __init__(self, allowed_dir: str | None, max_request_bytes: int = MAX_REQUEST_MEDIA_BYTES):
        self.allowed_dir = os.path.realpath(allowed_dir) if allowed_dir else None
        self.max_request_bytes = max_request_bytes

    def for_request(self) -> "RequestMedia":
        """The reader of one request's media (counts its bytes against max_request_bytes)."""
        return RequestMedia(self)

    def source(self, url: Any, where: str, kind: str = "image") -> bytes:
        """One source's bytes, on its own (per-item cap only; a request's sources go through for_request())."""
        return self.for_request().source(url, where, kind)


class RequestMedia:
    """One request's media sources read through a MediaPolicy: source(url, where, kind) → bytes, ApiError 400
    (naming `where`) for a source refused, unreadable or over its cap or the request's total."""

    def __init__(self, policy: MediaPolicy):
        self.policy, self.total_bytes = policy, 0

    def for_request(self) -> "RequestMedia":
        return self

    def source(self, url: Any, where: str, kind: str = "image") -> bytes:
        return self.admit(self._read(url, where, kind), where, kind)

    def admit(self, data: bytes, where: str, kind: str) -> bytes:
        """data (media of `kind` the request carries, e.g. a decoded input_audio) within its item cap, counted
        against the request's total."""
        if len(data) > _MEDIA_BYTES[kind]:
            raise ApiError(400, f"{where}: {len(data)} bytes of {kind}, more than the {_MEDIA_BYTES[kind]} bytes "
                           f"allowed", where)
        self.total_bytes += len(data)
        if self.total_bytes > self.policy.max_request_bytes:
            raise ApiError(413, f"{where}: the request's media add up to more than {self.policy.max_request_bytes} "
                           f"bytes", where)
        return data

    def _read(self, url: Any, where: str, kind: str) -> bytes:
        if not isinstance(url, str) or not url:
            raise ApiError(400, f"{where}: expected a data: URL or a file path", where)
        limit = _MEDIA_BYTES[kind]
        try:
            if url.startswith("data:"):
                return decode_data_url(url, where, limit)
            if url.startswith(("http://", "https://")):
                raise ApiError(400, f"{where}: remote URLs are not fetched by this server; send the bytes as a "
                               f"data: URL", where)
            if self.policy.allowed_dir is None:
                raise ApiError(400, f"{where}: local files are not allowed (start the server with --allow-media-dir)",
                               where)
            path = url[len("file://"):] if url.startswith("file://") else url
            return read_media_file(path, where, limit, allowed_dir=self.policy.allowed_dir)
        except InputError as e:
            raise ApiError(400, str(e), where) from None


def _audio_bytes(audio: dict, where: str) -> bytes:
    try:
        return base64.b64decode(audio["data"], validate=True)
    except (binascii.Error, ValueError):
        raise invalid(at(where, "data"), "not valid base64") from None


def _text_of(content: str | list) -> str:
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def _tool_call(call: dict, where: str) -> dict:
    fn = call["function"]
    args = parse_arguments(fn.get("arguments", "{}"), at(where, "function", "arguments"))
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def _part(p: dict, where: str, media: MediaPolicy, modalities: set[str]) -> dict:
    """An OpenAI content part (checked by check_messages) as markbase's."""
    if p["type"] == "text":
        return {"type": "text", "text": p["text"]}
    if p["type"] == "image_url":
        if "image" not in modalities:
            raise invalid(where, "this model has no vision encoder")
        image = p["image_url"]
        if isinstance(image, dict):
            return {"type": "image", "image": media.source(image["url"], at(where, "image_url", "url"))}
        return {"type": "image", "image": media.source(image, at(where, "image_url"))}
    if "audio" not in modalities:
        raise invalid(where, "this model has no audio encoder")
    where = at(where, "input_audio")
    return {"type": "audio", "audio": media.admit(_audio_bytes(p["input_audio"], where), where, "audio")}


def to_messages(messages: list[dict], media: MediaPolicy, modalities: set[str]) -> list[dict]:
    """OpenAI chat messages (checked by ChatRequest) → markbase's (the transformers chat format): image_url /
    input_audio parts to image / audio parts, tool calls with parsed arguments, tool results named after
    their call."""
    call_names: dict[str, str] = {}
    media = media.for_request()  # the request's media bytes counted together
    out = []
    for i, m in enumerate(messages):
        where, role, content = at("messages", i), m["role"], m.get("content")
        if role == "tool":
            name = call_names.get(m.get("tool_call_id"), m.get("name") or "tool")
            out.append({"role": "tool", "name": name, "content": _text_of(content)})
            continue
        msg: dict = {"role": role}
        calls = [_tool_call(c, at(where, "tool_calls", j)) for j, c in enumerate(m.get("tool_calls") or [])]
        if calls:
            call_names.update((c["id"], c["function"]["name"]) for c in calls if c["id"])
            msg["tool_calls"] = calls
        if isinstance(content, list):
            msg["content"] = [_part(p, at(where, "content", j), media, modalities) for j, p in enumerate(content)]
        else:
            msg["content"] = content if content is not None or calls else ""
        out.append(msg)
    return out


def thinking_requested(req: ChatRequest) -> bool | None:
    kw = req.chat_template_kwargs or {}
    if "enable_thinking" in kw:
        return kw["enable_thinking"]
    if req.reasoning_effort is not None:
        return req.reasoning_effort not in ("none", "minimal")
    return None


def check_tools(req: ChatRequest) -> list | None:
    """The tools the model is offered (checked by ChatRequest): none when tool_choice is 'none'."""
    return req.tools if req.tools and req.tool_choice != "none" else None


def input_error(e: InputError) -> ApiError:
    msg = str(e)
    return ApiError(413 if msg.startswith("context limit") else 400, msg,
                    code="context_length_exceeded" if msg.startswith("context limit") else None)


Finish = Literal["stop", "length", "tool_calls"]


def finish_reason(markbase_reason: str, has_tool_calls: bool) -> Finish:
    if has_tool_calls:
        return "tool_calls"
    return "length" if markbase_reason in ("length", "context") else "stop"
