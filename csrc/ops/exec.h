// How an op runs: what model code passes to every op front door. The backend is resolved once from a
// device name (backend/registry.h: backend_for); the default is the CPU backend.
#pragma once

namespace mb {

class Backend;
const Backend& default_backend();  // backend/registry.h

struct Exec {
  const Backend* backend = &default_backend();
  // Run the scalar reference kernels instead of the backend's (parity tests, debugging). They are the
  // yardstick of every backend and run on the CPU whatever the device.
  bool reference = false;
  // Let the quantized decode GEMV round x to 16-bit integers per weight group (ops/quant.h:
  // linear_quantized). false: every product and sum in f32.
  bool int16_activations = false;
  // Let the quantized decode GEMV with 4-bit weights round x to 8-bit integers per weight group instead
  // (llama.cpp's Q8 activations; AVX-512 VNNI only, 16-bit elsewhere); implies int16_activations'
  // permissions. 8-bit weights keep 16-bit x: there x8 saves no time (that GEMV is bandwidth-bound) and
  // adds 4-7x the KL divergence to f32 (bench/quant_quality.py), while with 4-bit weights it adds < 2%.
  bool int8_activations = false;
  // Let the CPU linear with bf16 weights round x to bf16 and sum the exact bf16 products in f32 (prefill:
  // vdpbf16ps; decode rows: the GEMV on the rounded x) where the CPU does that faster than f32 FMAs
  // (backend/cpu/gemm.h: bf16_products_enabled).
  bool bf16_products = false;
  // Every linear computes each row of x as it would a single row, bit for bit: a row's result does not
  // depend on how many rows the call has or what they hold (ops/params.h: LinearParams::row_invariant).
  // TextDecoder::forward_batch sets it for a decode step shared by several sequences, so a sequence's
  // logits do not depend on its batch. Prefill leaves it off (its GEMMs sum in another order).
  bool row_invariant = false;
};

}  // namespace mb
