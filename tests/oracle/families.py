"""Tiny Gemma 4 oracle checkpoints built by transformers 5.23 (random weights, every scale perturbed).

Five families mirror the released checkpoints' text features at toy size:
  e2b  PLE, KV sharing, double-wide MLP in reuse layers, 4:1 sliding:full pattern, 1 KV head
  e4b  PLE, KV sharing, 5:1 pattern, 2 KV heads
  26b  MoE (8 experts, top-2) + dense MLP, attention_k_eq_v, global KV heads
  31b  dense, attention_k_eq_v, global KV heads
  12b  gemma4_unified, k=v, 1 global KV head
Each directory holds the f32 checkpoint (`f32/`), a bf16 copy (`bf16/`) and `reference.npz` with
transformers' eager f32 logits for a prompt 4× the sliding window and its 64 greedy tokens, for a text
prompt holding image / video / audio placeholder ids (embedded as pad), and for a multimodal prompt whose
image and video placeholders are filled with given soft tokens (mm_encoder_outputs) with
mm_token_type_ids (bidirectional image blocks on the "vision" families); the same logits from transformers
run in float64 (`*_f64`), the yardstick of the precision policy (tests/oracle/policy.py).

Every numerical feature binds (asserted while building): the final norm is scaled so the prompt's logits
reach ±LOGIT_REACH before the softcap; the encoders' clip bounds sit at quantiles of what each clippable
linear sees on the oracle's own images and clips, so ≥ 1% of its inputs and of its outputs are clipped. The
prompts are well-conditioned: f32 summation order alone moves their logits by at most binding.MAX_SPREAD.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from oracle import binding
from oracle.cache_lock import built_once
from oracle.float64 import float64_math

CACHE_VERSION = "oracle-v4"  # v4: softcap and clamps bind, float64 references  # bump when the builder changes, so cached fixtures are rebuilt
WINDOW = 8
PROMPT_LEN = 4 * WINDOW
GREEDY_TOKENS = 64
VOCAB = 512
FAMILIES = ["e2b", "e4b", "26b", "31b", "12b"]
# The families whose tiny vision / audio tower (build_model) no earlier family shares: e4b's towers are e2b's and
# 31b's vision tower is 26b's (same config and inputs, other random weights), so an encoder-alone comparison of
# e4b or 31b on metal-sim (a simulator: ~20 s a case) runs the kernels e2b's or 26b's runs, at the same shapes.
# The encoder-alone tests run these on metal-sim and every family on the CPU; test_vision_oracle and
# test_audio_oracle check the claim against the checkpoints' configs.
VISION_TOWERS = ["e2b", "26b", "12b"]
AUDIO_TOWERS = ["e2b", "12b"]
# The tiny vocabulary cannot hold the released placeholder ids (258880, ...): move them inside it, as they
# are inside the real 262144-token vocabulary.
TINY_MEDIA_IDS = dict(image_token_id=500, video_token_id=501, audio_token_id=502, boi_token_id=503,
                      eoi_token_id=504, boa_token_id=505, eoa_token_index=506)

ROPE = {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}


LOGIT_REACH = 40.0  # max |logit| of the prompt before the final softcap (30): tanh is far from linear there
CAPPED_ABOVE = 25.0  # some logits must exceed this before capping
CLIP_QUANTILE = 0.04  # clip bounds at this quantile (and 1 -) of each clippable linear's inputs / outputs
MIN_CLIPPED = 0.01   # the fraction of inputs and of outputs each clippable linear must clip


def layer_types(n: int, period: int) -> list[str]:
    return ["full_attention" if i % period == period - 1 else "sliding_attention" for i in range(n)]


def text_kwargs(family: str) -> dict:
    common = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, head_dim=16, global_head_dim=32,
                  max_position_embeddings=1024, rms_norm_eps=1e-6, sliding_window=WINDOW,
                  final_logit_softcapping=30.0, rope_parameters=ROPE, initializer_range=0.1)
    if family == "e2b":
        return dict(common, intermediate_size=96, num_hidden_layers=10, num_key_value_heads=1,
                    num_global_key_value_heads=None, layer_types=layer_types(10, 5), vocab_size_per_layer_input=VOCAB,
                    hidden_size_per_layer_input=8, attention_k_eq_v=False, num_kv_shared_layers=4,
                    enable_moe_block=False, use_double_wide_mlp=True, use_bidirectional_attention=None)
    if family == "e4b":
        return dict(common, intermediate_size=128, num_hidden_layers=12, num_key_value_heads=2,
                    num_global_key_value_heads=None, layer_types=layer_types(12, 6), vocab_size_per_layer_input=VOCAB,
                    hidden_size_per_layer_input=8, attention_k_eq_v=False, num_kv_shared_layers=4,
                    enable_moe_block=False, use_double_wide_mlp=False, use_bidirectional_attention=None)
    if family == "26b":
        return dict(common, intermediate_size=48, num_hidden_layers=6, num_key_value_heads=2,
                    num_global_key_value_heads=1, layer_types=layer_types(6, 3), hidden_size_per_layer_input=0,
                    attention_k_eq_v=True, num_kv_shared_layers=0, enable_moe_block=True, num_experts=8,
                    top_k_experts=2, moe_intermediate_size=32, use_double_wide_mlp=False,
                    use_bidirectional_attention="vision")
    if family == "31b":
        return dict(common, intermediate_size=128, num_hidden_layers=6, num_key_value_heads=4,
                    num_global_key_value_heads=2, layer_types=layer_types(6, 3), hidden_size_per_layer_input=0,
                    attention_k_eq_v=True, num_kv_shared_layers=0, enable_moe_block=False,
                    use_double_wide_mlp=False, use_bidirectional_attention="vision")
    if family == "12b":
        return dict(common, intermediate_size=128, num_hidden_layers=6, num_key_value_heads=2,
                    num_global_key_value_heads=1, layer_types=layer_types(6, 3), attention_k_eq_v=True,
                    num_kv_shared_layers=0, use_double_wide_mlp=False, use_bidirectional_attention="vision")
    raise ValueError(family)


def media_ids() -> dict:
    return TINY_MEDIA_IDS if VOCAB < 262144 else {}


def build_model(family: str, seed: int = 0):
    import torch
    from transformers.models.gemma4 import configuration_gemma4 as c4
    from transformers.models.gemma4 import modeling_gemma4 as m4

    torch.manual_seed(seed)
    if family == "12b":
        from transformers.models.gemma4_unified import configuration_gemma4_unified as cu
        from transformers.models.gemma4_unified import modeling_gemma4_unified as mu

        cfg = cu.Gemma4UnifiedConfig(
            text_config=cu.Gemma4UnifiedTextConfig(**text_kwargs(family)),
            vision_config=cu.Gemma4UnifiedVisionConfig(patch_size=4, pooling_kernel_size=2, model_patch_size=8,
                                                       mm_embed_dim=64, mm_posemb_size=16, output_proj_dims=64),
            audio_config=cu.Gemma4UnifiedAudioConfig(audio_embed_dim=40), **media_ids())
        model = mu.Gemma4UnifiedForConditionalGeneration(cfg)
    else:
        vision = c4.Gemma4VisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                                       num_key_value_heads=2, head_dim=16, patch_size=4, pooling_kernel_size=3,
                                       position_embedding_size=32, use_clipped_linears=family in ("e2b", "e4b"),
                                       standardize=family in ("26b", "31b"))
        audio = None
        if family in ("e2b", "e4b"):
            audio = c4.Gemma4AudioConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         subsampling_conv_channels=[128, 4], output_proj_dims=48)
        cfg = c4.Gemma4Config(text_config=c4.Gemma4TextConfig(**text_kwargs(family)), vision_config=vision,
                              audio_config=audio, **media_ids())
        model = m4.Gemma4ForConditionalGeneration(cfg)
    perturb(model, seed)
    return model.eval()


def load_transformers(family_dir: str, dtype: str = "float32"):
    """(markbase config, transformers model in eager attention, `dtype` math) of an oracle family's f32
    checkpoint."""
    import torch
    import transformers

    from markbase.models.gemma4 import load_config

    ckpt = os.path.join(family_dir, "f32")
    cfg = load_config(ckpt)
    cls = (transformers.Gemma4UnifiedForConditionalGeneration if cfg.is_unified
           else transformers.Gemma4ForConditionalGeneration)
    return cfg, cls.from_pretrained(ckpt, dtype=getattr(torch, dtype), attn_implementation="eager",
                                    experts_implementation="eager").eval()


def perturb(model, seed: int) -> None:
    """Moves every norm weight, layer_scalar, scale and clip bound away from its initial value."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point() or "inv_freq" in name or "embed_scale" in name:
                continue
            if name.endswith("layer_scalar"):
                # Moved off 1, but not far below it: a residual shrunk by ~0.75 per layer hands each layer's
                # unit-RMS (post-normed) output more weight and doubles f32 noise on the 12-layer E4B.
                t.copy_(0.75 + 0.25 * torch.rand(t.shape, generator=g))
            elif name.endswith(("input_min", "output_min")):
                t.fill_(-2.0 - float(torch.rand((), generator=g)))
            elif name.endswith(("input_max", "output_max")):
                t.fill_(2.0 + float(torch.rand((), generator=g)))
            elif "q_norm" in name or "k_norm" in name:
                # Scale 1.0 attention: keep q·k logits moderate so the random model is not chaotic
                # (with unit norms f32 rounding doubles per layer and even transformers' own f32 run
                # drifts ~1e-3 from float64 on 12 layers).
                t.copy_(0.3 + 0.3 * torch.rand(t.shape, generator=g))
            elif name.endswith("std_scale") or name.endswith("per_expert_scale") or name.endswith("router.scale"):
                t.copy_(0.5 + torch.rand(t.shape, generator=g))
            elif t.dim() == 1:
                t.add_(0.1 * torch.randn(t.shape, generator=g))


def run_towers(model, family: str, module: str = "") -> None:
    """Runs the vision and audio towers on the oracle's own images (tests/oracle/vision.py) and clips
    (tests/oracle/audio.py): what the clip bounds are calibrated on. Only the tower of `module` if given."""
    import torch

    from . import audio, vision

    vc = model.config.vision_config
    unified = family == "12b"
    rows = vision.BUDGET if unified else vision.BUDGET * vc.pooling_kernel_size ** 2
    with torch.no_grad():
        for im in (vision.images() + list(vision.video())) * ("audio_tower" not in module):
            pv, pos = vision.processed(vc, unified, im).padded(rows)
            model.model.get_image_features(torch.tensor(pv)[None], torch.tensor(pos)[None])
        if getattr(model.config, "audio_config", None) is not None and "vision_tower" not in module:
            for samples in audio.clips(family):
                f, m = audio.extract(family, samples)
                model.model.get_audio_features(torch.tensor(f)[None], torch.tensor(m)[None], return_dict=True)


def prompt_ids(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + 100)
    ids = rng.integers(3, VOCAB, size=PROMPT_LEN)
    ids[0] = 2  # <bos>
    return ids.astype(np.int64)


def placeholder_prompt(seed: int = 0) -> np.ndarray:
    """A text prompt with image / video / audio placeholder ids scattered in it, no media attached."""
    ids = prompt_ids(seed + 1)
    m = TINY_MEDIA_IDS
    for pos, key in ((3, "image_token_id"), (4, "image_token_id"), (9, "video_token_id"), (13, "audio_token_id"),
                     (20, "image_token_id"), (27, "audio_token_id")):
        ids[pos] = m[key]
    return ids


MM_EXTRA = 6  # text tokens after the multimodal prompt: run as decode steps after a cached prefill


def multimodal_prompt(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mm_token_type_ids): text, an image of 12 soft tokens (longer than the window), text, a video
    frame of 6, text, an image of 3, text, then MM_EXTRA text tokens."""
    rng = np.random.default_rng(seed + 200)
    m = TINY_MEDIA_IDS

    def text(n):
        return list(rng.integers(3, 400, size=n))

    ids, types = [2], [0]
    for part, n, kind in (("text", 3, 0), ("image", 12, 1), ("text", 2, 0), ("video", 6, 2), ("text", 3, 0),
                          ("image", 3, 1), ("text", 4 + MM_EXTRA, 0)):
        if part == "text":
            ids += text(n)
            types += [0] * n
            continue
        place = m["image_token_id"] if part == "image" else m["video_token_id"]
        ids += [m["boi_token_id"]] + [place] * n + [m["eoi_token_id"]]
        types += [0] + [kind] * n + [0]
    return np.array(ids, np.int64), np.array(types, np.int64)


def multimodal_reference(model, ids: np.ndarray, types: np.ndarray, seed: int = 0) -> dict:
    """transformers' logits with the placeholders filled by random soft tokens (no encoder involved)."""
    import types as pytypes

    import torch

    g = torch.Generator().manual_seed(seed + 300)
    H = model.config.text_config.hidden_size
    n_img = int((ids == TINY_MEDIA_IDS["image_token_id"]).sum())
    n_vid = int((ids == TINY_MEDIA_IDS["video_token_id"]).sum())
    img = torch.randn(n_img, H, generator=g)
    vid = torch.randn(n_vid, H, generator=g)
    outputs = {"image": pytypes.SimpleNamespace(pooler_output=[img.to(model.dtype)]),
               "video": pytypes.SimpleNamespace(pooler_output=[vid.to(model.dtype)])}
    with torch.no_grad():
        logits = model(torch.tensor(ids)[None], mm_token_type_ids=torch.tensor(types)[None],
                       mm_encoder_outputs=outputs).logits[0].numpy()  # the model's own dtype (f32 or f64)
    return {"mm_ids": ids, "mm_types": types, "mm_image": img.numpy(), "mm_video": vid.numpy(), "mm_logits": logits}


@built_once(lambda family, root: os.path.join(root, family))
def build_family(family: str, root: str) -> str:
    out = os.path.join(root, family)
    if os.path.exists(os.path.join(out, "reference.npz")):
        return out
    import torch
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model = build_model(family)
    binding.bind_clips(model, lambda name: run_towers(model, family, name), CLIP_QUANTILE, MIN_CLIPPED)
    binding.bind_softcap(model, prompt_ids(), LOGIT_REACH, CAPPED_ABOVE)

    def logits_of(ids):
        with torch.no_grad():
            return model(torch.tensor(ids)[None]).logits[0].numpy()

    # Prompts whose logits f32 summation order alone moves by at most binding.MAX_SPREAD; the final norm then
    # scaled for the chosen prompt.
    seed = binding.well_conditioned_seed(model, lambda s: logits_of(prompt_ids(s)), 0, "prompt")
    ph_seed = binding.well_conditioned_seed(model, lambda s: logits_of(placeholder_prompt(s)), 0, "placeholder prompt")
    precap_max = binding.bind_softcap(model, prompt_ids(seed), LOGIT_REACH, CAPPED_ABOVE)
    model.save_pretrained(os.path.join(tmp, "f32"))
    # Reference: eager attention, f32, from the saved checkpoint (exactly what the engine loads).
    cls = type(model)
    ref = cls.from_pretrained(os.path.join(tmp, "f32"), dtype=torch.float32, attn_implementation="eager").eval()
    ids = prompt_ids(seed)
    with torch.no_grad():
        logits = ref(torch.tensor(ids)[None]).logits[0].float().numpy()
        gen = ref.generate(torch.tensor(ids)[None], max_new_tokens=GREEDY_TOKENS, do_sample=False,
                           eos_token_id=None, pad_token_id=0)[0, len(ids):].numpy()
    bf16 = cls.from_pretrained(os.path.join(tmp, "f32"), dtype=torch.bfloat16)
    bf16.save_pretrained(os.path.join(tmp, "bf16"))
    # The f32 reference of the bf16 checkpoint: same rounded weights, f32 math.
    ref16 = cls.from_pretrained(os.path.join(tmp, "bf16"), dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        logits16 = ref16(torch.tensor(ids)[None]).logits[0].float().numpy()
    ph = placeholder_prompt(ph_seed)
    with torch.no_grad():
        ph_logits = ref(torch.tensor(ph)[None]).logits[0].float().numpy()
    mm = multimodal_reference(ref, *multimodal_prompt())
    # The same prompts in float64: the yardstick for markbase's and transformers-f32's own error.
    with float64_math(), torch.no_grad():
        ref64 = cls.from_pretrained(os.path.join(tmp, "f32"), dtype=torch.float64, attn_implementation="eager",
                                    experts_implementation="eager").eval()
        logits64 = ref64(torch.tensor(ids)[None]).logits[0].numpy()
        ph64 = ref64(torch.tensor(ph)[None]).logits[0].numpy()
        mm64 = multimodal_reference(ref64, mm["mm_ids"], mm["mm_types"])["mm_logits"]
    np.savez(os.path.join(tmp, "reference.npz"), ids=ids, logits=logits, greedy=gen, logits_bf16_f32=logits16,
             ph_ids=ph, ph_logits=ph_logits, logits_f64=logits64, ph_logits_f64=ph64, mm_logits_f64=mm64,
             precap_max=precap_max, **mm)
    with open(os.path.join(tmp, "family.json"), "w") as f:
        json.dump({"family": family, "version": CACHE_VERSION}, f)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out


def cache_root() -> str:
    root = os.environ.get("MARKBASE_TEST_CACHE") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".test-cache")
    return os.path.join(root, CACHE_VERSION)


def build_all() -> dict[str, str]:
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    return {f: build_family(f, root) for f in FAMILIES}


if __name__ == "__main__":
    import time

    t0 = time.time()
    print(build_all(), f"{time.time() - t0:.1f}s")


CHAT_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello! What is the capital of France?"},
]
CHAT_NEW_TOKENS = 24


@built_once(lambda family, root: os.path.join(root or cache_root(), f"chat-{family}"))
def build_chat(family: str = "e2b", root: str | None = None) -> str:
    """A `family` checkpoint with the full 262144-token vocabulary plus markbase's test tokenizer and chat
    template, and transformers' greedy generation through that template (`chat_reference.npz`)."""
    import torch
    from transformers import AutoTokenizer

    from markbase.testing.tokenizer_build import GENERATION_CONFIG, build_tokenizer_json, chat_template, tokenizer_config

    root = root or cache_root()
    out = os.path.join(root, f"chat-{family}")
    if os.path.exists(os.path.join(out, "chat_reference.npz")):
        return out
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    global VOCAB
    saved = VOCAB
    VOCAB = 262144
    try:
        model = build_model(family, seed=7)
    finally:
        VOCAB = saved
    model.save_pretrained(tmp)
    with open(os.path.join(tmp, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(build_tokenizer_json())
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f)
    with open(os.path.join(tmp, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(chat_template(empty_thought=family in ("26b", "31b", "12b")))
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump(GENERATION_CONFIG, f)
    tok = AutoTokenizer.from_pretrained(tmp)
    ids = tok.apply_chat_template(CHAT_MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = torch.tensor(list(ids))[None]
    ref = type(model).from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        gen = ref.generate(ids, max_new_tokens=CHAT_NEW_TOKENS, do_sample=False, eos_token_id=[1, 106, 50],
                           pad_token_id=0)[0, ids.shape[1]:].numpy()
    np.savez(os.path.join(tmp, "chat_reference.npz"), prompt=ids[0].numpy(), greedy=gen)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out
