"""Tokenizer: one <bos>, sparse ids, streaming detokenisation, stop strings, thinking split."""

import pytest

import markbase as mb
from markbase.generate import _StopScanner
from markbase.tokenizer import Tokenizer, split_thinking
from markbase.testing.tokenizer_build import SPECIAL_IDS

TEXTS = ["Hello world! How are you?", "emoji 🎉🤖 and more 👩‍👩‍👧", "你好，世界。こんにちは", "mixed ünïcödé ∑ ≠ 𝔘 text",
         "Once upon a time 🐉 there was 龍 and <|turn> a special token", "  leading and trailing spaces  "]


@pytest.fixture(scope="module")
def tok(synthetic):
    return Tokenizer(synthetic("e2b"))


def test_special_ids_are_the_real_ones(tok):
    for token, i in SPECIAL_IDS.items():
        assert tok.token_to_id(token) == i
    assert tok.vocab_size == 258885  # sparse: far fewer tokens than ids


def test_exactly_one_bos(tok):
    ids = tok.encode("Hello")
    assert ids[0] == 2 and ids.count(2) == 1
    assert tok.encode("<bos>Hello").count(2) == 1
    assert 2 not in tok.encode("Hello", add_special_tokens=False)


@pytest.mark.parametrize("text", TEXTS)
def test_roundtrip(tok, text):
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


@pytest.mark.parametrize("text", TEXTS)
def test_streaming_equals_one_shot_decode(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    stream = tok.stream()
    pieces = [stream.push(i) for i in ids]
    pieces.append(stream.flush())
    assert "".join(pieces) == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces)  # never a broken character


def test_texts_exercise_byte_fallback(tok):
    pieces = {t: [tok.id_to_token(i) for i in tok.encode(t, add_special_tokens=False)] for t in TEXTS}
    assert sum(any(p.startswith("<0x") for p in ps) for ps in pieces.values()) >= 3


def test_stream_holds_back_incomplete_bytes(tok):
    ids = tok.encode("🎉", add_special_tokens=False)
    assert len(ids) == 4  # four byte-fallback pieces
    stream = tok.stream()
    assert [stream.push(i) for i in ids] == ["", "", "", "🎉"]


def test_stop_scanner_across_pieces():
    s = _StopScanner(["STOP", "<end>"])
    out = []
    for piece in ["abc S", "TO", "P tail"]:
        text, hit = s.feed(piece)
        out.append(text)
        if hit:
            break
    assert "".join(out) == "abc " and hit == "STOP"
    s = _StopScanner(["xyz"])
    assert s.feed("ax") == ("a", None)  # "x" might begin the stop string: held back
    assert s.feed("b") == ("xb", None)


def test_split_thinking():
    assert split_thinking("<|channel>thought\nponder<channel|>The answer") == ("ponder", "The answer")
    assert split_thinking("plain") == (None, "plain")


def test_missing_or_broken_tokenizer(tmp_path, synthetic):
    import shutil

    with pytest.raises(mb.CheckpointError, match="tokenizer.json"):
        Tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(mb.CheckpointError, match="unreadable tokenizer"):
        Tokenizer(tmp_path)
    d = tmp_path / "ckpt"
    shutil.copytree(synthetic("e2b"), d)
    (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }")
    with pytest.raises(mb.CheckpointError, match="chat template"):
        mb.load(d).generate([{"role": "user", "content": "hi"}], max_new_tokens=2)
