// Routing ops of a mixture-of-experts block (spec §2.8): the router's weight renormalisation and the
// weighted scatter-add that sums expert outputs back into their tokens' rows.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

// Per token row t: v[j] = w[t, j] / Σ_j' w[t, j'] · scale[ids[t, j]]   (top-k router weights renormalised
// to sum 1, then the learned per-expert scale; the row sum runs over j in order, in f32), written with
// the ids into out_w / out_ids ordered by increasing expert id — the order in which transformers adds
// the experts' outputs, so a per-token sum over the row reproduces its rounding.
// w: [T, K] f32 contiguous; ids: [T, K] i32 contiguous, distinct per row, each in [0, E); scale: [E] f32;
// out_w: [T, K] f32 (may be w); out_ids: [T, K] i32 (may be ids). ids are range-checked on the host,
// except on a deferred backend (Backend::deferred(): Metal), whose ids may still be in flight: its kernel
// gives an out-of-range id the weight 0 instead of reading outside `scale`.
void route_weights(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w, Tensor& out_ids,
                   const Exec& ex = {});

// out[index[i], :] += weight[i] · src[i, :] for i = 0, 1, ..., n-1 in that order; each product is rounded
// to f32 before its add (as torch's index_add_ of a weighted source), and a row named twice accumulates
// in index order. out: [R, D] f32 contiguous; index: [n] i32 contiguous, each in [0, R) (checked: read on
// the host, so it must be host data or the output of an already synchronized command buffer);
// src: [n, D] f32 contiguous; weight: [n] f32 contiguous, or nullptr for 1.
void index_add(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight, const Exec& ex = {});

}  // namespace mb::ops
