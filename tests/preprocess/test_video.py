"""Video: frame sampling as transformers' default sampler, the prompt text as the Gemma 4 processor's
replace_video_token writes it (called here with its own code), decoding with PyAV, and bad input."""

import types

import numpy as np
import pytest

import markbase as mb
from markbase.media import MediaItem, expand
from markbase.preprocess import load_video, process_image
from markbase.preprocess.video import sample_indices
from references.media_files import mp4_bytes

TOKENS = {"image": "<|image|>", "video": "<|video|>", "audio": "<|audio|>", "boi": "<|image>", "eoi": "<image|>",
          "boa": "<|audio>", "eoa": "<audio|>"}


@pytest.mark.parametrize("total, num, fps, video_fps", [(100, 32, None, None), (45, 8, None, None), (32, 32, None, None),
                                                        (240, None, 2.0, 24.0), (7, None, 1.0, 30.0)])
def test_sampling_equals_transformers(total, num, fps, video_fps):
    from transformers.video_utils import VideoMetadata, default_sample_indices_fn

    md = VideoMetadata(total_num_frames=total, fps=video_fps)
    want = default_sample_indices_fn(md, num_frames=num, fps=fps)
    np.testing.assert_array_equal(sample_indices(total, num, fps, video_fps), want)


def test_fewer_frames_than_asked_keeps_them_all():
    np.testing.assert_array_equal(sample_indices(5, 32), np.arange(5))


def test_prompt_text_equals_the_processor():
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
    from transformers.video_utils import VideoMetadata

    frames = [process_image(np.zeros((48, 64, 3), np.uint8), max_soft_tokens=70)] * 4
    item = MediaItem("video", frames, timestamps=[0.0, 3.3, 66.6, 125.0])
    ours = expand("a <|video|> b", [item], TOKENS)
    fake = types.SimpleNamespace(boi_token=TOKENS["boi"], eoi_token=TOKENS["eoi"], video_token=TOKENS["video"])
    md = VideoMetadata(total_num_frames=1300, fps=10, frames_indices=[0, 33, 666, 1250])
    want = Gemma4Processor.replace_video_token(fake, {"num_soft_tokens_per_video": [frames[0].num_soft_tokens],
                                                      "video_metadata": [md]}, 0)
    assert ours == f"a {want} b"
    assert want.startswith("00:00 <|image>") and " 02:05 <|image>" in want


def test_image_expansion_and_counts():
    frame = process_image(np.zeros((48, 64, 3), np.uint8), max_soft_tokens=70)
    item = MediaItem("image", [frame])
    assert expand("x<|image|>y", [item], TOKENS) == "x<|image>" + "<|image|>" * frame.num_soft_tokens + "<image|>y"
    with pytest.raises(mb.InputError, match="1 <\\|image\\|> placeholder\\(s\\) but 2 image"):
        expand("x<|image|>y", [item, item], TOKENS)


def test_decode_mp4_with_pyav_and_timestamps():
    v = load_video(mp4_bytes(45, fps=10), num_frames=8)
    assert v.total_frames == 45 and v.fps == 10.0 and len(v.frames) == 8
    assert v.indices == list(np.arange(8) * 45 // 8)
    assert v.timestamps == [i / 10 for i in v.indices]
    assert v.frames[0].size == (64, 48) and v.frames[0].mode == "RGB"


def test_arrays_and_lists_of_frames():
    arr = np.random.default_rng(0).integers(0, 256, (10, 20, 30, 3), dtype=np.uint8)
    v = load_video(arr, num_frames=4, video_fps=5)
    assert v.indices == [0, 2, 5, 7] and v.timestamps == [0.0, 0.4, 1.0, 1.4]
    np.testing.assert_array_equal(np.asarray(v.frames[1]), arr[2])
    v2 = load_video(list(arr), num_frames=4)
    assert v2.fps == 24.0 and v2.indices == v.indices


@pytest.mark.parametrize("src, match", [(b"", "0 bytes"), (b"\x00\x01garbage" * 10, "not a video"),
                                        ("/no/such.mp4", "no such file"), ([], "no frames"),
                                        (np.zeros((3, 4, 4), np.uint8), "uint8 \\[T, H, W, 3\\]")])
def test_bad_videos_are_input_errors(src, match):
    with pytest.raises(mb.InputError, match=match):
        load_video(src)
