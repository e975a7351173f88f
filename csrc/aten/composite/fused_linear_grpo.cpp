// GRPO and its variants (Liger's LigerFusedLinearGRPOLoss, TRL's GRPOTrainer losses) fused with the
// lm_head: the (B*T x V) logits never exist at once. Device-generic orchestration: ATen GEMMs
// (cuBLAS on CUDA) and the cross-entropy row step (csrc/aten/checks/cross_entropy_core.h) for the
// softmax statistics and dlogits, as the preference losses; the per-token math below is one
// kernel per chunk (csrc/kernels/divergence/grpo_token_math.h, with its CPU twin) and the batch's
// sums one more at the end.
//
// Per token (b, t): lp = log softmax(z)[y] with z = (x W^T + b) / temperature (the row step's
// -(lse - z_y)); old = old_per_token_logps (lp, detached, when absent); ref = the reference
// model's log-prob (ref_per_token_logps, or the reference head run chunk by chunk without
// gradient, or lp detached). m = attention_mask, n_b = sum_t m, A = advantages[b].
//   log-ratio r = lp - old; importance weight c1 = exp(r) ("token") or exp(sum_t m r / max(n_b, 1))
//   per sequence ("sequence", GSPO); the per-token loss l, by loss type:
//     standard (grpo, bnpo, dr_grpo, dapo, luspo): -min(min(c1, delta) A, clip(c1, 1 - eps_low,
//       1 + eps_high) A) (delta only when given); clipped: (c1 < 1 - eps_low and A < 0) or
//       (c1 > 1 + eps_high and A > 0)
//     cispo: -min(c1, eps_high) A lp with the clipped weight detached; clipped: c1 > eps_high, A > 0
//     sapo: -A sigmoid(tau (c1 - 1)) 4 / tau, tau = sapo_temperature_pos if A > 0 else _neg
//     vespo: -phi_b A lp, phi_b (detached) = exp(lambda + k log w - lambda w), w = exp(clamp(
//       sum_t m clamp(r, -20, 20) [+ sum_t clamp(log vllm_is_ratio, log 1e-8, 20)], log 1e-8, 20)),
//       (k, lambda) = vespo_*_pos if A >= 0 else vespo_*_neg, lambda >= 1e-4, NaN / inf -> 0
//   times vllm_is_ratio (not for vespo, which folds it into phi), plus beta * kl with the k3
//   estimator kl = exp(ref - lp) - (ref - lp) - 1 (times c1 with use_bias_correction_kl).
// Loss = sum_{b,t} w_bt l_bt with the reduction's weights (Liger's, B and T the full batch):
//   grpo, sapo: m / (max(n_b, 1) B); bnpo: m / max(sum m, 1); dr_grpo: m / (B max_completion_length);
//   dapo, cispo, vespo: m / normalizer (max(sum m, 1), or the caller's loss_normalizer: Liger's
//   num_items_in_batch / world size, or the all-reduced token count); luspo: n_b / (B T) on every
//   position, masked or not (Liger's branch, which does not multiply by the mask).
// Metrics: kl = sum m kl / max(sum m, 1) (beta != 0), clip_ratio = sum m clipped / max(sum m, 1).
//
// Gradient: dLoss/dlp_s = k_s in closed form (token level: local; sequence level: the sequence's
// sum of w dl/dc1 times dc1/dlp_s = c1 m_s / max(n_b, 1), plus the KL terms), and through the
// softmax dlogits = (k_s / temperature) (onehot - p): the row step's gradient with
// ce_scale = -k_s / temperature. Gradients are computed in the forward (grad_output 1).
//
// Chunks never straddle two sequences: whole sequences while T fits the chunk budget, else pieces
// of one sequence. A piece's gradient needs only its own tokens for the token-level losses; for
// sequence-level sampling and vespo a long sequence is run twice (log-probs of all its pieces
// first, then the gradient pass recomputes each piece's logits).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/divergence_core.h"
#include "aten/checks/grpo_checks.h"
#include "aten/checks/linear_chunks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_grpo_impl {

using namespace grpo_checks;  // NOLINT(build/namespaces)

using GrpoResult =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

GrpoResult grpo_fwd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& selected_token_ids,
                    const at::Tensor& attention_mask, const at::Tensor& advantages,
                    const std::optional<at::Tensor>& bias,
                    const std::optional<at::Tensor>& ref_per_token_logps,
                    const std::optional<at::Tensor>& old_per_token_logps,
                    const std::optional<at::Tensor>& ref_input, const std::optional<at::Tensor>& ref_weight,
                    const std::optional<at::Tensor>& ref_bias, const std::optional<at::Tensor>& vllm_is_ratio,
                    const std::optional<at::Tensor>& loss_normalizer, c10::string_view loss_type,
                    c10::string_view importance_sampling_level, double beta, double epsilon_low,
                    double epsilon_high, std::optional<double> delta, double temperature,
                    std::optional<int64_t> max_completion_length, bool use_bias_correction_kl,
                    double sapo_temperature_pos, double sapo_temperature_neg, double vespo_k_pos,
                    double vespo_lambda_pos, double vespo_k_neg, double vespo_lambda_neg, int64_t chunk_rows,
                    bool compute_dx, bool compute_dw, bool compute_db) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  kernels::GrpoOptions o = grpo_checks::grpo_options(loss_type, importance_sampling_level, beta, epsilon_low,
                                                     epsilon_high, delta, temperature, use_bias_correction_kl,
                                                     sapo_temperature_pos, sapo_temperature_neg, vespo_k_pos,
                                                     vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg);
  if (o.type == Grpo::kDrGrpo)
    LIGER_CHECK_ARG(max_completion_length.has_value() && *max_completion_length > 0, "max_completion_length",
                    "expected a positive length for loss_type 'dr_grpo' (its normaliser is B x "
                    "max_completion_length), got ",
                    max_completion_length ? std::to_string(*max_completion_length) : std::string("None"));
  LIGER_CHECK_ARG(chunk_rows >= 0, "chunk_rows", "expected a non-negative row count (0: automatic), got ",
                  chunk_rows);

  heads::check_head(input, weight, bias, "_input", "weight", "bias", 3);
  const int64_t B = input.size(0), T = input.size(1), H = input.size(2), V = weight.size(0), M = B * T;
  LIGER_CHECK_ARG(B > 0, "_input", "expected a non-empty batch, got shape ", shape_str(input));
  LIGER_CHECK_ARG(
      selected_token_ids.dim() == 2 && selected_token_ids.size(0) == B && selected_token_ids.size(1) == T,
      "selected_token_ids", "expected shape (", B, ", ", T, ") (_input's first two dimensions), got ",
      shape_str(selected_token_ids));
  check_index_dtype(selected_token_ids, "selected_token_ids", "token ids");
  LIGER_CHECK_ARG(selected_token_ids.device() == input.device(), "selected_token_ids", "expected device ",
                  input.device(), ", got ", selected_token_ids.device());
  LIGER_CHECK_ARG(attention_mask.dim() == 2 && attention_mask.size(0) == B && attention_mask.size(1) == T,
                  "attention_mask", "expected shape (", B, ", ", T, "), got ", shape_str(attention_mask));
  LIGER_CHECK_ARG(attention_mask.device() == input.device(), "attention_mask", "expected device ",
                  input.device(), ", got ", attention_mask.device());
  LIGER_CHECK_ARG(advantages.dim() == 1 && advantages.size(0) == B, "advantages", "expected shape (", B,
                  ",) (one advantage per sequence), got ", shape_str(advantages));
  LIGER_CHECK_ARG(advantages.device() == input.device() && at::isFloatingType(advantages.scalar_type()),
                  "advantages", "expected a floating tensor on ", input.device(), ", got ",
                  dtype_str(advantages.scalar_type()), " on ", advantages.device());
  const at::Tensor ref_lp_given = per_token_arg(ref_per_token_logps, "ref_per_token_logps", B, T, input);
  const at::Tensor old_lp = per_token_arg(old_per_token_logps, "old_per_token_logps", B, T, input);
  const at::Tensor vllm = vllm_arg(vllm_is_ratio, B, T, input);
  const bool ref_model = ref_weight.has_value() && ref_weight->defined();
  at::Tensor rx, rw, rb;
  if (ref_model) {
    LIGER_CHECK_ARG(!ref_lp_given.defined(), "ref_weight",
                    "expected None when ref_per_token_logps is given (one source of reference log-probs)");
    LIGER_CHECK_ARG(ref_input.has_value() && ref_input->defined(), "ref_input",
                    "expected the reference model's hidden states (B, T, H') with ref_weight, got None");
    heads::check_head(*ref_input, *ref_weight, ref_bias, "ref_input", "ref_weight", "ref_bias", 3);
    LIGER_CHECK_ARG(ref_input->size(0) == B && ref_input->size(1) == T, "ref_input", "expected shape (", B,
                    ", ", T, ", H'), got ", shape_str(*ref_input));
    LIGER_CHECK_ARG(ref_input->device() == input.device() && ref_input->scalar_type() == input.scalar_type(),
                    "ref_input", "expected _input's device and dtype, got ", ref_input->device(), " ",
                    dtype_str(ref_input->scalar_type()));
    LIGER_CHECK_ARG(ref_weight->size(0) == V, "ref_weight", "expected ", V,
                    " rows (weight's vocabulary: the token ids index both), got shape ",
                    shape_str(*ref_weight));
    rx = as_rows(*ref_input);
    rw = heads::gemm_ready(*ref_weight);
    rb = heads::opt(ref_bias);
  } else {
    LIGER_CHECK_ARG(!(ref_input.has_value() && ref_input->defined()), "ref_input",
                    "expected None without ref_weight (no reference model)");
  }
  o.batch = static_cast<float>(B);
  o.T = static_cast<float>(T);
  o.max_len = max_completion_length ? static_cast<float>(*max_completion_length) : 0.f;
  const auto f32 = input.options().dtype(at::kFloat);
  const at::Tensor mask = attention_mask.to(at::kFloat).contiguous();
  const at::Tensor given_normalizer = normalizer_arg(loss_normalizer, input);
  // [B + 2]: the sequences' mask sums, their total, the dapo / cispo / vespo divisor. One kernel of
  // ours (as the token math and the sums at the end): ATen's sum / clamp_min / neg_ were each a
  // kernel that a process's first call loaded (12 / 12 / 7 ms of its 78 on an H100).
  const at::Tensor mask_stats = at::empty({B + 2}, f32);
  grpo_prologue(mask, given_normalizer, mask_stats);
  const float* nseq = mask_stats.const_data_ptr<float>();
  const at::Tensor n_all = mask_stats.narrow(0, B, 1);
  const at::Tensor adv = advantages.to(at::kFloat).contiguous();
  const at::Tensor ids = selected_token_ids.reshape({M}).to(at::kLong).contiguous();
  constexpr int64_t kNoIgnore = std::numeric_limits<int64_t>::min();  // every id is scored
  check_ce_target_values(ids, V, kNoIgnore);

  const at::Tensor x = as_rows(input);
  const at::Tensor w = heads::gemm_ready(weight);
  const at::Tensor b = heads::opt(bias);
  heads::Grads gr = heads::alloc_grads(x, weight, b, compute_dx, compute_dw, compute_db);
  const bool want_grad = gr.any();
  // lse - z_y, until the token math turns each position into the log-prob -nll (in place)
  at::Tensor nll = at::empty({B, T}, f32);
  at::Tensor loss = at::empty({}, f32), kl = at::empty({}, f32), clip = at::empty({}, f32);
  at::Tensor partial;  // [groups' sequences, 3]: each sequence's (or piece's) loss, KL, clip sums
  int64_t rows_done = 0;

  if (M > 0) {
    const double inv_t = 1.0 / temperature;
    const int64_t R =
        heads::chunk_rows(M, V, std::max(H, rx.defined() ? rx.size(1) : H), input.element_size(), chunk_rows);
    // Chunks of whole sequences where they fit the budget, or (automatic plan) where one sequence's
    // logits take at most 512 MiB: GRPO's completions of ~1k tokens at V ~150k then run one
    // sequence (1024 rows) per chunk rather than pieces of 512 rows, whose GEMMs are less efficient
    // and whose sequence-level losses would need the two-phase path.
    const bool whole = T <= R || (chunk_rows == 0 && static_cast<double>(T) * static_cast<double>(V) *
                                                             static_cast<double>(input.element_size()) <=
                                                         512.0 * 1048576.0);
    const int64_t seqs = whole ? std::min(B, std::max<int64_t>(1, R / T)) : 1;
    const int64_t piece = whole ? T : heads::even_chunk(T, R);
    const bool two_phase = !whole && kernels::grpo::needs_seq_pass(o);
    at::Tensor buf = at::empty({whole ? seqs * T : piece, V}, input.options());
    const int64_t group_rows = whole ? seqs * T : (two_phase ? T : piece);
    at::Tensor scratch = at::empty({group_rows}, f32);  // reference nll
    at::Tensor scale = at::empty({group_rows}, f32);    // the group's ce_scale = -dLoss/dlp / temperature
    at::Tensor dummy = at::empty({buf.size(0)}, f32);
    partial = at::empty({whole || two_phase ? B : B * ((T + piece - 1) / piece), 3}, f32);
    const at::Tensor one = at::ones({1}, f32);
    at::Tensor nll_rows = nll.view({M});

    CeRows r;
    r.ce_scale = one;
    r.z_scale = one;
    r.ignore_index = kNoIgnore;
    // Log-probs of rows [r0, r0 + n): reference nll into ref_dst, policy nll into nll's rows; the
    // policy logits stay in the buffer.
    auto forward_rows = [&](int64_t r0, int64_t n, at::Tensor ref_dst) {
      at::Tensor lc = buf.narrow(0, 0, n);
      r.logits = lc;
      r.target = ids.narrow(0, r0, n);
      r.dlogits = at::Tensor();
      r.ce_scale = one;
      if (ref_model) {
        heads::logits_gemm(lc, rx.narrow(0, r0, n), rw, rb, inv_t);
        r.loss = ref_dst;
        ce_rows(r);
      }
      heads::logits_gemm(lc, x.narrow(0, r0, n), w, b, inv_t);
      r.loss = nll_rows.narrow(0, r0, n);
      ce_rows(r);
    };
    // dlogits of the rows whose logits are in the buffer (gradient scales `k_scale`), then their
    // dX / dW / dB.
    auto backward_rows = [&](int64_t r0, int64_t n, const at::Tensor& k_scale) {
      at::Tensor lc = buf.narrow(0, 0, n);
      r.logits = lc;
      r.target = ids.narrow(0, r0, n);
      r.dlogits = lc;
      r.loss = dummy.narrow(0, 0, n);
      r.ce_scale = k_scale;
      ce_rows(r);
      heads::chunk_grads(lc, x.narrow(0, r0, n), w, gr, r0);
    };
    // The token math of sequences [b0, b0 + S) x positions [t0, t0 + L) (one kernel): their
    // gradient scales into `scale`, their sums into the next S rows of `partial`.
    auto token_math = [&](int64_t b0, int64_t S, int64_t t0, int64_t L, const at::Tensor& ref_nll) {
      kernels::GrpoTokenArgs a{};
      a.nll = nll.data_ptr<float>() + b0 * T + t0;
      a.nll_stride = T;
      a.old = group_ptr(old_lp, b0, t0);
      a.old_stride = T;
      if (ref_model) {
        a.ref = ref_nll.const_data_ptr<float>();
        a.ref_stride = L;
        a.ref_is_nll = true;
      } else if (ref_lp_given.defined()) {
        a.ref = group_ptr(ref_lp_given, b0, t0);
        a.ref_stride = T;
      }
      a.mask = group_ptr(mask, b0, t0);
      a.mask_stride = T;
      if (vllm.defined()) {
        a.vllm = group_ptr(vllm, b0, t0);
        a.vllm_stride = vllm.stride(0);
        a.vllm_cols = vllm.size(1);
      }
      a.adv = adv.const_data_ptr<float>() + b0;
      a.nseq = nseq + b0;
      a.n_all = nseq + B;
      a.normalizer = nseq + B + 1;
      a.ce_scale = scale.data_ptr<float>();
      a.partial = partial.data_ptr<float>() + rows_done * 3;
      a.S = S;
      a.L = L;
      a.o = o;
      grpo_token_math(a, input.device());
      rows_done += S;
    };

    for (int64_t b0 = 0; b0 < B; b0 += seqs) {
      const int64_t S = std::min(seqs, B - b0);
      if (whole) {
        const int64_t r0 = b0 * T, n = S * T;
        const at::Tensor ref_nll = scratch.narrow(0, 0, n);
        forward_rows(r0, n, ref_nll);
        token_math(b0, S, 0, T, ref_nll);
        if (want_grad) backward_rows(r0, n, scale.narrow(0, 0, n));
        continue;
      }
      if (!two_phase) {
        for (int64_t t0 = 0; t0 < T; t0 += piece) {
          const int64_t L = std::min(piece, T - t0), r0 = b0 * T + t0;
          const at::Tensor ref_nll = scratch.narrow(0, 0, L);
          forward_rows(r0, L, ref_nll);
          token_math(b0, 1, t0, L, ref_nll);
          if (want_grad) backward_rows(r0, L, scale.narrow(0, 0, L));
        }
        continue;
      }
      // A sequence longer than a chunk whose gradient depends on all of it: log-probs first.
      for (int64_t t0 = 0; t0 < T; t0 += piece) {
        const int64_t L = std::min(piece, T - t0);
        forward_rows(b0 * T + t0, L, scratch.narrow(0, t0, L));
      }
      token_math(b0, 1, 0, T, scratch);
      if (!want_grad) continue;
      for (int64_t t0 = 0; t0 < T; t0 += piece) {
        const int64_t L = std::min(piece, T - t0), r0 = b0 * T + t0;
        heads::logits_gemm(buf.narrow(0, 0, L), x.narrow(0, r0, L), w, b, inv_t);
        backward_rows(r0, L, scale.narrow(0, t0, L));
      }
    }
  }
  if (!partial.defined()) partial = at::empty({0, 3}, f32);
  grpo_finish(partial.narrow(0, 0, rows_done), n_all, loss, kl, clip);
  auto [dX, dW, dB] = heads::finish_grads(gr, input, b);
  return {loss, kl, clip, nll, dX, dW, dB};  // nll now holds the log-probs
}

}  // namespace fused_linear_grpo_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_linear_grpo_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_grpo_fwd", &grpo_fwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_linear_grpo_impl;  // NOLINT(build/namespaces)
  m.impl("fused_linear_grpo_fwd", &grpo_fwd);
}
#endif

}  // namespace liger_cpp
