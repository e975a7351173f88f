// The GRPO family on given logits (Liger's GrpoLossFunction / triton_grpo_loss): logits (B, L + 1, V)
// whose position l predicts completion_ids[:, l] (the last position predicts nothing). The token
// log-prob row kernels read the logits scaled by 1 / temperature (csrc/kernels/divergence/
// divergence.h; CPU twin in float64), GRPO's token math (grpo_token_math.h) gives the loss, the
// metrics and each token's dLoss/dlp, and the backward turns those into dlogits in one pass over
// the logits. Formulas: csrc/aten/composite/fused_linear_grpo.cpp; what differs here is Liger's
// Triton semantics: tokens whose mask is 0 are skipped (no loss, KL, clipping or gradient, also for
// luspo), dr_grpo's length defaults to L, delta only for the standard types, beta != 0 needs
// ref_logp, and reduce=False returns the per-token loss, KL and clipping times the mask (their
// backward takes the upstream gradient of the loss as each token's weight).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/divergence_core.h"
#include "aten/checks/grpo_checks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace grpo_logits_impl {

using namespace grpo_checks;  // NOLINT(build/namespaces)
using Opt = std::optional<at::Tensor>;

constexpr int64_t kSkip = std::numeric_limits<int64_t>::min();  // the id of a row that is not scored

struct Prepared {
  int64_t B = 0, L = 0, V = 0;
  at::Tensor z;     // [B (L + 1), V] the logits' rows (a view where the leading dimensions flatten)
  at::Tensor ids;   // [B (L + 1)] int64: the completion ids, kSkip at masked and last positions
  at::Tensor mask;  // [B, L] float32 contiguous (ones without a mask)
  at::Tensor adv, old, ref, vllm, phi, normalizer;
  kernels::GrpoOptions o;
  double inv_t = 1.0;
};

Prepared prepare(const at::Tensor& logits, const at::Tensor& completion_ids, const at::Tensor& advantages,
                 const Opt& completion_mask, const Opt& old_logp, const Opt& ref_logp,
                 const Opt& vllm_is_ratio, const Opt& phi_seq, const Opt& loss_normalizer,
                 c10::string_view loss_type, c10::string_view level, double beta, double eps_low,
                 double eps_high, std::optional<double> delta, double temperature,
                 std::optional<int64_t> max_completion_length, bool use_bias_correction_kl, double sapo_pos,
                 double sapo_neg, double vk_pos, double vl_pos, double vk_neg, double vl_neg) {
  Prepared p;
  p.o = grpo_options(loss_type, level, beta, eps_low, eps_high, delta, temperature, use_bias_correction_kl,
                     sapo_pos, sapo_neg, vk_pos, vl_pos, vk_neg, vl_neg, EpsNames{"eps_low", "eps_high"});
  LIGER_CHECK_ARG(!(delta && !kernels::grpo::is_std(p.o.type)), "delta", "expected None for loss_type '",
                  std::string_view(loss_type.data(), loss_type.size()),
                  "' (two-sided clipping is for grpo, bnpo, dr_grpo, dapo and luspo: Liger's rule)");
  const bool cuda = logits.is_cuda();
  LIGER_CHECK_ARG(logits.dim() == 3 && logits.size(1) >= 1 && logits.size(2) > 0, "logits",
                  "expected shape (B, L + 1, V) with V > 0, got ", shape_str(logits));
  LIGER_CHECK_ARG(is_float_type(logits.scalar_type(), !cuda), "logits",
                  "expected float32, float16 or bfloat16", cuda ? "" : " (or float64 on CPU)", ", got ",
                  dtype_str(logits.scalar_type()));
  const int64_t B = logits.size(0), L = logits.size(1) - 1, V = logits.size(2);
  p.B = B;
  p.L = L;
  p.V = V;
  LIGER_CHECK_ARG(completion_ids.dim() == 2 && completion_ids.size(0) == B && completion_ids.size(1) == L,
                  "completion_ids", "expected shape (", B, ", ", L,
                  ") (logits' (B, L + 1) less the last position), got ", shape_str(completion_ids));
  check_index_dtype(completion_ids, "completion_ids", "token ids");
  LIGER_CHECK_ARG(completion_ids.device() == logits.device(), "completion_ids", "expected device ",
                  logits.device(), ", got ", completion_ids.device());
  LIGER_CHECK_ARG(advantages.dim() == 1 && advantages.size(0) == B, "advantages", "expected shape (", B,
                  ",) (one advantage per sequence), got ", shape_str(advantages));
  LIGER_CHECK_ARG(advantages.device() == logits.device() && at::isFloatingType(advantages.scalar_type()),
                  "advantages", "expected a floating tensor on ", logits.device(), ", got ",
                  dtype_str(advantages.scalar_type()), " on ", advantages.device());
  const auto f32 = logits.options().dtype(at::kFloat);
  const bool has_mask = completion_mask.has_value() && completion_mask->defined();
  if (has_mask) {
    const at::Tensor& m = *completion_mask;
    LIGER_CHECK_ARG(m.dim() == 2 && m.size(0) == B && m.size(1) == L, "completion_mask", "expected shape (",
                    B, ", ", L, "), got ", shape_str(m));
    LIGER_CHECK_ARG(m.device() == logits.device(), "completion_mask", "expected device ", logits.device(),
                    ", got ", m.device());
    p.mask = m.to(at::kFloat).contiguous();
  } else {
    p.mask = at::ones({B, L}, f32);
  }
  p.old = per_token_arg(old_logp, "old_logp", B, L, logits, "completion_ids");
  p.ref = per_token_arg(ref_logp, "ref_logp", B, L, logits, "completion_ids");
  LIGER_CHECK_ARG(
      beta == 0.0 || p.ref.defined(), "ref_logp",
      "expected the reference log-probs (B, L) when beta != 0 (the KL term needs them), got None");
  p.vllm = vllm_arg(vllm_is_ratio, B, L, logits);
  if (phi_seq.has_value() && phi_seq->defined()) {
    const at::Tensor& f = *phi_seq;
    LIGER_CHECK_ARG((f.dim() == 1 && f.size(0) == B) || (f.dim() == 2 && f.size(0) == B && f.size(1) == 1),
                    "phi_seq", "expected shape (", B, ",) or (", B, ", 1), got ", shape_str(f));
    LIGER_CHECK_ARG(f.device() == logits.device() && at::isFloatingType(f.scalar_type()), "phi_seq",
                    "expected a floating tensor on ", logits.device(), ", got ", dtype_str(f.scalar_type()));
    if (p.o.type == Grpo::kVespo) p.phi = f.reshape({B}).to(at::kFloat).contiguous();
  }
  p.normalizer = normalizer_arg(loss_normalizer, logits);
  if (max_completion_length)
    LIGER_CHECK_ARG(*max_completion_length > 0, "max_completion_length", "expected a positive length, got ",
                    *max_completion_length);
  p.adv = advantages.to(at::kFloat).contiguous();
  p.o.skip_masked = true;
  p.o.inv_temperature = 1.f;  // the token math's ce_scale is then -dLoss/dlp; 1 / T goes to the rows
  p.o.batch = static_cast<float>(B);
  p.o.T = static_cast<float>(L);
  p.o.max_len = static_cast<float>(max_completion_length ? *max_completion_length : L);
  p.inv_t = 1.0 / temperature;
  // The rows' ids: masked positions and each sequence's last position are not scored (their rows are
  // not read, and their gradient rows are written 0).
  const at::Tensor cids = completion_ids.to(at::kLong);
  p.ids = at::full({B, L + 1}, kSkip, logits.options().dtype(at::kLong));
  if (L > 0)
    p.ids.narrow(1, 0, L).copy_(has_mask ? at::where(p.mask != 0, cids, at::full({}, kSkip, p.ids.options()))
                                         : cids);
  p.ids = p.ids.view({B * (L + 1)});
  check_ce_target_values(p.ids, V, kSkip);
  p.z = as_rows(logits);
  return p;
}

// GRPO's token math over the batch: nll [B, L] (overwritten with the log-probs), each token's
// -dLoss/dlp into k [B, L], the sequences' sums into partial [B, 3]; w_given / tok: see
// GrpoTokenArgs.
void token_math(const Prepared& p, const at::Tensor& nll, const at::Tensor& k, const at::Tensor& partial,
                const at::Tensor& mask_stats, const at::Tensor& w_given, const at::Tensor* tok) {
  kernels::GrpoTokenArgs a{};
  const int64_t L = p.L;
  a.nll = nll.data_ptr<float>();
  a.nll_stride = L;
  a.old = group_ptr(p.old, 0, 0);
  a.old_stride = L;
  a.ref = group_ptr(p.ref, 0, 0);
  a.ref_stride = L;
  a.mask = p.mask.const_data_ptr<float>();
  a.mask_stride = L;
  if (p.vllm.defined()) {
    a.vllm = p.vllm.const_data_ptr<float>();
    a.vllm_stride = p.vllm.stride(0);
    a.vllm_cols = p.vllm.size(1);
  }
  a.adv = p.adv.const_data_ptr<float>();
  const float* st = mask_stats.const_data_ptr<float>();
  a.nseq = st;
  a.n_all = st + p.B;
  a.normalizer = st + p.B + 1;
  a.ce_scale = k.data_ptr<float>();
  a.partial = partial.data_ptr<float>();
  a.S = p.B;
  a.L = L;
  a.o = p.o;
  if (w_given.defined()) {
    a.w_given = w_given.const_data_ptr<float>();
    a.w_stride = L;
  }
  if (p.phi.defined()) a.phi_given = p.phi.const_data_ptr<float>();
  if (tok) {
    a.tok_loss = tok[0].data_ptr<float>();
    a.tok_kl = tok[1].data_ptr<float>();
    a.tok_clip = tok[2].data_ptr<float>();
    a.tok_stride = L;
  }
  grpo_token_math(a, nll.device());
}

at::Tensor mask_stats_of(const Prepared& p) {
  at::Tensor st = at::empty({p.B + 2}, p.mask.options());
  grpo_prologue(p.mask, p.normalizer, st);
  return st;
}

using FwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

FwdResult grpo_logits_fwd(const at::Tensor& logits, const at::Tensor& completion_ids,
                          const at::Tensor& advantages, const Opt& completion_mask, const Opt& old_logp,
                          const Opt& ref_logp, const Opt& vllm_is_ratio, const Opt& phi_seq,
                          const Opt& loss_normalizer, c10::string_view loss_type,
                          c10::string_view importance_sampling_level, double beta, double eps_low,
                          double eps_high, std::optional<double> delta, double temperature,
                          std::optional<int64_t> max_completion_length, bool use_bias_correction_kl,
                          double sapo_temperature_pos, double sapo_temperature_neg, double vespo_k_pos,
                          double vespo_lambda_pos, double vespo_k_neg, double vespo_lambda_neg, bool reduce,
                          bool /*inplace: the autograd's choice of backward*/) {
  const c10::DeviceGuard device_guard(logits.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Prepared p =
      prepare(logits, completion_ids, advantages, completion_mask, old_logp, ref_logp, vllm_is_ratio, phi_seq,
              loss_normalizer, loss_type, importance_sampling_level, beta, eps_low, eps_high, delta,
              temperature, max_completion_length, use_bias_correction_kl, sapo_temperature_pos,
              sapo_temperature_neg, vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg);
  const int64_t B = p.B, L = p.L, rows = B * (L + 1);
  const auto f32 = logits.options().dtype(at::kFloat);
  at::Tensor logp_rows = at::empty({rows}, f32), stats = at::empty({rows, 2}, f32);
  if (rows > 0) {
    LogprobRows l;
    l.z = p.z;
    l.z_scale = p.inv_t;  // the kernel scales as it reads: the logits are read once
    l.target = p.ids;
    l.logp = logp_rows;
    l.stats = stats;
    l.ignore_index = kSkip;
    logprob_rows_fwd(l);
  }
  at::Tensor nll = logp_rows.view({B, L + 1}).narrow(1, 0, L).neg();  // contiguous [B, L]
  const at::Tensor mask_stats = mask_stats_of(p);
  at::Tensor k = at::empty({B, L}, f32), partial = at::empty({B, 3}, f32);
  at::Tensor loss, kl, clip;
  if (reduce) {
    token_math(p, nll, k, partial, mask_stats, at::Tensor(), nullptr);
    loss = at::empty({}, f32);
    kl = at::empty({}, f32);
    clip = at::empty({}, f32);
    grpo_finish(partial, mask_stats.narrow(0, B, 1), loss, kl, clip);
  } else {
    const at::Tensor tok[3] = {at::empty({B, L}, f32), at::empty({B, L}, f32), at::empty({B, L}, f32)};
    token_math(p, nll, k, partial, mask_stats, p.mask, tok);
    loss = tok[0];
    kl = tok[1];
    clip = tok[2];
    k = at::empty({0}, f32);
  }
  return {loss, kl, clip, nll, k, stats};  // nll now holds the log-probs
}

// dlogits into dst (undefined: over logits, which must then be the rows' storage).
void grpo_logits_bwd_into(const at::Tensor& grad, const at::Tensor& logits, const at::Tensor& completion_ids,
                          const at::Tensor& advantages, const at::Tensor& logp, const at::Tensor& grad_scale,
                          const at::Tensor& stats, const Opt& completion_mask, const Opt& old_logp,
                          const Opt& ref_logp, const Opt& vllm_is_ratio, const Opt& phi_seq,
                          const Opt& loss_normalizer, c10::string_view loss_type, c10::string_view level,
                          double beta, double eps_low, double eps_high, std::optional<double> delta,
                          double temperature, std::optional<int64_t> max_completion_length, bool bias_kl,
                          double sapo_pos, double sapo_neg, double vk_pos, double vl_pos, double vk_neg,
                          double vl_neg, bool reduce, const at::Tensor& dst) {
  const c10::DeviceGuard device_guard(logits.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const Prepared p =
      prepare(logits, completion_ids, advantages, completion_mask, old_logp, ref_logp, vllm_is_ratio, phi_seq,
              loss_normalizer, loss_type, level, beta, eps_low, eps_high, delta, temperature,
              max_completion_length, bias_kl, sapo_pos, sapo_neg, vk_pos, vl_pos, vk_neg, vl_neg);
  const int64_t B = p.B, L = p.L, rows = B * (L + 1);
  const auto f32 = logits.options().dtype(at::kFloat);
  LIGER_CHECK_ARG(stats.dim() == 2 && stats.size(0) == rows && stats.size(1) == 2 &&
                      stats.scalar_type() == at::kFloat && stats.device() == logits.device(),
                  "stats", "expected grpo_logits_fwd's statistics (", rows, ", 2) float32, got ",
                  shape_str(stats));
  LIGER_CHECK_ARG(
      logp.dim() == 2 && logp.size(0) == B && logp.size(1) == L && logp.scalar_type() == at::kFloat, "logp",
      "expected grpo_logits_fwd's log-probs (", B, ", ", L, ") float32, got ", shape_str(logp));
  at::Tensor g_tok;  // [B, L]: dLoss/dlp times the upstream gradient
  if (reduce) {
    LIGER_CHECK_ARG(grad.numel() == 1, "grad",
                    "expected the loss's gradient (one element) with reduce=True, got shape ",
                    shape_str(grad));
    LIGER_CHECK_ARG(grad_scale.dim() == 2 && grad_scale.size(0) == B && grad_scale.size(1) == L, "grad_scale",
                    "expected grpo_logits_fwd's (", B, ", ", L, "), got ", shape_str(grad_scale));
    g_tok = grad_scale * grad.reshape({}).to(at::kFloat).neg();  // grad_scale is -dLoss/dlp
  } else {
    LIGER_CHECK_ARG(grad.dim() == 2 && grad.size(0) == B && grad.size(1) == L, "grad", "expected shape (", B,
                    ", ", L, ") (the per-token loss's gradient) with reduce=False, got ", shape_str(grad));
    // The token math again, each token weighted by the upstream gradient of its (masked) loss.
    const at::Tensor w = (grad.to(at::kFloat) * p.mask).contiguous();
    const at::Tensor nll = logp.neg().contiguous();
    const at::Tensor k = at::empty({B, L}, f32), partial = at::empty({B, 3}, f32);
    token_math(p, nll, k, partial, mask_stats_of(p), w, nullptr);
    g_tok = k.neg();
  }
  if (rows == 0) return;
  const at::Tensor g_lp = at::constant_pad_nd(g_tok, {0, 1}).contiguous().view({rows});
  LogprobRows l;
  l.z = p.z;
  l.z_scale = p.inv_t;
  l.scale = p.inv_t;
  l.target = p.ids;
  l.stats = stats;
  l.g_lp = g_lp;
  l.ignore_index = kSkip;
  if (dst.defined()) l.dz = dst.view({rows, p.V});
  logprob_rows_bwd(l);
}

#define LIGER_GRPO_LOGITS_BWD_ARGS                                                                          \
  const at::Tensor &grad, const at::Tensor &logits, const at::Tensor &completion_ids,                       \
      const at::Tensor &advantages, const at::Tensor &logp, const at::Tensor &grad_scale,                   \
      const at::Tensor &stats, const Opt &completion_mask, const Opt &old_logp, const Opt &ref_logp,        \
      const Opt &vllm_is_ratio, const Opt &phi_seq, const Opt &loss_normalizer, c10::string_view loss_type, \
      c10::string_view level, double beta, double eps_low, double eps_high, std::optional<double> delta,    \
      double temperature, std::optional<int64_t> max_len, bool bias_kl, double sapo_pos, double sapo_neg,   \
      double vk_pos, double vl_pos, double vk_neg, double vl_neg, bool reduce
#define LIGER_GRPO_LOGITS_BWD_PASS                                                                        \
  grad, logits, completion_ids, advantages, logp, grad_scale, stats, completion_mask, old_logp, ref_logp, \
      vllm_is_ratio, phi_seq, loss_normalizer, loss_type, level, beta, eps_low, eps_high, delta,          \
      temperature, max_len, bias_kl, sapo_pos, sapo_neg, vk_pos, vl_pos, vk_neg, vl_neg, reduce

at::Tensor grpo_logits_bwd(LIGER_GRPO_LOGITS_BWD_ARGS) {
  at::Tensor dlogits =
      at::empty(logits.sizes(), logits.options().memory_format(at::MemoryFormat::Contiguous));
  grpo_logits_bwd_into(LIGER_GRPO_LOGITS_BWD_PASS, dlogits);
  return dlogits;
}

// In place: dlogits over logits (Liger's inplace=True). Logits whose rows cannot be viewed as one
// matrix are an error here (the autograd takes the functional op for them).
void grpo_logits_bwd_(LIGER_GRPO_LOGITS_BWD_ARGS) {
  LIGER_CHECK_ARG(logits.is_contiguous(), "logits", "expected a contiguous tensor for the in-place backward");
  grpo_logits_bwd_into(LIGER_GRPO_LOGITS_BWD_PASS, at::Tensor());
  mark_written(logits);
}

#undef LIGER_GRPO_LOGITS_BWD_ARGS
#undef LIGER_GRPO_LOGITS_BWD_PASS

}  // namespace grpo_logits_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace grpo_logits_impl;  // NOLINT(build/namespaces)
  m.impl("grpo_logits_fwd", &grpo_logits_fwd);
  m.impl("grpo_logits_bwd", &grpo_logits_bwd);
  m.impl("grpo_logits_bwd_", &grpo_logits_bwd_);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace grpo_logits_impl;  // NOLINT(build/namespaces)
  m.impl("grpo_logits_fwd", &grpo_logits_fwd);
  m.impl("grpo_logits_bwd", &grpo_logits_bwd);
  m.impl("grpo_logits_bwd_", &grpo_logits_bwd_);
}
#endif

}  // namespace liger_cpp
