// CPU kernels for ops/embedding.h. Arguments (including the id range) are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

void embedding_ref(const Tensor& table, const Tensor& ids, Tensor& out, float scale);
// Rows shared out over the pool; inner loops over D written to vectorise.
void embedding_fast(const Tensor& table, const Tensor& ids, Tensor& out, float scale);

}  // namespace mb::cpu
