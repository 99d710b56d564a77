// Token embedding lookup: out[t] = f32(table[ids[t]]) * scale.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

// table: [V, D] f32 / bf16 / f16, contiguous (typically a mapped checkpoint: only looked-up rows are read)
// ids:   [T] i32 or i64, every id in [0, V) (else InputError naming the id and its position)
// out:   [T, D] f32 or bf16, contiguous; the product is computed in f32 and rounded once to out's dtype.
void embedding(const Tensor& table, const Tensor& ids, Tensor& out, float scale, const Exec& ex = {});

}  // namespace mb::ops
