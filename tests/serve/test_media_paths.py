"""Media paths under --allow-media-dir, as a hostile client names them: a FIFO, /dev/zero, symlinks out of the
directory, a directory swapped for a symlink while the request waits, invalid paths, oversized media. Each is
a 4xx OpenAI error (never a hang, a 500 or a read outside the directory) and the server keeps answering.
Requests that used to hang run with a client timeout, so a regression fails instead of hanging CI."""

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

import markbase as mb
from markbase.serve import app as app_module
from markbase.serve import create_app, protocol
from markbase.serve.protocol import ApiError, MediaPolicy

from .test_server import KEY, Running, png_bytes, wav_bytes

HEADERS = {"Authorization": f"Bearer {KEY}"}

# Paths opened by this process under the watched prefixes (an audit hook cannot be removed: it only records).
WATCHED: list[str] = []
OPENED: list[str] = []


def _audit(event, args):
    if event == "open" and WATCHED and isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        if any(path.startswith(w) for w in WATCHED):
            OPENED.append(path)


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def server(synthetic, tmp_path_factory):
    media_dir = tmp_path_factory.mktemp("media")
    model = mb.load(synthetic("e2b"), max_context=512)
    app = create_app(lambda: model, "tiny-e2b", api_key=KEY, allow_media_dir=str(media_dir), max_queue=16, max_batch=4)
    run = Running(app)
    assert app.state.markbase.wait_loaded(30)
    run.model, run.media_dir, run.app = model, media_dir, app
    yield run
    run.stop()


@dataclass
class Response:
    status_code: int
    body: dict

    def json(self) -> dict:
        return self.body


def chat(server, content, timeout=20) -> Response:
    """POST /v1/chat/completions (any JSON, unlike the openai client); a socket timeout fails the test."""
    body = {"model": "tiny-e2b", "messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": 6}
    req = urllib.request.Request(server.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={**HEADERS, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Response(r.status, json.loads(r.read()))
    except urllib.error.HTTPError as e:
        return Response(e.code, json.loads(e.read()))
    except TimeoutError:
        pytest.fail(f"no answer within {timeout} s: the server is blocked")


def image_part(url) -> list:
    return [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is this?"}]


def greedy_text(server) -> str:
    r = chat(server, "Tell me about robots.")
    assert r.status_code == 200, r.body
    return r.json()["choices"][0]["message"]["content"]


def assert_refused(r: Response, status: int, *fragments) -> str:
    assert r.status_code == status, (r.status_code, r.body)
    msg = r.json()["error"]["message"]
    for f in fragments:
        assert f in msg, msg
    return msg


def test_fifo_in_the_media_dir_is_a_400_and_the_server_keeps_answering(server):
    before = greedy_text(server)
    fifo = os.path.join(server.media_dir, "p.jpg")
    os.mkfifo(fifo)
    try:
        t0 = time.monotonic()
        assert_refused(chat(server, image_part(fifo)), 400, fifo, "FIFO")
        assert time.monotonic() - t0 < 5
    finally:
        for _ in range(20):  # frees a worker stuck in open() (the old behaviour) before the next test
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        os.unlink(fifo)
    assert greedy_text(server) == before
    assert before == server.model.generate([{"role": "user", "content": "Tell me about robots."}], temperature=0,
                                           max_new_tokens=6).text


def test_devices_directories_and_invalid_paths_are_400(server):
    d = str(server.media_dir)
    cases = [(os.path.join(d, "nope.png"), "no such file"), (d, "directory"), ("/dev/zero", "outside"),
             ("file:///dev/zero", "outside"),
             (os.path.join(d, "a\u0000b.png"), "NUL"), (os.path.join(d, "x" * 5000), "too long"),
             ("", "expected a data: URL"), (123, "expected a string"), (["x"], "expected a string"),
             ({"a": 1}, "expected a string")]
    for url, fragment in cases:
        assert_refused(chat(server, image_part(url)), 400, fragment)
    # /dev/zero where devices are "allowed": refused for what it is, at once
    with pytest.raises(ApiError) as e:
        MediaPolicy("/dev").source("/dev/zero", "messages[0].content[0]")
    assert e.value.status == 400 and "character device" in e.value.message
    assert greedy_text(server)


def test_symlinks_out_of_the_media_dir_are_400(server, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(png_bytes(1))
    link, linkdir = os.path.join(server.media_dir, "link.png"), os.path.join(server.media_dir, "linkdir")
    os.symlink(outside / "secret.png", link)
    os.symlink(outside, linkdir)
    try:
        assert_refused(chat(server, image_part(link)), 400, "outside the allowed")
        assert_refused(chat(server, image_part(os.path.join(linkdir, "secret.png"))), 400, "outside the allowed")
        assert_refused(chat(server, image_part(os.path.join(server.media_dir, "..", "x.png"))), 400)
    finally:
        os.unlink(link)
        os.unlink(linkdir)


def test_directory_swapped_for_a_symlink_while_the_request_waits(server, tmp_path, monkeypatch):
    """The request is read and checked, then (before the worker decodes) its directory is replaced by a
    symlink to a directory outside: the worker decodes the file that was checked, and nothing outside is
    opened."""
    sub = os.path.join(server.media_dir, "sub")
    os.mkdir(sub)
    inside = png_bytes(2, size=(48, 48))
    with open(os.path.join(sub, "a.png"), "wb") as f:
        f.write(inside)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.png").write_bytes(png_bytes(3, size=(480, 96)))  # another size: another soft-token count
    real_to_messages = app_module.to_messages

    def to_messages_then_swap(*args, **kwargs):
        messages = real_to_messages(*args, **kwargs)
        os.rename(sub, sub + ".old")
        os.symlink(outside, sub)
        return messages

    monkeypatch.setattr(app_module, "to_messages", to_messages_then_swap)
    WATCHED.append(str(outside))
    try:
        r = chat(server, image_part(os.path.join(sub, "a.png")))
    finally:
        WATCHED.clear()
        monkeypatch.undo()
    assert r.status_code == 200, r.body
    assert OPENED == [], f"the server opened {OPENED} outside the media directory"
    assert os.path.islink(sub)  # the swap happened before the worker ran
    want = server.model.generate([{"role": "user", "content": [{"type": "image", "image": inside},
                                                               {"type": "text", "text": "What is this?"}]}],
                                 temperature=0, max_new_tokens=6)
    assert r.json()["usage"]["prompt_tokens"] == want.prompt_tokens
    assert r.json()["choices"][0]["message"]["content"] == want.text


def test_media_byte_caps_per_item_and_per_request(server, monkeypatch):
    data = png_bytes(4)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    path = os.path.join(server.media_dir, "b.png")
    with open(path, "wb") as f:
        f.write(data)
    monkeypatch.setitem(protocol._MEDIA_BYTES, "image", len(data) - 1)
    assert_refused(chat(server, image_part(url)), 400, f"more than the {len(data) - 1} bytes allowed")
    assert_refused(chat(server, image_part(path)), 400, path, f"more than the {len(data) - 1} bytes allowed")
    audio = [{"type": "input_audio", "input_audio": {"data": base64.b64encode(wav_bytes()).decode(), "format": "wav"}}]
    monkeypatch.setitem(protocol._MEDIA_BYTES, "audio", 100)
    assert_refused(chat(server, audio), 400, "bytes of audio, more than the 100 bytes allowed")
    monkeypatch.undo()
    media = server.app.state.markbase.media
    monkeypatch.setattr(media, "max_request_bytes", 2 * len(data) - 1)
    two = image_part(url) + image_part(path)
    assert_refused(chat(server, two), 413, "media add up to more than")
    assert chat(server, image_part(path)).status_code == 200
