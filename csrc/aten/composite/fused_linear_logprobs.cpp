// Per-token log-probabilities (and entropy) of given tokens from hidden states at a temperature,
// without the logits (Liger's LigerFusedLinearScaledCrossEntropy; what RL frameworks compute for
// old and reference log-probs, TRL's selective_log_softmax). Math: the schema (csrc/schema.cpp).
// Per chunk of rows: z = (x W^T + b) / temperature (the scale as the GEMM's alpha), then the
// cross-entropy row step (log-probs: -(lse - z_y)) or, with entropy, the log-prob / entropy row
// kernel (csrc/kernels/divergence/divergence.h). The backward reruns the chunk loop: the same GEMM,
// dz from the upstream gradients (the row step's gradient with ce_scale = -g / temperature, or the
// entropy kernel's backward from the forward's row statistics), then dX / dW / dB.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/divergence_core.h"
#include "aten/checks/linear_chunks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_logprobs_impl {

struct Prepared {
  at::Tensor x, w, b, target;
  int64_t M = 0, H = 0, V = 0, R = 0;
};

Prepared prepare(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                 const std::optional<at::Tensor>& bias, double temperature, int64_t ignore_index,
                 int64_t chunk_rows) {
  heads::check_head(input, weight, bias, "input", "weight", "bias");
  LIGER_CHECK_ARG(std::isfinite(temperature) && temperature > 0.0, "temperature",
                  "expected a positive value, got ", temperature);
  LIGER_CHECK_ARG(chunk_rows >= 0, "chunk_rows", "expected a non-negative row count (0: automatic), got ",
                  chunk_rows);
  Prepared p;
  p.H = input.size(-1);
  p.M = input.numel() / p.H;
  p.V = weight.size(0);
  LIGER_CHECK_ARG(target.numel() == p.M, "target", "expected ", p.M,
                  " elements (one per row of input, shape ", shape_str(input), "), got shape ",
                  shape_str(target));
  LIGER_CHECK_ARG(target.scalar_type() == at::kLong || target.scalar_type() == at::kInt, "target",
                  "expected int64 (or int32) token ids, got ", dtype_str(target.scalar_type()));
  LIGER_CHECK_ARG(target.device() == input.device(), "target", "expected device ", input.device(), ", got ",
                  target.device());
  p.x = as_rows(input);
  p.w = heads::gemm_ready(weight);
  p.b = heads::opt(bias);
  p.target = target.reshape({p.M}).to(at::kLong).contiguous();
  check_ce_target_values(p.target, p.V, ignore_index);
  p.R = heads::chunk_rows(p.M, p.V, p.H, input.element_size(), chunk_rows);
  if (chunk_rows == 0) p.R = heads::even_chunk(p.M, p.R);  // no sliver of a last chunk
  return p;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> logprobs_fwd(const at::Tensor& input, const at::Tensor& weight,
                                                            const at::Tensor& target,
                                                            const std::optional<at::Tensor>& bias,
                                                            double temperature, int64_t ignore_index,
                                                            bool return_entropy, int64_t chunk_rows) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Prepared p = prepare(input, weight, target, bias, temperature, ignore_index, chunk_rows);
  const auto f32 = input.options().dtype(at::kFloat);
  at::Tensor logp = at::empty({p.M}, f32);
  at::Tensor entropy = return_entropy ? at::empty({p.M}, f32) : at::empty({0}, f32);
  at::Tensor stats = return_entropy ? at::empty({p.M, 2}, f32) : at::empty({0}, f32);
  if (p.M > 0) {
    at::Tensor buf = at::empty({p.R, p.V}, input.options());
    const at::Tensor one = at::ones({1}, f32);
    for (int64_t r0 = 0; r0 < p.M; r0 += p.R) {
      const int64_t n = std::min(p.R, p.M - r0);
      at::Tensor z = buf.narrow(0, 0, n);
      heads::logits_gemm(z, p.x.narrow(0, r0, n), p.w, p.b, 1.0 / temperature);
      if (return_entropy) {
        LogprobRows l;
        l.z = z;
        l.target = p.target.narrow(0, r0, n);
        l.logp = logp.narrow(0, r0, n);
        l.entropy = entropy.narrow(0, r0, n);
        l.stats = stats.narrow(0, r0, n);
        l.ignore_index = ignore_index;
        logprob_rows_fwd(l);
      } else {
        CeRows r;
        r.logits = z;
        r.target = p.target.narrow(0, r0, n);
        r.loss = logp.narrow(0, r0, n);  // lse - z_y, negated below
        r.ce_scale = one;
        r.z_scale = one;
        r.ignore_index = ignore_index;
        ce_rows(r);
      }
    }
    if (!return_entropy) logp.neg_();
  }
  const at::IntArrayRef shape = target.sizes();
  return {logp.view(shape), return_entropy ? entropy.view(shape) : entropy, stats};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> logprobs_bwd(
    const std::optional<at::Tensor>& grad_logprobs, const std::optional<at::Tensor>& grad_entropy,
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& stats,
    const std::optional<at::Tensor>& entropy, double temperature, int64_t ignore_index, int64_t chunk_rows,
    bool compute_dx, bool compute_dw, bool compute_db) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Prepared p = prepare(input, weight, target, bias, temperature, ignore_index, chunk_rows);
  auto rows_of = [&](const std::optional<at::Tensor>& g, const char* name) -> at::Tensor {
    if (!g.has_value() || !g->defined()) return at::Tensor();
    LIGER_CHECK_ARG(
        g->numel() == p.M && at::isFloatingType(g->scalar_type()) && g->device() == input.device(), name,
        "expected ", p.M, " floating elements on ", input.device(), ", got shape ", shape_str(*g));
    return g->reshape({p.M}).to(at::kFloat).contiguous();
  };
  const at::Tensor g_lp = rows_of(grad_logprobs, "grad_logprobs");
  const at::Tensor g_ent = rows_of(grad_entropy, "grad_entropy");
  at::Tensor st, ent;
  if (g_ent.defined()) {
    LIGER_CHECK_ARG(stats.has_value() && stats->defined() && stats->dim() == 2 && stats->size(0) == p.M &&
                        stats->size(1) == 2 && stats->scalar_type() == at::kFloat,
                    "stats", "expected the forward's float32 (", p.M,
                    ", 2) row statistics with grad_entropy");
    LIGER_CHECK_ARG(entropy.has_value() && entropy->defined() && entropy->numel() == p.M &&
                        entropy->scalar_type() == at::kFloat,
                    "entropy", "expected the forward's float32 entropy (", p.M,
                    " elements) with grad_entropy");
    st = stats->contiguous();
    ent = entropy->reshape({p.M}).contiguous();
  }
  heads::Grads gr = heads::alloc_grads(p.x, weight, p.b, compute_dx, compute_dw, compute_db);
  if (p.M > 0 && gr.any()) {
    if (!g_lp.defined() && !g_ent.defined()) {
      // No upstream gradient reached either output: zero gradients.
      if (gr.dx.defined()) gr.dx.zero_();
      if (gr.dw.defined()) gr.dw.zero_();
      if (gr.db.defined()) gr.db.zero_();
    } else {
      const auto f32 = input.options().dtype(at::kFloat);
      at::Tensor buf = at::empty({p.R, p.V}, input.options());
      at::Tensor scratch = at::empty({p.R}, f32);
      const at::Tensor one = at::ones({1}, f32);
      for (int64_t r0 = 0; r0 < p.M; r0 += p.R) {
        const int64_t n = std::min(p.R, p.M - r0);
        at::Tensor z = buf.narrow(0, 0, n);
        heads::logits_gemm(z, p.x.narrow(0, r0, n), p.w, p.b, 1.0 / temperature);
        if (g_ent.defined()) {
          LogprobRows l;
          l.z = z;
          l.target = p.target.narrow(0, r0, n);
          l.entropy = ent.narrow(0, r0, n);
          l.stats = st.narrow(0, r0, n);
          if (g_lp.defined()) l.g_lp = g_lp.narrow(0, r0, n);
          l.g_ent = g_ent.narrow(0, r0, n);
          l.scale = 1.0 / temperature;
          l.ignore_index = ignore_index;
          logprob_rows_bwd(l);
        } else {
          CeRows r;
          r.logits = z;
          r.dlogits = z;
          r.target = p.target.narrow(0, r0, n);
          r.loss = scratch.narrow(0, 0, n);
          r.ce_scale = (g_lp.narrow(0, r0, n) * (-1.0 / temperature)).contiguous();
          r.z_scale = one;
          r.ignore_index = ignore_index;
          ce_rows(r);
        }
        heads::chunk_grads(z, p.x.narrow(0, r0, n), p.w, gr, r0);
      }
    }
  }
  return heads::finish_grads(gr, input, p.b);
}

}  // namespace fused_linear_logprobs_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_linear_logprobs_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_logprobs_fwd", &logprobs_fwd);
  m.impl("fused_linear_logprobs_bwd", &logprobs_bwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_linear_logprobs_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_logprobs_fwd", &logprobs_fwd);
  m.impl("fused_linear_logprobs_bwd", &logprobs_bwd);
}
#endif

}  // namespace liger_cpp
