"""Every Python API argument checked (issue 38, items 8 and 9): a value of the wrong type or range is the
exact MarkbaseError subclass with the argument named in its message, never a TypeError / ValueError /
OverflowError / AttributeError; a Chat refuses a second turn while its streamed turn is open. Then a
Hypothesis target calls the API with arguments drawn from a pool of wrong types on a tiny synthetic model,
allowing only a result or a MarkbaseError (2,000 deterministic examples in CI, 10^4 with --fuzz-long)."""

import os
import shutil
import types
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import markbase as mb
from generation.conftest import synthetic  # noqa: F401 - the session's tiny checkpoints
from markbase import _core
from markbase.generate import GenerationResult, TurnStream

EXAMPLES = int(os.environ.get("MARKBASE_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=timedelta(seconds=10),
                suppress_health_check=list(HealthCheck))
MAX_CONTEXT = 64
SR = 16_000
IMAGE = np.zeros((32, 32, 3), np.uint8)
VIDEO = np.zeros((2, 32, 32, 3), np.uint8)
AUDIO = (np.sin(np.arange(SR // 10) / 5) * 0.1).astype(np.float32)
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def ckpt(synthetic):  # noqa: F811
    return synthetic("e2b")


@pytest.fixture(scope="module")
def model(ckpt):
    return mb.load(ckpt, max_context=MAX_CONTEXT)


@pytest.fixture(scope="module")
def ids(model):
    return model.encode_prompt("hi")


def raises_naming(cls, name: str, fn, *args, **kwargs):
    """Calls fn, which must raise exactly `cls` (not a subclass, not another MarkbaseError) with `name` in
    its message."""
    with pytest.raises(mb.MarkbaseError) as e:
        fn(*args, **kwargs)
    assert type(e.value) is cls, f"{type(e.value).__name__}: {e.value}"
    assert name in str(e.value), str(e.value)
    return e.value


# --- the escapes listed in issue 38, item 8 -----------------------------------------------------------------

@pytest.mark.parametrize("path", [None, 123, ["x"], 1.5, {"p": 1}, "", "a\0b", "\ud800dir"])
def test_load_and_validate_refuse_a_path_that_is_not_one(path):
    raises_naming(mb.InputError, "load: path", mb.load, path)
    raises_naming(mb.InputError, "validate: path", mb.validate, path)


def test_a_bytes_path_loads_like_its_str(ckpt):
    model = mb.load(os.fsencode(ckpt), max_context=16)
    assert model.path == str(ckpt)
    assert mb.validate(os.fsencode(ckpt), scan_values=False).ok
    raises_naming(mb.CheckpointError, "/no/such/dir", mb.load, b"/no/such/dir")


@pytest.mark.parametrize("kwargs, name", [
    (dict(quantize=[4]), "load: quantize"), (dict(quantize="q3"), "load: quantize"),
    (dict(quantize="q8", group_size=64.0), "load: group_size"),
    (dict(quantize="q8", group_size=[64]), "load: group_size"),
    (dict(precision=[1]), "load: precision"), (dict(dtype=np.array(["auto", "f32"])), "load: dtype"),
    (dict(quantize="q4", embedding_bits="4"), "load: embedding_bits"), (dict(preload="yes"), "load: preload"),
    (dict(progress=2), "load: progress"), (dict(prefill_chunk=2**70), "load: prefill_chunk"),
    (dict(prefill_chunk=64.0), "load: prefill_chunk"), (dict(max_context=2**70), "load: max_context"),
    (dict(max_context="16"), "load: max_context"), (dict(bogus=1), "'bogus'"),
])
def test_load_keywords(ckpt, kwargs, name):
    raises_naming(mb.InputError, name, mb.load, ckpt, **kwargs)


def test_load_device_of_the_wrong_type(ckpt):
    raises_naming(mb.DeviceError, "load: device", mb.load, ckpt, device=np.array(["cpu", "auto"]))


@pytest.mark.parametrize("kwargs, name", [(dict(scan_values="no"), "validate: scan_values"),
                                          (dict(progress="x"), "validate: progress"), (dict(bogus=1), "'bogus'")])
def test_validate_keywords(ckpt, kwargs, name):
    raises_naming(mb.InputError, name, mb.validate, ckpt, **kwargs)


@pytest.mark.parametrize("value", ["abc", [1], float("nan"), 2**70, 1.5, True, 0, MAX_CONTEXT + 1])
def test_session_max_context(model, value):
    raises_naming(mb.InputError, "session: max_context", model.session, value)
    raises_naming(mb.InputError, "session: max_context", mb.Session, model, value)


def test_session_takes_a_model():
    raises_naming(mb.InputError, "Session: model", mb.Session, "model", 8)


@pytest.mark.parametrize("value", ["x", 2**70, -1, None, 1.5, np.float64(1.0)])
def test_truncate(model, ids, value):
    s = model.session()
    s.prefill(ids)
    raises_naming(mb.InputError, "truncate: n", s.truncate, value)
    assert s.truncate(np.int64(1)) and s.position == 1


@pytest.mark.parametrize("value", ["x", None, 5, object()])
def test_sample_and_step_take_a_sampler(model, ids, value):
    s = model.session()
    s.prefill(ids)
    raises_naming(mb.InputError, "sample: sampler", s.sample, value)
    raises_naming(mb.InputError, "step: sampler", s.step, 5, value)
    raises_naming(mb.InputError, "step: token_id", s.step, "5", _core.Sampler(temperature=0.0))
    raises_naming(mb.InputError, "decode: token_id", s.decode, 2**70)


@pytest.mark.parametrize("embeddings", ["abc", None, [[1.0], [2.0, 3.0]], np.zeros((1, 1)), np.array([["x"]])])
def test_prefill_embeddings_embeddings(model, ids, embeddings):
    raises_naming(mb.InputError, "prefill_embeddings: embeddings", model.session().prefill_embeddings, embeddings, ids)


@pytest.mark.parametrize("block_ids", [
    "wrong length", "float dtype", "ragged", "strings", "2-D", "beyond int32", "below -1"])
def test_prefill_embeddings_block_ids(model, ids, block_ids):
    n = len(ids)
    bad = {"wrong length": np.zeros(n + 1, np.int32), "float dtype": np.full(n, 0.5), "ragged": [[1, 2], [3]],
           "strings": ["a"] * n, "2-D": np.zeros((n, 2), np.int32), "beyond int32": np.full(n, 2**40),
           "below -1": np.full(n, -2)}[block_ids]
    x = model.embed(ids)
    raises_naming(mb.InputError, "prefill_embeddings: block_ids", model.session().prefill_embeddings, x, ids,
                  block_ids=bad)
    model.session().prefill_embeddings(x, ids, block_ids=np.full(n, -1))  # the valid case runs


def test_prefill_keywords(model, ids):
    s = model.session()
    raises_naming(mb.InputError, "prefill: all_logits", s.prefill, ids, all_logits="x")
    raises_naming(mb.InputError, "prefill: images", s.prefill, ids, images=np.zeros(3))
    raises_naming(mb.InputError, "prefill: max_soft_tokens", s.prefill, ids, max_soft_tokens=np.array([70, 140]))
    raises_naming(mb.InputError, "prefill_embeddings: all_logits", s.prefill_embeddings, model.embed(ids), ids,
                  all_logits=None)


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_audio_s="x"), "max_audio_s"), (dict(max_audio_s=float("nan")), "max_audio_s"),
    (dict(max_audio_s=[30]), "max_audio_s"), (dict(sample_rate=2**2000), "sample_rate"),
    (dict(sample_rate="16k"), "sample_rate")])
def test_encode_audio_keywords(model, kwargs, name):
    raises_naming(mb.InputError, name, model.encode_audio, AUDIO, **({"sample_rate": SR} | kwargs))


@pytest.mark.parametrize("samples", [[[0.0, 1.0], [0.0]], [0.0, "x"], [[0.0], 1.0]])
def test_encode_audio_ragged_samples(model, samples):
    raises_naming(mb.InputError, "samples", model.encode_audio, samples, SR)


@pytest.mark.parametrize("kwargs, name", [
    (dict(video_fps="x"), "video_fps"), (dict(fps="x"), "fps"), (dict(fps=float("nan")), "fps"),
    (dict(fps=float("inf")), "fps"), (dict(num_frames=2.5), "num_frames"),
    (dict(num_frames=np.array([1, 2])), "num_frames"), (dict(max_soft_tokens="x"), "max_soft_tokens"),
    (dict(max_soft_tokens=70.0), "max_soft_tokens")])
def test_encode_video_keywords(model, kwargs, name):
    raises_naming(mb.InputError, f"encode_video: {name}", model.encode_video, VIDEO, **kwargs)


def test_encode_video_extreme_but_valid_rates(model):
    """A huge fps (or tiny video_fps) asks for more frames than exist: every frame, no OverflowError."""
    every_frame = model.encode_video(VIDEO, 70, num_frames=len(VIDEO))
    np.testing.assert_array_equal(model.encode_video(VIDEO, 70, fps=1e308, video_fps=1e-300), every_frame)


@pytest.mark.parametrize("value", [[1], np.array([70, 140]), "70", 70.0])
def test_encode_image_budget(model, value):
    raises_naming(mb.InputError, "encode_image: max_soft_tokens", model.encode_image, IMAGE, max_soft_tokens=value)


@pytest.mark.parametrize("kwargs, name", [
    (dict(prompt_or_messages="\ud800"), "prompt"),
    (dict(prompt_or_messages="ok \udfff"), "prompt"),
    (dict(prompt_or_messages=[{"role": "user", "content": "a\ud800b"}]), "messages[0].content"),
    (dict(prompt_or_messages=[{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]),
     "messages[0].content[0].text"),
    (dict(prompt_or_messages="hi", system="\udc00"), "system"),
    (dict(prompt_or_messages="hi", tools=[{"name": "f\ud800"}]), "tools[0].name"),
])
def test_lone_surrogates_are_named(model, kwargs, name):
    e = raises_naming(mb.InputError, name, model.generate, max_new_tokens=2, **kwargs)
    assert "surrogate" in str(e)


def test_tokenizer_encode_decode_arguments(model):
    tok = model.tokenizer
    raises_naming(mb.InputError, "encode: text", tok.encode, "\ud800")
    raises_naming(mb.InputError, "encode: text", tok.encode, b"hi")
    raises_naming(mb.InputError, "encode: add_special_tokens", tok.encode, "hi", add_special_tokens="yes")
    for ids in (["x"], [2**70], [-1], [1.5], [[1]]):
        raises_naming(mb.InputError, "decode: ids[0]", tok.decode, ids)
    raises_naming(mb.InputError, "decode: ids", tok.decode, 5)
    raises_naming(mb.InputError, "decode: ids", tok.decode, "abc")
    raises_naming(mb.InputError, "id_to_token: i", tok.id_to_token, "x")
    raises_naming(mb.InputError, "id_to_token: i", tok.id_to_token, 2**40)
    raises_naming(mb.InputError, "token_to_id: token", tok.token_to_id, 5)
    assert tok.decode(np.array(tok.encode("hello"))) == tok.decode(tok.encode("hello"))


@pytest.mark.parametrize("kwargs, name", [
    (dict(bogus=1), "'bogus'"), (dict(stream="x"), "generate: stream"),
    (dict(enable_thinking="x"), "generate: enable_thinking"), (dict(tools=5), "generate: tools"),
    (dict(system=5), "system"), (dict(seed=2**64), "seed"), (dict(seed=-1), "seed"),
    (dict(seed="1"), "seed"), (dict(max_new_tokens=2**70 + 0.5), "max_new_tokens"),
    (dict(temperature=10**400), "temperature"),
])
def test_generate_keywords(model, kwargs, name):
    raises_naming(mb.InputError, name, model.generate, "hi", **({"max_new_tokens": 2} | kwargs))


def test_chat_refuses_stream_and_unknown_keywords(model):
    raises_naming(mb.InputError, "chat: stream", model.chat, USER, stream=True)
    raises_naming(mb.InputError, "'bogus'", model.chat, USER, bogus=1)


@pytest.mark.parametrize("seed", [2**64, -1, "x", 1.5, [1]])
def test_generate_batch_seed_range(model, seed):
    e = raises_naming(mb.InputError, "seed", model.generate_batch, ["a", "b"], seed=seed, max_new_tokens=2)
    assert "[0, 2**64)" in str(e)


def test_generate_batch_seeds_wrap_past_the_largest(model):
    """Seeds are integers in [0, 2**64), checked in one place; prompt i of a batch seeded s gets (s + i) mod 2**64."""
    top = 2**64 - 1
    got = model.generate_batch(["a", "b"], seed=top, temperature=1.0, max_new_tokens=4)
    assert got[0].token_ids == model.generate("a", seed=top, temperature=1.0, max_new_tokens=4).token_ids
    assert got[1].token_ids == model.generate("b", seed=0, temperature=1.0, max_new_tokens=4).token_ids


@pytest.mark.parametrize("kwargs, name", [
    (dict(bogus=1), "new_chat: unknown keyword argument 'bogus'"), (dict(temperature="hot"), "temperature"),
    (dict(enable_thinking="x"), "new_chat: enable_thinking"), (dict(tools="x"), "new_chat: tools"),
    (dict(system=5), "new_chat: system"), (dict(messages="hi"), "new_chat: messages")])
def test_new_chat_arguments(model, kwargs, name):
    raises_naming(mb.InputError, name, model.new_chat, **kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(bogus=1), "Chat.send: unknown keyword argument 'bogus'"), (dict(enable_thinking=True), "enable_thinking"),
    (dict(stream="x"), "Chat.send: stream"), (dict(seed=2**64), "seed")])
def test_chat_send_arguments(model, kwargs, name):
    chat = model.new_chat(max_new_tokens=2)
    raises_naming(mb.InputError, name, chat.send, "hi", **kwargs)
    assert chat.messages == []  # the refused turn left no trace
    assert isinstance(chat.send("hi"), str)  # and did not leave the chat locked


# --- generation_config.json holding the wrong thing -------------------------------------------------------------

@pytest.mark.parametrize("content, key", [
    ("[1]", "top level must be a JSON object"), ('"x"', "top level"), ('{"top_p": 7}', "top_p"),
    ('{"max_new_tokens": -5}', "max_new_tokens"), ('{"temperature": "hot"}', "temperature"),
    ('{"eos_token_id": [1, "x"]}', "eos_token_id"), ('{"do_sample": "yes"}', "do_sample"),
    ('{"top_k": 1e400}', "top_k"),
])
def test_generation_config_content_is_a_checkpoint_error(tmp_path, ckpt, content, key):
    """transformers cannot load such a file either (GenerationConfig.from_pretrained fails on it): a
    CheckpointError naming the file and the key, not an AttributeError, nor an InputError blaming the caller."""
    d = tmp_path / "ckpt"
    shutil.copytree(ckpt, d)
    (d / "generation_config.json").write_text(content)
    m = mb.load(d, max_context=MAX_CONTEXT)
    for call in (lambda: m.generate("hi", max_new_tokens=2), lambda: m.new_chat(), lambda: m.prepare("hi")):
        e = raises_naming(mb.CheckpointError, "generation_config.json", call)
        assert key in str(e)


@pytest.mark.parametrize("content", ["{not json", '{"temperature": null, "top_k": null}', "{}"])
def test_generation_config_unreadable_or_null_gives_the_defaults(tmp_path, ckpt, content):
    """Not JSON: ignored, as transformers' model loader falls back to defaults; null values: unset."""
    d = tmp_path / "ckpt"
    shutil.copytree(ckpt, d)
    (d / "generation_config.json").write_text(content)
    m = mb.load(d, max_context=MAX_CONTEXT)
    assert len(m.generate("hi", max_new_tokens=2).token_ids) <= 2


@pytest.mark.parametrize("part", [{"type": "image", "image": IMAGE, "max_soft_tokens": np.array([70, 140])},
                                  {"type": "video", "video": VIDEO, "num_frames": np.array([])}])
def test_media_part_options(model, part):
    name = "max_soft_tokens" if "max_soft_tokens" in part else "num_frames"
    raises_naming(mb.InputError, name, model.encode_prompt, [{"role": "user", "content": [part]}])


# --- item 9: one open turn per Chat ---------------------------------------------------------------------------

def test_chat_refuses_a_turn_while_its_stream_is_open(model):
    chat = model.new_chat(temperature=0, max_new_tokens=6)
    stream = chat.send("Count to ten.", stream=True)
    assert isinstance(stream, TurnStream)
    next(stream)
    for call in (lambda: chat.send("again"), lambda: chat.send("again", stream=True), chat.reset):
        e = raises_naming(mb.InputError, "previous streamed turn is still open", call)
        assert "close()" in str(e)
    assert [m["role"] for m in chat.messages] == ["user"]  # nothing interleaved
    pieces = list(stream)  # the open turn goes on undisturbed, from its own cache
    assert isinstance(pieces[-1], GenerationResult)
    assert [m["role"] for m in chat.messages] == ["user", "assistant"]
    # exhausted: the chat is free, and its answer equals a fresh conversation's
    fresh = model.new_chat(messages=[dict(m) for m in chat.messages], temperature=0, max_new_tokens=6)
    assert chat.send("And then?") == fresh.send("And then?")


def test_chat_refuses_a_turn_while_another_thread_runs_one(model):
    chat = model.new_chat(max_new_tokens=2)
    chat._turn_open.acquire()  # as a send running in another thread holds it
    raises_naming(mb.InputError, "in use by another thread", chat.send, "hi")
    chat._turn_open.release()
    assert isinstance(chat.send("hi"), str)


def test_closing_or_dropping_an_open_stream_frees_the_chat(model):
    chat = model.new_chat(temperature=0, max_new_tokens=4)
    stream = chat.send("Hi", stream=True)
    next(stream)
    stream.close()
    assert chat.messages == []
    with chat.send("Hi", stream=True) as stream:  # a with-block closes it
        next(stream)
    assert chat.messages == []
    chat.send("Hi", stream=True)  # never iterated, dropped at once: no turn was taken
    assert chat.messages == []
    unstarted = chat.send("Hi", stream=True)
    unstarted.close()
    want = model.new_chat(temperature=0, max_new_tokens=4).send("Hi")
    assert chat.send("Hi") == want


def test_an_error_inside_a_streamed_turn_frees_the_chat(model):
    chat = model.new_chat(max_new_tokens=2)
    stream = chat.send([{"type": "weird"}], stream=True)  # refused when the turn starts
    with pytest.raises(mb.InputError, match="unknown content type"):
        next(stream)
    assert chat.messages == []
    assert isinstance(chat.send("hi"), str)


# --- the fuzz target ------------------------------------------------------------------------------------------

NUMPY_ODDITIES = [np.zeros(0), np.zeros((2, 3, 4)), np.array(["a", "b"]), np.array([1 + 2j]), np.array([np.nan]),
                  np.zeros(3, np.int8), np.zeros(3, bool), np.array([None, 1], dtype=object), np.float32("nan"),
                  np.int64(-1), np.uint64(2**64 - 1), np.float64("inf"), np.zeros((1, 0)), np.array(3)]
HOSTILE = st.one_of(
    st.sampled_from([None, True, False, "", "x", "\ud800", "a\udfffb", b"x", b"", float("nan"), float("inf"),
                     -float("inf"), 0, -1, 1, 2, 2**31, 2**63, 2**64, 2**64 - 1, 2**70, -2**70, 1.5, -0.0, 1e308,
                     [], [1], ["x"], [[1, 2], [3]], [None], {}, {"a": 1}, (), (1, 2), object(), Ellipsis, 1j,
                     "/dev/null", "/", "hi", [{"role": "user", "content": "\ud800"}], [{"role": "user"}]]),
    st.sampled_from(NUMPY_ODDITIES),
    st.integers(-2**70, 2**70), st.floats(), st.text(max_size=6), st.binary(max_size=6),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.lists(st.one_of(st.integers(-3, 300), st.text(max_size=2), st.floats()), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _calls(model, ckpt, session, ids):
    """name -> (callable taking keywords, valid keywords): the API surface the fuzz target covers."""
    tok, x = model.tokenizer, model.embed(ids)
    sampler = _core.Sampler(temperature=0.0)
    sampling = dict(max_new_tokens=2, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                    presence_penalty=0.0, frequency_penalty=0.0, seed=0, stop=None)

    def new_chat_send(content, stream, system, **options):
        return model.new_chat(system=system, max_new_tokens=2).send(content, stream=stream, **options)

    def stream_push(skip_special_tokens, token_id, **extra):
        return tok.stream(skip_special_tokens).push(token_id, **extra)

    return {
        "load": (mb.load, dict(path=ckpt, device="cpu", dtype="auto", max_context=16, prefill_chunk=512, preload=False,
                               progress=None, quantize=None, group_size=64, precision="auto", embedding_bits=8)),
        "validate": (mb.validate, dict(path=ckpt, scan_values=False, progress=None)),
        "session": (model.session, dict(max_context=None)),
        "logits": (model.logits, dict(input_ids=ids, images=None, videos=None, audio=None, max_soft_tokens=None,
                                      max_audio_s=None)),
        "embed": (model.embed, dict(input_ids=ids)),
        "encode_prompt": (model.encode_prompt, dict(prompt_or_messages="hi", system=None)),
        "encode_image": (model.encode_image, dict(image=IMAGE, max_soft_tokens=70)),
        "encode_video": (model.encode_video, dict(video=VIDEO, max_soft_tokens=70, num_frames=2, fps=None,
                                                  video_fps=None)),
        "encode_audio": (model.encode_audio, dict(audio=AUDIO, sample_rate=SR, max_audio_s=None)),
        "generate": (model.generate, dict(prompt_or_messages="hi", stream=False, system=None, enable_thinking=None,
                                          tools=None, **sampling)),
        "generate_batch": (model.generate_batch, dict(prompts=["hi", "yo"], system=None, **sampling)),
        "chat": (model.chat, dict(messages=USER, **sampling)),
        "prepare": (model.prepare, dict(prompt_or_messages="hi", system=None, enable_thinking=None, tools=None,
                                        **sampling)),
        "start_sequence": (model.start_sequence, dict(prompt_or_messages="hi", system=None, enable_thinking=None,
                                                      tools=None, **sampling)),
        "new_chat": (model.new_chat, dict(system=None, messages=None, enable_thinking=None, tools=None, **sampling)),
        "new_chat.send": (new_chat_send, dict(content="hi", stream=False, system=None, **sampling)),
        "trace_nonfinite": (model.trace_nonfinite, dict(inputs=ids)),
        "Session": (mb.Session, dict(model=model, max_context=8)),
        "memory_plan": (model.memory_plan, {}),
        "Session.prefill": (session.prefill, dict(input_ids=ids, all_logits=False, images=None, videos=None,
                                                  audio=None, max_soft_tokens=None, max_audio_s=None)),
        "Session.prefill_embeddings": (session.prefill_embeddings, dict(embeddings=x, input_ids=ids, block_ids=None,
                                                                        all_logits=False)),
        "Session.decode": (session.decode, dict(token_id=5)),
        "Session.sample": (session.sample, dict(sampler=sampler)),
        "Session.step": (session.step, dict(token_id=5, sampler=sampler)),
        "Session.truncate": (session.truncate, dict(n=1)),
        "Session.reset": (session.reset, {}),
        "Tokenizer.encode": (tok.encode, dict(text="hi", add_special_tokens=True)),
        "Tokenizer.decode": (tok.decode, dict(ids=[5, 6], skip_special_tokens=False)),
        "Tokenizer.id_to_token": (tok.id_to_token, dict(i=5)),
        "Tokenizer.token_to_id": (tok.token_to_id, dict(token="hi")),
        "Tokenizer.stream.push": (stream_push, dict(skip_special_tokens=False, token_id=5)),
    }


class Surface:
    """The session and the calls of the fuzz target (with a short repr for Hypothesis' failure reports)."""

    def __init__(self, model, ckpt, ids):
        self.session, self.ids = model.session(), ids
        self.calls = _calls(model, ckpt, self.session, ids)

    def __repr__(self) -> str:
        return "Surface()"


@pytest.fixture(scope="module")
def surface(model, ckpt, ids):
    return Surface(model, ckpt, ids)


CALL_NAMES = sorted([
    "load", "validate", "session", "logits", "embed", "encode_prompt", "encode_image", "encode_video", "encode_audio",
    "generate", "generate_batch", "chat", "prepare", "start_sequence", "new_chat", "new_chat.send",
    "trace_nonfinite", "memory_plan",
    "Session", "Session.prefill", "Session.prefill_embeddings", "Session.decode", "Session.sample", "Session.step",
    "Session.truncate", "Session.reset", "Tokenizer.encode", "Tokenizer.decode", "Tokenizer.id_to_token",
    "Tokenizer.token_to_id", "Tokenizer.stream.push"])


def test_the_fuzz_covers_every_call(surface):
    assert sorted(surface.calls) == CALL_NAMES


@FUZZ
@given(name=st.sampled_from(CALL_NAMES), data=st.data())
def test_hostile_arguments(surface, name, data):
    session = surface.session
    fn, valid = surface.calls[name]
    slots = sorted(valid) + ["bogus_keyword"]
    chosen = data.draw(st.lists(st.sampled_from(slots), min_size=1, max_size=2, unique=True), label="slots")
    kwargs = dict(valid) | {slot: data.draw(HOSTILE, label=slot) for slot in chosen}
    if name.startswith("Session."):  # a session holding a short prompt, as decode / sample / step need
        session.reset()
        session.prefill(surface.ids)
    try:
        out = fn(**kwargs)
        if isinstance(out, (types.GeneratorType, TurnStream)):
            for _ in out:
                pass
    except mb.MarkbaseError:
        pass
