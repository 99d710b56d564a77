"""Video → sampled RGB frames with timestamps (spec §6).

`load_video(src, num_frames=32, fps=None)` accepts a file path, a `data:` / `http(s)://` URL or bytes
(decoded with PyAV: mp4, webm, mov and whatever else its FFmpeg reads; more than MAX_VIDEO_BYTES of file or
download is refused, and so are frames of more than the image MAX_PIXELS, before they are decoded), a list of
images (anything `load_image` takes), or a numpy uint8 array [T, H, W, 3]. Frames are sampled as
transformers' default sampler does: `num_frames` indices `arange(n) · total // n`, or, with `fps`,
`max(1, int(total / video_fps · fps))` frames the same way.
Unlike transformers, which refuses a video with fewer frames than asked, every frame is kept then. Each
frame's timestamp is index / video fps (24 when the source does not say, as transformers assumes).
Each frame then goes through the image path (preprocess/image.py) with the video budget (70 soft tokens
per frame by default); transformers' video processor resizes with torchvision instead of Pillow, so its
pixels can differ slightly from these.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field

import numpy as np

from .. import args
from .._core import InputError
from ..files import is_url, read_media, shown
from .image import MAX_PIXELS, load_image

DEFAULT_FPS = 24.0  # what transformers assumes when a video carries no frame rate
MAX_VIDEO_BYTES = 256 << 20  # one encoded video (file, data: URL or download)


@dataclass
class VideoFrames:
    frames: list            # RGB PIL images, in time order
    timestamps: list[float]  # seconds of each frame: index / fps
    fps: float
    total_frames: int
    indices: list[int] = field(default_factory=list)


def sample_indices(total: int, num_frames: int | None = 32, fps: float | None = None,
                   video_fps: float | None = None) -> np.ndarray:
    """transformers' default_sample_indices_fn, keeping every frame when fewer than asked exist."""
    num_frames, fps, video_fps = check_sampling(num_frames, fps, video_fps, "video")
    if total < 1:
        raise InputError("video: no frames")
    if fps is not None:  # (capped at total first: a huge fps or a tiny video_fps must not overflow int())
        num_frames = max(1, int(min(total, total / (video_fps or DEFAULT_FPS) * fps)))
    if num_frames is None:
        return np.arange(total)
    n = min(num_frames, total)
    return np.arange(n, dtype=np.int64) * total // n


def check_sampling(num_frames, fps, video_fps, what: str) -> tuple[int | None, float | None, float | None]:
    """The frame-sampling arguments checked (InputError naming them): num_frames a positive integer, fps and
    video_fps finite numbers > 0, each or None."""
    return (None if num_frames is None else args.integer(num_frames, f"{what}: num_frames", lo=1),
            None if fps is None else args.real(fps, f"{what}: fps", lo=0, lo_open=True),
            None if video_fps is None else args.real(video_fps, f"{what}: video_fps", lo=0, lo_open=True))


def timestamp(seconds: float) -> str:
    """mm:ss as the Gemma 4 processor writes frame times."""
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def _decode(data: bytes, what: str, num_frames, fps) -> VideoFrames:
    try:
        import av
    except ImportError as e:
        raise InputError(f"{what}: decoding video files needs PyAV (pip install av): {e}") from None
    try:
        container = av.open(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001 - PyAV raises many types for bad input
        raise InputError(f"{what}: not a video PyAV can read ({type(e).__name__}: {e})") from None
    try:
        if not container.streams.video:
            raise InputError(f"{what}: the file has no video stream")
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        if width * height > MAX_PIXELS:
            raise InputError(f"{what}: {width}×{height} frames are more than the {MAX_PIXELS / 1e6:.0f} megapixels "
                             f"markbase decodes (markbase.preprocess.image.MAX_PIXELS)")
        rate = stream.average_rate or stream.guessed_rate
        video_fps = float(rate) if rate else None
        total = int(stream.frames or 0)
        if total <= 0:  # the container does not say: count by decoding once
            total = sum(1 for _ in container.decode(stream))
            container.seek(0)
        wanted = sample_indices(total, num_frames, fps, video_fps)
        keep = {int(i): k for k, i in enumerate(wanted)}
        frames: list = [None] * len(wanted)
        for i, frame in enumerate(container.decode(stream)):
            if i in keep:
                frames[keep[i]] = frame.to_image().convert("RGB")
            if i >= int(wanted[-1]):
                break
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001
        raise InputError(f"{what}: the video does not decode ({type(e).__name__}: {e})") from None
    finally:
        container.close()
    missing = [int(wanted[k]) for k, f in enumerate(frames) if f is None]
    if missing:
        raise InputError(f"{what}: frames {missing[:5]} could not be decoded (the file has fewer frames than it says)")
    f = video_fps or DEFAULT_FPS
    return VideoFrames(frames=frames, timestamps=[int(i) / f for i in wanted], fps=f, total_frames=total,
                       indices=[int(i) for i in wanted])


def load_video(src, num_frames: int | None = 32, fps: float | None = None, video_fps: float | None = None,
               what: str = "video") -> VideoFrames:
    """Sampled frames of a video file, bytes, list of images or [T, H, W, 3] uint8 array. video_fps: the frame
    rate of a list or array (for timestamps; default 24)."""
    num_frames, fps, video_fps = check_sampling(num_frames, fps, video_fps, what)
    if isinstance(src, (str, os.PathLike)):
        data = read_media(src, what, MAX_VIDEO_BYTES)
        return _decode(data, what if is_url(src) else f"{what} {shown(os.fspath(src))}", num_frames, fps)
    if isinstance(src, (bytes, bytearray, memoryview)):
        if not len(src):
            raise InputError(f"{what}: no video data (0 bytes)")
        return _decode(bytes(src), what, num_frames, fps)
    if isinstance(src, np.ndarray):
        if src.ndim != 4 or src.shape[-1] not in (3, 4) or src.dtype != np.uint8:
            raise InputError(f"{what}: a numpy video must be uint8 [T, H, W, 3], got {src.dtype} {src.shape}")
        items = list(src)
    elif isinstance(src, (list, tuple)):
        items = list(src)
    else:
        raise InputError(f"{what}: expected a path, bytes, a list of images or a [T, H, W, 3] array, "
                         f"got {type(src).__name__}")
    if not items:
        raise InputError(f"{what}: no frames")
    wanted = sample_indices(len(items), num_frames, fps, video_fps)
    frames = [load_image(items[int(i)], f"{what} frame {int(i)}") for i in wanted]
    f = float(video_fps) if video_fps else DEFAULT_FPS
    return VideoFrames(frames=frames, timestamps=[int(i) / f for i in wanted], fps=f, total_frames=len(items),
                       indices=[int(i) for i in wanted])
