"""tests/oracle/cache_lock.py: while one process builds a cache entry, another cannot take its lock (the
xdist workers of the README's test command would otherwise build the same reference into the same folder)."""

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.cache_lock import built_once, cache_lock

TESTS = str(Path(__file__).resolve().parent)


def test_a_held_entry_lock_excludes_other_processes(tmp_path):
    entry = str(tmp_path / "cache" / "e2b")
    holder = (f"import sys; sys.path.insert(0, {TESTS!r}); from oracle.cache_lock import cache_lock\n"
              f"with cache_lock({entry!r}):\n    print('held', flush=True); sys.stdin.readline()\n")
    p = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with open(entry + ".lock", "a") as f:
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.wait(timeout=30) == 0
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the holder's block
    finally:
        p.kill()


def test_the_lock_is_released_when_the_block_raises(tmp_path):
    entry = str(tmp_path / "e2b")
    with pytest.raises(RuntimeError):
        with cache_lock(entry):
            raise RuntimeError("builder failed")
    with open(entry + ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_decorated_builder_runs_holding_its_entry_lock(tmp_path):
    """built_once names the entry from the builder's arguments with their defaults applied."""
    seen = []

    @built_once(lambda root, family: str(tmp_path / root / family))
    def build(root, family="e2b"):
        with open(str(tmp_path / root / family) + ".lock", "a") as f:  # another open file: flock conflicts
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen.append((root, family))
        return "built"

    assert build("cache") == "built" and build.__name__ == "build"
    assert seen == [("cache", "e2b")]
