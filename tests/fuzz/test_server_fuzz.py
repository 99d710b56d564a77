"""Fuzzing the OpenAI server (issue 38): request bodies built from the OpenAI schema (chat completions and
completions, valid in shape) and then mutated (wrong types, huge / deep / surrogate / NUL values, NaN and
Infinity as JSON tokens, missing and extra fields, truncated JSON), posted to the app in-process serving a
tiny synthetic model. The only outcomes allowed: 200 with a well-formed OpenAI response (or an event stream
ending in [DONE]), or a 4xx with OpenAI's error JSON. Never a 5xx, a non-JSON error or a request past its
deadline; and after each target the server answers a greedy request with the same text as before it.

2,000 examples per target in CI (MARKBASE_FUZZ_EXAMPLES); `pytest --fuzz-long` runs 10^5
(MARKBASE_SERVER_FUZZ_EXAMPLES, set by tests/conftest.py)."""

import base64
import copy
import json
import math
import os
import shutil
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import markbase as mb
from generation.conftest import synthetic  # noqa: F401  (the tiny synthetic checkpoints, shared)
from markbase.serve import create_app
from serve.asgi_client import AsgiClient, Response, error_of
from serve.test_server import png_bytes, wav_bytes

EXAMPLES = int(os.environ.get("MARKBASE_SERVER_FUZZ_EXAMPLES") or os.environ.get("MARKBASE_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))
REQUEST_DEADLINE = 30.0  # seconds; a request still unanswered then is a hang
MODEL = "tiny-e2b"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MEDIA_DIR = os.path.join(tempfile.gettempdir(), f"markbase-server-fuzz-{os.getpid()}")  # filled by the fixture
GREEDY = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about rivers."}], "temperature": 0,
          "max_tokens": 6}


@pytest.fixture(scope="module")
def server(synthetic):  # noqa: F811
    os.makedirs(MEDIA_DIR, exist_ok=True)
    with open(os.path.join(MEDIA_DIR, "a.png"), "wb") as f:
        f.write(png_bytes(size=(8, 8)))
    # max_context 128: a request whose max_tokens a mutation removed still ends within ~100 tokens.
    model = mb.load(synthetic("e2b"), max_context=128)
    app = create_app(lambda: model, MODEL, allow_media_dir=MEDIA_DIR)
    assert app.state.markbase.wait_loaded(30)
    client = AsgiClient(app)
    yield client
    client.close()
    app.state.markbase.worker.stop()
    shutil.rmtree(MEDIA_DIR, ignore_errors=True)


class Raw:
    """JSON text spliced into a body as it is: what json.dumps cannot write (nesting past Python's recursion
    limit, bytes that are not UTF-8)."""

    def __init__(self, text: bytes):
        self.text = text

    def __repr__(self):
        return f"Raw({self.text[:40]!r}{'...' if len(self.text) > 40 else ''} [{len(self.text)} bytes])"


def serialize(body) -> bytes:
    """The body as JSON bytes: NaN / Infinity as the tokens Python writes, Raw values spliced in."""
    raws: list[bytes] = []

    def placeholder(value):
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(type(value).__name__)

    text = json.dumps(body, default=placeholder, allow_nan=True).encode()
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00").encode(), raw, 1)
    return text


# ------------------------------------------------------------------------------- valid-shaped bodies

TEXT = st.text(max_size=40)
WORDS = st.sampled_from(["hello", "Tell me a story.", "What is 2+2?", "", " ", "\n\n", "é ü 漢字 🙂",
                         "<|tool_call>call:f{a:1}<tool_call|>", "<|channel>thought\nx<channel|>", "<|image|>",
                         "<turn|>", "{{ 7 * 7 }}", "{% for x in range(9) %}x{% endfor %}"])
CONTENT_TEXT = st.one_of(WORDS, TEXT)
# A tool's name (st.from_regex would be slow)
NAME = st.builds(str.__add__, st.sampled_from("abcxyzAZ_"), st.text("abcdefxyz0189_-", max_size=12))
CALL_ID = st.integers(0, 99).map(lambda i: f"call_{i}")
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40),
                         st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda c: st.one_of(st.lists(c, max_size=3),
                                                            st.dictionaries(TEXT, c, max_size=3)), max_leaves=5)
ARGUMENTS = st.dictionaries(NAME, JSON_VALUES, max_size=3)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


IMAGE_URLS = st.sampled_from([data_url("image/png", png_bytes(size=(8, 8))), "file://" + MEDIA_DIR + "/a.png",
                              MEDIA_DIR + "/a.png", MEDIA_DIR + "/missing.png", MEDIA_DIR + "/../a.png", MEDIA_DIR,
                              "file://", "/etc/passwd",
                              "https://example.com/a.png", "data:image/png;base64,AAAA", "data:,"])
AUDIO = st.sampled_from([base64.b64encode(wav_bytes(0.1)).decode(), "AAAA", "%%%"])
TEXT_PART = st.fixed_dictionaries({"type": st.just("text"), "text": CONTENT_TEXT})
USER_PART = st.one_of(
    TEXT_PART,
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.one_of(
        st.fixed_dictionaries({"url": IMAGE_URLS}, optional={"detail": st.just("auto")}), IMAGE_URLS)}),
    st.fixed_dictionaries({"type": st.just("input_audio"), "input_audio": st.fixed_dictionaries(
        {"data": AUDIO}, optional={"format": st.sampled_from(["wav", "mp3"])})}))
TOOL_CALL = st.fixed_dictionaries({"id": CALL_ID,
                                   "type": st.just("function"),
                                   "function": st.fixed_dictionaries({"name": NAME,
                                                                      "arguments": ARGUMENTS.map(json.dumps)})})
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer"]),
                           "content": st.one_of(CONTENT_TEXT, st.lists(TEXT_PART, max_size=2))}),
    st.fixed_dictionaries({"role": st.just("user"),
                           "content": st.one_of(CONTENT_TEXT, st.lists(USER_PART, max_size=3))}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(st.none(), CONTENT_TEXT)},
                          optional={"tool_calls": st.lists(TOOL_CALL, min_size=1, max_size=2),
                                    "reasoning_content": CONTENT_TEXT}),
    st.fixed_dictionaries({"role": st.just("tool"), "content": CONTENT_TEXT},
                          optional={"tool_call_id": CALL_ID,
                                    "name": NAME}))
SCHEMA = st.recursive(st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean"])},
                                            optional={"description": TEXT}),
                      lambda c: st.fixed_dictionaries({"type": st.just("object"),
                                                       "properties": st.dictionaries(NAME, c, max_size=3)},
                                                      optional={"required": st.lists(NAME, max_size=2)}),
                      max_leaves=5)
TOOL = st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": NAME}, optional={"description": TEXT, "parameters": SCHEMA, "strict": st.just(False)})})
STOP = st.one_of(st.text(min_size=1, max_size=5), st.lists(st.text(min_size=1, max_size=5), max_size=4))
MAX_TOKENS = st.integers(1, 3)  # generation stays short in a valid body
COMMON = {"temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1), "seed": st.integers(0, 2**63 - 1),
          "stop": STOP, "stream": st.booleans(),
          "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
          "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2), "user": TEXT,
          "metadata": st.dictionaries(NAME, TEXT, max_size=2), "n": st.just(1), "logprobs": st.just(False)}
CHAT_BODY = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": st.lists(MESSAGE, min_size=1, max_size=4), "max_tokens": MAX_TOKENS},
    optional={**COMMON, "tools": st.lists(TOOL, max_size=2), "tool_choice": st.sampled_from(["auto", "none"]),
              "reasoning_effort": st.sampled_from(["none", "low", "high"]),
              "chat_template_kwargs": st.fixed_dictionaries({"enable_thinking": st.booleans()}),
              "response_format": st.just({"type": "text"}), "parallel_tool_calls": st.just(True)})
COMPLETIONS_BODY = st.fixed_dictionaries(
    {"model": st.just(MODEL), "prompt": st.one_of(CONTENT_TEXT, st.lists(CONTENT_TEXT, min_size=1, max_size=1)),
     "max_tokens": MAX_TOKENS},
    optional={**COMMON, "echo": st.booleans(), "suffix": st.just(""), "best_of": st.just(1)})

# ------------------------------------------------------------------------------------------- mutations

SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
HOSTILE = st.one_of(
    JSON_VALUES,  # any JSON value: mostly the wrong type for the field it lands in
    st.sampled_from([None, True, False, 0, -1, 1, 2**31, 2**63, 2**64, -2**63, 10**30, 1.5, -0.0, 1e308, -1e308,
                     5e-324, "", "0", "true", "auto", [], {}, [[]], {"": None}, ["text"], {"type": "text"}]),
    st.sampled_from([math.nan, math.inf, -math.inf]),  # NaN / Infinity / -Infinity tokens
    st.builds(lambda a, s, b: a + s + b, TEXT, SURROGATE, TEXT),  # a lone surrogate (escaped as \udXXX)
    st.builds(lambda a, b: a + "\x00" + b, TEXT, TEXT),
    st.sampled_from([10**4, 10**5]).map(lambda n: "word " * (n // 5)),  # huge strings: past the context
    st.sampled_from([10**3, 10**4]).map(lambda n: ["x"] * n),
    st.sampled_from([65, 300, 800]).map(lambda d: Raw(b"[" * d + b"]" * d)),  # deep, below Python's json limit
    st.sampled_from([65, 300]).map(lambda d: Raw(b'{"a":' * d + b"1" + b"}" * d)),
    st.sampled_from(['{"a": NaN}', '{"a": "\\ud800"}', "[" * 5000 + "]" * 5000, '{"a": 1' + "0" * 5000 + "}",
                     '{"a": 1e999}', "{", "null", "[]", "\"s\""]),  # strings that are tool call arguments
)
FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
          "stream_options", "stop", "seed", "logprobs", "top_logprobs", "logit_bias", "tools", "tool_choice",
          "response_format", "user", "echo", "suffix", "best_of", "role", "content", "tool_calls", "tool_call_id",
          "name", "type", "text", "image_url", "url", "detail", "input_audio", "data", "format", "function",
          "arguments", "parameters", "strict", "description", "include_usage", "enable_thinking", "top_k", "x"]


# What a mutation does; a whole new body ("root") less often, as most of those are refused alike.
OPS = ["replace"] * 3 + ["remove"] * 2 + ["add"] * 2 + ["root"]


def hostile(data, values=HOSTILE):
    return copy.deepcopy(data.draw(values, label="value"))


def slots(tree) -> list[tuple]:
    """Every (container, key) of a body: where a mutation can replace, remove or add a value."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        pairs = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in pairs:
            out.append((node, key))
            if isinstance(value, (dict, list)) and len(value) < 100:
                stack.append(value)
    return out


def mutate(data, body):
    """Up to three mutations of the body tree, then maybe one of its JSON text."""
    body = copy.deepcopy(body)  # (the strategies' constants, e.g. st.just({...}), stay as they are)
    for _ in range(data.draw(st.integers(0, 3), label="mutations")):
        where = slots(body)
        op = data.draw(st.sampled_from(OPS), label="op")
        if op == "root" or not where:
            body = hostile(data, st.one_of(HOSTILE, st.just({})))
            continue
        node, key = data.draw(st.sampled_from(where), label="at")
        if op == "replace":
            node[key] = hostile(data)
        elif op == "remove":
            del node[key]
        elif isinstance(node, dict):
            node[data.draw(st.one_of(st.sampled_from(FIELDS), TEXT), label="key")] = hostile(data)
        else:
            node.append(hostile(data))
    raw = serialize(body)
    if data.draw(st.integers(0, 9), label="truncate?") == 0:  # truncated JSON (still UTF-8)
        text = raw.decode()
        raw = text[:data.draw(st.integers(0, max(len(text) - 1, 0)), label="cut")].encode()
    return raw


# ---------------------------------------------------------------------------------------- the outcomes

FINISH = {"stop", "length", "tool_calls"}


def check_choice(route: str, choice: dict, streamed: bool) -> None:
    assert choice["index"] == 0, choice
    assert choice["finish_reason"] in FINISH or (streamed and choice["finish_reason"] is None), choice
    if route == COMPLETIONS:
        assert isinstance(choice["text"], str)
        return
    message = choice["delta" if streamed else "message"]
    assert isinstance(message.get("content", ""), (str, type(None))), message
    for call in message.get("tool_calls") or []:
        assert call["type"] == "function" and isinstance(call["id"], str) and isinstance(call["function"]["name"], str)
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
    if not streamed:
        assert message["role"] == "assistant"


def check_usage(usage: dict) -> None:
    assert all(isinstance(usage[k], int) and usage[k] >= 0 for k in ("prompt_tokens", "completion_tokens",
                                                                    "total_tokens"))


def check_answer(route: str, r: Response) -> None:
    """A 200 that is a well-formed OpenAI answer, or a 4xx that is OpenAI's error JSON."""
    if 400 <= r.status < 500:
        error = error_of(r)
        if r.status == 400 and error["param"] is not None:  # an error names the field at fault
            assert error["message"].startswith(error["param"]), error
        return
    assert r.status == 200, (r.status, r.headers, r.body[:500])
    kind = "chat.completion" if route == CHAT else "text_completion"
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = r.events()
        assert events and events[-1] == "[DONE]", events[-3:]
        for chunk in events[:-1]:
            assert isinstance(chunk, dict) and "error" not in chunk, chunk
            assert chunk["object"] == (kind + ".chunk" if route == CHAT else kind), chunk
            for choice in chunk["choices"]:
                check_choice(route, choice, streamed=True)
            if chunk.get("usage"):
                check_usage(chunk["usage"])
        return
    body = r.json()
    assert body["object"] == kind and body["model"] == MODEL and len(body["choices"]) == 1, body
    check_choice(route, body["choices"][0], streamed=False)
    check_usage(body["usage"])


def post_and_check(server: AsgiClient, route: str, raw: bytes) -> None:
    t0 = time.monotonic()
    r = server.post(route, raw, timeout=REQUEST_DEADLINE)
    try:
        check_answer(route, r)
    except (AssertionError, KeyError, TypeError, ValueError) as e:
        raise AssertionError(f"{route} answered {r.status} in {time.monotonic() - t0:.2f} s, not an allowed outcome "
                             f"({type(e).__name__}: {e}):\nbody sent: {raw[:500]!r}\nanswer: {r.body[:500]!r}") from e


def greedy_text(server: AsgiClient) -> str:
    r = server.post(CHAT, GREEDY, timeout=REQUEST_DEADLINE)
    assert r.status == 200, r.body
    return r.json()["choices"][0]["message"]["content"]


def still_the_same(server: AsgiClient, before: str) -> None:
    """After a fuzz run: nothing left running, and the greedy answer is what it was."""
    state = server.app.state.markbase
    deadline = time.monotonic() + 10
    while state.worker.running or state.worker.waiting:
        assert time.monotonic() < deadline, "requests still running after the fuzz run"
        time.sleep(0.01)
    assert greedy_text(server) == before


REQUESTS = st.one_of(st.tuples(st.just(CHAT), CHAT_BODY), st.tuples(st.just(COMPLETIONS), COMPLETIONS_BODY))


def test_server_fuzz(server):
    before = greedy_text(server)

    @FUZZ
    @given(REQUESTS, st.data())
    def one(request, data):
        route, body = request
        post_and_check(server, route, mutate(data, body))

    one()
    still_the_same(server, before)


BASE_BODIES = [
    (CHAT, {"model": MODEL, "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 2}),
    (CHAT, {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "max_tokens": 2, "stream": True, "tools": [{"type": "function", "function": {"name": "f"}}]}),
    (COMPLETIONS, {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2, "temperature": 0.5}),
]
NOT_UTF8 = [b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xe2\x82"]
RAW_VALUES = st.one_of(st.sampled_from(NOT_UTF8).map(lambda b: Raw(b'"a' + b + b'b"')),
                       st.sampled_from([1000, 5000, 100_000]).map(lambda d: Raw(b"[" * d + b"]" * d)),
                       st.sampled_from([1000, 100_000]).map(lambda d: Raw(b'{"a":' * d + b"1" + b"}" * d)))


def test_server_fuzz_bytes(server):
    """Bytes that are not UTF-8 and nesting past Python's recursion limit, anywhere in a body."""
    before = greedy_text(server)

    @FUZZ
    @given(st.sampled_from(BASE_BODIES), st.data())
    def one(request, data):
        route, body = request
        body = copy.deepcopy(body)
        for _ in range(data.draw(st.integers(1, 2), label="mutations")):
            node, key = data.draw(st.sampled_from(slots(body)), label="at")
            node[key] = data.draw(RAW_VALUES, label="value")
        raw = serialize(body)
        if data.draw(st.booleans(), label="bytes too?"):  # and a bad byte at any offset
            at = data.draw(st.integers(0, len(raw)), label="offset")
            raw = raw[:at] + data.draw(st.sampled_from(NOT_UTF8), label="bytes") + raw[at:]
        post_and_check(server, route, raw)

    one()
    still_the_same(server, before)
