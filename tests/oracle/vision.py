"""transformers references for images and video on the tiny oracle checkpoints (tests/oracle/families.py).

The images are random uint8 arrays; markbase's own processor (equal to transformers' Pillow processor,
tested separately) turns them into pixel_values, which transformers gets directly (its torchvision
processors cannot run here). Stored per family as `vision-<VERSION>.npz` next to the checkpoints:
  - `feat_*`: get_image_features for each image (vision tower output before the projection, soft tokens),
  - `one_ids`/`one_logits`, `two_ids`/`two_logits`: logits for a prompt with one image and with two images
    of different sizes (text before, between and after them),
  - `greedy`: 32 greedy tokens of transformers' generate for the two-image prompt (decode after the
    images: the cache path, with bidirectional image blocks on the "vision" families),
  - `vid_ids`/`vid_logits`: a 3-frame video given as pixel_values_videos.
"""

from __future__ import annotations

import os

import numpy as np

from .cache_lock import built_once
from .families import TINY_MEDIA_IDS
from .float64 import build_with_float64
from . import binding

VERSION = "v3"  # v3: float64 references (`*_f64`), well-conditioned prompts; v2: two video frames, not three (the video test took ~1 min per family on metal-sim on a slow VM)
BUDGET = 70           # soft tokens per image (the smallest budget keeps the tiny grids inside the position tables)
GREEDY = 32
IMAGE_SHAPES = [(80, 60), (60, 90)]  # (H, W): 27×21 and 18×30 patches of 4 px — different sizes and aspects
VIDEO_FRAMES = 2
# The first seed of each prompt's text; the builder takes the first well-conditioned one from there
# (binding.well_conditioned_seed) and the float64 pass reuses it (stored as `seeds`).
PROMPT_SEEDS = {"one": 1, "two": 2, "video": 7}


def images() -> list[np.ndarray]:
    rng = np.random.default_rng(500)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in IMAGE_SHAPES]


def video() -> np.ndarray:
    rng = np.random.default_rng(501)
    return rng.integers(0, 256, (VIDEO_FRAMES, 64, 80, 3), dtype=np.uint8)


def processed(vision_config, unified: bool, image):
    from markbase.preprocess import process_image

    return process_image(image, max_soft_tokens=BUDGET, patch_size=vision_config.patch_size,
                         pooling_kernel_size=vision_config.pooling_kernel_size, merge_patches=unified)


def prompt(counts: list[int], kind: str = "image", seed: int = 0) -> np.ndarray:
    """[bos] text ([boi] placeholder×n [eoi] text)… with a run per image (or video frame)."""
    rng = np.random.default_rng(600 + seed)
    m = TINY_MEDIA_IDS
    place = m["image_token_id"] if kind == "image" else m["video_token_id"]
    ids = [2] + list(rng.integers(3, 400, size=4))
    for n in counts:
        ids += [m["boi_token_id"]] + [place] * n + [m["eoi_token_id"]] + list(rng.integers(3, 400, size=3))
    return np.array(ids, np.int64)


def token_types(ids: np.ndarray) -> np.ndarray:
    m = TINY_MEDIA_IDS
    return np.where(ids == m["image_token_id"], 1, np.where(ids == m["video_token_id"], 2, 0)).astype(np.int64)


def _references(cfg, model, greedy: bool, seeds: dict | None = None) -> dict[str, np.ndarray]:
    """The features, logits (and greedy tokens) of the prompts above, in the model's own dtype. Without `seeds`
    (the f32 pass) each prompt's seed is searched for (well-conditioned) and returned in data["seeds"]."""
    import torch

    unified = cfg.is_unified
    vc = cfg.vision_config
    rows = BUDGET if unified else BUDGET * vc.pooling_kernel_size ** 2
    procs = [processed(vc, unified, im) for im in images()]
    padded = [p.padded(rows) for p in procs]
    pv = torch.tensor(np.stack([a for a, _ in padded])).to(model.dtype)
    pos = torch.tensor(np.stack([b for _, b in padded]))
    data: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for i in range(len(procs)):
            f = model.model.get_image_features(pv[i:i + 1], pos[i:i + 1])
            n = procs[i].num_soft_tokens
            hidden = f.last_hidden_state.reshape(-1, f.last_hidden_state.shape[-1])[:n]
            data[f"feat_pooled_{i}"] = hidden.numpy()
            data[f"feat_soft_{i}"] = f.pooler_output[0].numpy()
        chosen = dict(seeds or {})
        for name, idx in (("one", [0]), ("two", [0, 1])):
            def image_prompt(seed, idx=idx):
                ids = prompt([procs[i].num_soft_tokens for i in idx], seed=seed)
                return ids, dict(pixel_values=pv[idx], image_position_ids=pos[idx],
                                 mm_token_type_ids=torch.tensor(token_types(ids))[None])

            ids, kw = binding.chosen_prompt(model, chosen, name, image_prompt, PROMPT_SEEDS[name])
            t = torch.tensor(ids)[None]
            data[f"{name}_ids"] = ids
            data[f"{name}_logits"] = model(t, **kw).logits[0].numpy()
            if name == "two" and greedy:
                data["greedy"] = model.generate(t, max_new_tokens=GREEDY, do_sample=False, eos_token_id=None,
                                                pad_token_id=0, **kw)[0, len(ids):].numpy()
        frames = [processed(vc, unified, fr) for fr in video()]
        vpad = [fr.padded(rows) for fr in frames]

        def video_prompt(seed):
            vids = prompt([fr.num_soft_tokens for fr in frames], kind="video", seed=seed)
            return vids, dict(pixel_values_videos=torch.tensor(np.stack([a for a, _ in vpad])).to(model.dtype),
                              video_position_ids=torch.tensor(np.stack([b for _, b in vpad])),
                              num_frames_per_video=torch.tensor([len(frames)]),
                              mm_token_type_ids=torch.tensor(token_types(vids))[None])

        vids, vkw = binding.chosen_prompt(model, chosen, "video", video_prompt, PROMPT_SEEDS["video"])
        data["vid_ids"] = vids
        data["vid_logits"] = model(torch.tensor(vids)[None], **vkw).logits[0].numpy()
        data["seeds"] = chosen
    return data


@built_once(lambda family_dir, family: os.path.join(family_dir, "vision"))
def build(family_dir: str, family: str) -> str:
    return build_with_float64(os.path.join(family_dir, f"vision-{VERSION}.npz"), _references, family_dir)
    data = with_float64(_references, family_dir)
    tmp = out + ".tmp.npz"
    np.savez(tmp, **data)
    os.replace(tmp, out)
    return out
