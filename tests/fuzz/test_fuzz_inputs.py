"""Fuzzing every input a user controls (issue 14, item 2): config.json, the tokenizer / template files,
chat messages, sampler arguments, token id arrays, image bytes and audio bytes. Each target: 2,000
deterministic examples in CI (10^4 with --fuzz-long); a result or a MarkbaseError, nothing else."""

import copy
import io
import json
import os
import shutil
import struct
import tempfile
import wave
import zlib
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import markbase as mb
from markbase.models.gemma4 import parse_config
from markbase.testing import make_checkpoint
from markbase.testing.released import RELEASED
from markbase.tokenizer import Tokenizer

EXAMPLES = int(os.environ.get("MARKBASE_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=timedelta(seconds=10),
                suppress_health_check=list(HealthCheck))

# Values a JSON field may hold, hostile ones included.
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                         st.text(max_size=20))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda c: st.one_of(st.lists(c, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), c, max_size=4)),
                           max_leaves=12)
BASE_CONFIG = json.loads(json.dumps(RELEASED["gemma-4-E2B-it"]))
TEXT_KEYS = sorted(BASE_CONFIG["text_config"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = make_checkpoint(tmp_path_factory.mktemp("fuzz") / "e2b", family="e2b", size="tiny", dtype="bf16", seed=5)
    return d, mb.load(d, max_context=128)


def allowed(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except mb.MarkbaseError:
        return None


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(TEXT_KEYS + ["extra_field", "vision_config", "audio_config"]),
                          st.one_of(JSON_VALUES, st.integers(0, 2**40))), min_size=1, max_size=4),
       st.lists(st.sampled_from(TEXT_KEYS), max_size=3))
def test_config_json(changes, removed):
    cfg = copy.deepcopy(BASE_CONFIG)
    for key, value in changes:
        (cfg if key in ("vision_config", "audio_config") else cfg["text_config"])[key] = value
    for key in removed:
        cfg["text_config"].pop(key, None)
    allowed(parse_config, cfg)
    allowed(parse_config, json.dumps(cfg))


CONTENT_PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(st.text(max_size=200), JSON_SCALARS)}),
    st.fixed_dictionaries({"type": st.sampled_from(["image", "audio", "video", "weird", 3])}),
    JSON_VALUES)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant", "model", "tool", "x", None]),
                           "content": st.one_of(st.text(max_size=300), st.lists(CONTENT_PART, max_size=3), JSON_SCALARS)}),
    JSON_VALUES)


@FUZZ
@given(st.one_of(st.lists(MESSAGE, max_size=4), JSON_VALUES), st.booleans())
def test_chat_messages(tiny, messages, thinking):
    _, model = tiny
    allowed(model.encode_prompt, messages, enable_thinking=thinking)


def test_huge_message(tiny):
    _, model = tiny
    big = "word " * 200_000  # 1 MB: far more than max_context tokens, refused from its bytes before tokenizing
    for call in (model.encode_prompt, lambda m: model.generate(m, max_new_tokens=1)):
        with pytest.raises(mb.InputError, match="context limit: the prompt has 1000[0-9]+ bytes"):
            call([{"role": "user", "content": big}])
    # Under the byte bound (5 bytes a word, tokens are up to max_token_bytes): tokenized, refused by its count.
    longer = "word " * (2 * model.max_context)
    assert 5 < model.tokenizer.max_token_bytes and len(model.encode_prompt(longer)) > model.max_context
    with pytest.raises(mb.InputError, match="context limit: the prompt has [0-9]+ tokens"):
        model.generate(longer, max_new_tokens=1)


SAMPLER_VALUES = st.one_of(JSON_SCALARS, st.floats(), st.integers(-2**70, 2**70), st.lists(st.text(max_size=3), max_size=3))


@FUZZ
@given(st.dictionaries(st.sampled_from(["max_new_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                                        "presence_penalty", "frequency_penalty", "seed", "stop"]),
                       SAMPLER_VALUES, max_size=4))
def test_sampler_arguments(tiny, kwargs):
    _, model = tiny
    if isinstance(kwargs.get("max_new_tokens"), int) and not isinstance(kwargs["max_new_tokens"], bool):
        kwargs["max_new_tokens"] = min(kwargs["max_new_tokens"], 2)
    if kwargs.get("max_new_tokens") is None:  # (None means the checkpoint's default)
        kwargs["max_new_tokens"] = 2
    out = allowed(model.generate, "Hi", **kwargs)
    if out is not None:
        assert len(out.token_ids) <= 2


@FUZZ
@given(st.one_of(st.lists(st.integers(-2**40, 2**40), max_size=80),
                 st.lists(st.integers(0, 300), min_size=1, max_size=80),
                 st.lists(st.floats(), max_size=5), st.lists(st.booleans(), max_size=5), JSON_VALUES))
def test_token_id_arrays(tiny, ids):
    _, model = tiny
    sess = model.session()
    logits = allowed(sess.prefill, ids)
    if logits is not None:
        assert np.isfinite(logits).all()
        allowed(sess.decode, ids[0] if ids else 0)


def png(width: int, height: int, body: bytes | None = None) -> bytes:
    """A PNG whose header claims width × height (the data need not match)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = body if body is not None else zlib.compress(b"\0" * min(width * 3 + 1, 1 << 16) * min(height, 64))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def small_png(seed: int) -> bytes:
    from PIL import Image

    arr = np.random.default_rng(seed).integers(0, 255, (12, 17, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


IMAGE_BYTES = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda n, cut: small_png(n)[:cut], st.integers(0, 3), st.integers(0, 400)),  # truncated
    st.builds(lambda b, i, v: (lambda x: x[:i] + bytes([v]) + x[i + 1:])(small_png(b)), st.integers(0, 3),
              st.integers(0, 200), st.integers(0, 255)),  # one byte flipped
    st.builds(png, st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),  # absurd dimensions
    st.builds(lambda w, h: png(w, h, zlib.compress(b"\0" * (1 << 22))), st.integers(1, 50000), st.integers(1, 50000)),
    st.builds(lambda s: b"GIF89a" + s, st.binary(max_size=50)),  # wrong / partial magic
)


def wav(samples: np.ndarray, rate: int, channels: int = 1, width: int = 2) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels), w.setsampwidth(width), w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return buf.getvalue()


GOOD_WAV = wav((np.sin(np.arange(3200) / 5) * 8000).astype(np.int16), 16000)
AUDIO_BYTES = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda cut: GOOD_WAV[:cut], st.integers(0, len(GOOD_WAV))),
    st.builds(lambda i, v: GOOD_WAV[:i] + bytes([v]) + GOOD_WAV[i + 1:], st.integers(0, 60), st.integers(0, 255)),
    st.builds(lambda rate: GOOD_WAV[:24] + struct.pack("<I", rate) + GOOD_WAV[28:], st.integers(0, 2**32 - 1)),
    st.builds(lambda n: b"RIFF" + struct.pack("<I", n) + b"WAVEfmt " + bytes(20), st.integers(0, 2**32 - 1)),
    st.builds(lambda s: b"ID3" + s, st.binary(max_size=60)),  # partial MP3 magic
)


MEDIA_BYTES = {"image": IMAGE_BYTES, "audio": AUDIO_BYTES}


@pytest.mark.parametrize("kind", sorted(MEDIA_BYTES))
@FUZZ
@given(data=st.data())
def test_media_bytes(tiny, kind, data):
    _, model = tiny
    soft = allowed(getattr(model, f"encode_{kind}"), data.draw(MEDIA_BYTES[kind]))
    if soft is not None:
        assert np.isfinite(soft).all()


TEMPLATES = st.one_of(
    st.text(max_size=120),
    st.sampled_from(["{% for m in messages %}{{ m['content'] }}{% endfor %}", "{{ raise_exception('no') }}",
                     "{% for i in range(10**9) %}x{% endfor %}", "{{ messages.__class__.__mro__ }}",
                     "{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}",
                     "{{ 1 + 'a' }}", "{{ [1] * 10**9 }}",
                     "{{ ''.join(['a'] * 10) }}", "{% if %}", "{{ messages[99]['role'] }}",
                     "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{{ (messages | tojson) * 3 }}"]))
TOKENIZER_CONFIG = st.one_of(JSON_VALUES, st.fixed_dictionaries({"chat_template": st.one_of(st.text(max_size=40), JSON_VALUES)}),
                             st.text(max_size=40))


@FUZZ
@given(st.one_of(st.none(), TEMPLATES), st.one_of(st.none(), TOKENIZER_CONFIG),
       st.one_of(st.none(), st.binary(max_size=80), st.just(b'{"version": "1.0"}')))
def test_tokenizer_files(tiny, template, tok_config, tok_json):
    src, _ = tiny
    d = tempfile.mkdtemp(prefix="mb-tokfuzz-")
    try:
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(src, name), d) if os.path.exists(os.path.join(src, name)) else None
        if template is not None:
            with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(template)
        if tok_config is not None:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                f.write(tok_config if isinstance(tok_config, str) else json.dumps(tok_config))
        if tok_json is not None:
            with open(os.path.join(d, "tokenizer.json"), "wb") as f:
                f.write(tok_json)
        tok = allowed(Tokenizer, d)
        if tok is not None:
            allowed(tok.apply_chat_template, [{"role": "user", "content": "hi"}])
            allowed(tok.encode, "hello")
    finally:
        shutil.rmtree(d, ignore_errors=True)
