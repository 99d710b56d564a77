"""Reading files and URLs markbase does not control: media named by a prompt or a server request, and the
checkpoint's JSON / tokenizer / template files. Every such read in the Python package goes through here.

What every read guarantees:
- never blocks in open(): the file is opened O_NONBLOCK, so a FIFO (a named pipe with no writer) opens at once
  and is then refused;
- only regular files: the *opened descriptor* is fstat-ed, and a FIFO, a device (/dev/zero), a directory or a
  socket is refused with an error naming the path;
- a size cap: a file larger than the cap is refused before anything is read, and the read itself stops at
  the cap (a file that grows while it is read is refused too);
- a deadline (checked between chunks of CHUNK_BYTES).

Media (`read_media_file`, errors are InputError): with `allowed_dir` (the server's --allow-media-dir) the last
path component must not be a symbolic link (O_NOFOLLOW) and the opened descriptor's own path — what the kernel
resolved, read back from /proc/self/fd on Linux or F_GETPATH on macOS — must lie under allowed_dir. The check
is made on the descriptor that is then read, so a directory swapped for a symlink after the check cannot
redirect the read. (A hard link inside allowed_dir to a file outside it is not detected: making one needs
write access to allowed_dir.) Without allowed_dir (the Python API, the user's own paths) symlinks are followed.

Checkpoint files (`read_checkpoint_file`, errors are CheckpointError): symlinks are followed (the Hugging Face
cache's snapshot files are symlinks into blobs/), the final target must be a regular file.

Remote media (`fetch_url`): http(s) only, an overall deadline URL_DEADLINE_S for the whole transfer (DNS,
connect and every read together, not per read) and the caller's byte cap.
"""

from __future__ import annotations

import base64
import errno
import os
import stat
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Callable

from ._core import CheckpointError, InputError

CHUNK_BYTES = 8 << 20
FILE_DEADLINE_S = 60.0            # one local file, read whole (a hung network filesystem ends here)
URL_DEADLINE_S = 30.0             # one remote media URL, the whole transfer
# Checkpoint files read by Python (config.json and the safetensors are read by the C++ loader, with its caps).
CHECKPOINT_JSON_MAX_BYTES = 64 << 20    # tokenizer_config.json, generation_config.json, processor_config.json
TOKENIZER_JSON_MAX_BYTES = 256 << 20    # tokenizer.json (Gemma's is about 32 MB)
TEMPLATE_MAX_BYTES = 4 << 20            # chat_template.jinja (Gemma 4's is about 16 KB)
PATH_SHOWN_CHARS = 200                  # of a path in an error message

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def shown(path) -> str:
    """A path for an error message: repr, long ones cut."""
    r = repr(path)
    return r if len(r) <= PATH_SHOWN_CHARS else r[:PATH_SHOWN_CHARS] + "…'"


def _kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _check_path(path, what: str, error) -> str:
    from . import args

    return args.path(path, f"{what}: the path", error)


def _open_regular(path, what: str, error, follow_symlinks: bool) -> tuple[int, os.stat_result]:
    """A read-only descriptor of `path` checked (fstat) to be a regular file; error naming the path otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise error(f"{what}: {shown(path)} is a symbolic link; media under the allowed directory must be "
                        f"named by their own path") from None
        if e.errno == errno.ENOENT:
            raise error(f"{what}: cannot read {shown(path)}: no such file") from None
        raise error(f"{what}: cannot read {shown(path)} ({e.strerror or e})") from None
    except ValueError as e:  # e.g. characters the filesystem encoding cannot hold
        raise error(f"{what}: invalid path {shown(path)} ({e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what}: {shown(path)} is not a regular file ({_kind_of(st.st_mode)})")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _descriptor_path(fd: int, path) -> str:
    """The path the kernel resolved for the open descriptor (symlinks and .. already followed)."""
    if sys.platform.startswith("linux"):
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # /proc not mounted: fall through
    if sys.platform == "darwin":
        import fcntl

        buf = fcntl.fcntl(fd, getattr(fcntl, "F_GETPATH", 50), bytes(1024))  # MAXPATHLEN
        return os.fsdecode(buf.split(b"\0", 1)[0])
    # Elsewhere: the resolved name, accepted only when it is the very file the descriptor holds.
    real = os.path.realpath(os.fsdecode(path))
    st, here = os.fstat(fd), os.stat(real)
    if (st.st_dev, st.st_ino) != (here.st_dev, here.st_ino):
        raise OSError(errno.ESTALE, "the file changed while it was opened")
    return real


def _refuse_outside(real: str, path, allowed_dir: str, what: str, error) -> None:
    if os.path.commonpath([real, allowed_dir]) != allowed_dir:
        raise error(f"{what}: {shown(path)} is outside the allowed media directory")


def _check_name_under(path, allowed_dir: str, what: str, error) -> None:
    """The path as it resolves now lies under allowed_dir (the descriptor check after open is the one that holds)."""
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (OSError, ValueError) as e:
        raise error(f"{what}: invalid path {shown(path)} ({e})") from None
    _refuse_outside(real, path, allowed_dir, what, error)


def _check_under(fd: int, path, allowed_dir: str, what: str, error) -> None:
    """The opened file lies under allowed_dir, by the path the kernel resolved for its descriptor."""
    try:
        real = _descriptor_path(fd, path)
    except OSError as e:
        raise error(f"{what}: cannot tell where {shown(path)} lies ({e.strerror or e})") from None
    _refuse_outside(real, path, allowed_dir, what, error)


def _read_capped(fd: int, size: int, path, what: str, max_bytes: int, deadline_s: float, error) -> bytes:
    if size > max_bytes:
        raise error(f"{what}: {shown(path)} is {size} bytes, more than the {max_bytes} bytes allowed")
    deadline = time.monotonic() + deadline_s

    def in_time():
        if time.monotonic() > deadline:
            raise error(f"{what}: reading {shown(path)} took longer than {deadline_s:g} s")

    return _read_chunks(lambda n: os.read(fd, n), max_bytes, in_time, lambda: error(
        f"{what}: {shown(path)} grew past the {max_bytes} bytes allowed while it was read"))


def _read_chunks(read: Callable[[int], bytes], max_bytes: int, check: Callable[[], None],
                 too_large: Callable[[], Exception]) -> bytes:
    """read(n) until it returns nothing, at most max_bytes in all (too_large() is raised past them), check()
    after every chunk (it raises to stop)."""
    chunks, total = [], 0
    while True:
        chunk = read(min(CHUNK_BYTES, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise too_large()
        check()


def read_file(path, *, what: str, max_bytes: int, error=InputError, follow_symlinks: bool = True,
              allowed_dir: str | None = None, deadline_s: float | None = None) -> bytes:
    """The bytes of the regular file `path` (at most max_bytes, read within deadline_s). allowed_dir: a
    canonical directory (os.path.realpath) the opened file must lie under. `error` is raised naming `what`
    and the path."""
    path = _check_path(path, what, error)
    if allowed_dir is not None:  # nothing outside is opened (or probed) when no symlink moves meanwhile
        _check_name_under(path, allowed_dir, what, error)
    fd, st = _open_regular(path, what, error, follow_symlinks)
    try:
        if allowed_dir is not None:
            _check_under(fd, path, allowed_dir, what, error)
        try:
            return _read_capped(fd, st.st_size, path, what, max_bytes,
                                FILE_DEADLINE_S if deadline_s is None else deadline_s, error)
        except OSError as e:
            raise error(f"{what}: cannot read {shown(path)} ({e.strerror or e})") from None
    finally:
        os.close(fd)


def read_media_file(path, what: str, max_bytes: int, allowed_dir: str | None = None) -> bytes:
    """A media file's bytes (InputError). Under allowed_dir: no symlink as the last component, and the opened
    file must lie under allowed_dir by its descriptor's path."""
    return read_file(path, what=what, max_bytes=max_bytes, error=InputError, follow_symlinks=allowed_dir is None,
                     allowed_dir=allowed_dir)


def read_checkpoint_file(path, max_bytes: int) -> bytes:
    """A checkpoint file's bytes (symlinks followed; CheckpointError unless a regular file within max_bytes)."""
    return read_file(path, what="checkpoint file", max_bytes=max_bytes, error=CheckpointError)


def read_checkpoint_text(path, max_bytes: int) -> str:
    """A checkpoint file as UTF-8 text (CheckpointError when it is not)."""
    data = read_checkpoint_file(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text ({e})") from None


def is_url(src) -> bool:
    """A data: or http(s) URL string (anything else given as a string is a path)."""
    return isinstance(src, str) and src.startswith(("data:", "http://", "https://"))


def decode_data_url(url: str, what: str, max_bytes: int) -> bytes:
    """The payload of a data: URL (base64 or percent-encoded), refused past max_bytes before it is decoded."""
    head, sep, payload = url.partition(",")
    if not sep:
        raise InputError(f"{what}: a data URL needs a ',' before its payload")
    b64 = head.endswith(";base64")
    least = len(payload) // 4 * 3 - 2 if b64 else len(payload) // 3  # the fewest bytes the payload can decode to
    if least > max_bytes:
        raise InputError(f"{what}: the data URL holds more than the {max_bytes} bytes allowed")
    try:
        data = base64.b64decode(payload, validate=True) if b64 else urllib.parse.unquote_to_bytes(payload)
    except Exception as e:  # noqa: BLE001 - binascii.Error, ValueError
        raise InputError(f"{what}: the data URL's payload does not decode ({e})") from None
    if len(data) > max_bytes:
        raise InputError(f"{what}: the data URL holds {len(data)} bytes, more than the {max_bytes} bytes allowed")
    return data


def fetch_url(url: str, what: str, max_bytes: int, deadline_s: float | None = None) -> bytes:
    """The body of an http(s) URL, whole within deadline_s (default URL_DEADLINE_S) and at most max_bytes.
    The transfer runs on a daemon thread so that nothing (DNS, a server trickling bytes) outlives the deadline
    here; a transfer left behind stops at its next received chunk."""
    deadline_s = URL_DEADLINE_S if deadline_s is None else deadline_s
    outcome: dict = {}
    done, cancelled = threading.Event(), threading.Event()

    def run():
        try:
            # (socket timeouts past the overall deadline: that one always ends a stalled transfer first)
            outcome["data"] = _download(url, what, max_bytes, deadline_s + 1.0, cancelled)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            outcome["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name="markbase-fetch", daemon=True).start()
    if not done.wait(deadline_s):
        cancelled.set()
        raise InputError(f"{what}: {url} did not arrive within {deadline_s:g} s (markbase.files.URL_DEADLINE_S)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["data"]


def _download(url: str, what: str, max_bytes: int, timeout_s: float, cancelled: threading.Event) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - the user named this URL
            declared = r.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise InputError(f"{what}: {url} is {declared} bytes, more than the {max_bytes} bytes allowed")
            def not_cancelled():
                if cancelled.is_set():
                    raise InputError(f"{what}: {url}: the transfer was cancelled")

            return _read_chunks(r.read1, max_bytes, not_cancelled, lambda: InputError(
                f"{what}: {url} is larger than the {max_bytes} bytes allowed"))
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - URLError, HTTPError, timeouts, bad URLs
        raise InputError(f"{what}: could not fetch {url} ({type(e).__name__}: {e})") from None


def read_media(src, what: str, max_bytes: int, allowed_dir: str | None = None) -> bytes:
    """The bytes of a media source given as a string or path: a data: URL, an http(s) URL, or a file."""
    if is_url(src):
        if src.startswith("data:"):
            return decode_data_url(src, what, max_bytes)
        return fetch_url(src, what, max_bytes)
    return read_media_file(src, what, max_bytes, allowed_dir)
