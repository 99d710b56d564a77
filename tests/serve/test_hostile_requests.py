"""Hostile request bodies (issue 38, item 3), each posted to the app in-process: a 400 with OpenAI's error
JSON whose `param` and message name the field at fault by its JSON path, never a 500 or plain text; and
the server answers a greedy request after all of them with the same text as before."""

import json

import pytest

import markbase as mb
from markbase.serve import create_app
from markbase.serve.tool_calls import MAX_DEPTH, split_tool_calls
from serve.asgi_client import AsgiClient, error_of

MODEL = "tiny-e2b"
GREEDY = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about rivers."}], "temperature": 0,
          "max_tokens": 6}


@pytest.fixture(scope="module")
def client(synthetic, tmp_path_factory):
    model = mb.load(synthetic("e2b"), max_context=256)
    app = create_app(lambda: model, MODEL, allow_media_dir=str(tmp_path_factory.mktemp("media")))
    assert app.state.markbase.wait_loaded(30)
    c = AsgiClient(app)
    yield c
    c.close()
    app.state.markbase.worker.stop()


def chat(*messages, **fields) -> dict:
    return {"model": MODEL, "messages": list(messages), "max_tokens": 2, **fields}


def user(content):
    return {"role": "user", "content": content}


def assistant_calls(calls):
    return {"role": "assistant", "content": None, "tool_calls": calls}


def call(id="call_1", name="get_weather", arguments='{"city": "Paris"}'):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(name="get_weather", **function):
    return {"type": "function", "function": {"name": name, **function}}


HI = user("hi")
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"

# (route, body, the JSON path the error names, a phrase of its message)
HOSTILE = {
    # the item-3 inputs that were 500s as plain text or "generation failed: TypeError"
    "tool_calls is a number": (CHAT, chat(HI, {"role": "assistant", "content": None, "tool_calls": 5}),
                               "messages[1].tool_calls", "expected an array"),
    "tool call id is a list": (CHAT, chat(HI, assistant_calls([call(id=[1, 2])])),
                               "messages[1].tool_calls[0].id", "expected a string"),
    "tool call id is a dict": (CHAT, chat(HI, assistant_calls([call(id={"a": 1})])),
                               "messages[1].tool_calls[0].id", "expected a string"),
    "tool_call_id is a list": (CHAT, chat(HI, assistant_calls([call()]),
                                          {"role": "tool", "tool_call_id": ["call_1"], "content": "sunny"}),
                               "messages[2].tool_call_id", "expected a string"),
    "tool_call_id is a dict": (CHAT, chat(HI, assistant_calls([call()]),
                                          {"role": "tool", "tool_call_id": {"id": 1}, "content": "sunny"}),
                               "messages[2].tool_call_id", "expected a string"),
    "arguments 50000 deep": (CHAT, chat(HI, assistant_calls([call(arguments="[" * 50000 + "]" * 50000)])),
                             "messages[1].tool_calls[0].function.arguments", "nested more than"),
    "arguments 200 deep (parses, too deep)": (CHAT, chat(HI, assistant_calls([call(arguments='{"a":' * 200 + "1"
                                                                                             + "}" * 200)])),
                                              "messages[1].tool_calls[0].function.arguments" + ".a" * MAX_DEPTH,
                                              "nested more than"),
    "arguments not JSON": (CHAT, chat(HI, assistant_calls([call(arguments="{city: Paris")])),
                           "messages[1].tool_calls[0].function.arguments", "not valid JSON"),
    "arguments a JSON array": (CHAT, chat(HI, assistant_calls([call(arguments="[1, 2]")])),
                               "messages[1].tool_calls[0].function.arguments", "expected a JSON object"),
    "arguments hold NaN": (CHAT, chat(HI, assistant_calls([call(arguments='{"x": NaN}')])),
                           "messages[1].tool_calls[0].function.arguments.x", "not a JSON number"),
    "arguments hold a lone surrogate": (CHAT, chat(HI, assistant_calls([call(arguments='{"x": "a\\ud800"}')])),
                                        "messages[1].tool_calls[0].function.arguments.x", "lone surrogate"),
    "NUL in an image path": (CHAT, chat(user([{"type": "image_url", "image_url": {"url": "/tmp/a\u0000b.png"}}])),
                             "messages[0].content[0].image_url.url", "NUL"),
    "lone surrogate in content": (CHAT, chat(user("a\ud800b")), "messages[0].content", "lone surrogate \\ud800"),
    "lone surrogate in a text part": (CHAT, chat(user([{"type": "text", "text": "x\udfffy"}])),
                                      "messages[0].content[0].text", "lone surrogate \\udfff"),
    "lone surrogate in a completions prompt": (COMPLETIONS, {"model": MODEL, "prompt": "a\ud800b", "max_tokens": 2},
                                               "prompt", "lone surrogate"),
    "lone surrogate in a tool name": (CHAT, chat(HI, tools=[tool("get\ud800")]), "tools[0].function.name",
                                      "lone surrogate"),
    "lone surrogate in a key": (CHAT, chat(HI, tools=[tool(parameters={"type": "object", "properties": {
        "\udc00": {"type": "string"}}})]), 'tools[0].function.parameters.properties["\\udc00"]', "lone surrogate"),
    "tool name is a number": (CHAT, chat(HI, tools=[tool(5)]), "tools[0].function.name", "expected a string"),
    "tool name with spaces": (CHAT, chat(HI, tools=[tool("get weather")]), "tools[0].function.name",
                              "not a tool name"),
    "tool name in a call is a list": (CHAT, chat(HI, assistant_calls([call(name=["f"])])),
                                      "messages[1].tool_calls[0].function.name", "expected a string"),
    # every field an OpenAI client sends, with the wrong type or a value markbase cannot honour
    "message is a string": (CHAT, chat("hello"), "messages[0]", "expected a message object"),
    "unknown role": (CHAT, chat({"role": "wizard", "content": "hi"}), "messages[0].role", "unknown role"),
    "content is a number": (CHAT, chat(user(5)), "messages[0].content", "expected a string or an array"),
    "user content missing": (CHAT, chat({"role": "user"}), "messages[0].content", "required"),
    "text part text is a dict": (CHAT, chat(user([{"type": "text", "text": {"a": 1}}])), "messages[0].content[0].text",
                                 "expected a string"),
    "unknown part type": (CHAT, chat(user([{"type": "file", "file": {}}])), "messages[0].content[0].type",
                          "unsupported content part type"),
    "image part in a system message": (CHAT, chat({"role": "system", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}, HI), "messages[0].content[0].type", "unsupported"),
    "image detail high": (CHAT, chat(user([{"type": "image_url", "image_url": {"url": "data:,", "detail": "high"}}])),
                          "messages[0].content[0].image_url.detail", "only 'auto'"),
    "audio data is a number": (CHAT, chat(user([{"type": "input_audio", "input_audio": {"data": 5}}])),
                               "messages[0].content[0].input_audio.data", "expected a string"),
    "name on a user message": (CHAT, chat({"role": "user", "content": "hi", "name": "bob"}), "messages[0].name",
                               "not supported"),
    "unknown message field": (CHAT, chat({"role": "user", "content": "hi", "weight": 2}), "messages[0].weight",
                              "not supported"),
    "refusal in history": (CHAT, chat(HI, {"role": "assistant", "content": "x", "refusal": "no"}),
                           "messages[1].refusal", "not supported"),
    "tool call type": (CHAT, chat(HI, assistant_calls([dict(call(), type="code")])), "messages[1].tool_calls[0].type",
                       "expected \"function\""),
    "tool call without function": (CHAT, chat(HI, assistant_calls([{"id": "c"}])),
                                   "messages[1].tool_calls[0].function", "required"),
    "messages empty": (CHAT, chat(), "messages", "non-empty"),
    "messages a dict": (CHAT, dict(chat(), messages={"role": "user"}), "messages", "expected a non-empty array"),
    "tools a dict": (CHAT, chat(HI, tools={"type": "function"}), "tools", "expected an array"),
    "tool type": (CHAT, chat(HI, tools=[{"type": "retrieval", "function": {"name": "f"}}]), "tools[0].type",
                  "expected \"function\""),
    "tool description a list": (CHAT, chat(HI, tools=[tool(description=["x"])]), "tools[0].function.description",
                                "expected a string"),
    "tool parameters a string": (CHAT, chat(HI, tools=[tool(parameters="{}")]), "tools[0].function.parameters",
                                 "JSON Schema object"),
    "strict tool": (CHAT, chat(HI, tools=[tool(strict=True)]), "tools[0].function.strict", "not supported"),
    "strict is a number": (CHAT, chat(HI, tools=[tool(strict=0)]), "tools[0].function.strict", "expected a boolean"),
    "tool_choice required": (CHAT, chat(HI, tools=[tool()], tool_choice="required"), "tool_choice", "only 'auto'"),
    "tool_choice a function": (CHAT, chat(HI, tools=[tool()], tool_choice={"type": "function",
                                                                            "function": {"name": "get_weather"}}),
                               "tool_choice", "only 'auto'"),
    "tool_choice a number": (CHAT, chat(HI, tool_choice=3), "tool_choice", "expected"),
    "stop too many": (CHAT, chat(HI, stop=["a", "b", "c", "d", "e"]), "stop", "up to 4"),
    "stop a number": (CHAT, chat(HI, stop=5), "stop", "string"),
    "stop empty": (CHAT, chat(HI, stop=""), "stop", "non-empty"),
    "stream_options unknown": (CHAT, chat(HI, stream=True, stream_options={"include_usage": True, "x": 1}),
                               "stream_options.x", "unknown field"),
    "stream_options include_usage a string": (CHAT, chat(HI, stream=True, stream_options={"include_usage": "yes"}),
                                              "stream_options.include_usage", "boolean"),
    "stream a string": (CHAT, chat(HI, stream="true"), "stream", "boolean"),
    "response_format json": (CHAT, chat(HI, response_format={"type": "json_object"}), "response_format",
                             "only {\"type\": \"text\"}"),
    "response_format schema": (CHAT, chat(HI, response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
                               "response_format", "structured outputs"),
    "logit_bias": (CHAT, chat(HI, logit_bias={"50256": -100}), "logit_bias", "not supported"),
    "logprobs": (CHAT, chat(HI, logprobs=True), "logprobs", "not supported"),
    "top_logprobs": (CHAT, chat(HI, top_logprobs=3), "top_logprobs", "not supported"),
    "n 2": (CHAT, chat(HI, n=2), "n", "n=1"),
    "parallel_tool_calls false": (CHAT, chat(HI, parallel_tool_calls=False), "parallel_tool_calls", "not supported"),
    "audio output": (CHAT, chat(HI, modalities=["text", "audio"]), "modalities", "only [\"text\"]"),
    "functions (deprecated)": (CHAT, chat(HI, functions=[{"name": "f"}]), "functions", "tools"),
    "reasoning_effort unknown": (CHAT, chat(HI, reasoning_effort="extreme"), "reasoning_effort", "Input should be"),
    "chat_template_kwargs unknown key": (CHAT, chat(HI, chat_template_kwargs={"add_vision_id": True}),
                                         "chat_template_kwargs.add_vision_id", "unknown field"),
    "enable_thinking a string": (CHAT, chat(HI, chat_template_kwargs={"enable_thinking": "yes"}),
                                 "chat_template_kwargs.enable_thinking", "boolean"),
    "unknown top-level field": (CHAT, chat(HI, top_k=5), "top_k", "not a field this server supports"),
    "max_tokens a string": (CHAT, chat(HI, max_tokens="5"), "max_tokens", "integer"),
    "max_tokens negative": (CHAT, chat(HI, max_tokens=-1), "max_tokens", "greater than or equal to 1"),
    "seed 2**64": (CHAT, chat(HI, seed=2**64), "seed", "less than"),
    "temperature NaN token": (CHAT, chat(HI, temperature=float("nan")), "temperature", "not a JSON number"),
    "Infinity in tool parameters": (CHAT, chat(HI, tools=[tool(parameters={"type": "object",
                                                                            "maximum": float("inf")})]),
                                    "tools[0].function.parameters.maximum", "not a JSON number"),
    "100-deep tool parameters": (CHAT, chat(HI, tools=[tool(parameters=json.loads('{"a":' * 100 + "1" + "}" * 100))]),
                                 # (the body is the first level, tools the second, ...)
                                 "tools[0].function.parameters" + ".a" * (MAX_DEPTH - 4), "nested more than"),
    "model a number": (CHAT, dict(chat(HI), model=5), "model", "string"),
    "body an array": (CHAT, [chat(HI)], None, "must be a JSON object"),
    "prompt token ids": (COMPLETIONS, {"model": MODEL, "prompt": [1, 2, 3]}, "prompt", "token-id prompts"),
    "prompt two strings": (COMPLETIONS, {"model": MODEL, "prompt": ["a", "b"]}, "prompt", "one string"),
    "prompt a dict": (COMPLETIONS, {"model": MODEL, "prompt": {"text": "a"}}, "prompt", "one string"),
    "suffix": (COMPLETIONS, {"model": MODEL, "prompt": "a", "suffix": "b"}, "suffix", "not supported"),
    "best_of 3": (COMPLETIONS, {"model": MODEL, "prompt": "a", "best_of": 3}, "best_of", "best_of=1"),
    "echo a number": (COMPLETIONS, {"model": MODEL, "prompt": "a", "echo": 1}, "echo", "boolean"),
    "messages on completions": (COMPLETIONS, {"model": MODEL, "prompt": "a", "messages": []}, "messages",
                                "not a field"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_request_is_a_400_naming_the_field(client, name):
    route, body, param, phrase = HOSTILE[name]
    for stream in (False, True):  # streamed or not: the same plain 400 before any event
        sent = dict(body, stream=True) if stream and isinstance(body, dict) and "stream" not in body else body
        r = client.post(route, sent)
        assert r.status == 400, (r.status, r.body[:500])
        error = error_of(r)
        assert error["type"] == "invalid_request_error" and error["param"] == param, error
        assert phrase in error["message"], error
        assert error["message"].startswith(param + ": ") if param else True, error


def test_the_same_greedy_text_before_and_after(client):
    before = client.post(CHAT, GREEDY)
    assert before.status == 200, before.body
    for route, body, _, _ in HOSTILE.values():
        assert client.post(route, body).status == 400
    after = client.post(CHAT, GREEDY)
    assert after.status == 200 and after.json()["choices"] == before.json()["choices"]


def test_accepted_fields_that_do_not_change_the_output(client):
    """What OpenAI clients send with their neutral value, and fields that only label a request, are accepted."""
    neutral = dict(GREEDY, user="u1", metadata={"k": "v"}, store=False, service_tier="auto", n=1, logprobs=False,
                   top_logprobs=0, logit_bias={}, response_format={"type": "text"}, modalities=["text"],
                   parallel_tool_calls=True, stream_options=None, tools=[], tool_choice="auto",
                   reasoning_effort="none", safety_identifier="s", prompt_cache_key="p", functions=None)
    base = client.post(CHAT, GREEDY)
    r = client.post(CHAT, neutral)
    assert r.status == 200, r.body
    assert r.json()["choices"] == base.json()["choices"]
    # an assistant message as the openai client echoes it back from a response
    echoed = {"role": "assistant", "content": "Sure.", "refusal": None, "annotations": [], "audio": None,
              "function_call": None, "tool_calls": None}
    r = client.post(CHAT, dict(GREEDY, messages=[*GREEDY["messages"], echoed, user("More?")]))
    assert r.status == 200, r.body


def unparseable_body_is_openai_error_json(client, raw):
    r = client.post(COMPLETIONS, raw)
    assert r.status == 400, (r.status, r.body[:300])
    assert error_of(r)["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", [b'{"model": "tiny-e2b", "prompt": "a"', b"", b"{", b"nul"],
                         ids=["truncated JSON", "empty", "open brace", "bad token"])
def test_unparseable_body(client, raw):
    unparseable_body_is_openai_error_json(client, raw)


@pytest.mark.parametrize("raw", [b'{"model": "tiny-e2b", "prompt": "\xff\xfe"}', b"[" * 100000 + b"]" * 100000],
                         ids=["invalid UTF-8", "100k-deep JSON"])
def test_unparseable_body_refused_by_fastapi(client, raw):
    """(FastAPI refuses these before protocol.py sees them; the app's handlers answer OpenAI error JSON)"""
    unparseable_body_is_openai_error_json(client, raw)


def test_tool_call_parser_refuses_what_json_cannot_hold():
    """Model output the server parses into tool_calls: nesting past MAX_DEPTH (a RecursionError before) and
    numbers JSON cannot write (1e999 became Infinity in `arguments`) leave the call as text, as written."""
    for args in ("{a:" + "[" * 100_000 + "]" * 100_000 + "}", "{a:" + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
                 + "}", "{a:1e999}", "{a:-1e400}", "{a:1" + "0" * 5000 + "}"):
        text = f"Sure.<|tool_call>call:f{args}<tool_call|>"
        assert split_tool_calls(text) == (text, []), args[:40]
    deep_enough = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert split_tool_calls(f"<|tool_call>call:f{{a:{deep_enough}}}<tool_call|>")[1][0].arguments == \
        {"a": json.loads(deep_enough)}
