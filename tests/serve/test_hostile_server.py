"""The server against hostile clients (issue 38): bodies too large to fit, clients that vanish, bodies that are
not JSON, failures in markbase itself, a model that fails to load, SIGTERM under load. Each gets OpenAI error
JSON with its status (or a clean exit), and the server answers a greedy request afterwards exactly as the model
called directly does."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import markbase as mb
from markbase.serve import create_app

from .test_server import KEY, Running, direct, free_port, get, user

GREEDY = user("Tell me about the sea.")


@pytest.fixture(scope="module")
def hostile(synthetic):
    """A served tiny E2B; at teardown its greedy answer must still equal the model's own."""
    model = mb.load(synthetic("e2b"), max_context=512)
    app = create_app(lambda: model, "tiny-e2b", api_key=KEY, max_queue=16, max_batch=4)
    run = Running(app)
    assert app.state.markbase.wait_loaded(30)
    run.model = model
    expected = direct(model, GREEDY, max_new_tokens=12, temperature=0).text
    yield run
    after = run.client().chat.completions.create(model="tiny-e2b", messages=GREEDY, max_tokens=12, temperature=0)
    run.stop()
    assert after.choices[0].message.content == expected, "the server answers differently after the hostile requests"


def raw_request(port: int, head: str, body: bytes = b"", timeout: float = 10.0) -> tuple[int, dict, float]:
    """Sends a request by hand (headers as given, then the body; a refusal mid-body is fine) and returns
    (status, JSON body, seconds until the answer)."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode("latin-1") + b"\r\n")
        try:
            for i in range(0, len(body), 1 << 16):
                s.sendall(body[i:i + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed without reading the rest
        data = b""
        try:
            while b"\r\n\r\n" not in data or len(data) < _expected_length(data):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
    elapsed = time.perf_counter() - t0
    header, _, payload = data.partition(b"\r\n\r\n")
    status = int(header.split()[1])
    try:
        return status, json.loads(payload), elapsed
    except ValueError:  # a refusal by the HTTP parser itself (uvicorn), before markbase sees the request
        return status, {"not json": payload.decode(errors="replace")}, elapsed


def _expected_length(data: bytes) -> int:
    header, sep, _ = data.partition(b"\r\n\r\n")
    for line in header.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(header) + len(sep) + int(line.split(b":")[1])
    return 0


def post_head(path: str, length: int | None, key: str = KEY, extra: str = "") -> str:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    return head + extra


def assert_openai_error(status: int, body: dict, expect_status: int) -> dict:
    assert status == expect_status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


# ------------------------------------------------------------------------------------------ size limits


def test_body_over_the_limit_is_refused_unread(hostile):
    limit = hostile.app.state.markbase.max_body_bytes
    body = b"x" * (limit + 1)
    status, err, _ = raw_request(hostile.port, post_head("/v1/chat/completions", len(body)), body)
    error = assert_openai_error(status, err, 413)
    assert str(limit) in error["message"] and error["code"] == "request_too_large"


def test_chunked_body_is_cut_at_the_limit(hostile):
    """Without a Content-Length the body is counted as it arrives, refused once past the limit."""
    limit = hostile.app.state.markbase.max_body_bytes
    piece = b"y" * (1 << 20)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(limit // len(piece) + 2)) + b"0\r\n\r\n"
    status, err, _ = raw_request(hostile.port, post_head("/v1/chat/completions", None,
                                                         extra="Transfer-Encoding: chunked\r\n"), chunks)
    assert_openai_error(status, err, 413)


def test_text_that_cannot_fit_is_refused_before_it_is_tokenized(hostile):
    """Under the body limit but longer than the context can hold: a 413 from its byte length, at once."""
    for route, body in (("/v1/chat/completions", {"model": "tiny-e2b", "messages": user("word " * 400_000)}),
                        ("/v1/completions", {"model": "tiny-e2b", "prompt": "word " * 400_000})):
        data = json.dumps(body).encode()
        status, err, elapsed = raw_request(hostile.port, post_head(route, len(data)), data)
        error = assert_openai_error(status, err, 413)
        assert error["code"] == "context_length_exceeded" and "bytes" in error["message"]
        assert elapsed < 2.0, f"{route}: took {elapsed:.2f} s"


def test_bad_content_length(hostile):
    """(uvicorn's HTTP parser refuses it before the app sees it)"""
    status, _, _ = raw_request(hostile.port, post_head("/v1/chat/completions", None, extra="Content-Length: 1x\r\n"))
    assert status == 400


def test_max_body_bytes_is_the_operators_choice(synthetic):
    model = mb.load(synthetic("e2b"), max_context=512)
    run = Running(create_app(lambda: model, "tiny", max_body_bytes=300))
    try:
        small = json.dumps({"model": "tiny", "messages": user("hi"), "max_tokens": 1}).encode()
        assert len(small) <= 300
        assert raw_request(run.port, post_head("/v1/chat/completions", len(small)), small)[0] == 200
        big = json.dumps({"model": "tiny", "messages": user("hi " * 100), "max_tokens": 1}).encode()
        status, err, _ = raw_request(run.port, post_head("/v1/chat/completions", len(big)), big)
        assert_openai_error(status, err, 413)
    finally:
        run.stop()


# ------------------------------------------------------------------------------------- malformed bodies


@pytest.mark.parametrize("body, says", [
    (b'{"model": "tiny-e2b", "messages": [{"role": "user", "content": "\xff\xfe"}]}', "UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"model": "tiny-e2b", "messages": [', "JSON"),
    (b"\x00\x01", "JSON"),
])
def test_bodies_that_are_not_json(hostile, body, says):
    status, err, _ = raw_request(hostile.port, post_head("/v1/chat/completions", len(body)), body)
    error = assert_openai_error(status, err, 400)
    assert says in error["message"], error


def test_unknown_routes_and_methods_answer_openai_json(hostile):
    status, body = get(hostile.url + "/v1/nothing")
    assert_openai_error(status, body, 404)
    status, err, _ = raw_request(hostile.port, post_head("/v1/models", 2), b"{}")
    assert_openai_error(status, err, 405)


# ---------------------------------------------------------------------------------------------- auth


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer sk-test-kez", "bearer sk-test-key", "Bearer \u00e9\u00e9", "Basic c2stdGVzdC1rZXk="])
def test_wrong_keys_get_401(hostile, header):
    head = f"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + (f"Authorization: {header}\r\n" if header else "")
    status, body, _ = raw_request(hostile.port, head)
    assert assert_openai_error(status, body, 401)["code"] == "invalid_api_key"


def test_health_tells_strangers_only_that_it_is_up(hostile):
    assert get(hostile.url + "/health", key=None) == (200, {"status": "ok"})
    assert get(hostile.url + "/health", key="wrong") == (200, {"status": "ok"})
    status, health = get(hostile.url + "/health")
    assert status == 200 and health["pid"] == os.getpid()


# --------------------------------------------------------------------------------- vanishing clients


def test_non_streaming_client_that_disconnects_stops_its_generation(hostile):
    """The request is cancelled within a check interval of the client going away (it would otherwise run
    for up to 500 tokens)."""
    state = hostile.app.state.markbase
    done_before = state.worker.completed
    body = json.dumps({"model": "tiny-e2b", "messages": user("Go on forever."), "max_tokens": 500,
                       "temperature": 0}).encode()
    with socket.create_connection(("127.0.0.1", hostile.port)) as s:
        s.sendall(post_head("/v1/chat/completions", len(body)).encode() + b"\r\n" + body)
        deadline = time.time() + 10
        while state.worker.running == 0:
            assert time.time() < deadline, "the request never started"
            time.sleep(0.01)
    t0 = time.time()
    while state.worker.completed == done_before:
        assert time.time() - t0 < 2.0, "the generation of a client that went away kept running"
        time.sleep(0.01)
    assert state.worker.running == 0


# ---------------------------------------------------------------------------- failures inside markbase


def test_a_bug_in_a_route_is_500_json_and_logged(hostile, monkeypatch, caplog):
    def broken(job):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(hostile.app.state.markbase.worker, "submit", broken)
    body = json.dumps({"model": "tiny-e2b", "messages": user("hi")}).encode()
    with caplog.at_level(logging.ERROR, logger="markbase.serve"):
        status, err, _ = raw_request(hostile.port, post_head("/v1/chat/completions", len(body)), body)
    error = assert_openai_error(status, err, 500)
    assert error["type"] == "server_error" and "simulated bug" not in error["message"]
    assert any("simulated bug" in (r.exc_text or "") for r in caplog.records), "the bug was not logged"


@pytest.mark.parametrize("failure", [OverflowError("cannot convert float infinity to integer"),
                                     RuntimeError("unexpected"), mb.ConfigError("does not fit")])
def test_a_load_failure_of_any_kind_shows_in_health(failure):
    def load():
        raise failure

    seen = []
    app = create_app(load, "tiny", on_load_failure=seen.append)
    run = Running(app)
    try:
        assert not app.state.markbase.wait_loaded(10)
        status, body = get(run.url + "/health")
        assert status == 503 and body["status"] == "failed" and type(failure).__name__ in body["error"]
        assert seen and type(failure).__name__ in seen[0]
        status, err = get(run.url + "/v1/models")
        assert_openai_error(status, err, 503)
    finally:
        run.stop()


def _serve(model_dir: str, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, int, "tempfile._TemporaryFileWrapper"]:
    port = free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "markbase", "serve", "--model", model_dir, "--port", str(port),
                             "--api-key", KEY, *args], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    return proc, port, log


def _wait_ready(proc, port: int, log) -> None:
    deadline = time.time() + 120
    while True:
        assert proc.poll() is None, _read(log)
        try:
            if get(f"http://127.0.0.1:{port}/health")[0] == 200:
                return
        except OSError:
            pass
        assert time.time() < deadline, "markbase serve did not become ready:\n" + _read(log)
        time.sleep(0.1)


def _read(log) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")


def test_markbase_serve_exits_nonzero_when_the_model_fails_to_load(synthetic):
    proc, _, log = _serve(synthetic("e2b"), env={"MARKBASE_MEMORY_LIMIT": "inf"})
    try:
        assert proc.wait(timeout=60) != 0
        assert "failed to load" in _read(log)
    finally:
        proc.kill()
        log.close()


def _vm_hwm_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_100_mb_request_is_refused_at_once_and_sigterm_stops_the_server_mid_generation(synthetic):
    """In its own process: a 100 MB chat request is refused in under a second with the server's peak RSS
    growing by less than 50 MB; then SIGTERM during a long generation ends the server within a second."""
    proc, port, log = _serve(synthetic("e2b"), "--max-context", "512")
    try:
        _wait_ready(proc, port, log)
        ok = json.dumps({"model": os.path.basename(synthetic("e2b")), "messages": user("hi"), "max_tokens": 2}).encode()
        raw_request(port, post_head("/v1/chat/completions", len(ok)), ok)  # warm: the first request's imports
        hwm = _vm_hwm_kb(proc.pid)
        message = b"a" * (100 << 20)
        body = b'{"model": "m", "messages": [{"role": "user", "content": "' + message + b'"}]}'
        status, err, elapsed = raw_request(port, post_head("/v1/chat/completions", len(body)), body)
        grown_mb = (_vm_hwm_kb(proc.pid) - hwm) / 1024
        assert_openai_error(status, err, 413)
        assert elapsed < 1.0, f"the refusal took {elapsed:.2f} s"
        assert grown_mb < 50, f"peak RSS grew {grown_mb:.0f} MB"

        long = json.dumps({"model": os.path.basename(synthetic("e2b")), "messages": user("Go on forever."),
                           "max_tokens": 500, "temperature": 0, "stream": True}).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(post_head("/v1/chat/completions", len(long)).encode() + b"\r\n" + long)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")  # the stream has begun
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        stopped = time.perf_counter() - t0
        s.close()
        assert stopped < 1.0, f"SIGTERM took {stopped:.2f} s to stop the server"
    finally:
        proc.kill()
        proc.wait()
        log.close()


def test_requests_in_flight_are_bounded_by_the_request_budget(hostile):
    """When the requests in flight hold what the memory plan leaves for them, the next is a 429 before its body
    is read; once they are gone it is served."""
    budget = hostile.app.state.markbase.requests
    body = json.dumps({"model": "tiny-e2b", "messages": user("hi"), "max_tokens": 1}).encode()
    held = budget.held
    budget.held = budget.capacity - len(body)  # as if other requests held the rest
    try:
        status, err, _ = raw_request(hostile.port, post_head("/v1/chat/completions", len(body)), body)
        assert assert_openai_error(status, err, 429)["code"] == "server_busy"
    finally:
        budget.held = held
    status, out, _ = raw_request(hostile.port, post_head("/v1/chat/completions", len(body)), body)
    assert status == 200 and out["choices"][0]["message"]["content"] is not None
    assert budget.held == held, "a finished request kept its reservation"


@pytest.mark.parametrize("body, message, param", [
    (b"", "must be a JSON object", None), (b"null", "must be a JSON object", None),
    (b'{"model": "tiny-e2b", "messages": [1]}', "messages[0]", "messages[0]"),
])
def test_schema_errors_name_the_json_path(hostile, body, message, param):
    status, err, _ = raw_request(hostile.port, post_head("/v1/chat/completions", len(body)), body)
    error = assert_openai_error(status, err, 400)
    assert message in error["message"] and error["param"] == param, error
