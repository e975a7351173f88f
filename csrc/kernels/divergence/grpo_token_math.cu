// GRPO's per-token math on CUDA (the formulas: grpo_token_math.h, shared with the CPU twin).
// One block per sequence of the group; the work is O(S L) float math, a few microseconds next to
// the group's GEMMs, so the plan is fixed: 256 threads, sums in a fixed order (deterministic).
#include <cuda_runtime.h>

#include "kernels/common/common.cuh"
#include "kernels/divergence/grpo_token_math.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) grpo_token_kernel(const GrpoTokenArgs a) {
  __shared__ float scratch[32];
  const int64_t s = blockIdx.x, L = a.L;
  float seq_sum = 0.f;
  if (grpo::needs_seq_pass(a.o)) {
    for (int64_t l = threadIdx.x; l < L; l += kThreads) seq_sum += grpo::seq_term(a, s, l);
    seq_sum = group_sum(seq_sum, scratch);
  }
  const grpo::Seq q = grpo::sequence(a, s, seq_sum);
  const float neg_inv_t = -a.o.inv_temperature;
  float* out = a.ce_scale + s * L;
  float loss = 0.f, kl = 0.f, clipped = 0.f, wdl = 0.f, wkl0 = 0.f;
  for (int64_t l = threadIdx.x; l < L; l += kThreads) {
    const grpo::Token t = grpo::token(a, q, s, l);
    grpo::store_token(a, t, s, l);
    loss += t.loss;
    kl += t.kl;
    clipped += t.clipped;
    wdl += t.wdl;
    wkl0 += t.wkl0;
    out[l] = a.o.seq ? t.k : t.k * neg_inv_t;               // sequence level: finished below
    a.nll[s * a.nll_stride + l] = grpo::log_prob(a, s, l);  // in place: -nll
  }
  loss = group_sum(loss, scratch);
  kl = group_sum(kl, scratch);
  clipped = group_sum(clipped, scratch);
  if (a.o.seq) {
    wdl = group_sum(wdl, scratch);
    wkl0 = group_sum(wkl0, scratch);
    // Each thread rewrites the positions it wrote above: no barrier needed between the passes.
    for (int64_t l = threadIdx.x; l < L; l += kThreads)
      out[l] = grpo::seq_k(a, q, out[l], wdl, wkl0, s, l) * neg_inv_t;
  }
  if (threadIdx.x == 0) {
    a.partial[s * 3 + 0] = loss;
    a.partial[s * 3 + 1] = kl;
    a.partial[s * 3 + 2] = clipped;
  }
}

__global__ void __launch_bounds__(kThreads)
    grpo_prologue_kernel(const float* __restrict__ mask, int64_t B, int64_t T,
                         const float* __restrict__ given, float* __restrict__ stats) {
  __shared__ float scratch[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int64_t b = warp; b < B; b += kThreads / 32) {
    float v = 0.f;
    for (int64_t t = lane; t < T; t += 32) v += mask[b * T + t];
    v = warp_sum(v);
    if (lane == 0) stats[b] = v;
  }
  __syncthreads();
  float n = 0.f;
  for (int64_t b = threadIdx.x; b < B; b += kThreads) n += stats[b];
  n = group_sum(n, scratch);
  if (threadIdx.x != 0) return;
  stats[B] = n;
  stats[B + 1] = given ? *given : (n < 1.f ? 1.f : n);
}

__global__ void __launch_bounds__(kThreads)
    grpo_finish_kernel(const float* __restrict__ partial, int64_t rows, const float* __restrict__ n_all,
                       float* __restrict__ loss, float* __restrict__ kl, float* __restrict__ clip) {
  __shared__ double scratch[3][kThreads];
  double v[3] = {0.0, 0.0, 0.0};
  for (int64_t r = threadIdx.x; r < rows; r += kThreads)
    for (int j = 0; j < 3; ++j) v[j] += partial[r * 3 + j];
  for (int j = 0; j < 3; ++j) scratch[j][threadIdx.x] = v[j];
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half)
      for (int j = 0; j < 3; ++j) scratch[j][threadIdx.x] += scratch[j][threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const float n = *n_all, denom = n < 1.f ? 1.f : n;
  *loss = static_cast<float>(scratch[0][0]);
  *kl = static_cast<float>(scratch[1][0]) / denom;
  *clip = static_cast<float>(scratch[2][0]) / denom;
}

}  // namespace

cudaError_t grpo_token_math(const GrpoTokenArgs& a, cudaStream_t stream) {
  if (a.S == 0) return cudaSuccess;
  grpo_token_kernel<<<static_cast<unsigned>(a.S), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t grpo_prologue(const float* mask, int64_t B, int64_t T, const float* given, float* stats,
                          cudaStream_t stream) {
  grpo_prologue_kernel<<<1, kThreads, 0, stream>>>(mask, B, T, given, stats);
  return cudaGetLastError();
}

cudaError_t grpo_finish(const float* partial, int64_t rows, const float* n_all, float* loss, float* kl,
                        float* clip, cudaStream_t stream) {
  grpo_finish_kernel<<<1, kThreads, 0, stream>>>(partial, rows, n_all, loss, kl, clip);
  return cudaGetLastError();
}

}  // namespace liger_cpp::kernels
