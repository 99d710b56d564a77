"""The OpenAI request schemas markbase serves (pydantic), their translation into markbase's generate
arguments, and OpenAI's error JSON.

Only what markbase implements is accepted: a field it cannot honour (n > 1, logprobs, an unknown
content part) is a 400 naming it, never silently ignored. Fields the OpenAI client sends that do not
change the output (user, metadata, store) are accepted and ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .._core import InputError
from ..files import decode_data_url, read_media_file
from ..preprocess.audio import MAX_AUDIO_BYTES
from ..preprocess.image import MAX_IMAGE_BYTES

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


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = Field(default=None, ge=0, le=2)
    top_p: Optional[float] = Field(default=None, gt=0, le=1)
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = Field(default=None, ge=0, lt=2**63)
    n: int = 1
    stream: bool = False
    stream_options: Optional[dict[str, Any]] = None
    presence_penalty: Optional[float] = Field(default=None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(default=None, ge=-2, le=2)
    logprobs: Optional[Any] = None


class ChatRequest(_Request):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[str, dict[str, Any]]] = None
    reasoning_effort: Optional[str] = None
    chat_template_kwargs: Optional[dict[str, Any]] = None


class CompletionRequest(_Request):
    prompt: Union[str, list[str]]
    echo: bool = False


def check_common(req: _Request) -> None:
    if req.n != 1:
        raise ApiError(400, "only n=1 is supported", "n")
    if req.logprobs not in (None, False, 0):
        raise ApiError(400, "logprobs are not supported", "logprobs")


def sampling_kwargs(req: _Request, max_tokens: int | None) -> dict:
    """markbase generate() keywords; seed absent → a fresh random seed (OpenAI's sampling is not
    reproducible unless a seed is given)."""
    seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(7), "little")
    out = dict(max_new_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, seed=seed,
               presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty)
    if req.stop is not None:
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop)
        if len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
            raise ApiError(400, "stop must be a non-empty string or up to 4 of them", "stop")
        out["stop"] = stops
    return {k: v for k, v in out.items() if v is not None}


MAX_REQUEST_MEDIA_BYTES = 256 << 20  # all the media of one request together (files and data: URLs)


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


def _audio_bytes(part: dict, where: str) -> bytes:
    audio = part.get("input_audio")
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
        raise ApiError(400, f"{where}: an input_audio part needs input_audio.data (base64)", where)
    try:
        return base64.b64decode(audio["data"], validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where}: input_audio.data is not valid base64", where) from None


def _text_of(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ApiError(400, f"{where}: expected text content", where)


def _tool_call(call: Any, where: str) -> dict:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ApiError(400, f"{where}: a tool call needs function.name", where)
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError:
            raise ApiError(400, f"{where}: function.arguments is not JSON", where) from None
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def to_messages(messages: list[dict], media: MediaPolicy, modalities: set[str]) -> list[dict]:
    """OpenAI chat messages → markbase's (the transformers chat format): image_url / input_audio parts to
    image / audio parts, tool calls with parsed arguments, tool results named after their call."""
    call_names: dict[str, str] = {}
    media = media.for_request()  # the request's media bytes counted together
    out = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        where = f"messages[{i}]"
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ApiError(400, f"{where}.role: unknown role {role!r}", f"{where}.role")
        if role == "tool":
            name = call_names.get(m.get("tool_call_id"), m.get("name") or "tool")
            out.append({"role": "tool", "name": name, "content": _text_of(content, f"{where}.content")})
            continue
        msg: dict = {"role": role}
        if role == "assistant" and m.get("tool_calls"):
            calls = [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(m["tool_calls"])]
            for c in calls:
                if c["id"]:
                    call_names[c["id"]] = c["function"]["name"]
            msg["tool_calls"] = calls
        if content is None or isinstance(content, str):
            msg["content"] = content if content is not None or "tool_calls" in msg else ""
        elif isinstance(content, list):
            parts = []
            for j, p in enumerate(content):
                pw = f"{where}.content[{j}]"
                kind = p.get("type") if isinstance(p, dict) else None
                if kind == "text":
                    parts.append({"type": "text", "text": str(p.get("text", ""))})
                elif kind == "image_url":
                    if "image" not in modalities:
                        raise ApiError(400, f"{pw}: this model has no vision encoder", pw)
                    url = p.get("image_url", {}).get("url") if isinstance(p.get("image_url"), dict) else p.get("image_url")
                    parts.append({"type": "image", "image": media.source(url, pw)})
                elif kind == "input_audio":
                    if "audio" not in modalities:
                        raise ApiError(400, f"{pw}: this model has no audio encoder", pw)
                    parts.append({"type": "audio", "audio": media.admit(_audio_bytes(p, pw), pw, "audio")})
                else:
                    raise ApiError(400, f"{pw}: unsupported content part type {kind!r} (text, image_url, input_audio)", pw)
            msg["content"] = parts
        else:
            raise ApiError(400, f"{where}.content must be a string or a list of parts", f"{where}.content")
        out.append(msg)
    return out


def thinking_requested(req: ChatRequest) -> bool | None:
    kw = req.chat_template_kwargs or {}
    if "enable_thinking" in kw:
        return bool(kw["enable_thinking"])
    if req.reasoning_effort is not None:
        return req.reasoning_effort not in ("none", "minimal")
    return None


def check_tools(req: ChatRequest) -> list | None:
    if req.tool_choice not in (None, "auto", "none"):
        raise ApiError(400, "tool_choice: only 'auto' and 'none' are supported (the model decides whether to call)",
                       "tool_choice")
    if not req.tools or req.tool_choice == "none":
        return None
    for j, t in enumerate(req.tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if t.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"tools[{j}]: expected {{'type': 'function', 'function': {{'name': ...}}}}", f"tools[{j}]")
    return req.tools


def input_error(e: InputError) -> ApiError:
    msg = str(e)
    return ApiError(413 if msg.startswith("context limit") else 400, msg,
                    code="context_length_exceeded" if msg.startswith("context limit") else None)


Finish = Literal["stop", "length", "tool_calls"]


def finish_reason(markbase_reason: str, has_tool_calls: bool) -> Finish:
    if has_tool_calls:
        return "tool_calls"
    return "length" if markbase_reason in ("length", "context") else "stop"
