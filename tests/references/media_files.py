"""Small test videos written with PyAV (shared by the video, media and CLI tests)."""

import io

import numpy as np


def mp4_bytes(frames: int, fps: int = 10, w: int = 64, h: int = 48) -> bytes:
    """An mp4 (MPEG-4 part 2) whose frames differ: a bar grows by 3 px per frame."""
    import av

    buf = io.BytesIO()
    c = av.open(buf, "w", format="mp4")
    s = c.add_stream("mpeg4", rate=fps)
    s.width, s.height, s.pix_fmt = w, h, "yuv420p"
    for i in range(frames):
        img = np.zeros((h, w, 3), np.uint8)
        img[:, : (i * 3) % w] = 200
        for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
            c.mux(p)
    for p in s.encode():
        c.mux(p)
    c.close()
    return buf.getvalue()


def mp4_file(path, frames: int = 12, fps: int = 8) -> str:
    with open(path, "wb") as f:
        f.write(mp4_bytes(frames, fps))
    return str(path)
