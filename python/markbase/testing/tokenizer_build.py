"""Builds a Gemma-4-style tokenizer with the `tokenizers` library (for synthetic checkpoints and tests).

A byte-fallback BPE trained on a small built-in corpus; every Gemma 4 special token sits at its real id
(spec §8.1), ordinary tokens fill the free low ids, so ids are sparse (the largest is 258884).
"""

from __future__ import annotations

import json

SPECIAL_IDS = {
    "<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4,
    "<|tool>": 46, "<tool|>": 47, "<|tool_call>": 48, "<tool_call|>": 49, "<|tool_response>": 50,
    "<tool_response|>": 51, '<|"|>': 52, "<|think|>": 98, "<|channel>": 100, "<channel|>": 101,
    "<|turn>": 105, "<turn|>": 106, "<|image>": 255999, "<|audio>": 256000, "<|image|>": 258880,
    "<|audio|>": 258881, "<image|>": 258882, "<audio|>": 258883, "<|video|>": 258884,
}

_CORPUS = """
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Hello world! How are you today? I am fine, thank you. What is the weather like? It is sunny and warm.
Gemma is a family of open models. Markbase runs them natively on the CPU and on Apple silicon.
model user system assistant tool image audio video thought answer question response call declaration
The capital of France is Paris. Two plus two equals four. Water boils at one hundred degrees Celsius.
Once upon a time there was a little robot who wanted to learn how to paint the sky at sunset.
def main(): print("hello") return 0  # code, numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 2026
Bonjour le monde. Hola mundo. Hallo Welt. Ciao mondo. Olá mundo. Привет мир. 你好，世界。こんにちは世界。
""" * 4


def build_tokenizer_json(vocab_size: int = 1200) -> str:
    """tokenizer.json text of a byte-fallback BPE with the Gemma 4 special tokens at their real ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_IDS) + byte_tokens,
                                  show_progress=False)
    scratch = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    scratch.normalizer = normalizers.Replace(" ", "▁")
    scratch.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    scratch.train_from_iterator(_CORPUS.splitlines(), trainer)
    model = json.loads(scratch.to_str())["model"]
    learned = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]

    # Special tokens at their real ids; every other token packed into the free ids from the bottom.
    vocab = dict(SPECIAL_IDS)
    taken = set(vocab.values())
    next_id = 0
    for token, _ in learned:
        if token in vocab:
            continue
        while next_id in taken:
            next_id += 1
        vocab[token] = next_id
        taken.add(next_id)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_IDS])
    for t, i in SPECIAL_IDS.items():
        assert tok.token_to_id(t) == i, (t, i, tok.token_to_id(t))
    return tok.to_str()


def tokenizer_config(chat_template: str | None = None) -> dict:
    cfg = {
        "tokenizer_class": "GemmaTokenizer",
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "add_bos_token": False, "add_eos_token": False, "model_max_length": 1000000,
        "padding_side": "left",
    }
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    return cfg


# A Gemma-4-style chat template written for markbase (format of spec §8.2): system turn when the first
# message is system/developer, tools are given or thinking is on; <|think|> at its top; assistant → model;
# thought channels stripped from earlier model turns; media parts become placeholders; generation prompt
# `<|turn>model\n` (plus an empty closed thought channel when `empty_thought` is set and thinking is off,
# as the 26B/31B/12B templates do).
CHAT_TEMPLATE = r"""{%- macro strip_thinking(text) -%}
{%- set ns = namespace(out='') -%}
{%- for part in text.split('<channel|>') -%}
{%- if '<|channel>' in part -%}{%- set ns.out = ns.out + part.split('<|channel>')[0] -%}{%- else -%}{%- set ns.out = ns.out + part -%}{%- endif -%}
{%- endfor -%}
{{- ns.out | trim -}}
{%- endmacro -%}
{%- macro render_content(content, role) -%}
{%- if content is string -%}
{{- strip_thinking(content) if role == 'model' else content | trim -}}
{%- else -%}
{%- for part in content -%}
{%- if part['type'] == 'text' -%}{{- strip_thinking(part['text']) if role == 'model' else part['text'] | trim -}}
{%- elif part['type'] == 'image' -%}{{- '<|image|>' -}}
{%- elif part['type'] == 'audio' -%}{{- '<|audio|>' -}}
{%- elif part['type'] == 'video' -%}{{- '<|video|>' -}}
{%- else -%}{{- raise_exception('unknown content type ' + part['type']) -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- set loop_messages = messages -%}
{%- set thinking = enable_thinking is defined and enable_thinking -%}
{%- if thinking or tools or messages[0]['role'] in ['system', 'developer'] -%}
{{- '<|turn>system\n' -}}
{%- if thinking -%}{{- '<|think|>\n' -}}{%- endif -%}
{%- if messages[0]['role'] in ['system', 'developer'] -%}
{{- render_content(messages[0]['content'], 'system') -}}
{%- set loop_messages = messages[1:] -%}
{%- endif -%}
{%- for tool in tools or [] -%}
{%- set fn = tool['function'] if 'function' in tool else tool -%}
{{- '<|tool>declaration:' + fn['name'] + '{description:<|"|>' + (fn['description'] | default('')) + '<|"|>' -}}
{%- if fn['parameters'] is defined -%}{{- ',parameters:' + (fn['parameters'] | tojson) -}}{%- endif -%}
{{- '}<tool|>' -}}
{%- endfor -%}
{{- '<turn|>\n' -}}
{%- endif -%}
{%- for message in loop_messages -%}
{%- if message['role'] == 'tool' -%}
{{- '<|turn>user\n<|tool_response>response:' + (message['name'] | default('tool')) + '{value:<|"|>' + (message['content'] if message['content'] is string else message['content'] | tojson) + '<|"|>}<tool_response|><turn|>\n' -}}
{%- else -%}
{%- set role = 'model' if message['role'] in ['assistant', 'model'] else message['role'] -%}
{%- if role not in ['user', 'model', 'system', 'developer'] -%}{{- raise_exception('unknown role ' + message['role']) -}}{%- endif -%}
{{- '<|turn>' + role + '\n' -}}
{%- for call in message['tool_calls'] or [] -%}
{%- set fn = call['function'] if 'function' in call else call -%}
{{- '<|tool_call>call:' + fn['name'] + (fn['arguments'] | tojson if fn['arguments'] is mapping else fn['arguments']) + '<tool_call|>' -}}
{%- endfor -%}
{%- if message['content'] is not none -%}{{- render_content(message['content'], role) -}}{%- endif -%}
{{- '<turn|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|turn>model\n' -}}
{%- if EMPTY_THOUGHT and not thinking -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}
{%- endif -%}
"""


def chat_template(empty_thought: bool) -> str:
    """The template with the E-series (no empty thought) or larger-model (empty thought) generation prompt."""
    return CHAT_TEMPLATE.replace("EMPTY_THOUGHT", "true" if empty_thought else "false")


GENERATION_CONFIG = {"bos_token_id": 2, "eos_token_id": [1, 106, 50], "pad_token_id": 0, "do_sample": True,
                     "temperature": 1.0, "top_k": 64, "top_p": 0.95}
