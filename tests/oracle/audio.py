"""transformers references for audio on the tiny oracle checkpoints (tests/oracle/families.py): the E2B- and
E4B-like conformer towers (every norm, clip bound and per_dim_scale perturbed) and the 12B-like waveform
embedder (frames of audio_embed_dim = 40 samples at toy size).

The clips are synthetic 16 kHz float32 signals; transformers' own feature extractors make the features
the model gets (Gemma4AudioFeatureExtractor; Gemma4UnifiedAudioFeatureExtractor with 40-sample frames).
Stored per family as `audio-<VERSION>.npz` next to the checkpoints:
  - `fe_<i>` / `fe_mask_<i>`: the extractor's features and mask for clip i,
  - `hid_<i>`, `soft_<i>`: get_audio_features for clip i, valid rows only (the tower's last_hidden_state,
    on E2B/E4B; the soft tokens after embed_audio),
  - `aud_ids` / `aud_logits`: a prompt with two clips between text; `greedy`: 32 greedy tokens of
    transformers' generate for it,
  - `mix_ids` / `mix_logits`: an image and a clip in the same message.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from .cache_lock import built_once
from .families import TINY_MEDIA_IDS
from .float64 import build_with_float64
from . import binding

VERSION = "v2"  # v2: float64 references (`*_f64`), well-conditioned prompts
# The first seed of each prompt's text; the builder takes the first well-conditioned one from there
# (binding.well_conditioned_seed) and the float64 pass reuses it (stored as `seeds`).
PROMPT_SEEDS = {"aud": 1, "mix": 2}
GREEDY = 32
SR = 16000
UNIFIED_FRAME = 40  # the tiny 12B's audio_embed_dim: samples per token


def clip_lengths(family: str) -> list[int]:
    """Samples per clip. Tower: 1 s (25 tokens), 4.4 s (110), 2.37 s (59: not a multiple of the 12-token
    chunk), 1.93 s (48: exactly 4 chunks). 12B: 40 tokens, and 31 with a partial last frame."""
    if family == "12b":
        return [1600, 1234]
    return [16000, 70400, 37920, 30880]


def clip(n: int, seed: int) -> np.ndarray:
    """A chirp, two tones and noise: every mel band gets energy, nothing is periodic in the frames."""
    rng = np.random.default_rng(700 + seed)
    t = np.arange(n) / SR
    f0, f1 = 150.0 + 50 * seed, 3500.0
    chirp = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * max(t[-1], 1e-3))))
    tones = 0.3 * np.sin(2 * np.pi * 440 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.2 * np.sin(2 * np.pi * 5200 * t)
    return (0.4 * chirp + tones + 0.05 * rng.normal(size=n)).astype(np.float32)


def pair(family: str) -> list[int]:
    """The two clips of the two-clip prompt: 1 s and 2.37 s (tower), both (12B)."""
    return [0, 1] if family == "12b" else [0, 2]


def clips(family: str) -> list[np.ndarray]:
    return [clip(n, i) for i, n in enumerate(clip_lengths(family))]


def extract(family: str, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """transformers' feature extractor for this family: (features [F, d], mask [F])."""
    if family == "12b":
        from transformers.models.gemma4_unified.feature_extraction_gemma4_unified import (
            Gemma4UnifiedAudioFeatureExtractor)

        out = Gemma4UnifiedAudioFeatureExtractor(feature_size=UNIFIED_FRAME, audio_samples_per_token=UNIFIED_FRAME)(
            [samples], return_tensors="np")
    else:
        from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

        out = Gemma4AudioFeatureExtractor()([samples], return_tensors="np")
    return np.asarray(out["input_features"][0], np.float32), np.asarray(out["input_features_mask"][0], bool)


def tokens(family: str, mask: np.ndarray) -> int:
    if family == "12b":
        return int(mask.sum())
    t = len(mask)
    for _ in range(2):  # the processor's replace_audio_token: two stride-2 convs on the mask
        mask = mask[::2][:(t + 2 - 3) // 2 + 1]
        t = len(mask)
    return int(mask.sum())


def prompt(runs: list[tuple[str, int]], seed: int) -> np.ndarray:
    """[bos] text, then per (kind, n): [boi|boa] placeholder×n [eoi|eoa] text."""
    rng = np.random.default_rng(800 + seed)
    m = TINY_MEDIA_IDS
    ids = [2] + list(rng.integers(3, 400, size=4))
    for kind, n in runs:
        if kind == "audio":
            ids += [m["boa_token_id"]] + [m["audio_token_id"]] * n + [m["eoa_token_index"]]
        else:
            ids += [m["boi_token_id"]] + [m["image_token_id"]] * n + [m["eoi_token_id"]]
        ids += list(rng.integers(3, 400, size=3))
    return np.array(ids, np.int64)


def token_types(ids: np.ndarray) -> np.ndarray:
    m = TINY_MEDIA_IDS
    return np.where(ids == m["image_token_id"], 1, np.where(ids == m["audio_token_id"], 3, 0)).astype(np.int64)


def _references(family: str, cfg, model, greedy: bool, seeds: dict | None = None) -> dict[str, np.ndarray]:
    """The features, tower outputs, logits (and greedy tokens) of the clips and prompts above, in the model's
    own dtype. Without `seeds` (the f32 pass) each prompt's seed is searched for and returned in data["seeds"]."""
    import torch

    from . import vision

    unified = cfg.is_unified
    data: dict[str, np.ndarray] = {}
    feats = []
    with torch.no_grad():
        for i, samples in enumerate(clips(family)):
            f, m = extract(family, samples)
            data[f"fe_{i}"], data[f"fe_mask_{i}"] = f, m
            ft, mt = torch.tensor(f, dtype=model.dtype)[None], torch.tensor(m)[None]
            feats.append((ft, mt, tokens(family, m)))
            o = model.model.get_audio_features(ft, mt, return_dict=True)
            valid = o.attention_mask[0].bool()
            assert int(valid.sum()) == feats[-1][2]
            if not unified:
                data[f"hid_{i}"] = o.last_hidden_state[0][valid].numpy()
            data[f"soft_{i}"] = o.pooler_output[0][valid].numpy()

        def audio_kwargs(idx):
            # one batch row per clip, padded to the longest as the extractor pads a batch
            F = max(feats[i][0].shape[1] for i in idx)
            ft = torch.zeros((len(idx), F, feats[idx[0]][0].shape[2]), dtype=model.dtype)
            mt = torch.zeros((len(idx), F), dtype=torch.bool)
            for r, i in enumerate(idx):
                ft[r, :feats[i][0].shape[1]] = feats[i][0][0]
                mt[r, :feats[i][1].shape[1]] = feats[i][1][0]
            return dict(input_features=ft, input_features_mask=mt)

        chosen = dict(seeds or {})

        idx = pair(family)

        def two_clips(seed):
            ids = prompt([("audio", feats[i][2]) for i in idx], seed=seed)
            return ids, dict(audio_kwargs(idx), mm_token_type_ids=torch.tensor(token_types(ids))[None])

        ids, kw = binding.chosen_prompt(model, chosen, "aud", two_clips, PROMPT_SEEDS["aud"])
        t = torch.tensor(ids)[None]
        data["aud_ids"] = ids
        data["aud_logits"] = model(t, **kw).logits[0].numpy()
        if greedy:
            data["greedy"] = model.generate(t, max_new_tokens=GREEDY, do_sample=False, eos_token_id=None, pad_token_id=0,
                                            **kw)[0, len(ids):].numpy()

        # an image and a clip in the same message
        vc = cfg.vision_config
        im = vision.processed(vc, unified, vision.images()[0])
        rows = vision.BUDGET if unified else vision.BUDGET * vc.pooling_kernel_size ** 2
        pv, pos = im.padded(rows)

        def image_and_clip(seed):
            mix = prompt([("image", im.num_soft_tokens), ("audio", feats[1][2])], seed=seed)
            return mix, dict(audio_kwargs([1]), pixel_values=torch.tensor(pv, dtype=model.dtype)[None],
                             image_position_ids=torch.tensor(pos)[None], mm_token_type_ids=torch.tensor(token_types(mix))[None])

        mix, kw = binding.chosen_prompt(model, chosen, "mix", image_and_clip, PROMPT_SEEDS["mix"])
        data["mix_ids"] = mix
        data["mix_logits"] = model(torch.tensor(mix)[None], **kw).logits[0].numpy()
        data["seeds"] = chosen
    return data


@built_once(lambda family_dir, family: os.path.join(family_dir, "audio"))
def build(family_dir: str, family: str) -> str:
    return build_with_float64(os.path.join(family_dir, f"audio-{VERSION}.npz"), functools.partial(_references, family),
                              family_dir, same=lambda k: k.startswith("fe_"))
    data = with_float64(functools.partial(_references, family), family_dir, same=lambda k: k.startswith("fe_"))
    tmp = out + ".tmp.npz"
    np.savez(tmp, **data)
    os.replace(tmp, out)
    return out
