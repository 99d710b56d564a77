"""Requests posted to the ASGI app in-process (no socket, no HTTP client library): the exact bytes a client
sends, the status, headers and body the app answers, and a deadline on each request. One event loop runs
in a thread for the client's lifetime, as uvicorn's does for a server's."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass

# The fields of OpenAI's error JSON, each error's type.
ERROR_FIELDS = {"message": str, "type": str, "param": (str, type(None)), "code": (str, type(None))}


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)

    def events(self) -> list:
        """A server-sent event stream's data payloads: JSON objects, and the final "[DONE]"."""
        out = []
        for event in self.body.decode().split("\n\n"):
            if event:
                assert event.startswith("data: "), f"not a server-sent data event: {event[:200]!r}"
                data = event[len("data: "):]
                out.append(data if data == "[DONE]" else json.loads(data))
        return out


def error_of(r: Response) -> dict:
    """The OpenAI error of a 4xx answer ({"error": {"message", "type", "param", "code"}} and nothing else);
    AssertionError naming what is wrong otherwise."""
    assert r.headers.get("content-type", "").startswith("application/json"), (r.status, r.headers, r.body[:300])
    body = r.json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict) and set(error) == set(ERROR_FIELDS), body
    for field, types in ERROR_FIELDS.items():
        assert isinstance(error[field], types), (field, body)
    return error


class AsgiClient:
    def __init__(self, app):
        self.app = app
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="asgi-client-loop", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    def post(self, path: str, body: bytes | dict, timeout: float = 30.0, headers: dict[str, str] | None = None
             ) -> Response:
        """POST `body` (bytes as they are, a dict as JSON, NaN / Infinity tokens allowed) and the whole answer;
        TimeoutError past `timeout` seconds (the request is cancelled)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        future = asyncio.run_coroutine_threadsafe(self._request("POST", path, raw, headers or {}), self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"POST {path} did not answer within {timeout} s: {raw[:200]!r}") from None

    async def _request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Response:
        sent: list[dict] = []
        answered = asyncio.Event()
        body_sent = False

        async def receive():
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await answered.wait()  # the client stays connected until the whole answer is in
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered.set()

        all_headers = {"content-type": "application/json", "content-length": str(len(body)), **headers}
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
                 "headers": [(k.lower().encode(), v.encode()) for k, v in all_headers.items()]}
        try:
            await self.app(scope, receive, send)
        except Exception as e:  # noqa: BLE001 - what escaped the app; a 500 if it had answered nothing
            if not any(m["type"] == "http.response.start" for m in sent):
                return Response(500, {"x-escaped": type(e).__name__}, repr(e).encode())
        start = next((m for m in sent if m["type"] == "http.response.start"), None)
        if start is None:
            return Response(500, {"x-escaped": "no response"}, b"")
        headers_out = {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}
        return Response(start["status"], headers_out,
                        b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
