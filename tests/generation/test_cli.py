"""The command line, through subprocesses (as a user runs it)."""

import os
import subprocess
import sys

import pytest

import markbase as mb


def run(*args, input=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "markbase", *args], capture_output=True, text=True, input=input,
                          timeout=timeout)


def test_version():
    r = run("--version")
    assert r.returncode == 0 and mb.__version__ in r.stdout


@pytest.mark.parametrize("cmd", ["run", "chat", "demo", "validate", "inspect", "trace", "devices", "quantize"])
def test_help(cmd):
    r = run(cmd, "--help")
    assert r.returncode == 0 and "usage: markbase " + cmd in r.stdout


def test_demo():
    r = run("demo", "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr
    for stage in ("build synthetic checkpoint", "validate", "load", "prefill (text)", "decode (text)", "tok/s",
                  "image preprocess", "image encode", "prefill (image turn)", "decode (image turn)",
                  "audio features", "audio encode", "prefill (audio turn)", "decode (audio turn)", "50 soft tokens"):
        assert stage in r.stdout


def test_run_streams_answer(synthetic):
    r = run("run", "--model", synthetic("e2b"), "--prompt", "Hello", "--max-new-tokens", "6", "--seed", "1", "-v")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "decode 6 tok" in r.stderr and "finish: length" in r.stderr


def test_quantize_then_run(synthetic, tmp_path):
    """`markbase quantize` writes an MLX-format copy that validates and answers; `run --quantize` works too."""
    out = str(tmp_path / "q4")
    r = run("quantize", synthetic("e2b"), out, "--bits", "4")
    assert r.returncode == 0, r.stderr
    assert "matrices quantized (4-bit, groups of 64)" in r.stdout
    assert run("validate", out).returncode == 0
    a = run("run", "--model", out, "--prompt", "Hello", "--max-new-tokens", "6", "--seed", "1")
    b = run("run", "--model", synthetic("e2b"), "--quantize", "q4", "--prompt", "Hello", "--max-new-tokens", "6",
            "--seed", "1")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout.strip() and b.stdout.strip()
    r = run("quantize", synthetic("e2b"), out + "2", "--bits", "3")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_run_with_images_and_a_video(synthetic, tmp_path):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i, (h, w) in enumerate([(100, 150), (64, 64)]):
        p = tmp_path / f"im{i}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    from references.media_files import mp4_file

    video = mp4_file(tmp_path / "clip.mp4", frames=12)
    r = run("run", "--model", synthetic("e2b"), "--prompt", "Describe", "--image", paths[0], "--image", paths[1],
            "--video", video, "--max-soft-tokens", "70", "--max-new-tokens", "3", "-v")
    assert r.returncode == 0, r.stderr
    assert "3 media (image 60 tok, image 64 tok, video 756 tok)" in r.stderr and "encode" in r.stderr  # 12 frames × 63
    bad = run("run", "--model", synthetic("e2b"), "--prompt", "x", "--image", str(tmp_path / "missing.png"))
    assert bad.returncode == 1 and "cannot read" in bad.stderr


def test_run_with_audio(synthetic, tmp_path):
    import numpy as np
    import soundfile as sf

    t = np.arange(int(1.5 * 22050)) / 22050
    clip = tmp_path / "clip.ogg"
    sf.write(clip, (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), 22050, format="OGG", subtype="VORBIS")
    r = run("run", "--model", synthetic("e4b"), "--prompt", "Transcribe this.", "--audio", str(clip),
            "--max-new-tokens", "3", "-v")
    assert r.returncode == 0, r.stderr
    assert "1 media (audio 38 tok)" in r.stderr  # 1.5 s: 149 valid mel frames → 75 → 38 tokens
    long = tmp_path / "long.wav"
    sf.write(long, np.zeros(31 * 16000, np.float32), 16000)
    bad = run("run", "--model", synthetic("e4b"), "--prompt", "x", "--audio", str(long))
    assert bad.returncode == 1 and "longer than max_audio_s" in bad.stderr
    ok = run("run", "--model", synthetic("e4b"), "--prompt", "x", "--audio", str(long), "--max-audio-s", "32",
             "--max-new-tokens", "1")
    assert ok.returncode == 0, ok.stderr
    deaf = run("run", "--model", synthetic("31b"), "--prompt", "x", "--audio", str(clip))
    assert deaf.returncode == 1 and "no audio" in deaf.stderr


def test_run_same_seed_same_output(synthetic):
    a = run("run", "--model", synthetic("e2b"), "--prompt", "Hi", "--max-new-tokens", "6", "--seed", "5")
    b = run("run", "--model", synthetic("e2b"), "--prompt", "Hi", "--max-new-tokens", "6", "--seed", "5")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout.strip() and a.stdout == b.stdout


def test_run_bad_model(tmp_path):
    r = run("run", "--model", str(tmp_path), "--prompt", "x")
    assert r.returncode == 1 and "markbase: error:" in r.stderr


def test_chat_via_stdin(synthetic):
    r = run("chat", "--model", synthetic("e2b"), "--max-new-tokens", "4", "--temperature", "0", "-v",
            input="Hello\n/reset\nAgain\n/quit\nnever sent\n")
    assert r.returncode == 0, r.stderr
    assert "[conversation reset]" in r.stdout
    assert r.stderr.count("finish:") == 2  # two answers, the line after /quit is never read


def test_chat_ctrl_d(synthetic):
    r = run("chat", "--model", synthetic("e2b"), "--max-new-tokens", "2", input="Hi\n")
    assert r.returncode == 0


def test_validate_and_inspect(synthetic):
    d = synthetic("26b")
    v = run("validate", d)
    assert v.returncode == 0 and "OK" in v.stdout
    i = run("inspect", d)
    assert i.returncode == 0, i.stderr
    assert "gemma-4-26B-A4B (MoE)" in i.stdout and "image, video" in i.stdout and "audio" not in i.stdout.split("modalities")[1].split("\n")[0]
    assert "parameters" in i.stdout and "BF16" in i.stdout
