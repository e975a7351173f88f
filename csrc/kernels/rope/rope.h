// Rotary position embedding (HF "rotate-half" RoPE) and Qwen2-VL mRoPE CUDA
// kernels: plain-C++ interface (raw pointers, strides, a stream). Liger's
// LigerRopeFunction / LigerQwen2VLMRopeFunction, out of place.
//
// For every row x of D = 2h elements (one head of one token of q or k), with
// c, s the cos/sin rows of that token (D elements each; general values, not
// assumed to be cat(f, f)):
//   forward   o[j]   = x[j]   c[j]   - x[j+h] s[j]
//             o[j+h] = x[j+h] c[j+h] + x[j]   s[j+h]          (0 <= j < h)
//   backward  (the transpose) dx[j]   = g[j]   c[j]   + g[j+h] s[j+h]
//                             dx[j+h] = g[j+h] c[j+h] - g[j]   s[j]
// fp32 math, one rounding to the output dtype.
//
// mRoPE: column j and column j+h both take cos/sin from plane p(j) of the
// (3, B, S, D) tables, p(j) = 0 for j < section0, 1 for j < section0 + section1,
// else 2 (HF's apply_multimodal_rotary_pos_emb with mrope_section * 2). Plain
// RoPE is section0 = h (plane 0 only).
//
// Tensors are addressed as [b][head][s][d] with int64 element strides (d unit
// stride); cos/sin as [plane][b][s][d] (batch stride 0 broadcasts one table).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

// One of q, k (forward: x -> o; backward: g -> dx). `in` and `out` never overlap.
struct RopeOperand {
  const void* in;
  int64_t in_sb, in_sh, in_ss;  // batch, head, sequence strides (elements)
  void* out;
  int64_t out_sb, out_sh, out_ss;
  int64_t heads;
};

struct RopeArgs {
  RopeOperand q, k;
  const void* cos;
  int64_t cos_sp, cos_sb, cos_ss;  // plane, batch, sequence strides (batch stride 0: broadcast)
  const void* sin;
  int64_t sin_sp, sin_sb, sin_ss;
  int64_t batch, seq, head_dim;  // head_dim even
  int64_t section0, section1;    // mRoPE plane boundaries in [0, head_dim / 2]; RoPE: head_dim / 2, 0
  bool backward;
  DType dtype;     // of q, k and the outputs
  DType cs_dtype;  // of cos and sin: float32 or dtype
};

cudaError_t rope(const RopeArgs& a, int sm_count, cudaStream_t stream);

}  // namespace liger_cpp::kernels
