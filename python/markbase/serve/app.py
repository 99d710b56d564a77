"""`markbase serve`: the OpenAI HTTP API over one loaded model (FastAPI + uvicorn).

Routes: POST /v1/chat/completions, POST /v1/completions (both with `stream: true` as server-sent
events in OpenAI's chunk format), GET /v1/models, GET /health. The model loads in the background after
the server starts: until it is ready every route but /health answers 503. Requests share decode steps on
the generation worker (serve/worker.py, continuous batching); a full queue answers 429; a client that
disconnects leaves the batch before the next decode step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
import time
import uuid
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._core import ConfigError, InputError, MarkbaseError
from ..generate import GenerationResult
from ..tokenizer import CHANNEL_CLOSE, CHANNEL_OPEN, split_thinking
from .guard import REQUEST_MEMORY_FACTOR, Guard, RequestBudget, scope_authorized
from .protocol import (MAX_REQUEST_MEDIA_BYTES, ApiError, at, ChatRequest, CompletionRequest, MediaPolicy, check_common,
                       check_tools, finish_reason, input_error, sampling_kwargs, thinking_requested, to_messages)
from .tool_calls import CALL_OPEN, split_tool_calls
from .worker import Job, QueueFull, Worker

log = logging.getLogger("markbase.serve")


class ServerState:
    """The model (loaded in a background thread), the worker and the serving options."""

    def __init__(self, load: Callable[[], Any], model_id: str, api_key: str | None, media: MediaPolicy,
                 max_queue: int, max_batch: int, prompt_cache: int, max_body_bytes: int | None = None,
                 on_load_failure: Callable[[str], None] | None = None):
        self.model_id, self.api_key, self.media = model_id, api_key, media
        self.model = None
        self.load_error: str | None = None
        self.max_body_bytes = max_body_bytes  # None: sized from the model once loaded (default_max_body_bytes)
        self._on_load_failure = on_load_failure
        self.worker = Worker(max_queue, max_batch, prompt_cache)
        self.created = int(time.time())
        self._loader = threading.Thread(target=self._load, args=(load,), name="markbase-serve-load", daemon=True)
        self._loader.start()

    def _load(self, load) -> None:
        try:
            model = load()
            if self.max_body_bytes is None:
                self.max_body_bytes = default_max_body_bytes(model)
            self.worker.session_context, sessions_bytes = fit_sessions(model, self.worker.max_batch,
                                                                       self.worker.cache.capacity)
            self.requests = RequestBudget(request_memory_budget(model, self.max_body_bytes, sessions_bytes))
            self.model = model
        except BaseException as e:  # noqa: BLE001 - any failure is reported by /health, never left "loading"
            self.load_error = f"{type(e).__name__}: {e}"
            if not isinstance(e, MarkbaseError):
                log.error("markbase serve: the model failed to load", exc_info=e)
            if self._on_load_failure is not None:
                self._on_load_failure(self.load_error)

    def wait_loaded(self, timeout: float | None = None) -> bool:
        self._loader.join(timeout)
        return self.model is not None

    def ready_model(self):
        if self.model is None:
            raise self._not_ready()
        return self.model

    def _not_ready(self) -> ApiError:
        if self.load_error:
            return ApiError(503, f"the model failed to load: {self.load_error}")
        return ApiError(503, "the model is loading; retry shortly")

    def body_limit(self) -> tuple[int | None, RequestBudget | ApiError]:
        """(the largest request body accepted, the request budget) once the model is loaded; (None, the 503)
        before."""
        if self.model is None:
            return None, self._not_ready()
        return self.max_body_bytes, self.requests


def default_max_body_bytes(model) -> int:
    """The longest body a request that fits the context can have: each token is at most the vocabulary's
    longest token in UTF-8 bytes, each byte at most 6 in JSON (a \\u escape), plus the media a request may carry
    (base64: 4 bytes per 3) and room for the JSON around the messages."""
    text = model.max_context * model.tokenizer.max_token_bytes * 6
    return text + MAX_REQUEST_MEDIA_BYTES * 4 // 3 + (1 << 16)


def refuse_unfit(model, text: str, what: str) -> None:
    """A 413 now, before the request waits in the queue, when `text` alone cannot fit the context."""
    try:
        model.tokenizer.check_fits(text, model.max_context, what)
    except InputError as e:
        raise input_error(e) from None


def _verbatim_text(messages: list[dict]):
    """The text of the system, developer and user messages, which chat templates render whole (up to
    surrounding whitespace): a lower bound on what the rendered prompt holds."""
    for m in messages:
        if m.get("role") not in ("system", "developer", "user"):
            continue
        content = m.get("content")
        if isinstance(content, str):
            yield content.strip()
        elif isinstance(content, list):
            yield from (p["text"].strip() for p in content if p.get("type") == "text" and isinstance(p.get("text"), str))


def fit_sessions(model, max_batch: int, prompt_cache: int) -> tuple[int, int]:
    """(the context each request's session gets, what the server's sessions need in bytes): max_context when
    its sessions (max_batch running, a batched step of them, prompt_cache kept) all fit beside the model at
    it, else the longest that does (logged). ConfigError with the numbers when not even one prefill chunk
    fits."""
    sessions, what = max_batch + prompt_cache, f"markbase serve (--max-batch {max_batch}, --prompt-cache {prompt_cache})"

    def need(context: int) -> int:
        return model.check_sessions(sessions, context=context, what=what, batch_rows=max_batch,
                                    penalties=True)["total_bytes"]

    try:
        return model.max_context, need(model.max_context)
    except ConfigError:
        pass
    lo, hi = min(model.prefill_chunk, model.max_context), model.max_context
    need(lo)  # raises, with the numbers, when even that does not fit
    while lo < hi:  # the longest context that fits, by bisection (the need grows with the context)
        mid = (lo + hi + 1) // 2
        try:
            need(mid)
            lo = mid
        except ConfigError:
            hi = mid - 1
    log.warning("markbase serve: %d sessions at max_context %d do not fit in memory; each request gets %d tokens "
                "(lower --max-batch or --prompt-cache for longer ones)", sessions, model.max_context, lo)
    return lo, need(lo)


def request_memory_budget(model, max_body_bytes: int, sessions_bytes: int) -> int:
    """What the requests in flight may hold together: the memory available at load less the model's share and
    its sessions' (sessions_bytes), and at least what one request of the largest body holds
    (REQUEST_MEMORY_FACTOR x max_body_bytes)."""
    plan = model.memory_plan()
    one = REQUEST_MEMORY_FACTOR * max_body_bytes
    if plan["available_bytes"] is None:
        return 8 * one
    model_share = plan["weights_mapped_bytes"] + plan["weights_resident_bytes"] + plan["arena_bytes"]
    return max(one, plan["available_bytes"] - model_share - sessions_bytes)


def _sse(obj: dict | str) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n".encode()


class _PieceRouter:
    """Splits streamed raw text into reasoning (inside the thought channel), content, and text held back
    because a tool call has begun (parsed at the end)."""

    LABEL = "thought\n"  # what follows the channel's opening token

    def __init__(self, tools: bool):
        self.tools = tools
        self.in_thought = False
        self.label: str | None = None  # text after <|channel> while it may still be the label
        self.holding = False

    def route(self, piece: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while piece:
            if self.holding:
                return out
            if self.label is not None:  # drop the channel's "thought" label, however the pieces cut it
                buf = self.label + piece
                if self.LABEL.startswith(buf) and len(buf) < len(self.LABEL):
                    self.label = buf
                    return out
                self.label = None
                piece = buf[len("thought"):].lstrip("\n") if buf.startswith("thought") else buf
                continue
            if self.in_thought:
                end = piece.find(CHANNEL_CLOSE)
                if end < 0:
                    out.append(("reasoning_content", piece))
                    return out
                out.append(("reasoning_content", piece[:end]))
                self.in_thought, piece = False, piece[end + len(CHANNEL_CLOSE):]
                continue
            start = piece.find(CHANNEL_OPEN)
            call = piece.find(CALL_OPEN) if self.tools else -1
            if call >= 0 and (start < 0 or call < start):
                out.append(("content", piece[:call]))
                self.holding = True
                return out
            if start < 0:
                out.append(("content", piece))
                return out
            out.append(("content", piece[:start]))
            self.in_thought, self.label, piece = True, "", piece[start + len(CHANNEL_OPEN):]
        return out


def create_app(load: Callable[[], Any], model_id: str, api_key: str | None = None, allow_media_dir: str | None = None,
               max_queue: int = 64, max_batch: int = 8, prompt_cache: int = 4, max_body_bytes: int | None = None,
               on_load_failure: Callable[[str], None] | None = None):
    """The ASGI app. `load()` returns a markbase Model (called once, in a background thread). Up to
    max_batch requests decode together (continuous batching); up to max_queue more wait; the sessions of the
    last prompt_cache finished requests are kept for prompts that share their prefix (0: none). A request body
    over max_body_bytes is refused unread (default: the longest a request that fits the context can be,
    default_max_body_bytes). on_load_failure(error) is called if load() fails."""

    state = ServerState(load, model_id, api_key, MediaPolicy(allow_media_dir), max_queue, max_batch, prompt_cache,
                        max_body_bytes, on_load_failure)

    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        state.worker.stop(timeout=SHUTDOWN_GRACE_S)

    app = FastAPI(title="markbase", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.markbase = state

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError):
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, e: StarletteHTTPException):
        cause = e.__cause__
        if isinstance(cause, UnicodeDecodeError):
            message = f"the request body is not UTF-8 ({cause.reason} at byte {cause.start})"
        elif isinstance(cause, RecursionError):
            message = "the request body's JSON is nested too deeply"
        elif e.status_code == 400 and cause is not None:
            message = f"the request body is not valid JSON ({type(cause).__name__})"
        else:
            message = str(e.detail)
        return JSONResponse(ApiError(e.status_code, message).body(), status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def _bug(_: Request, e: Exception):  # the Guard logs it (it sees the exception re-raised)
        return JSONResponse(ApiError(500, "internal error in markbase (logged by the server)").body(), status_code=500)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        loc = first.get("loc", ())
        keys = loc[1:] if loc[:1] == ("body",) else loc
        if first.get("type") == "json_invalid":
            message, where = f"the request body is not valid JSON ({first.get('ctx', {}).get('error', 'invalid')})", ""
        elif not keys and first.get("type") == "missing":
            message, where = "the request body must be a JSON object (it is empty or null)", ""
        else:
            where = at("", *(k for k in keys if isinstance(k, (int, str))))
            message = f"{where or 'the request body'}: {first.get('msg', 'invalid request')}"
        return JSONResponse(ApiError(400, message, where or None).body(), status_code=400)

    app.add_middleware(Guard, api_key=lambda: state.api_key, body_limit=state.body_limit)

    @app.get("/health")
    async def health(request: Request):
        if state.model is None:
            body = {"status": "failed" if state.load_error else "loading"}
            if state.load_error:
                body["error"] = state.load_error
            return JSONResponse(body, status_code=503)
        if not scope_authorized(request.scope):  # the details (pid, traffic) are for the key's holder
            return {"status": "ok"}
        w = state.worker
        return {"status": "ok", "model": state.model_id, "pid": os.getpid(), "running": w.running, "waiting": w.waiting,
                "completed": w.completed, "mean_batch": round(w.batch_rows / w.steps, 2) if w.steps else 0.0,
                "prompt_cache_hits": w.cache.hits, "prompt_cache_reused_tokens": w.cache.reused_tokens}

    @app.get("/v1/models")
    async def models():
        state.ready_model()
        return {"object": "list", "data": [{"id": state.model_id, "object": "model", "created": state.created,
                                            "owned_by": "markbase"}]}

    def check_model(name: str) -> Any:
        model = state.ready_model()
        if name != state.model_id:
            raise ApiError(404, f"model {name!r} does not exist (this server serves {state.model_id!r})", "model",
                           "model_not_found")
        return model

    def submit(model, prepare: Callable[[], Any]) -> Job:
        job = Job(prepare=prepare, model=model, loop=asyncio.get_running_loop())
        try:
            state.worker.submit(job)
        except QueueFull:
            raise ApiError(429, "the server's request queue is full; retry later") from None
        return job

    async def next_event(job: Job, request: Request) -> tuple[str, Any]:
        """The job's next event; a client found disconnected (checked every 0.2 s) cancels the job."""
        while True:
            try:
                kind, value = await asyncio.wait_for(job.out.get(), timeout=0.2)
            except asyncio.TimeoutError:
                kind = None
            now = time.monotonic()
            if now - job.checked >= 0.2:
                job.checked = now
                if await request.is_disconnected():
                    job.cancel()
                    raise asyncio.CancelledError()
            if kind is None:
                continue
            if kind == "input_error":
                raise input_error(value)
            if kind == "error":
                raise ApiError(500, f"generation failed: {type(value).__name__}: {value}")
            return kind, value

    async def collect(job: Job, request: Request) -> GenerationResult:
        while True:  # (next_event cancels the job when the client is gone)
            kind, value = await next_event(job, request)
            if kind == "done":
                return value

    async def stream(job: Job, request: Request, first: dict, make_chunk, finish):
        """A StreamingResponse: `first` (the role chunk, if any), then make_chunk(text) per piece, finish(result).
        The job's first event is awaited before answering, so a bad prompt (too long, bad media) is still a
        plain error with its status code; a failure after that ends the stream with an error event."""
        try:
            pending = await next_event(job, request)
        except BaseException:
            job.cancel()
            raise
        return StreamingResponse(sse_body(job, request, first, pending, make_chunk, finish),
                                 media_type="text/event-stream")

    async def sse_body(job: Job, request: Request, first: dict, pending, make_chunk, finish) -> AsyncIterator[bytes]:
        try:
            if first:
                yield _sse(first)
            while True:
                if pending is not None:
                    (kind, value), pending = pending, None
                else:
                    try:
                        kind, value = await next_event(job, request)
                    except ApiError as e:
                        yield _sse(e.body())
                        return
                if kind == "text":
                    for chunk in make_chunk(value):
                        yield _sse(chunk)
                elif kind == "done":
                    for chunk in finish(value):
                        yield _sse(chunk)
                    yield _sse("[DONE]")
                    return
                else:  # cancelled
                    return
        finally:
            job.cancel()  # no-op when finished; frees the worker when the client went away

    def usage(result: GenerationResult) -> dict:
        n = len(result.token_ids)
        return {"prompt_tokens": result.prompt_tokens, "completion_tokens": n, "total_tokens": result.prompt_tokens + n,
                "prompt_tokens_details": {"cached_tokens": result.prompt_tokens - result.prefill_tokens}}

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest, request: Request):
        model = check_model(req.model)
        check_common(req)
        tools = check_tools(req)
        # (off the event loop: media files are read here, up to MAX_REQUEST_MEDIA_BYTES)
        messages = await asyncio.to_thread(to_messages, req.messages, state.media, model.modalities)
        refuse_unfit(model, " ".join(_verbatim_text(messages)), "the messages")
        kwargs = sampling_kwargs(req, req.max_completion_tokens or req.max_tokens)
        thinking = thinking_requested(req)
        if thinking is not None:
            kwargs["enable_thinking"] = thinking
        if tools:
            kwargs["tools"] = tools
        try:
            job = submit(model, lambda: model.prepare(messages, **kwargs))
        except InputError as e:
            raise input_error(e) from None
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def message_of(result: GenerationResult) -> tuple[dict, list]:
            thought, answer = split_thinking(result.raw_text)
            calls = []
            if tools:
                answer, parsed = split_tool_calls(answer)
                calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                          "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                         for c in parsed]
            msg: dict = {"role": "assistant", "content": answer if (answer or not calls) else None}
            if thought is not None:
                msg["reasoning_content"] = thought
            if calls:
                msg["tool_calls"] = calls
            return msg, calls

        if not req.stream:
            result = await collect(job, request)
            msg, calls = message_of(result)
            return {"id": rid, "object": "chat.completion", "created": created, "model": state.model_id,
                    "choices": [{"index": 0, "message": msg, "finish_reason": finish_reason(result.finish_reason, bool(calls)),
                                 "logprobs": None}],
                    "usage": usage(result)}

        router = _PieceRouter(bool(tools))
        include_usage = bool((req.stream_options or {}).get("include_usage"))

        def chunk(delta: dict, finish=None) -> dict:
            out = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": state.model_id,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
            if include_usage:
                out["usage"] = None
            return out

        def pieces(text: str):
            for field, part in router.route(text):
                if part:
                    yield chunk({field: part})

        def finish(result: GenerationResult):
            calls = message_of(result)[1] if tools else []
            if router.holding and not calls:  # a tool call that did not parse: its text, as written
                raw = result.raw_text
                yield chunk({"content": raw[raw.find(CALL_OPEN):]})
            if calls:
                yield chunk({"tool_calls": [dict(c, index=i) for i, c in enumerate(calls)]})
            yield chunk({}, finish_reason(result.finish_reason, bool(calls)))
            if include_usage:
                yield {"id": rid, "object": "chat.completion.chunk", "created": created, "model": state.model_id,
                       "choices": [], "usage": usage(result)}

        return await stream(job, request, chunk({"role": "assistant", "content": ""}), pieces, finish)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        model = check_model(req.model)
        check_common(req)
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        if len(prompts) != 1 or not isinstance(prompts[0], str):
            raise ApiError(400, "prompt must be one string", "prompt")
        prompt = prompts[0]
        refuse_unfit(model, prompt, "the prompt")
        kwargs = sampling_kwargs(req, req.max_tokens or 16)  # OpenAI's default for completions
        job = submit(model, lambda: model.prepare(prompt, **kwargs))
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        echo = prompt if req.echo else ""

        def choice(text: str, finish=None) -> dict:
            return {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}

        if not req.stream:
            result = await collect(job, request)
            return {"id": rid, "object": "text_completion", "created": created, "model": state.model_id,
                    "choices": [choice(echo + result.raw_text, finish_reason(result.finish_reason, False))],
                    "usage": usage(result)}

        def chunk(text: str, finish=None) -> dict:
            return {"id": rid, "object": "text_completion", "created": created, "model": state.model_id,
                    "choices": [choice(text, finish)]}

        def finish(result: GenerationResult):
            yield chunk("", finish_reason(result.finish_reason, False))
            if (req.stream_options or {}).get("include_usage"):
                yield {"id": rid, "object": "text_completion", "created": created, "model": state.model_id,
                       "choices": [], "usage": usage(result)}

        return await stream(job, request, chunk(echo) if echo else {}, lambda t: [chunk(t)], finish)

    return app


def serve(model_dir: str, host: str = "127.0.0.1", port: int = 8000, device: str = "auto", api_key: str | None = None,
          model_id: str | None = None, max_queue: int = 64, max_batch: int = 8, prompt_cache: int = 4,
          allow_media_dir: str | None = None, max_context: int | None = None, quantize: str | None = None,
          max_body_bytes: int | None = None) -> int:
    """Runs the server until SIGINT / SIGTERM (uvicorn, one process); returns the exit status: 1 when the model
    failed to load (the server stops then), 0 otherwise. A signal stops it within a second: requests still
    running are cut off, not waited for."""
    import uvicorn

    from ..api import load

    model_id = model_id or os.path.basename(os.path.normpath(model_dir))
    failed: list[str] = []
    server: list[uvicorn.Server] = []

    def on_load_failure(error: str) -> None:
        failed.append(error)
        if server:
            server[0].should_exit = True

    app = create_app(lambda: load(model_dir, device=device, max_context=max_context, quantize=quantize), model_id,
                     api_key=api_key, allow_media_dir=allow_media_dir, max_queue=max_queue, max_batch=max_batch,
                     prompt_cache=prompt_cache, max_body_bytes=max_body_bytes, on_load_failure=on_load_failure)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    server.append(uvicorn.Server(config))
    if failed:  # it failed before the server existed
        return _exit_failed(failed[0])
    server[0].run()
    state: ServerState = app.state.markbase
    state.worker.stop(timeout=SHUTDOWN_GRACE_S)
    if failed:
        return _exit_failed(failed[0])
    if state.worker.alive:  # a forward still runs in C++: end the process without waiting for it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


SHUTDOWN_GRACE_S = 0.3  # how long a stopping server lets running requests finish


def _exit_failed(error: str) -> int:
    print(f"markbase serve: the model failed to load: {error}", file=sys.stderr)
    return 1
