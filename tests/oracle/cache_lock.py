"""One builder per cache entry: the tests run in several processes (pytest-xdist workers, see the README's test
command) that may all ask for the same transformers reference at once. The first takes the entry's lock and
builds it; the others wait on the lock and then find the entry built (each builder returns early when it exists)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import inspect
import os
from typing import Callable


@contextlib.contextmanager
def cache_lock(entry: str):
    """Holds an exclusive lock on `entry` (a cache path, built or not) for the duration of the block."""
    os.makedirs(os.path.dirname(entry) or ".", exist_ok=True)
    with open(entry + ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield


def built_once(entry: Callable[..., str]):
    """Decorates a cache builder to run holding the lock of entry(**its arguments, defaults applied)."""

    def decorate(build):
        sig = inspect.signature(build)

        @functools.wraps(build)
        def locked(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            with cache_lock(entry(**bound.arguments)):
                return build(*args, **kwargs)

        return locked

    return decorate
