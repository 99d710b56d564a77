"""Image preprocessing against transformers' Gemma4ImageProcessorPil (the Pillow processor, which runs
here): pixel_values and positions bit for bit on a grid of sizes, aspect ratios and budgets, from every
kind of source; RGB conversion of every mode; the 12B's merged patches against transformers' own merge
algorithm (re-implemented below from image_processing_gemma4_unified.py, whose module needs
torchvision); and bad input as InputError."""

import base64
import io
import zlib

import numpy as np
import pytest
from PIL import Image

import markbase as mb
from markbase.preprocess import process_image
from markbase.preprocess import image as image_mod

SIZES = [(1, 1), (17, 3000), (3000, 17), (224, 224), (896, 896), (1080, 1920), (333, 517), (47, 49), (5, 401)]
BUDGETS = [70, 140, 280, 560, 1120]


def hf_pixels(img, budget):
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    out = Gemma4ImageProcessorPil(max_soft_tokens=budget)(images=[img], return_tensors="np")
    return out["pixel_values"][0], out["image_position_ids"][0], int(out["num_soft_tokens_per_image"][0])


def assert_same(img, budget, ours=None):
    pv, pos, n = hf_pixels(img, budget)
    p = ours if ours is not None else process_image(img, max_soft_tokens=budget)
    mine_pv, mine_pos = p.padded(budget * 9)
    assert p.num_soft_tokens == n
    np.testing.assert_array_equal(mine_pos, pos)
    assert np.array_equal(mine_pv, pv), f"pixel_values differ by up to {np.max(np.abs(mine_pv - pv))}"


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("hw", SIZES, ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_pixel_values_equal_transformers_pil_processor(hw, budget):
    rng = np.random.default_rng(hw[0] * 7919 + hw[1])
    img = Image.fromarray(rng.integers(0, 256, (*hw, 3), dtype=np.uint8))
    assert_same(img, budget)


def test_every_source_kind_gives_the_same_pixels(tmp_path):
    rng = np.random.default_rng(3)
    arr = rng.integers(0, 256, (120, 200, 3), dtype=np.uint8)
    img = Image.fromarray(arr)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    data = buf.getvalue()
    path = tmp_path / "x.png"
    path.write_bytes(data)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    want = process_image(img).pixel_values
    for src in (arr, data, str(path), path, url):
        np.testing.assert_array_equal(process_image(src).pixel_values, want)


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "PA", "CMYK", "1", "I;16", "RGBA-palette-transparency"])
def test_modes_convert_like_transformers(mode):
    rng = np.random.default_rng(11)
    base = Image.fromarray(rng.integers(0, 256, (64, 90, 4), dtype=np.uint8), "RGBA")
    if mode == "RGBA-palette-transparency":
        img = base.convert("RGB").convert("P", palette=Image.ADAPTIVE, colors=16)
        img.info["transparency"] = 3
    elif mode == "I;16":
        img = Image.fromarray((rng.integers(0, 65536, (64, 90))).astype(np.uint16))
        p = process_image(img, max_soft_tokens=70)
        # 16-bit: scaled to 8 bits (value >> 8), where Pillow's conversion would saturate at 255
        want = Image.fromarray((np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8), "L")
        assert_same(want, 70, ours=p)
        return
    else:
        img = base.convert(mode)
    assert_same(img, 70)


def test_exif_orientation_is_applied():
    rng = np.random.default_rng(5)
    arr = rng.integers(0, 256, (60, 100, 3), dtype=np.uint8)
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif.tobytes(), quality=95)
    p = process_image(buf.getvalue(), max_soft_tokens=70)
    decoded = Image.open(io.BytesIO(buf.getvalue()))
    assert decoded.size == (100, 60) and p.original_size == (100, 60)  # (h, w) after the rotation


def merge_like_transformers(patches16, positions16, k):
    """transformers' patches_merge (gemma4_unified), in numpy: k×k groups of 16-px patches → one patch."""
    L, D = patches16.shape
    p = int(round((D // 3) ** 0.5))
    length = L // (k * k)
    max_x = positions16[:, 0].max() + 1
    kernel = positions16 // k
    target = k * k * kernel[:, 0] + k * max_x * kernel[:, 1] + (positions16[:, 0] % k) + (positions16[:, 1] % k) * k
    perm = np.argsort(target, kind="stable")
    ordered = patches16[perm].reshape(length, k, k, p, p, 3).transpose(0, 1, 3, 2, 4, 5)
    merged = ordered.reshape(length, k * p * k * p * 3)
    pos = (positions16[perm] // k).reshape(length, k * k, 2).min(axis=1)
    return merged, pos


@pytest.mark.parametrize("hw", [(224, 224), (1080, 1920), (17, 3000)])
def test_unified_merged_patches_equal_transformers_merge(hw):
    rng = np.random.default_rng(9)
    img = Image.fromarray(rng.integers(0, 256, (*hw, 3), dtype=np.uint8))
    small = process_image(img, max_soft_tokens=280)
    merged = process_image(img, max_soft_tokens=280, merge_patches=True)
    want, want_pos = merge_like_transformers(small.pixel_values, small.positions, 3)
    np.testing.assert_array_equal(merged.pixel_values, want)
    np.testing.assert_array_equal(merged.positions, want_pos)
    assert merged.num_soft_tokens == small.num_soft_tokens == len(want)


@pytest.mark.parametrize("src, match", [
    (b"", "0 bytes"),
    (b"not an image at all", "not an image"),
    (np.zeros((0, 5, 3), np.uint8), "empty"),
    (np.zeros((4, 4, 3), np.float32), "uint8"),
    (np.zeros((4, 4, 2), np.uint8), "shape"),
    ("/no/such/file.png", "cannot read"),
    ("data:image/png;base64,@@@", "does not decode"),
    (12345, "expected a path"),
])
def test_bad_images_are_input_errors(src, match):
    with pytest.raises(mb.InputError, match=match):
        process_image(src)


def test_truncated_file_is_an_input_error():
    buf = io.BytesIO()
    Image.fromarray(np.zeros((200, 200, 3), np.uint8)).save(buf, format="PNG")
    with pytest.raises(mb.InputError, match="does not decode|not an image"):
        process_image(buf.getvalue()[: len(buf.getvalue()) // 2])


def test_decompression_bomb_is_refused_before_decoding(monkeypatch):
    # A 30000×30000 PNG header (900 megapixels) that would need 2.7 GB decoded: refused from the header.
    buf = io.BytesIO()
    Image.new("L", (1, 1)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    data[16:24] = (30000).to_bytes(4, "big") + (30000).to_bytes(4, "big")  # IHDR width, height
    data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")  # the IHDR chunk's CRC
    with pytest.raises(mb.InputError, match="megapixels"):
        process_image(bytes(data))


def test_large_jpeg_is_decoded_at_a_reduced_scale(monkeypatch):
    monkeypatch.setattr(image_mod, "MAX_PIXELS", 200_000)
    buf = io.BytesIO()
    Image.fromarray(np.full((1000, 1000, 3), 128, np.uint8)).save(buf, format="JPEG")
    img = image_mod.load_image(buf.getvalue())
    assert img.size[0] * img.size[1] <= 200_000


def test_budget_must_be_supported():
    with pytest.raises(mb.InputError, match="max_soft_tokens"):
        process_image(np.zeros((10, 10, 3), np.uint8), max_soft_tokens=300)
