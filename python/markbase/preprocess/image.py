"""Images → patches, as transformers' Gemma 4 Pillow image processor makes them (spec §3.1, §5.2).

`load_image(src)` accepts a path, bytes, a `PIL.Image`, a numpy uint8 array [H, W, 3 | 4] (or [H, W] grey),
or a `data:` / `http(s)://` URL string, applies the EXIF orientation and converts to RGB the way
transformers does (transparency composited onto white). `process_image(img, ...)` resizes it,
preserving the aspect ratio, to the largest size whose 16-px patches fit the soft-token budget with both
sides multiples of 48 (upscaling too), with Pillow's bicubic filter on 8-bit RGB, rescales to [0, 1] and
cuts it into patches: `pixel_values` equal `Gemma4ImageProcessorPil`'s bit for bit (padding rows left
out: the model never reads them).

Limits, documented choices:
- An image file, data: URL or http(s) download of more than MAX_IMAGE_BYTES (64 MB) is refused before it is
  read whole (markbase/files.py reads every path and URL: regular files only, a deadline on every read).
- Images of more than MAX_PIXELS pixels (default 64 megapixels, `markbase.preprocess.image.MAX_PIXELS`)
  are refused before they are decoded (a decompression bomb never reaches memory), except JPEGs, which are
  decoded directly at a reduced scale (Pillow's draft mode) to at most MAX_PIXELS; such a JPEG's pixels
  then differ slightly from a full decode followed by the resize.
- 16-bit and 32-bit integer images are scaled to 8 bits (value >> 8 for 16-bit); Pillow's own conversion,
  which transformers uses, saturates them at 255.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass

import numpy as np

from .. import args
from .._core import InputError
from ..files import is_url, read_media, shown

SUPPORTED_SOFT_TOKENS = (70, 140, 280, 560, 1120)
MAX_PIXELS = 64_000_000
MAX_IMAGE_BYTES = 64 << 20  # one encoded image (file, data: URL or download)


@dataclass
class ProcessedImage:
    """One image as the vision tower (or the 12B embedder) reads it."""
    pixel_values: np.ndarray   # float32 [n_patches, 3·patch²], each row (row, col, channel) of one patch, in [0, 1]
    positions: np.ndarray      # int32 [n_patches, 2]: (x, y) of each patch on the patch grid, row-major order
    num_soft_tokens: int       # soft tokens the image becomes (patches / pooling_kernel_size², or the 12B's patches)
    size: tuple[int, int]      # (height, width) after the resize
    original_size: tuple[int, int]

    def padded(self, max_patches: int) -> tuple[np.ndarray, np.ndarray]:
        """pixel_values and positions padded to max_patches rows as transformers pads them (zeros, (-1, -1))."""
        n = len(self.pixel_values)
        if n > max_patches:
            raise InputError(f"image has {n} patches, more than max_patches {max_patches}")
        pv = np.zeros((max_patches, self.pixel_values.shape[1]), np.float32)
        pos = np.full((max_patches, 2), -1, np.int64)
        pv[:n] = self.pixel_values
        pos[:n] = self.positions
        return pv, pos


def _pil():
    try:
        from PIL import Image, ImageOps
    except ImportError as e:  # a dependency of markbase: only a broken install lands here
        raise InputError(f"images need Pillow (pip install pillow): {e}") from None
    return Image, ImageOps


def _open_bytes(data: bytes, what: str):
    Image, _ = _pil()
    if not data:
        raise InputError(f"{what}: no image data (0 bytes)")
    try:
        img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:  # header says far beyond MAX_PIXELS: nothing decoded
        raise InputError(f"{what}: more megapixels than markbase decodes (MAX_PIXELS = {MAX_PIXELS / 1e6:.0f} "
                         f"megapixels; {e})") from None
    except Exception as e:  # noqa: BLE001 - Pillow raises several types for undecodable data
        raise InputError(f"{what}: not an image Pillow can read ({type(e).__name__}: {e})") from None
    return img


def _from_array(arr: np.ndarray, what: str):
    Image, _ = _pil()
    if arr.dtype != np.uint8:
        raise InputError(f"{what}: a numpy image must be uint8 [H, W, 3] (or [H, W, 4], [H, W]), got dtype {arr.dtype}")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (3, 4)):
        raise InputError(f"{what}: a numpy image must be [H, W, 3], [H, W, 4] or [H, W], got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"{what}: the image is empty ({arr.shape[0]}×{arr.shape[1]})")
    mode = "L" if arr.ndim == 2 else ("RGB" if arr.shape[2] == 3 else "RGBA")
    return Image.fromarray(np.ascontiguousarray(arr), mode=mode)


def _bounded(img, what: str):
    """Refuses (or, for JPEG, decodes smaller) an image beyond MAX_PIXELS, before decoding it."""
    w, h = img.size
    if w < 1 or h < 1:
        raise InputError(f"{what}: the image is empty ({w}×{h})")
    if w * h <= MAX_PIXELS:
        return img
    if getattr(img, "format", None) == "JPEG":
        # draft picks the largest 1/2, 1/4 or 1/8 reduction at least as large as asked: ask for half the
        # side that fits, so what it gives fits
        scale = math.sqrt(MAX_PIXELS / (w * h)) / 2
        img.draft("RGB", (max(1, int(w * scale)), max(1, int(h * scale))))
        if img.size[0] * img.size[1] <= MAX_PIXELS:
            return img
    raise InputError(f"{what}: {w}×{h} = {w * h / 1e6:.0f} megapixels is more than the {MAX_PIXELS / 1e6:.0f} "
                     f"megapixels markbase decodes (markbase.preprocess.image.MAX_PIXELS)")


def to_rgb(img, what: str = "image"):
    """RGB as transformers' convert_to_rgb makes it: transparency composited onto white; 16/32-bit integer
    images scaled to 8 bits first."""
    Image, _ = _pil()
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        a = np.asarray(img)
        a = (a.astype(np.uint32) >> 8) if img.mode.startswith("I;16") else np.clip(a, 0, 65535).astype(np.uint32) >> 8
        img = Image.fromarray(a.astype(np.uint8), mode="L")
    elif img.mode == "F":
        a = np.nan_to_num(np.asarray(img, np.float32), nan=0.0)
        img = Image.fromarray(np.clip(np.round(a * 255.0 if a.max(initial=0) <= 1.0 else a), 0, 255).astype(np.uint8), "L")
    has_alpha = "A" in img.getbands() or img.info.get("transparency") is not None
    if has_alpha:
        img = img.convert("RGBA")
        background = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, img).convert("RGB")
    return img.convert("RGB")


def load_image(src, what: str = "image"):
    """A decoded RGB PIL image (EXIF orientation applied) from any supported source; InputError naming
    `what` when it cannot be had."""
    Image, ImageOps = _pil()
    if isinstance(src, Image.Image):
        img = src
    elif isinstance(src, np.ndarray):
        img = _from_array(src, what)
    elif isinstance(src, (bytes, bytearray, memoryview)):
        img = _open_bytes(bytes(src), what)
    elif isinstance(src, (str, os.PathLike)):
        data = read_media(src, what, MAX_IMAGE_BYTES)
        img = _open_bytes(data, what if is_url(src) else f"{what} {shown(os.fspath(src))}")
    else:
        raise InputError(f"{what}: expected a path, bytes, a PIL image, a numpy uint8 array or a URL, "
                         f"got {type(src).__name__}")
    img = _bounded(img, what)
    try:
        img.load()
        img = ImageOps.exif_transpose(img) or img
        return to_rgb(img, what)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - truncated files and unsupported modes surface here
        raise InputError(f"{what}: the image does not decode ({type(e).__name__}: {e})") from None


def target_size(height: int, width: int, patch_size: int, max_patches: int, pooling_kernel_size: int) -> tuple[int, int]:
    """The resize target (spec §3.1; transformers' get_aspect_ratio_preserving_size)."""
    target_px = max_patches * patch_size ** 2
    factor = math.sqrt(target_px / (height * width))
    side = pooling_kernel_size * patch_size
    th = int(math.floor(factor * height / side)) * side
    tw = int(math.floor(factor * width / side)) * side
    if th == 0 and tw == 0:
        raise InputError(f"image of {height}×{width} cannot be resized to at least one {side}-px block")
    max_side = (max_patches // pooling_kernel_size ** 2) * side
    if th == 0:
        th, tw = side, min(int(math.floor(width / height)) * side, max_side)
    elif tw == 0:
        tw, th = side, min(int(math.floor(height / width)) * side, max_side)
    if th * tw > target_px:
        raise InputError(f"resizing {height}×{width} to {th}×{tw} exceeds {max_patches} patches")
    return th, tw


def patchify(pixels: np.ndarray, patch: int) -> tuple[np.ndarray, np.ndarray]:
    """[H, W, 3] float32 → patches [n, patch²·3] (row, col, channel within a patch; patches row-major) and their
    (x, y) grid positions [n, 2]."""
    h, w, c = pixels.shape
    nh, nw = h // patch, w // patch
    p = pixels.reshape(nh, patch, nw, patch, c).transpose(0, 2, 1, 3, 4).reshape(nh * nw, patch * patch * c)
    gx, gy = np.meshgrid(np.arange(nw), np.arange(nh), indexing="xy")
    pos = np.stack([gx, gy], axis=-1).reshape(nh * nw, 2).astype(np.int32)
    return np.ascontiguousarray(p), pos


def process_image(image, *, max_soft_tokens: int = 280, patch_size: int = 16, pooling_kernel_size: int = 3,
                  merge_patches: bool = False, what: str = "image") -> ProcessedImage:
    """Resize, rescale and patchify (spec §3.1). merge_patches: the 12B's merged patches of
    patch_size·pooling_kernel_size pixels (spec §5.2), one per soft token, instead of 16-px patches."""
    max_soft_tokens = args.one_of(max_soft_tokens, f"{what}: max_soft_tokens", SUPPORTED_SOFT_TOKENS)
    Image, _ = _pil()
    img = load_image(image, what)
    w, h = img.size
    max_patches = max_soft_tokens * pooling_kernel_size ** 2
    th, tw = target_size(h, w, patch_size, max_patches, pooling_kernel_size)
    if (th, tw) != (h, w):
        img = img.resize((tw, th), resample=Image.BICUBIC)
    # uint8 → float64 · 1/255 → float32, as transformers rescales
    pixels = (np.asarray(img, dtype=np.uint8).astype(np.float64) * (1 / 255)).astype(np.float32)
    patch = patch_size * pooling_kernel_size if merge_patches else patch_size
    pv, pos = patchify(pixels, patch)
    n_soft = len(pv) if merge_patches else len(pv) // pooling_kernel_size ** 2
    return ProcessedImage(pixel_values=pv, positions=pos, num_soft_tokens=n_soft, size=(th, tw), original_size=(h, w))
