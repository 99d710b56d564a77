"""`markbase serve` driven by the official `openai` client against a tiny synthetic E2B (random weights,
the test tokenizer) served by uvicorn on loopback. Expected outputs come from the same model called
directly (`Model.generate` with the same arguments), never from the server itself."""

import base64
import concurrent.futures as cf
import io
import json
import os
import resource
import socket
import threading
import time
import wave

import numpy as np
import openai
import pytest
import uvicorn

import markbase as mb
from markbase.serve import create_app
from markbase.serve.tool_calls import parse_call, split_tool_calls

KEY = "sk-test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    """An app served by uvicorn in a thread."""

    def __init__(self, app):
        self.app, self.port = app, free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, key=KEY, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=60, **kw)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def served(synthetic, tmp_path_factory):
    media_dir = tmp_path_factory.mktemp("media")
    model = mb.load(synthetic("e2b"), max_context=512)
    # max_batch 8: batched rows take the GEMV kernels, whose per-row sums are those of a single step, so
    # every request's greedy text equals its direct generate() whatever else shares its steps.
    app = create_app(lambda: model, "tiny-e2b", api_key=KEY, allow_media_dir=str(media_dir), max_queue=64, max_batch=8)
    run = Running(app)
    assert app.state.markbase.wait_loaded(30)
    run.model, run.media_dir = model, media_dir
    yield run
    run.stop()


def get(url: str, key: str | None = KEY) -> tuple[int, dict]:
    """GET a JSON route (status, body) with the API key (None: without): the /health checks, outside the
    OpenAI client."""
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def user(text):
    return [{"role": "user", "content": text}]


def direct(model, messages, **kw):
    return model.generate(messages, **kw)


def png_bytes(seed=0, size=(40, 32)) -> bytes:
    from PIL import Image

    arr = np.random.default_rng(seed).integers(0, 255, size=(size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def wav_bytes(seconds=0.5, rate=16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    pcm = (np.sin(2 * np.pi * 440 * t) * 0.3 * 32767).astype(np.int16)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------- routes


def test_models_and_health(served):
    models = served.client().models.list()
    assert [m.id for m in models.data] == ["tiny-e2b"]
    status, health = get(served.url + "/health")
    assert status == 200 and health["status"] == "ok" and health["model"] == "tiny-e2b" and "pid" in health
    # Without the key: liveness only (no pid, no traffic figures); the OpenAPI schema needs the key.
    assert get(served.url + "/health", key=None) == (200, {"status": "ok"})
    status, body = get(served.url + "/openapi.json", key=None)
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert get(served.url + "/openapi.json")[0] == 200


def test_chat_greedy_equals_direct_generate(served):
    msgs = user("Tell me a story about a robot.")
    got = served.client().chat.completions.create(model="tiny-e2b", messages=msgs, temperature=0, max_tokens=12)
    want = direct(served.model, msgs, temperature=0, max_new_tokens=12)
    assert got.choices[0].message.content == want.text and got.choices[0].message.role == "assistant"
    assert got.choices[0].finish_reason == ("length" if want.finish_reason == "length" else "stop")
    assert got.usage.prompt_tokens == want.prompt_tokens
    assert got.usage.completion_tokens == len(want.token_ids)
    assert got.object == "chat.completion" and got.model == "tiny-e2b"


def test_streamed_text_equals_non_streamed_for_the_same_seed(served):
    msgs = user("Hello there!")
    client = served.client()
    kw = dict(model="tiny-e2b", messages=msgs, temperature=1.0, top_p=0.9, max_tokens=24, seed=1234)
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # The seed is honoured: it is what the direct call with that seed gives.
    want = direct(served.model, msgs, temperature=1.0, top_p=0.9, max_new_tokens=24, seed=1234)
    assert text == want.text


def test_stop_strings(served):
    msgs = user("Count for me.")
    full = direct(served.model, msgs, temperature=0, max_new_tokens=20).text
    stop = full[3:5]
    assert stop and full.find(stop) >= 0
    got = served.client().chat.completions.create(model="tiny-e2b", messages=msgs, temperature=0, max_tokens=20,
                                                  stop=[stop])
    assert got.choices[0].message.content == full[: full.find(stop)]
    assert got.choices[0].finish_reason == "stop"


def test_completions_route(served):
    client = served.client()
    want = served.model.generate("The capital of France is", temperature=0, max_new_tokens=10)
    got = client.completions.create(model="tiny-e2b", prompt="The capital of France is", temperature=0, max_tokens=10)
    assert got.choices[0].text == want.raw_text and got.usage.prompt_tokens == want.prompt_tokens
    streamed = client.completions.create(model="tiny-e2b", prompt="The capital of France is", temperature=0,
                                         max_tokens=10, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == want.raw_text


def test_image_part_as_data_url_and_allowed_file(served):
    data = png_bytes()
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "What is this?"}]}]
    got = served.client().chat.completions.create(model="tiny-e2b", messages=msgs, temperature=0, max_tokens=8)
    want = direct(served.model, [{"role": "user", "content": [{"type": "image", "image": data},
                                                              {"type": "text", "text": "What is this?"}]}],
                  temperature=0, max_new_tokens=8)
    assert want.soft_tokens and got.usage.prompt_tokens == want.prompt_tokens
    assert got.choices[0].message.content == want.text
    path = os.path.join(served.media_dir, "a.png")
    with open(path, "wb") as f:
        f.write(data)
    msgs[0]["content"][0]["image_url"]["url"] = "file://" + path
    again = served.client().chat.completions.create(model="tiny-e2b", messages=msgs, temperature=0, max_tokens=8)
    assert again.choices[0].message.content == want.text


def test_audio_part(served):
    data = wav_bytes()
    msgs = [{"role": "user", "content": [{"type": "input_audio",
                                          "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}},
                                         {"type": "text", "text": "Transcribe."}]}]
    got = served.client().chat.completions.create(model="tiny-e2b", messages=msgs, temperature=0, max_tokens=8)
    want = direct(served.model, [{"role": "user", "content": [{"type": "audio", "audio": data},
                                                              {"type": "text", "text": "Transcribe."}]}],
                  temperature=0, max_new_tokens=8)
    assert want.media == ["audio"] and got.usage.prompt_tokens == want.prompt_tokens
    assert got.choices[0].message.content == want.text


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


def test_tools_round_trip_renders_declarations_calls_and_results(served):
    """The request's tools, the assistant's earlier tool call and the tool's result reach the prompt exactly
    as the chat template renders them (same token count and greedy output as the direct call)."""
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    got = served.client().chat.completions.create(model="tiny-e2b", messages=msgs, tools=TOOLS, temperature=0,
                                                  max_tokens=8)
    mine = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "name": "get_weather", "content": "sunny, 21 C"}]
    want = direct(served.model, mine, tools=TOOLS, temperature=0, max_new_tokens=8)
    prompt = served.model.tokenizer.apply_chat_template(mine, tools=TOOLS)
    assert "declaration:get_weather" in prompt and "call:get_weather" in prompt and "sunny, 21 C" in prompt
    assert got.usage.prompt_tokens == want.prompt_tokens
    # The reply is the direct call's text, split as the server splits it: prose as content, each tool call parsed.
    prose, calls = split_tool_calls(want.text)
    message = got.choices[0].message
    assert message.content == (prose if prose or not calls else None)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []] == \
        [(c.name, c.arguments) for c in calls]


def test_tool_call_parsing():
    text = ('Let me check.<|tool_call>call:get_weather{city:<|"|>Paris, FR<|"|>,days:3,units:{deg:<|"|>C<|"|>},'
            'ok:true,list:[1,2.5,<|"|>x<|"|>]}<tool_call|><|tool_call>call:ping{}<tool_call|>')
    rest, calls = split_tool_calls(text)
    assert rest == "Let me check."
    assert [c.name for c in calls] == ["get_weather", "ping"]
    assert calls[0].arguments == {"city": "Paris, FR", "days": 3, "units": {"deg": "C"}, "ok": True,
                                  "list": [1, 2.5, "x"]}
    assert parse_call('call:f{"a": "b", "n": null}').arguments == {"a": "b", "n": None}  # JSON form
    broken = "x<|tool_call>call:f{a:<tool_call|>"
    assert split_tool_calls(broken) == (broken, [])  # malformed: left as written
    with pytest.raises(ValueError):
        parse_call("nonsense")


# ------------------------------------------------------------------------------------------ bad requests


def test_bad_requests(served):
    client = served.client()
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-4", messages=user("hi"))
    with pytest.raises(openai.BadRequestError, match="n=1"):
        client.chat.completions.create(model="tiny-e2b", messages=user("hi"), n=2)
    with pytest.raises(openai.BadRequestError, match="role"):
        client.chat.completions.create(model="tiny-e2b", messages=[{"role": "wizard", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="tiny-e2b", messages=[])
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="tiny-e2b", messages=user("hi"), temperature=5)
    with pytest.raises(openai.BadRequestError, match="remote URLs"):
        client.chat.completions.create(model="tiny-e2b", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}])
    with pytest.raises(openai.BadRequestError, match="outside the allowed"):
        client.chat.completions.create(model="tiny-e2b", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "/etc/passwd"}}]}])
    with pytest.raises(openai.BadRequestError, match="not an image"):
        client.chat.completions.create(model="tiny-e2b", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"junk").decode()}}]}])
    with pytest.raises(openai.BadRequestError, match="base64"):
        client.chat.completions.create(model="tiny-e2b", messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "%%%", "format": "wav"}}]}])
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model="tiny-e2b", messages=user("word " * 600))
    assert e.value.status_code == 413 and "context limit" in str(e.value)
    with pytest.raises(openai.APIStatusError) as e:  # streamed: still a plain 413 before any event
        client.chat.completions.create(model="tiny-e2b", messages=user("word " * 600), stream=True)
    assert e.value.status_code == 413
    with pytest.raises(openai.AuthenticationError):
        served.client(key="wrong").chat.completions.create(model="tiny-e2b", messages=user("hi"))
    # After all that, the server still answers.
    assert client.chat.completions.create(model="tiny-e2b", messages=user("hi"), max_tokens=2).choices


def test_client_disconnect_frees_the_worker(served):
    """A streaming client that goes away mid-stream: its generation stops within a step or two, the worker
    takes the next request at once."""
    state = served.app.state.markbase
    client = served.client()
    done_before = state.worker.completed
    stream = client.chat.completions.create(model="tiny-e2b", messages=user("Go on forever."), max_tokens=400,
                                            temperature=0, stream=True)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    deadline = time.time() + 5
    while state.worker.completed == done_before:
        assert time.time() < deadline, "the cancelled generation kept running"
        time.sleep(0.01)
    t0 = time.time()
    client.chat.completions.create(model="tiny-e2b", messages=user("hi"), max_tokens=2)
    assert time.time() - t0 < 2.0


def test_503_while_loading_and_429_when_the_queue_is_full(synthetic):
    gate = threading.Event()
    model = mb.load(synthetic("e2b"), max_context=512)

    def slow_load():
        gate.wait(30)
        return model

    app = create_app(slow_load, "tiny", max_queue=1, max_batch=1)
    run = Running(app)
    try:
        client = run.client(key="unused")
        with pytest.raises(openai.APIStatusError) as e:
            client.chat.completions.create(model="tiny", messages=user("hi"))
        assert e.value.status_code == 503 and "loading" in str(e.value)
        assert get(run.url + "/health") == (503, {"status": "loading"})
        gate.set()
        assert app.state.markbase.wait_loaded(30)
        # One request running, one waiting: more get 429.
        def one(_):
            try:
                client.chat.completions.create(model="tiny", messages=user("Go on."), max_tokens=300, temperature=0)
                return 200
            except openai.APIStatusError as err:
                return err.status_code

        with cf.ThreadPoolExecutor(6) as ex:
            codes = list(ex.map(one, range(6)))
        assert codes.count(200) >= 2 and 429 in codes and set(codes) <= {200, 429}, codes
    finally:
        run.stop()


@pytest.mark.parametrize("family", ["e2b", "e4b", "26b", "31b", "12b"])
def test_answers_do_not_depend_on_the_traffic(synthetic, family):
    """Batch invariance through the API at the default precision: 24 concurrent requests (greedy and seeded
    sampling, 12 prompts) share decode steps of up to 16 rows, and each answer is the one the same request gets
    alone (model.generate, one sequence)."""
    model = mb.load(synthetic(family), max_context=256)
    run = Running(create_app(lambda: model, family, max_batch=16, max_queue=64))
    try:
        assert run.app.state.markbase.wait_loaded(60)
        asks = [(f"Request {i}: tell me about {w}.", t, 1000 + i) for i, w in
                enumerate(["rivers", "cats", "numbers", "music", "rain", "trees"] * 2) for t in (0.0, 0.9)]
        want = {a: direct(model, user(a[0]), temperature=a[1], seed=a[2], max_new_tokens=12).text for a in asks}
        client = run.client(key="unused")

        def one(a):
            r = client.chat.completions.create(model=family, messages=user(a[0]), temperature=a[1], seed=a[2],
                                               max_tokens=12)
            return a, r.choices[0].message.content or ""

        w = run.app.state.markbase.worker
        steps0, rows0 = w.steps, w.batch_rows
        with cf.ThreadPoolExecutor(24) as ex:
            got = list(ex.map(one, asks))
        assert (w.batch_rows - rows0) / (w.steps - steps0) > 4, "the requests did not share decode steps"
        differ = [(a, text, want[a]) for a, text in got if text != want[a]]
        assert not differ, f"{len(differ)} of {len(asks)} answers changed with the traffic: {differ[:2]}"
    finally:
        run.stop()


def test_concurrent_streaming_clients(served):
    """16 concurrent streaming clients, 48 requests: every stream's text equals its prompt's greedy text
    (no lost or duplicated pieces), no errors, requests shared decode steps, and memory does not grow from
    one round to the next."""
    prompts = [f"Prompt number {i}: say something." for i in range(4)]
    want = {p: direct(served.model, user(p), temperature=0, max_new_tokens=16).text for p in prompts}
    client = served.client()

    def one(i):
        p = prompts[i % len(prompts)]
        s = client.chat.completions.create(model="tiny-e2b", messages=user(p), temperature=0, max_tokens=16,
                                           stream=True)
        return p, "".join(c.choices[0].delta.content or "" for c in s if c.choices)

    def round_():
        with cf.ThreadPoolExecutor(16) as ex:
            for p, text in ex.map(one, range(48)):
                assert text == want[p]

    steps0, rows0 = served.app.state.markbase.worker.steps, served.app.state.markbase.worker.batch_rows
    round_()
    w = served.app.state.markbase.worker
    assert (w.batch_rows - rows0) / (w.steps - steps0) > 2, "concurrent requests did not share decode steps"
    assert get(served.url + "/health")[1]["running"] == 0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    round_()
    round_()
    rss3 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert rss3 - rss1 < 64 * 1024, f"peak RSS grew {(rss3 - rss1) / 1024:.0f} MB over two more rounds"


def test_markbase_serve_command(synthetic):
    """The CLI end to end: `markbase serve` in its own process answers once /health says ok."""
    import subprocess
    import sys

    import tempfile

    port = free_port()
    log = tempfile.TemporaryFile()  # (a pipe nobody reads would block the server once full)
    proc = subprocess.Popen([sys.executable, "-m", "markbase", "serve", "--model", synthetic("e2b"), "--port", str(port),
                             "--max-context", "256", "--model-id", "cli-model"],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(log.read().decode(errors="replace"))
            try:
                if get(f"http://127.0.0.1:{port}/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                log.seek(0)
                raise AssertionError("markbase serve did not become ready:\n" + log.read().decode(errors="replace"))
            time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        out = client.chat.completions.create(model="cli-model", messages=user("hi"), max_tokens=3, temperature=0)
        assert out.usage.completion_tokens >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_prompt_cache_reuses_a_shared_prefix(synthetic):
    """A second request that continues the first one's conversation prefills only what is new (usage's
    cached_tokens says how much was reused: whole prefill chunks of the first prompt) and answers exactly as an
    uncached run."""
    model = mb.load(synthetic("e2b"), max_context=512, prefill_chunk=16)
    run = Running(create_app(lambda: model, "tiny", max_batch=4))
    try:
        assert run.app.state.markbase.wait_loaded(30)
        client = run.client(key="unused")
        system = {"role": "system", "content": "You are a careful assistant. " * 6}
        first = [system, {"role": "user", "content": "First question?"}]
        a = client.chat.completions.create(model="tiny", messages=first, temperature=0, max_tokens=6)
        second = first + [{"role": "assistant", "content": a.choices[0].message.content},
                          {"role": "user", "content": "And a second one?"}]
        b = client.chat.completions.create(model="tiny", messages=second, temperature=0, max_tokens=6)
        want = direct(model, second, temperature=0, max_new_tokens=6)
        assert b.usage.prompt_tokens == want.prompt_tokens
        cached = b.usage.prompt_tokens_details.cached_tokens
        assert cached % 16 == 0 and a.usage.prompt_tokens - 16 < cached <= a.usage.prompt_tokens, cached
        assert b.choices[0].message.content == want.text
    finally:
        run.stop()


def test_long_prompts_prefill_in_chunks_between_decode_steps(synthetic):
    """With prefill_chunk 16 a 100-token prompt joins the batch over several iterations, one chunk per decode
    step of the streams already running; every request still answers as the same model run directly (the
    chunks are cut where a direct prefill cuts them)."""
    model = mb.load(synthetic("e2b"), max_context=512, prefill_chunk=16)
    run = Running(create_app(lambda: model, "tiny", max_batch=4))
    try:
        assert run.app.state.markbase.wait_loaded(30)
        long_prompt = "Please read all of this carefully: " + "one two three four five six " * 12
        prompts = ["Short one.", long_prompt, "Another short one.", long_prompt + " Now answer."]
        want = {p: direct(model, user(p), temperature=0, max_new_tokens=10).text for p in prompts}
        assert len(model.encode_prompt(user(long_prompt))) > 64
        client = run.client(key="unused")

        def one(p):
            s = client.chat.completions.create(model="tiny", messages=user(p), temperature=0, max_tokens=10, stream=True)
            return p, "".join(c.choices[0].delta.content or "" for c in s if c.choices)

        with cf.ThreadPoolExecutor(4) as ex:
            for p, text in ex.map(one, prompts * 2):
                assert text == want[p]
        # The worker's schedule: a long prompt went in over several chunks, and while it did, streams already
        # running got decode steps between its chunks (never two chunks back to back while a stream waited).
        events = list(run.app.state.markbase.worker.schedule)
        chunks = [e for e in events if e[0] == "prefill"]
        assert chunks and max(e[2] for e in chunks) == 16 and all(0 < e[2] <= 16 for e in chunks)
        def decoded(part):
            return {j for f in part if f[0] == "decode" for j in f[1]}

        # chunks of one prompt with decode steps of other streams between them
        interleaved = sum(1 for i, e in enumerate(events) if e[0] == "prefill" and events[i + 1:i + 2]
                          and events[i + 1][0] == "decode" and e[1] not in events[i + 1][1]
                          and any(f[0] == "prefill" and f[1] == e[1] for f in events[i + 2:]))
        assert interleaved >= 3, events
        # two chunks back to back only when no stream was running across them
        for i in range(len(events) - 1):
            if events[i][0] == events[i + 1][0] == "prefill":
                assert not decoded(events[:i]) & decoded(events[i + 2:]), (i, events)
    finally:
        run.stop()


def test_stream_router_splits_reasoning_content_and_held_tool_calls():
    """What a stream sends for raw model text arriving piece by piece: the thought channel as
    reasoning_content, the answer as content, and nothing of a tool call (it is sent parsed at the end)."""
    from markbase.serve.app import _PieceRouter

    pieces = ["<|channel>", "thought\nLet me", " think.", "<channel|>", "Sure", ", calling.", "<|tool_call>",
              "call:get_weather{city:", '<|"|>Paris<|"|>}', "<tool_call|>"]
    router = _PieceRouter(tools=True)
    out = [part for p in pieces for part in router.route(p) if part[1]]
    assert out == [("reasoning_content", "Let me"), ("reasoning_content", " think."), ("content", "Sure"),
                   ("content", ", calling.")]
    assert router.holding
    rest, calls = split_tool_calls("".join(pieces[4:]))
    assert rest == "Sure, calling." and calls[0].name == "get_weather" and calls[0].arguments == {"city": "Paris"}
    plain = _PieceRouter(tools=False)  # without tools a tool-call-looking text is just content
    assert [p for p in plain.route("a<|tool_call>b") if p[1]] == [("content", "a<|tool_call>b")]
