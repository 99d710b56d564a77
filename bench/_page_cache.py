"""The page cache state a benchmark starts from (Linux; no-ops elsewhere).

A file mapping gets 2 MiB page-table entries only where the page cache holds the file in 2 MiB folios; a file
cached in small folios (written piecewise, partly evicted and re-read) maps as 4 KiB pages, a TLB miss per page
of streamed weights. Which one a file is in depends on its history, and on this project's VMs it moved an
engine's decode by ~30%. So benchmarks evict the weight files first and let them be read back.
"""

from __future__ import annotations

import os


def evict(paths: list[str], read_back: bool = False) -> None:
    """Drops `paths` from the page cache (POSIX_FADV_DONTNEED, after an fsync: dirty pages are not dropped).
    read_back: then reads each file once sequentially with read() (cached, never mapped: no RSS)."""
    if not hasattr(os, "posix_fadvise"):
        return
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while read_back and os.read(fd, 8 << 20):
                pass
        finally:
            os.close(fd)
