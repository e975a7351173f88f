// Per-token log-probabilities (and entropy) of given tokens from hidden states at a temperature,
// without the logits (Liger's LigerFusedLinearScaledCrossEntropy; what RL frameworks compute for
// old and reference log-probs, TRL's selective_log_softmax). Math: the schema (csrc/schema.cpp).
// Per chunk of rows: z = (x W^T + b) / temperature (the scale as the GEMM's alpha), then the
// cross-entropy row step (log-probs: -(lse - z_y)) or, with entropy, the log-prob / entropy row
// kernel (csrc/kernels/divergence/divergence.h). The backward reruns the chunk loop: the same GEMM,
// dz from the upstream gradients (the row step's gradient with ce_scale = -g / temperature, or the
// entropy kernel's backward from the forward's row statistics), then dX / dW / dB.
// The shard ops (`_shard_fwd` / `_shard_bwd`) run the same loops on one tensor-parallel rank's
// vocabulary shard: the forward gives the three per-row values the ranks exchange (the shard's lse,
// its softmax mean of z, the target's logit where this shard holds it), the backward takes the
// combined lse and entropy and gives no one-hot term to rows whose target another shard holds.
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
  at::Tensor owned;  // shard ops: [M] bool, the row's target lies in this shard
  int64_t M = 0, H = 0, V = 0, R = 0;
  int64_t ignore_index = -100;  // what the row kernels treat as ignored
};

// A shard's row targets for the row kernels: the global id - vocab_start where this shard holds it;
// for a row another shard holds, `elsewhere` (0 in the forward: a column the statistics pass may
// read, its log-prob discarded; V in the backward: no column, so no one-hot term); -1 for ignored
// rows (the kernels' ignore_index then: no local id or sentinel is negative, so a non-negative
// ignore_index cannot collide with a local id).
void shard_targets(Prepared& p, int64_t vocab_start, int64_t ignore_index, int64_t elsewhere) {
  const at::Tensor valid = p.target != ignore_index;
  const at::Tensor local = p.target - vocab_start;
  p.owned = valid & (local >= 0) & (local < p.V);
  p.target =
      at::where(p.owned, local, at::where(valid, at::full_like(local, elsewhere), at::full_like(local, -1)))
          .contiguous();
  p.ignore_index = -1;
}

// vocab_start: the shard ops' first vocabulary id (none: the weight holds the whole vocabulary).
Prepared prepare(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                 const std::optional<at::Tensor>& bias, double temperature, int64_t ignore_index,
                 int64_t chunk_rows, std::optional<int64_t> vocab_start = std::nullopt,
                 bool backward = false) {
  heads::check_head(input, weight, bias, "input", "weight", "bias");
  LIGER_CHECK_ARG(std::isfinite(temperature) && temperature > 0.0, "temperature",
                  "expected a positive value, got ", temperature);
  LIGER_CHECK_ARG(chunk_rows >= 0, "chunk_rows", "expected a non-negative row count (0: automatic), got ",
                  chunk_rows);
  Prepared p;
  p.H = input.size(-1);
  p.M = input.numel() / p.H;
  p.V = weight.size(0);
  p.target = row_token_ids(target, p.M, input, "input");
  p.x = as_rows(input);
  p.w = heads::gemm_ready(weight);
  p.b = heads::opt(bias);
  p.ignore_index = ignore_index;
  if (!vocab_start.has_value()) {
    check_ce_target_values(p.target, p.V, ignore_index);
  } else {
    LIGER_CHECK_ARG(*vocab_start >= 0, "vocab_start", "expected the shard's first vocabulary id (>= 0), got ",
                    *vocab_start);
    LIGER_CHECK_ARG(!p.b.defined(), "bias", "expected None with a vocabulary shard");
    shard_targets(p, *vocab_start, ignore_index, backward ? p.V : 0);
  }
  p.R = heads::chunk_rows(p.M, p.V, p.H, input.element_size(), chunk_rows);
  if (chunk_rows == 0) p.R = heads::even_chunk(p.M, p.R);  // no sliver of a last chunk
  return p;
}

// The forward's chunk loop: log-probs, and with the entropy kernel (`with_entropy`) entropy and row
// statistics, into logp [M], entropy [M] and stats [M, 2].
void run_fwd(const Prepared& p, double temperature, bool with_entropy, at::Tensor& logp, at::Tensor& entropy,
             at::Tensor& stats) {
  if (p.M == 0) return;
  at::Tensor buf = at::empty({p.R, p.V}, p.x.options());
  const at::Tensor one = at::ones({1}, p.x.options().dtype(at::kFloat));
  for (int64_t r0 = 0; r0 < p.M; r0 += p.R) {
    const int64_t n = std::min(p.R, p.M - r0);
    at::Tensor z = buf.narrow(0, 0, n);
    heads::logits_gemm(z, p.x.narrow(0, r0, n), p.w, p.b, 1.0 / temperature);
    if (with_entropy) {
      LogprobRows l;
      l.z = z;
      l.target = p.target.narrow(0, r0, n);
      l.logp = logp.narrow(0, r0, n);
      l.entropy = entropy.narrow(0, r0, n);
      l.stats = stats.narrow(0, r0, n);
      l.ignore_index = p.ignore_index;
      logprob_rows_fwd(l);
    } else {
      CeRows r;
      r.logits = z;
      r.target = p.target.narrow(0, r0, n);
      r.loss = logp.narrow(0, r0, n);  // lse - z_y, negated below
      r.ce_scale = one;
      r.z_scale = one;
      r.ignore_index = p.ignore_index;
      ce_rows(r);
    }
  }
  if (!with_entropy) logp.neg_();
}

// The backward's chunk loop: dz from the upstream gradients (the entropy kernel's backward from the
// row statistics `st` where given, else the cross-entropy row step), then dX / dW / dB into gr.
void run_bwd(const Prepared& p, const at::Tensor& g_lp, const at::Tensor& g_ent, const at::Tensor& st,
             const at::Tensor& ent, double temperature, heads::Grads& gr) {
  if (p.M == 0 || !gr.any()) return;
  if (!g_lp.defined() && !g_ent.defined()) {
    // No upstream gradient reached either output: zero gradients.
    if (gr.dx.defined()) gr.dx.zero_();
    if (gr.dw.defined()) gr.dw.zero_();
    if (gr.db.defined()) gr.db.zero_();
    return;
  }
  const auto f32 = p.x.options().dtype(at::kFloat);
  at::Tensor buf = at::empty({p.R, p.V}, p.x.options());
  at::Tensor scratch = at::empty({p.R}, f32);
  const at::Tensor one = at::ones({1}, f32);
  for (int64_t r0 = 0; r0 < p.M; r0 += p.R) {
    const int64_t n = std::min(p.R, p.M - r0);
    at::Tensor z = buf.narrow(0, 0, n);
    heads::logits_gemm(z, p.x.narrow(0, r0, n), p.w, p.b, 1.0 / temperature);
    if (st.defined()) {
      LogprobRows l;
      l.z = z;
      l.target = p.target.narrow(0, r0, n);
      if (ent.defined()) l.entropy = ent.narrow(0, r0, n);
      l.stats = st.narrow(0, r0, n);
      if (g_lp.defined()) l.g_lp = g_lp.narrow(0, r0, n);
      if (g_ent.defined()) l.g_ent = g_ent.narrow(0, r0, n);
      l.scale = 1.0 / temperature;
      l.ignore_index = p.ignore_index;
      logprob_rows_bwd(l);
    } else {
      CeRows r;
      r.logits = z;
      r.dlogits = z;
      r.target = p.target.narrow(0, r0, n);
      r.loss = scratch.narrow(0, 0, n);
      r.ce_scale = (g_lp.narrow(0, r0, n) * (-1.0 / temperature)).contiguous();
      r.z_scale = one;
      r.ignore_index = p.ignore_index;
      ce_rows(r);
    }
    heads::chunk_grads(z, p.x.narrow(0, r0, n), p.w, gr, r0);
  }
}

// An upstream gradient as float32 [M] (undefined when None), or an error naming it.
at::Tensor grad_rows(const Prepared& p, const std::optional<at::Tensor>& g, const at::Tensor& input,
                     const char* name) {
  if (!g.has_value() || !g->defined()) return at::Tensor();
  LIGER_CHECK_ARG(g->numel() == p.M && at::isFloatingType(g->scalar_type()) && g->device() == input.device(),
                  name, "expected ", p.M, " floating elements on ", input.device(), ", got shape ",
                  shape_str(*g));
  return g->reshape({p.M}).to(at::kFloat).contiguous();
}

at::Tensor check_entropy(const Prepared& p, const std::optional<at::Tensor>& entropy) {
  LIGER_CHECK_ARG(entropy.has_value() && entropy->defined() && entropy->numel() == p.M &&
                      entropy->scalar_type() == at::kFloat,
                  "entropy", "expected the float32 entropy (", p.M, " elements) with grad_entropy");
  return entropy->reshape({p.M}).contiguous();
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
  run_fwd(p, temperature, return_entropy, logp, entropy, stats);
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
  const at::Tensor g_lp = grad_rows(p, grad_logprobs, input, "grad_logprobs");
  const at::Tensor g_ent = grad_rows(p, grad_entropy, input, "grad_entropy");
  at::Tensor st, ent;
  if (g_ent.defined()) {
    LIGER_CHECK_ARG(stats.has_value() && stats->defined() && stats->dim() == 2 && stats->size(0) == p.M &&
                        stats->size(1) == 2 && stats->scalar_type() == at::kFloat,
                    "stats", "expected the forward's float32 (", p.M,
                    ", 2) row statistics with grad_entropy");
    st = stats->contiguous();
    ent = check_entropy(p, entropy);
  }
  heads::Grads gr = heads::alloc_grads(p.x, weight, p.b, compute_dx, compute_dw, compute_db);
  run_bwd(p, g_lp, g_ent, st, ent, temperature, gr);
  return heads::finish_grads(gr, input, p.b);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> logprobs_shard_fwd(const at::Tensor& input,
                                                                  const at::Tensor& weight,
                                                                  const at::Tensor& target,
                                                                  int64_t vocab_start, double temperature,
                                                                  int64_t ignore_index, int64_t chunk_rows) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Prepared p = prepare(input, weight, target, std::nullopt, temperature, ignore_index, chunk_rows,
                             vocab_start, /*backward=*/false);
  const auto f32 = input.options().dtype(at::kFloat);
  at::Tensor logp = at::empty({p.M}, f32), entropy = at::empty({p.M}, f32), stats = at::empty({p.M, 2}, f32);
  run_fwd(p, temperature, /*with_entropy=*/true, logp, entropy, stats);
  const at::Tensor lse = stats.select(1, 0) + stats.select(1, 1);
  const at::Tensor mean = lse - entropy;  // sum_j p_j z_j = lse - entropy
  // logp = z_y - lse where this shard holds y; rows another shard scores (and ignored rows) give 0
  const at::Tensor logit = at::where(p.owned, logp + lse, at::zeros_like(lse));
  const at::IntArrayRef shape = target.sizes();
  return {logit.view(shape), lse.view(shape), mean.view(shape)};
}

std::tuple<at::Tensor, at::Tensor> logprobs_shard_bwd(
    const std::optional<at::Tensor>& grad_logprobs, const std::optional<at::Tensor>& grad_entropy,
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target, const at::Tensor& lse,
    const std::optional<at::Tensor>& entropy, int64_t vocab_start, double temperature, int64_t ignore_index,
    int64_t chunk_rows, bool compute_dx, bool compute_dw) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Prepared p = prepare(input, weight, target, std::nullopt, temperature, ignore_index, chunk_rows,
                             vocab_start, /*backward=*/true);
  const at::Tensor g_lp = grad_rows(p, grad_logprobs, input, "grad_logprobs");
  const at::Tensor g_ent = grad_rows(p, grad_entropy, input, "grad_entropy");
  LIGER_CHECK_ARG(lse.numel() == p.M && lse.scalar_type() == at::kFloat && lse.device() == input.device(),
                  "lse", "expected the ranks' combined float32 log-sum-exp (", p.M, " elements on ",
                  input.device(), "), got shape ", shape_str(lse));
  // the row kernels' statistics (max, log sum exp(z - max)) of the whole vocabulary: (lse, 0)
  const at::Tensor st = at::stack({lse.reshape({p.M}), at::zeros({p.M}, lse.options())}, 1);
  const at::Tensor ent = g_ent.defined() ? check_entropy(p, entropy) : at::Tensor();
  heads::Grads gr = heads::alloc_grads(p.x, weight, at::Tensor(), compute_dx, compute_dw, false);
  run_bwd(p, g_lp, g_ent, st, ent, temperature, gr);
  auto [dx, dw, db] = heads::finish_grads(gr, input, at::Tensor());
  return {dx, dw};
}

}  // namespace fused_linear_logprobs_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_linear_logprobs_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_logprobs_fwd", &logprobs_fwd);
  m.impl("fused_linear_logprobs_bwd", &logprobs_bwd);
  m.impl("fused_linear_logprobs_shard_fwd", &logprobs_shard_fwd);
  m.impl("fused_linear_logprobs_shard_bwd", &logprobs_shard_bwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_linear_logprobs_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_logprobs_fwd", &logprobs_fwd);
  m.impl("fused_linear_logprobs_bwd", &logprobs_bwd);
  m.impl("fused_linear_logprobs_shard_fwd", &logprobs_shard_fwd);
  m.impl("fused_linear_logprobs_shard_bwd", &logprobs_shard_bwd);
}
#endif

}  // namespace liger_cpp
