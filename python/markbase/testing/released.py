"""The five released Gemma 4 configurations (text, vision and audio parts), as published.

Values from the implementer's specification (spec §1.2, §1.3); `markbase.testing.make_checkpoint(size="real")`
writes real-size synthetic checkpoints from them.
"""

ROPE = {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}
def lt(n, pattern):  # full attention at every `pattern`-th layer
    return ["full_attention" if (i % pattern) == pattern - 1 else "sliding_attention" for i in range(n)]
AUDIO = dict(hidden_size=1024, num_hidden_layers=12, num_attention_heads=8, hidden_act="silu",
             subsampling_conv_channels=[128, 32], conv_kernel_size=5, residual_weight=0.5,
             attention_chunk_size=12, attention_context_left=13, attention_context_right=0,
             attention_logit_cap=50.0, attention_invalid_logits_value=-1e9, use_clipped_linears=True,
             rms_norm_eps=1e-6, gradient_clipping=1e10, output_proj_dims=1536)
VIS_SMALL = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=16, num_attention_heads=12,
                 num_key_value_heads=12, head_dim=64, patch_size=16, pooling_kernel_size=3,
                 position_embedding_size=10240, use_clipped_linears=True, standardize=False,
                 rope_parameters={"rope_theta": 100.0, "rope_type": "default"})
VIS_LARGE = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                 num_key_value_heads=16, head_dim=72, patch_size=16, pooling_kernel_size=3,
                 position_embedding_size=10240, use_clipped_linears=False, standardize=True,
                 rope_parameters={"rope_theta": 100.0, "rope_type": "default"})
COMMON_TOP = dict(boi_token_id=255999, eoi_token_id=258882, image_token_id=258880, video_token_id=258884,
                  boa_token_id=256000, eoa_token_index=258883, audio_token_id=258881, tie_word_embeddings=True)
E2B_TEXT = dict(vocab_size=262144, hidden_size=1536, intermediate_size=6144, num_hidden_layers=35,
    num_attention_heads=8, num_key_value_heads=1, head_dim=256, global_head_dim=512, num_global_key_value_heads=None,
    max_position_embeddings=131072, rms_norm_eps=1e-6, sliding_window=512, layer_types=lt(35, 5),
    final_logit_softcapping=30.0, use_bidirectional_attention=None, vocab_size_per_layer_input=262144,
    hidden_size_per_layer_input=256, attention_k_eq_v=False, num_kv_shared_layers=20, enable_moe_block=False,
    use_double_wide_mlp=True, rope_parameters=ROPE)
E4B_TEXT = dict(E2B_TEXT, hidden_size=2560, intermediate_size=10240, num_hidden_layers=42, num_key_value_heads=2,
    layer_types=lt(42, 6), num_kv_shared_layers=18, use_double_wide_mlp=False)
A4B_TEXT = dict(vocab_size=262144, hidden_size=2816, intermediate_size=2112, num_hidden_layers=30,
    num_attention_heads=16, num_key_value_heads=8, head_dim=256, global_head_dim=512, num_global_key_value_heads=2,
    max_position_embeddings=262144, rms_norm_eps=1e-6, sliding_window=1024, layer_types=lt(30, 6),
    final_logit_softcapping=30.0, use_bidirectional_attention="vision", vocab_size_per_layer_input=262144,
    hidden_size_per_layer_input=0, attention_k_eq_v=True, num_kv_shared_layers=0, enable_moe_block=True,
    num_experts=128, top_k_experts=8, moe_intermediate_size=704, use_double_wide_mlp=False, rope_parameters=ROPE)
B31_TEXT = dict(A4B_TEXT, hidden_size=5376, intermediate_size=21504, num_hidden_layers=60, num_attention_heads=32,
    num_key_value_heads=16, num_global_key_value_heads=4, layer_types=lt(60, 6), enable_moe_block=False,
    num_experts=None, top_k_experts=None, moe_intermediate_size=None)
U12_TEXT = dict(vocab_size=262144, hidden_size=3840, intermediate_size=15360, num_hidden_layers=48,
    num_attention_heads=16, num_key_value_heads=8, head_dim=256, global_head_dim=512, num_global_key_value_heads=1,
    max_position_embeddings=262144, rms_norm_eps=1e-6, sliding_window=1024, layer_types=lt(48, 6),
    final_logit_softcapping=30.0, use_bidirectional_attention="vision", attention_k_eq_v=True,
    num_kv_shared_layers=0, use_double_wide_mlp=False, rope_parameters=ROPE)
U12_VIS = dict(patch_size=16, pooling_kernel_size=3, mm_embed_dim=3840, mm_posemb_size=1120, output_proj_dims=3840, rms_norm_eps=1e-6)
U12_AUD = dict(audio_embed_dim=640, rms_norm_eps=1e-6)
MODELS = {
  "gemma-4-E2B-it": ("gemma4", dict(COMMON_TOP, text_config=E2B_TEXT, vision_config=VIS_SMALL, audio_config=AUDIO)),
  "gemma-4-E4B-it": ("gemma4", dict(COMMON_TOP, text_config=E4B_TEXT, vision_config=VIS_SMALL, audio_config=AUDIO)),
  "gemma-4-26B-A4B-it": ("gemma4", dict(COMMON_TOP, text_config=A4B_TEXT, vision_config=VIS_LARGE, audio_config=None)),
  "gemma-4-31B-it": ("gemma4", dict(COMMON_TOP, text_config=B31_TEXT, vision_config=VIS_LARGE, audio_config=None)),
  "gemma-4-12B-it": ("gemma4_unified", dict(COMMON_TOP, text_config=U12_TEXT, vision_config=U12_VIS, audio_config=U12_AUD)),
}


# model name -> config.json dict (model_type included)
RELEASED = {name: {"model_type": model_type, **cfg} for name, (model_type, cfg) in MODELS.items()}
