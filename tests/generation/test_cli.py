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


@pytest.mark.parametrize("cmd", ["run", "chat", "demo", "validate", "inspect", "trace", "devices"])
def test_help(cmd):
    r = run(cmd, "--help")
    assert r.returncode == 0 and "usage: markbase " + cmd in r.stdout


def test_demo():
    r = run("demo", "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr
    for stage in ("build synthetic checkpoint", "validate", "load", "prefill (text)", "decode (text)", "tok/s",
                  "image preprocess", "image encode", "prefill (image turn)", "decode (image turn)"):
        assert stage in r.stdout


def test_run_streams_answer(synthetic):
    r = run("run", "--model", synthetic("e2b"), "--prompt", "Hello", "--max-new-tokens", "6", "--seed", "1", "-v")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "decode 6 tok" in r.stderr and "finish: length" in r.stderr


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
