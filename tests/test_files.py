"""Reading files and URLs markbase does not control (markbase/files.py): FIFOs, devices and directories are
refused at once, reads are size-capped and time-bounded, --allow-media-dir is checked on the opened
descriptor, checkpoint files follow symlinks (the Hugging Face cache) but must be regular files.

Everything that used to hang or grow without bound runs under a deadline — a thread (a FIFO's stuck open()
is released at the end) or a subprocess with a bounded address space (reads of /dev/zero) — so a regression
fails instead of hanging CI or eating the machine's memory."""

import http.server
import io
import os
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import markbase as mb
from generation.conftest import synth_model, synthetic  # noqa: F401  (the tiny synthetic checkpoints)
from markbase import files
from markbase.preprocess import audio as audio_mod
from markbase.preprocess import image as image_mod
from markbase.preprocess import load_audio, load_image, load_video, process_audio
from markbase.preprocess import video as video_mod
from references.media_files import mp4_bytes

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 20  # far above what a refusal takes (well under a second); a hang fails here


# ---------------------------------------------------------------- helpers

def release(fifo) -> None:
    """Lets an open() stuck on a FIFO return: a writer that opens and closes (the reader then sees EOF)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def outcome_within(seconds: float, fn, *args, fifos=()):
    """fn(*args) on a thread: its exception (or its value); pytest.fail when it has not returned in time."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        for f in fifos:
            for _ in range(50):
                release(f)
                time.sleep(0.01)
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not return within {seconds} s (blocked)")
    return box.get("error", box.get("value"))


def refused(exc_type, fn, *args, fifos=(), seconds: float = DEADLINE_S) -> str:
    """fn(*args) raises exc_type within `seconds`; its message."""
    t0 = time.monotonic()
    got = outcome_within(seconds, fn, *args, fifos=fifos)
    assert isinstance(got, exc_type), f"expected {exc_type.__name__}, got {got!r}"
    assert time.monotonic() - t0 < 5, "refused, but slowly"
    return str(got)


def run_bounded(code: str, timeout: float = 60, address_space: int = 6 << 30) -> str:
    """`code` in a fresh interpreter whose address space is capped (a read that grows without bound fails
    there with MemoryError instead of filling the machine); its stdout. The code prints its outcome."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    # The markbase this test runs (the working tree's, or the installed one in CI), and the test helpers.
    package_root = os.path.dirname(os.path.dirname(mb.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, str(REPO / "tests")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


OUTCOME = """
import time
def outcome(fn):
    t0 = time.monotonic()
    try:
        fn()
        print("returned")
    except BaseException as e:
        print(type(e).__name__, "|", str(e).replace("\\n", " "), "|", round(time.monotonic() - t0, 2))
"""


def parse_outcome(out: str) -> tuple[str, str, float]:
    kind, msg, seconds = out.strip().splitlines()[-1].split(" | ")
    return kind, msg, float(seconds)


def png_bytes(color=(255, 0, 0), size=(32, 32)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def wav_bytes(seconds: float = 0.5, rate: int = 16000) -> bytes:
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, (0.1 * np.sin(np.arange(int(seconds * rate)) / 10)).astype(np.float32), rate, format="WAV")
    return buf.getvalue()


# ---------------------------------------------------------------- files.py itself

def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.jpg"
    os.mkfifo(fifo)
    msg = refused(mb.InputError, files.read_media_file, str(fifo), "image", 1 << 20, fifos=[fifo])
    assert str(fifo) in msg and "FIFO" in msg
    msg = refused(mb.CheckpointError, files.read_checkpoint_file, str(fifo), 1 << 20, fifos=[fifo])
    assert str(fifo) in msg and "FIFO" in msg


def test_devices_directories_and_bad_paths_are_refused(tmp_path):
    assert "character device" in refused(mb.InputError, files.read_media_file, "/dev/zero", "image", 1 << 20)
    assert "directory" in refused(mb.InputError, files.read_media_file, str(tmp_path), "image", 1 << 20)
    assert "no such file" in refused(mb.InputError, files.read_media_file, str(tmp_path / "nope.png"), "image", 9)
    assert "NUL character" in refused(mb.InputError, files.read_media_file, "a\0b.png", "image", 1 << 20)
    assert "File name too long" in refused(mb.InputError, files.read_media_file, "x" * 5000, "image", 1 << 20)
    for bad in (123, None, ["x"]):
        assert "must be a path" in refused(mb.InputError, files.read_media_file, bad, "image", 1 << 20)


def test_size_cap_refuses_before_reading_and_while_reading(tmp_path):
    big = tmp_path / "big.png"
    with open(big, "wb") as f:
        f.truncate(1 << 40)  # sparse: a terabyte that a read would never finish
    msg = refused(mb.InputError, files.read_media_file, str(big), "image", 1 << 20)
    assert str(big) in msg and "more than the 1048576 bytes allowed" in msg
    # a file that grows after fstat: the read stops at the cap
    grown = tmp_path / "grown.bin"
    grown.write_bytes(b"x" * 5000)
    fd = os.open(grown, os.O_RDONLY)
    try:
        with pytest.raises(mb.InputError, match="grew past the 1000 bytes"):
            files._read_capped(fd, 0, str(grown), "image", 1000, 10.0, mb.InputError)  # fstat said 0 bytes
    finally:
        os.close(fd)


def test_read_deadline(tmp_path, monkeypatch):
    f = tmp_path / "slow.bin"
    f.write_bytes(b"x" * 4096)
    monkeypatch.setattr(files, "CHUNK_BYTES", 1024)
    with pytest.raises(mb.InputError, match="took longer than 0 s"):
        files.read_file(str(f), what="clip", max_bytes=1 << 20, deadline_s=0.0)


def test_allowed_dir_is_checked_on_the_opened_descriptor(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "sub").mkdir(parents=True)
    outside.mkdir()
    (allowed / "sub" / "a.png").write_bytes(b"inside")
    (outside / "a.png").write_bytes(b"outside")
    root = os.path.realpath(allowed)
    assert files.read_media_file(str(allowed / "sub" / "a.png"), "image", 100, root) == b"inside"
    # symlinks out (as the last component or a directory on the way), '..': refused before anything is opened
    os.symlink(outside / "a.png", allowed / "link.png")
    os.symlink(outside, allowed / "linkdir")
    for escape in (allowed / "link.png", allowed / "linkdir" / "a.png", allowed / "sub" / ".." / ".." / "outside" / "a.png"):
        msg = refused(mb.InputError, files.read_media_file, str(escape), "image", 100, root)
        assert "outside the allowed media directory" in msg and str(escape) in msg
    # a symlink as the last component, even to a file inside, is not followed (O_NOFOLLOW)
    os.symlink(allowed / "sub" / "a.png", allowed / "inner.png")
    assert "symbolic link" in refused(mb.InputError, files.read_media_file, str(allowed / "inner.png"), "image", 100,
                                      root)
    # without allowed_dir (the Python API: the user's own paths) symlinks are followed
    assert files.read_media_file(str(allowed / "link.png"), "image", 100) == b"outside"


def test_a_directory_swapped_after_the_name_check_is_caught_on_the_descriptor(tmp_path, monkeypatch):
    """The race of a server request: the name resolves inside when checked, then a directory on the way is
    replaced by a symlink out before the open. The opened descriptor's own path is outside: refused."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "sub").mkdir(parents=True)
    outside.mkdir()
    (allowed / "sub" / "a.png").write_bytes(b"inside")
    (outside / "a.png").write_bytes(b"outside")
    real_check = files._check_name_under

    def check_then_swap(*args):
        real_check(*args)
        os.rename(allowed / "sub", allowed / "sub.old")
        os.symlink(outside, allowed / "sub")

    monkeypatch.setattr(files, "_check_name_under", check_then_swap)
    msg = refused(mb.InputError, files.read_media_file, str(allowed / "sub" / "a.png"), "image", 100,
                  os.path.realpath(allowed))
    assert "outside the allowed media directory" in msg


def test_data_url_cap_before_decoding():
    import base64

    url = "data:image/png;base64," + base64.b64encode(b"x" * 3000).decode()
    assert files.decode_data_url(url, "image", 3000) == b"x" * 3000
    with pytest.raises(mb.InputError, match="more than the 2999 bytes allowed"):
        files.decode_data_url(url, "image", 2999)
    with pytest.raises(mb.InputError, match="more than the 100 bytes allowed"):
        files.decode_data_url(url, "image", 100)  # refused from the payload's length, not decoded


# ---------------------------------------------------------------- remote URLs: overall deadline, byte cap

class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/trickle":  # one byte every 5 s, forever: per-read timeouts never fire
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(5)
            except OSError:
                return
        body = {"/image.png": png_bytes(), "/clip.wav": wav_bytes(), "/big": b"y" * 5000}[self.path]
        self.send_response(200)
        if self.path != "/big":  # /big: no Content-Length, the body ends at close
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def web():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_url_fetch_works(web):
    assert load_image(web + "/image.png").size == (32, 32)
    assert len(load_audio(web + "/clip.wav")) == 8000


def test_trickling_url_ends_at_the_overall_deadline(web, monkeypatch):
    monkeypatch.setattr(files, "URL_DEADLINE_S", 1.5)
    for load in (load_image, load_audio, load_video):
        t0 = time.monotonic()
        msg = refused(mb.InputError, load, web + "/trickle")
        assert "did not arrive within 1.5 s" in msg and "/trickle" in msg
        assert 1.4 < time.monotonic() - t0 < 10  # (loaded CI box: well short of the trickle)


def test_url_byte_cap(web):
    with pytest.raises(mb.InputError, match="larger than the 1000 bytes allowed"):
        files.fetch_url(web + "/big", "image", 1000)  # no Content-Length: counted while reading
    with pytest.raises(mb.InputError, match="1000000 bytes, more than the 1000 bytes allowed"):
        files.fetch_url(web + "/trickle", "image", 1000)  # refused from its Content-Length, at once


# ---------------------------------------------------------------- media through the Python API

@pytest.mark.parametrize("kind", ["image", "audio", "video"])
def test_fifo_media_path_is_refused(synth_model, tmp_path, kind):
    model = synth_model("e2b")
    fifo = tmp_path / {"image": "x.jpg", "audio": "x.wav", "video": "x.mp4"}[kind]
    os.mkfifo(fifo)
    encode = {"image": model.encode_image, "audio": model.encode_audio, "video": model.encode_video}[kind]
    msg = refused(mb.InputError, encode, str(fifo), fifos=[fifo])
    assert str(fifo) in msg and "FIFO" in msg


def test_encode_image_dev_zero_is_refused_with_bounded_memory(synthetic):
    kind, msg, seconds = parse_outcome(run_bounded(OUTCOME + f"""
import markbase as mb
model = mb.load({synthetic("e2b")!r})
outcome(lambda: model.encode_image("/dev/zero"))
outcome(lambda: model.encode_audio("/dev/zero"))
"""))
    assert kind == "InputError" and "/dev/zero" in msg and "character device" in msg and seconds < 5


def test_media_over_the_byte_cap_is_refused_unread(tmp_path, monkeypatch):
    big = tmp_path / "huge.png"
    with open(big, "wb") as f:
        f.truncate(image_mod.MAX_IMAGE_BYTES + 1)
    assert "more than the" in refused(mb.InputError, load_image, str(big))
    with open(big, "wb") as f:
        f.truncate(audio_mod.MAX_AUDIO_BYTES + 1)
    assert "more than the" in refused(mb.InputError, load_audio, str(big))


def test_long_audio_is_refused_without_decoding_it_whole():
    import soundfile

    buf = io.BytesIO()  # 20 minutes of 48 kHz stereo silence: ~200 KB of FLAC, 460 MB as float32
    soundfile.write(buf, np.zeros((48000 * 60 * 20, 2), np.int16), 48000, format="FLAC")
    flac = buf.getvalue()
    assert len(flac) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(mb.InputError, match="longer than max_audio_s = 30 s"):
            process_audio(flac)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, f"decoding peaked at {peak >> 20} MB"
    assert len(process_audio(wav_bytes(2.0)).features) > 0  # a clip under the limit still decodes


def test_video_frames_over_max_pixels_are_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(video_mod, "MAX_PIXELS", 64 * 48 - 1)
    with pytest.raises(mb.InputError, match="64×48 frames are more than"):
        load_video(mp4_bytes(3))


# ---------------------------------------------------------------- checkpoint files

def linked_copy(src: str, dst: Path, special: dict[str, str]) -> str:
    """A checkpoint directory of symlinks to src's files (as the Hugging Face cache lays it out), with the
    files named in `special` replaced by a FIFO ("fifo") or a symlink to /dev/zero ("zero")."""
    dst.mkdir()
    for name in os.listdir(src):
        os.symlink(os.path.join(src, name), dst / name)
    for name, what in special.items():
        if (dst / name).is_symlink():
            (dst / name).unlink()
        if what == "fifo":
            os.mkfifo(dst / name)
        else:
            os.symlink("/dev/zero", dst / name)
    return str(dst)


def _load(d):
    return mb.load(d)


def _generate(d):
    return mb.load(d).generate("hi", max_new_tokens=1)


def _encode_image(d):
    return mb.load(d).encode_image(np.zeros((48, 48, 3), np.uint8))


FIFO_CASES = {"model.safetensors": _load, "config.json": _load, "model.safetensors.index.json": _load,
              "tokenizer.json": _generate, "tokenizer_config.json": _generate, "chat_template.jinja": _generate,
              "generation_config.json": _generate, "processor_config.json": _encode_image}


@pytest.mark.parametrize("name", FIFO_CASES)
def test_fifo_checkpoint_file_is_refused(synthetic, tmp_path, name):
    d = linked_copy(synthetic("e2b"), tmp_path / "ckpt", {name: "fifo"})
    msg = refused(mb.CheckpointError, FIFO_CASES[name], d, fifos=[os.path.join(d, name)])
    assert name in msg and "FIFO" in msg, msg


@pytest.mark.parametrize("name", ["chat_template.jinja", "tokenizer.json", "config.json"])
def test_checkpoint_file_linked_to_dev_zero_is_refused(synthetic, tmp_path, name):
    d = linked_copy(synthetic("e2b"), tmp_path / "ckpt", {name: "zero"})
    kind, msg, seconds = parse_outcome(run_bounded(OUTCOME + f"""
import markbase as mb
outcome(lambda: mb.load({d!r}).generate("hi", max_new_tokens=1))
"""))
    assert kind == "CheckpointError" and name in msg and "character device" in msg and seconds < 5, msg


def test_oversized_template_is_refused(synthetic, tmp_path):
    d = linked_copy(synthetic("e2b"), tmp_path / "ckpt", {})
    os.unlink(os.path.join(d, "chat_template.jinja"))
    with open(os.path.join(d, "chat_template.jinja"), "wb") as f:
        f.truncate(files.TEMPLATE_MAX_BYTES + 1)
    from markbase.tokenizer import Tokenizer

    with pytest.raises(mb.CheckpointError, match=r"chat_template\.jinja.*more than the 4194304 bytes allowed"):
        Tokenizer(d)


def test_hugging_face_cache_layout_still_loads(synthetic, synth_model, tmp_path):
    """snapshots/<rev>/<file> are relative symlinks into blobs/ (huggingface_hub's cache): followed."""
    src = synthetic("e2b")
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "0123abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for i, name in enumerate(sorted(os.listdir(src))):
        os.link(os.path.join(src, name), blobs / f"blob{i:02d}")
        os.symlink(os.path.join("..", "..", "blobs", f"blob{i:02d}"), snap / name)
    model = mb.load(snap)
    ours = model.generate("Hello there", max_new_tokens=6, temperature=0)
    want = synth_model("e2b").generate("Hello there", max_new_tokens=6, temperature=0)
    assert ours.token_ids == want.token_ids
    np.testing.assert_array_equal(model.encode_image(np.zeros((48, 48, 3), np.uint8)),
                                  synth_model("e2b").encode_image(np.zeros((48, 48, 3), np.uint8)))
