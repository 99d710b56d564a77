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


@pytest.mark.parametrize("cmd", ["run", "chat", "demo", "validate", "inspect", "devices"])
def test_help(cmd):
    r = run(cmd, "--help")
    assert r.returncode == 0 and "usage: markbase " + cmd in r.stdout


def test_demo():
    r = run("demo", "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr
    for stage in ("build synthetic checkpoint", "validate", "load", "prefill (text)", "decode (text)", "tok/s"):
        assert stage in r.stdout


def test_run_streams_answer(synthetic):
    r = run("run", "--model", synthetic("e2b"), "--prompt", "Hello", "--max-new-tokens", "6", "--seed", "1", "-v")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "decode 6 tok" in r.stderr and "finish: length" in r.stderr


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
