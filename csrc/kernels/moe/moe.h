// Fused MoE experts (liger::moe_experts, csrc/schema.cpp states the math): the CUDA kernels around
// the grouped GEMMs, plain-C++ interface (raw pointers, sizes, a stream). No kernel here reads
// anything back to the host: the routing metadata stays on the device and every later kernel reads
// the number of routed rows (offsets[E - 1]) itself.
//
// Names: T tokens, k slots a token (top-k), S = T * k slots, E experts, H hidden, I intermediate.
// Slot s = t * k + j is token t's j-th choice. The routed rows are the slots sorted by expert
// (stably: a row's slots keep their slot order within an expert); row r holds slot sorted_slot[r],
// slot s sits at row slot_row[s]. Slots whose expert is outside [0, E) are "dropped": they are
// sorted after every routed row, contribute nothing and get zero gradients.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace liger_cpp::kernels {

// The gated activation on a gate_up row [2I] (gate g, up u; GPT-OSS's rows interleave them:
// g = row[2i], u = row[2i + 1], else g = row[i], u = row[I + i]):
//   kSilu     a = silu(g) * u
//   kGeluTanh a = gelu_tanh(g) * u
//   kGptOss   g' = min(g, limit), u' = clamp(u, -limit, limit), a = (u' + 1) * g' * sigmoid(alpha g')
enum class MoeAct : int { kSilu = 0, kGeluTanh = 1, kGptOss = 2 };

inline constexpr int kMoeRoutingChunk = 256;  // slots a block of the routing kernels

// int32 words of workspace moe_routing needs: the per-chunk counts and the experts' starts.
int64_t moe_routing_workspace(int64_t num_slots, int num_experts);

struct MoeRoutingArgs {
  const void* top_k_index;  // [S] int32 or int64
  bool index_int64;
  int64_t num_slots;       // S (< 2^31)
  int num_experts;         // E
  int32_t* workspace;      // moe_routing_workspace(S, E) words
  int32_t* offsets;        // [E] out: inclusive cumulative routed rows per expert (grouped GEMM offs)
  int32_t* sorted_slot;    // [S] out
  int32_t* slot_row;       // [S] out
  int32_t* sorted_expert;  // [S] out: the expert of row r (E for dropped rows)
};

cudaError_t moe_routing(const MoeRoutingArgs& a, cudaStream_t stream);

// dst[r, :] = src[sorted_slot[r] / k, :] for the routed rows r < offsets[E - 1], zero for the
// dropped rows. dst is dense [S, cols]; src rows have stride src_stride (elements).
struct MoeGatherArgs {
  const void* src;
  int64_t src_stride;
  void* dst;
  const int32_t* sorted_slot;
  const int32_t* offsets;
  int64_t num_slots;
  int num_experts;
  int top_k;
  int64_t cols;
  DType dtype;
};

cudaError_t moe_gather(const MoeGatherArgs& a, cudaStream_t stream);

// out[t, :] = sum_j c_j * (y[slot_row[t k + j], :] + bias[e_j, :]) in float32, the k slots in
// order, dropped slots skipped; c_j = weights[t k + j] (float32) or 1 when weights is nullptr.
// bias: [E, cols] or nullptr. y rows have stride y_stride; out is dense [T, cols].
struct MoeCombineArgs {
  const void* y;
  int64_t y_stride;
  const float* weights;
  const void* bias;
  const int32_t* slot_row;
  const int32_t* sorted_expert;
  void* out;
  int64_t num_tokens;
  int top_k;
  int num_experts;
  int64_t cols;
  DType dtype;
};

cudaError_t moe_combine(const MoeCombineArgs& a, cudaStream_t stream);

struct MoeActArgs {
  const void* gate_up;  // [S, 2I], row stride gu_stride; the GEMM output, without its bias
  int64_t gu_stride;
  const void* gu_bias;  // [E, 2I] or nullptr (added in float32 before the activation)
  const int32_t* sorted_expert;
  const int32_t* sorted_slot;
  int64_t num_slots;
  int num_experts;
  int64_t inter;  // I
  bool interleaved;
  MoeAct act;
  float alpha, limit;  // kGptOss
  DType dtype;
  // Forward: act_out [S, I] dense = a (zero on dropped rows).
  void* act_out;
  // Backward: d_act [S, I] (row stride da_stride) is dL/da' with a' the unweighted activation
  // feeding the down GEMM of dOut's gathered rows (dA' = G W_down_e); weights: float32 [S] by slot.
  //   d_gate_up [S, 2I] dense = w * dA' * da/d(g, u); act_w [S, I] dense = w * a;
  //   d_weights[slot] = <dA', a> + <g_rows[r], down_bias[e]> (float32, one block a row).
  const void* d_act;
  int64_t da_stride;
  const float* weights;
  const void* g_rows;     // [S, H] dense gathered dOut, only with down_bias
  const void* down_bias;  // [E, H] or nullptr
  int64_t hidden;
  void* d_gate_up;
  void* act_w;
  float* d_weights;  // [S] by slot
};

cudaError_t moe_act_fwd(const MoeActArgs& a, cudaStream_t stream);
cudaError_t moe_act_bwd(const MoeActArgs& a, cudaStream_t stream);

// out[e, n] = sum over expert e's routed rows r of scale(r) * m[r, n], float32, in a fixed order;
// scale(r) = weights[sorted_slot[r]] or 1 when weights is nullptr. out: [E, cols] dense, m's dtype.
struct MoeSegSumArgs {
  const void* m;
  int64_t m_stride;
  const float* weights;
  const int32_t* sorted_slot;
  const int32_t* offsets;
  int num_experts;
  int64_t cols;
  void* out;
  DType dtype;
};

cudaError_t moe_segment_sum(const MoeSegSumArgs& a, cudaStream_t stream);

// Zeroes w[e] (dense [E, per_expert]) of every expert with no routed row.
cudaError_t moe_zero_empty(void* w, int64_t per_expert, int num_experts, const int32_t* offsets, DType dtype,
                           cudaStream_t stream);

}  // namespace liger_cpp::kernels
