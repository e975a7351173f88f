// Helpers of the chunk loops that fuse an lm_head with a loss (the RL and distillation losses:
// csrc/aten/composite/fused_linear_{grpo,distillation,logprobs,kl_div}.cpp; FLCE's, which keeps its own
// chunk rule; the preference losses', whose chunks of pairs keep their own row layout): argument checks of a
// head (hidden states, weight, bias), the chunk size, the logits GEMM of a chunk and the dX / dW / dB GEMMs
// of its dlogits. ATen GEMMs (cuBLAS on CUDA, ATen's CPU BLAS in CI), except dW on sm_90, which takes
// cuBLASLt with a fixed algorithm where it applies (dw_gemm).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "aten/checks/common.h"
#ifdef LIGER_CPP_WITH_CUDA
#include "aten/cuda/dw_gemm_cuda.h"
#endif

namespace liger_cpp::heads {

// Checks one head: input (..., H) (or exactly `dims` dimensions when dims > 0) of a float dtype
// (float64 only on the CPU), weight (V, H) and bias (V,) or None of input's dtype and device.
inline void check_head(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, const char* iname, const char* wname,
                       const char* bname, int64_t dims = 0) {
  const bool cuda = input.is_cuda();
  if (dims > 0)
    LIGER_CHECK_ARG(input.dim() == dims, iname, "expected ", dims, " dimensions (",
                    dims == 3 ? "B, T, H" : "M, H", "), got shape ", shape_str(input));
  LIGER_CHECK_ARG(input.dim() >= 1 && input.size(-1) > 0, iname, "expected shape (..., H) with H > 0, got ",
                  shape_str(input));
  LIGER_CHECK_ARG(is_float_type(input.scalar_type(), !cuda), iname, "expected float32, float16 or bfloat16",
                  cuda ? "" : " (or float64 on CPU)", ", got ", dtype_str(input.scalar_type()));
  const int64_t H = input.size(-1);
  LIGER_CHECK_ARG(weight.dim() == 2 && weight.size(1) == H && weight.size(0) > 0, wname,
                  "expected shape (V, ", H, ") with V > 0 (", iname, "'s hidden size), got ",
                  shape_str(weight),
                  weight.numel() == 0 ? " (a parameter not gathered yet, e.g. under DeepSpeed ZeRO-3?)" : "");
  LIGER_CHECK_ARG(weight.device() == input.device(), wname, "expected device ", input.device(), " (", iname,
                  "'s), got ", weight.device());
  LIGER_CHECK_ARG(weight.scalar_type() == input.scalar_type(), wname, "expected ", iname, "'s dtype (",
                  dtype_str(input.scalar_type()), "), got ", dtype_str(weight.scalar_type()));
  if (bias.has_value() && bias->defined()) {
    LIGER_CHECK_ARG(bias->dim() == 1 && bias->size(0) == weight.size(0), bname, "expected shape (",
                    weight.size(0), ",) (", wname, "'s rows), got ", shape_str(*bias));
    LIGER_CHECK_ARG(bias->device() == input.device(), bname, "expected device ", input.device(), ", got ",
                    bias->device());
    LIGER_CHECK_ARG(bias->scalar_type() == input.scalar_type(), bname, "expected ", iname, "'s dtype (",
                    dtype_str(input.scalar_type()), "), got ", dtype_str(bias->scalar_type()));
  }
}

// A weight layout cuBLAS reads directly (a unit stride in either dimension); others are copied once.
inline at::Tensor gemm_ready(const at::Tensor& w) {
  return (w.stride(1) == 1 || w.stride(0) == 1) ? w : w.contiguous();
}

inline at::Tensor opt(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? *t : at::Tensor();
}

// Rows of a chunk's logits buffer. `requested` > 0 is used as given (tests force small, uneven
// chunks). Otherwise the fused linear cross entropy's rule and budget, measured there on the H200
// (csrc/aten/composite/fused_linear_cross_entropy.cpp): the larger of Liger's chunk
// (next_pow2(ceil(M / ceil(V / H))) rows) and H / 4 rows, kept within 64..251 MiB of logits, a
// multiple of 8 rows (16-byte aligned chunks of x for any H), at least one row; then at least
// `min_rows` where that takes at most kMinRowsMaxMiB of logits. Every chunk after the first
// re-reads and re-writes dW in its GEMM (about 1 + 330 / rows of the dW GEMM's time on the H200):
// the distillation and KL losses ask for 2048 rows, within Liger's memory at their benchmark
// shapes (8192 x 151936, bf16). H200, e0db132: 512 -> 1024 rows KL 28.16 -> 26.05 ms (774 -> 922
// MiB; Liger 28.2 at 1822), JSD (Hs 2048, Ht 4096) 43.35 -> 42.61 ms (1104 -> 1220 MiB; Liger 2997)
// (benchmarks/results/2026-12-05-h200-rl_losses-chunks-e0db132.json). H100, 1024 -> 2048 rows,
// three runs each: JSD 40.19 -> 39.49 ms (1220 -> 1814 MiB), KL 25.62 -> 24.66 ms (923 -> 1220
// MiB) (benchmarks/results/2026-12-06-h100-distill-store16-chunks.txt).
inline constexpr double kMinRowsMaxMiB = 640.0;
inline constexpr int64_t kDistillMinRows = 2048;  // the distillation and KL losses' min_rows
inline int64_t chunk_rows(int64_t M, int64_t V, int64_t H, int64_t elem_size, int64_t requested,
                          int64_t min_rows = 0) {
  if (M <= 0) return 0;
  if (requested > 0) return std::min(requested, M);
  const int64_t liger_chunks = std::max<int64_t>(1, (V + H - 1) / H);
  int64_t liger_rows = 1;
  while (liger_rows < (M + liger_chunks - 1) / liger_chunks) liger_rows *= 2;
  const double per_row = static_cast<double>(V) * static_cast<double>(elem_size);
  const double want = std::max(static_cast<double>(liger_rows), static_cast<double>(H) / 4.0) * per_row;
  const double bytes = std::clamp(want, 64.0 * 1048576.0, 251.0 * 1048576.0);
  int64_t rows = static_cast<int64_t>(std::floor(bytes / per_row));
  if (rows < min_rows) {
    const int64_t cap = static_cast<int64_t>(std::floor(kMinRowsMaxMiB * 1048576.0 / per_row));
    rows = std::max(rows, std::min(min_rows, cap));
  }
  if (rows >= 8) rows -= rows % 8;
  return std::clamp<int64_t>(rows, 1, M);
}

// `n` rows split into chunks of at most `cap` rows, evened out so that the last is not a sliver
// (a multiple of 8 where cap is).
inline int64_t even_chunk(int64_t n, int64_t cap) {
  if (n <= cap) return n;
  const int64_t chunks = (n + cap - 1) / cap;
  int64_t even = (n + chunks - 1) / chunks;
  if (cap >= 8) even = std::min(cap, (even + 7) / 8 * 8);
  return even;
}

// out = scale * (x @ W^T + b) for a block of rows (out: [n, V'] with V' >= V: only its first V
// columns are written). The scale rides in the GEMM's alpha (and the bias's beta).
inline void logits_gemm(at::Tensor out, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                        double scale = 1.0) {
  const at::Tensor wt = w.t();
  if (b.defined())
    at::addmm_out(out, b, x, wt, scale, scale);
  else if (scale == 1.0)
    at::mm_out(out, x, wt);
  else
    at::addmm_out(out, out, x, wt, 0.0, scale);  // beta 0: out's old contents are not read
}

// The gradients of a block of rows from their dlogits dl ([n, V]): dX rows = dl @ W (into dx_rows,
// when defined), dW (+)= dl^T @ x (the first block writes it: no zero fill; then fp32 accumulation
// inside the GEMM, one rounding per block), dB (+)= column sums of dl (float32, float64 for float64).
struct Grads {
  at::Tensor dx;  // [M, H] rows, input dtype, or undefined
  at::Tensor dw;  // [V, H] weight dtype, or undefined
  at::Tensor db;  // [V] float32 / float64, or undefined
  bool dw_written = false, db_written = false;
  bool any() const { return dx.defined() || dw.defined() || db.defined(); }
};

// dw (+)= dl^T @ x in dw's dtype, float32 accumulation inside the GEMM (first: beta 0, dw's old contents
// are not read). On sm_90 for 16-bit chunks of at most 1024 rows through cuBLASLt with a fixed algorithm
// (aten/cuda/dw_gemm_cuda.cpp), else ATen.
inline void dw_gemm(at::Tensor& dw, const at::Tensor& dl, const at::Tensor& x, bool first) {
#ifdef LIGER_CPP_WITH_CUDA
  if (dw.is_cuda() && cuda::dw_gemm_lt(dw, dl, x, !first)) return;
#endif
  if (first)
    at::mm_out(dw, dl.t(), x);
  else
    dw.addmm_(dl.t(), x);
}

inline void chunk_grads(const at::Tensor& dl, const at::Tensor& x, const at::Tensor& w, Grads& g,
                        int64_t row0) {
  const int64_t n = dl.size(0);
  if (g.dx.defined()) {
    at::Tensor dxs = g.dx.narrow(0, row0, n);
    at::mm_out(dxs, dl, w);
  }
  if (g.dw.defined()) {
    dw_gemm(g.dw, dl, x, !g.dw_written);
    g.dw_written = true;
  }
  if (g.db.defined()) {
    const int64_t rows_dim[1] = {0};
    if (!g.db_written)
      at::sum_out(g.db, dl, at::IntArrayRef(rows_dim), false, g.db.scalar_type());
    else
      g.db.add_(at::sum(dl, at::IntArrayRef(rows_dim), false, g.db.scalar_type()));
    g.db_written = true;
  }
}

// Gradients allocated for the compute_* flags (zeros for an empty input, which no block writes).
inline Grads alloc_grads(const at::Tensor& x_rows, const at::Tensor& weight, const at::Tensor& bias,
                         bool compute_dx, bool compute_dw, bool compute_db) {
  Grads g;
  const bool empty = x_rows.size(0) == 0;
  auto make = [&](at::IntArrayRef size, const at::TensorOptions& o) {
    return empty ? at::zeros(size, o) : at::empty(size, o);
  };
  const at::ScalarType acc = x_rows.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  if (compute_dx) g.dx = make(x_rows.sizes(), x_rows.options());
  if (compute_dw) g.dw = make(weight.sizes(), weight.options());
  if (compute_db && bias.defined()) g.db = make({weight.size(0)}, x_rows.options().dtype(acc));
  g.dw_written = g.db_written = empty;
  return g;
}

// The op's (dX, dW, dB) outputs: dX in input's shape, dW in weight's dtype, dB in bias's; distinct
// empty (0,) tensors for those not computed (outputs of an op must not alias each other).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> finish_grads(Grads& g, const at::Tensor& input,
                                                                   const at::Tensor& bias) {
  auto none = [&] { return at::empty({0}, input.options()); };
  at::Tensor dx = g.dx.defined() ? g.dx.view(input.sizes()) : none();
  at::Tensor dw = g.dw.defined() ? g.dw : none();
  at::Tensor db = g.db.defined() ? g.db.to(bias.scalar_type()) : none();
  return {dx, dw, db};
}

// Whether ATen's mm/addmm with out_dtype (low-precision inputs, float32 output)
// works here; set false the first time it throws or is found missing at compile
// time (has_out_dtype_mm below), after which the float32 accumulation upcasts
// each chunk's operands instead.
inline std::atomic<bool> g_out_dtype_gemm{true};

// Whether this torch's ATen declares mm / addmm with out_dtype (their dtype_out overloads, which
// torch 2.6 lacks): found at compile time, so that the extension builds against either.
template <class T, class = void>
struct has_out_dtype_mm : std::false_type {};
template <class T>
struct has_out_dtype_mm<T, std::void_t<decltype(at::mm_out(std::declval<T&>(), std::declval<const T&>(),
                                                           std::declval<const T&>(), at::kFloat))>>
    : std::true_type {};

// dW (+)= dL^T @ xc by ATen's out_dtype GEMMs; false where this torch has none.
template <class T>
bool out_dtype_gemm(T& dw32, const T& dlt, const T& xc, bool first) {
  if constexpr (has_out_dtype_mm<T>::value) {
    // cuBLAS: bf16/fp16 operands, fp32 accumulation and fp32 C, read back
    // with beta 1 on later chunks: no rounding to the low dtype at all.
    if (first)
      at::mm_out(dw32, dlt, xc, at::kFloat);
    else
      at::addmm_out(dw32, dw32, dlt, xc, at::kFloat, 1, 1);
    return true;
  } else {
    return false;
  }
}

// dW (+)= dL^T @ xc into a float32 buffer from low-precision dL and xc.
inline void accumulate_dw_fp32(at::Tensor& dw32, const at::Tensor& dlt, const at::Tensor& xc, bool first) {
  if (dw32.is_cuda() && g_out_dtype_gemm.load(std::memory_order_relaxed)) {
    try {
      if (out_dtype_gemm<at::Tensor>(dw32, dlt, xc, first)) return;
      g_out_dtype_gemm.store(false, std::memory_order_relaxed);
    } catch (const c10::Error&) {
      // The dtype checks run before any work is queued, so falling back is safe.
      g_out_dtype_gemm.store(false, std::memory_order_relaxed);
    }
  }
  // CPU (no out_dtype kernels) or an older CUDA torch: exact, but pays a
  // float32 copy of the chunk's operands and a float32 GEMM.
  const at::Tensor a = dlt.to(at::kFloat), b = xc.to(at::kFloat);
  if (first)
    at::mm_out(dw32, a, b);
  else
    dw32.addmm_(a, b);
}

}  // namespace liger_cpp::heads
