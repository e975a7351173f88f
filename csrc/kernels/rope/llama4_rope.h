// Llama 4's complex-frequency RoPE (HF apply_rotary_emb / vision_apply_rotary_emb; also DeepSeek-V2's
// apply_rotary_emb) CUDA kernels: plain-C++ interface (raw pointers, strides, a stream). Liger's
// LigerLlama4RopeFunction, out of place.
//
// A head row x of D = 2P elements is P complex numbers z_j = x[2j] + i x[2j+1] (interleaved pairs),
// each multiplied by its token's frequency f_j = c_j + i s_j:
//   forward   o[2j] = x[2j] c_j - x[2j+1] s_j,   o[2j+1] = x[2j] s_j + x[2j+1] c_j
//   backward  (multiplication by the conjugate) dx[2j] = g[2j] c_j + g[2j+1] s_j,
//                                               dx[2j+1] = g[2j+1] c_j - g[2j] s_j
// fp32 math, one rounding to the output dtype (HF: x.float() * freqs_cis (complex64), type_as(x)).
//
// q, k are addressed as [b][s][head][d] with int64 element strides (d unit stride), so both HF's
// (B, S, H, D) layout and (B, H, S, D) are plain stride choices; freqs as [b][s][j][2] float32
// (torch.view_as_real of the complex table), batch stride 0 when one table serves every sample.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

// One of q, k (forward: x -> o; backward: g -> dx). `in` and `out` never overlap.
struct Llama4RopeOperand {
  const void* in;
  int64_t in_sb, in_ss, in_sh;  // batch, sequence, head strides (elements)
  void* out;
  int64_t out_sb, out_ss, out_sh;
  int64_t heads;
};

struct Llama4RopeArgs {
  Llama4RopeOperand q, k;
  const float* freqs;
  int64_t f_sb, f_ss;         // batch (0: broadcast) and sequence strides (floats); pairs are dense (j * 2)
  int64_t batch, seq, pairs;  // pairs = D / 2
  bool conj;                  // the backward: multiply by the conjugate
  DType dtype;                // of q, k and the outputs
};

inline constexpr int kLlama4RopeMaxThreads = 256;

// The launch of one call: pairs per thread (1, or 16 bytes of q / k per access when every pointer
// and stride allows it), threads per block and blocks (one (b, s) row per block and step of a
// grid-stride loop).
struct Llama4RopePlan {
  int vec_pairs;
  int threads;
  int64_t grid;
};

// Pure host plan (no device calls): from the problem, the element size, whether 16-byte vectors
// are possible (alignment and strides, checked by llama4_rope) and the SM count.
Llama4RopePlan plan_llama4_rope(int64_t rows, int64_t heads, int64_t pairs, int elem_size, bool vec_ok,
                                int sm_count);

cudaError_t llama4_rope(const Llama4RopeArgs& a, int sm_count, cudaStream_t stream);

}  // namespace liger_cpp::kernels
