// The Gemma 4 text decoder's resolved configuration (parsed and checked in Python, see
// python/markbase/models/gemma4/config.py; this struct is what the C++ forward pass needs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mb::gemma4 {

enum class KvMode { Own, Store, Reuse };

struct LayerConfig {
  int64_t index = 0;
  bool sliding = true;
  int64_t head_dim = 0;
  int64_t num_kv_heads = 0;
  int64_t intermediate = 0;   // dense MLP width (doubled in E2B's KV-reuse layers)
  KvMode kv_mode = KvMode::Own;
  int64_t kv_source = 0;      // layer whose cache this layer attends to (itself unless Reuse)
  bool has_v_proj = true;     // false: V = v_norm(raw k projection) (attention_k_eq_v full layers)
  std::string rope_kind = "default";  // "default" | "proportional"
  double rope_theta = 10000.0;
  double rope_partial = 1.0;
};

struct TextConfig {
  int64_t vocab = 0, hidden = 0, num_layers = 0, num_heads = 0;
  int64_t window = 0;          // sliding window W (keys incl. self)
  float eps = 1e-6f;
  float final_softcap = 0.f;   // 0 = none
  float embed_scale = 1.f;     // sqrt(hidden), rounded to the embedding's storage dtype
  int64_t ple_dim = 0;         // per-layer-embedding width P (0 = no PLE)
  float ple_embed_scale = 1.f; // sqrt(P), rounded to the PLE table's storage dtype
  bool moe = false;
  int64_t num_experts = 0, top_k = 0, moe_intermediate = 0;
  int64_t max_context = 0;
  int64_t max_chunk = 256;     // prefill is processed in chunks of at most this many tokens
  std::vector<LayerConfig> layers;
};

}  // namespace mb::gemma4
