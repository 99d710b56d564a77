"""The ASGI layer in front of the routes: the API key, the request body's size, and the one exception boundary.

Pure ASGI (not Starlette's BaseHTTPMiddleware, which hides a client's disconnect from the routes): the body is
read here, at most `max_body_bytes` of it (a Content-Length over the limit is refused before a byte is read),
then replayed to the route, after which `receive` is the client's own, so a disconnect reaches
`request.is_disconnected()`. Whatever escapes a route becomes OpenAI error JSON: a 500 for markbase's own bugs,
logged with its traceback.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Callable

from .protocol import ApiError

log = logging.getLogger("markbase.serve")

# Routes anyone may call without the key: /health answers only {"status": ...} to them.
PUBLIC_PATHS = ("/health",)


async def send_error(send, e: ApiError, headers: list | None = None) -> None:
    body = json.dumps(e.body()).encode()
    await send({"type": "http.response.start", "status": e.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def key_matches(authorization: str | None, api_key: str) -> bool:
    """Constant-time comparison of an `Authorization: Bearer KEY` header with the key."""
    given = (authorization or "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, f"Bearer {api_key}".encode("utf-8", "surrogateescape"))


# A request holds up to this many times its body's bytes while it is parsed, validated and rendered (the JSON
# text, the parsed strings, the rendered prompt, its UTF-8 copy): what the request budget charges it.
REQUEST_MEMORY_FACTOR = 6


class RequestBudget:
    """Bytes the requests in flight may hold together (REQUEST_MEMORY_FACTOR x their bodies): a request that
    would exceed it is answered 429 before its body is read. Used on the event loop only."""

    def __init__(self, capacity: int):
        self.capacity, self.held = capacity, 0

    def reserve(self, nbytes: int) -> bool:
        if self.held + nbytes > self.capacity:
            return False
        self.held += nbytes
        return True

    def release(self, nbytes: int) -> None:
        self.held -= nbytes


class Guard:
    """`api_key()`: the key or None; `body_limit()`: (the largest body accepted now in bytes, the request
    budget), or (None, the 503) to answer without reading the body (the model is not loaded, so no request
    could be served)."""

    def __init__(self, app, api_key: Callable[[], str | None],
                 body_limit: Callable[[], tuple[int | None, RequestBudget | ApiError]]):
        self.app, self.api_key, self.body_limit = app, api_key, body_limit

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        key = self.api_key()
        authorized = key is None or key_matches(headers.get("authorization"), key)
        scope.setdefault("state", {})["authorized"] = authorized
        if not authorized and scope["path"] not in PUBLIC_PATHS:
            return await send_error(send, ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                                                   code="invalid_api_key"), [(b"www-authenticate", b"Bearer")])
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self._run(scope, receive, send)
        limit, budget = self.body_limit()
        if limit is None:
            return await send_error(send, budget)
        declared = headers.get("content-length")
        if declared is not None and not declared.isdigit():
            return await send_error(send, ApiError(400, "Content-Length is not a number", "Content-Length"))
        if declared is not None and int(declared) > limit:
            return await send_error(send, _too_large(int(declared), limit), [(b"connection", b"close")])
        # What the request may hold while it lives: its declared size, or the most a chunked body may grow to.
        charge = REQUEST_MEMORY_FACTOR * (int(declared) if declared is not None else limit)
        if not budget.reserve(charge):
            return await send_error(send, ApiError(
                429, "the server holds as much request data as its memory allows; retry shortly",
                code="server_busy"), [(b"retry-after", b"1")])
        try:
            receive = await self._read_body(receive, send, limit)
            if receive is not None:
                await self._run(scope, receive, send)
        finally:
            budget.release(charge)

    @staticmethod
    async def _read_body(receive, send, limit: int):
        """The body read whole (at most `limit` bytes) and a `receive` that replays it; None when refused."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await send_error(send, _too_large(size, limit, partial=True), [(b"connection", b"close")])
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # the client's own: its disconnect reaches the route

        return replay

    async def _run(self, scope, receive, send) -> None:
        started = False

        async def tracked(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:  # noqa: BLE001 - the one boundary: a bug in markbase, answered as JSON and logged
            log.exception("markbase serve: unhandled error in %s %s", scope["method"], scope["path"])
            if not started:
                await send_error(send, ApiError(500, "internal error in markbase (logged by the server)"))


def _too_large(size: int, limit: int, partial: bool = False) -> ApiError:
    got = f"more than {limit}" if partial else str(size)
    return ApiError(413, f"the request body has {got} bytes; this server accepts at most {limit} "
                         f"(a longer request cannot fit the model's context; see --max-body-bytes)",
                    code="request_too_large")


def scope_authorized(scope: dict[str, Any]) -> bool:
    return bool(scope.get("state", {}).get("authorized", False))
