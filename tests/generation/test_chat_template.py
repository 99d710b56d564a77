"""Chat templates: markbase's rendering equals transformers' apply_chat_template for the same template."""

import pytest

from markbase.tokenizer import Tokenizer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]

CASES = {
    "user only": ([{"role": "user", "content": "Hi there  "}], {}),
    "system turn": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], {}),
    "thinking on": ([{"role": "user", "content": "Think about it"}], {"enable_thinking": True}),
    "thinking off": ([{"role": "user", "content": "Quick"}], {"enable_thinking": False}),
    "multi turn with thought stripped": ([
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<|channel>thought\nhmm<channel|>A1"},
        {"role": "user", "content": "Q2"}], {}),
    "multimodal parts": ([{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "What is this?"}, {"type": "audio"}, {"type": "video"}]}], {}),
    "tools": ([{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "tool_calls": [{"type": "function", "function": {
                   "name": "get_weather", "arguments": {"city": "Paris"}}}], "content": None},
               {"role": "tool", "name": "get_weather", "content": "sunny"}], {"tools": TOOLS}),
}


@pytest.fixture(scope="module", params=["e2b", "31b"])
def both(request, synthetic):
    from transformers import AutoTokenizer

    d = synthetic(request.param)
    return Tokenizer(d), AutoTokenizer.from_pretrained(d)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("gen", [True, False])
def test_parity_with_transformers(both, case, gen):
    ours, theirs = both
    messages, kw = CASES[case]
    want = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen, **kw)
    got = ours.apply_chat_template(messages, add_generation_prompt=gen, **kw)
    assert got == want
    assert got.startswith("<bos>") and got.count("<bos>") == 1


def test_generation_prompt_shapes(both):
    ours, _ = both
    text = ours.apply_chat_template([{"role": "user", "content": "x"}])
    assert text.endswith("<|turn>model\n") or text.endswith("<|turn>model\n<|channel>thought\n<channel|>")
