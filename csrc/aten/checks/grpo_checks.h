// Argument checks and option parsing shared by the GRPO losses: fused with the lm_head
// (csrc/aten/composite/fused_linear_grpo.cpp) and on given logits (grpo_logits.cpp). The formulas
// are the former's file comment; the options' meaning is csrc/kernels/divergence/grpo_token_math.h.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "aten/checks/common.h"
#include "kernels/divergence/grpo_token_math.h"

namespace liger_cpp {
namespace grpo_checks {

using Grpo = kernels::GrpoType;

inline Grpo parse_grpo_type(std::string_view s) {
  static const std::pair<const char*, Grpo> names[] = {
      {"grpo", Grpo::kGrpo},   {"bnpo", Grpo::kBnpo}, {"dr_grpo", Grpo::kDrGrpo}, {"dapo", Grpo::kDapo},
      {"cispo", Grpo::kCispo}, {"sapo", Grpo::kSapo}, {"luspo", Grpo::kLuspo},    {"vespo", Grpo::kVespo}};
  for (const auto& [n, t] : names)
    if (s == n) return t;
  LIGER_FAIL(
      "argument 'loss_type': expected one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo, got '", s,
      "'");
}

// A per-token input of the group (s, l) = (b0 + s, t0 + l) of a contiguous [B, cols] float32
// tensor, or null; cols 1 (vllm_is_ratio per sequence) ignores t0.
inline const float* group_ptr(const at::Tensor& t, int64_t b0, int64_t t0) {
  if (!t.defined()) return nullptr;
  return t.const_data_ptr<float>() + b0 * t.stride(0) + (t.size(1) == 1 ? 0 : t0);
}

// A float tensor of the batch as float32 [B, T] on input's device, or an error naming it (`like`:
// the argument whose shape it shares).
inline at::Tensor per_token_arg(const std::optional<at::Tensor>& t, const char* name, int64_t B, int64_t T,
                                const at::Tensor& input, const char* like = "selected_token_ids") {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  LIGER_CHECK_ARG(t->dim() == 2 && t->size(0) == B && t->size(1) == T, name, "expected shape (", B, ", ", T,
                  ") (", like, "'), got ", shape_str(*t));
  LIGER_CHECK_ARG(t->device() == input.device(), name, "expected device ", input.device(), ", got ",
                  t->device());
  LIGER_CHECK_ARG(at::isFloatingType(t->scalar_type()), name, "expected a floating dtype, got ",
                  dtype_str(t->scalar_type()));
  return t->to(at::kFloat).contiguous();
}

// vllm_is_ratio (B,), (B, 1) or (B, T) as float32 [B, 1] or [B, T], or undefined.
inline at::Tensor vllm_arg(const std::optional<at::Tensor>& vllm_is_ratio, int64_t B, int64_t T,
                           const at::Tensor& input) {
  if (!vllm_is_ratio.has_value() || !vllm_is_ratio->defined()) return at::Tensor();
  const at::Tensor& v = *vllm_is_ratio;
  const bool ok = (v.dim() == 1 && v.size(0) == B) ||
                  (v.dim() == 2 && v.size(0) == B && (v.size(1) == 1 || v.size(1) == T));
  LIGER_CHECK_ARG(ok, "vllm_is_ratio", "expected shape (", B, ",), (", B, ", 1) or (", B, ", ", T, "), got ",
                  shape_str(v));
  LIGER_CHECK_ARG(v.device() == input.device() && at::isFloatingType(v.scalar_type()), "vllm_is_ratio",
                  "expected a floating tensor on ", input.device(), ", got ", dtype_str(v.scalar_type()));
  return (v.dim() == 1 ? v.unsqueeze(1) : v).to(at::kFloat).contiguous();
}

// loss_normalizer (one floating element on input's device) as a float32 scalar, or undefined.
inline at::Tensor normalizer_arg(const std::optional<at::Tensor>& loss_normalizer, const at::Tensor& input) {
  if (!loss_normalizer.has_value() || !loss_normalizer->defined()) return at::Tensor();
  LIGER_CHECK_ARG(loss_normalizer->numel() == 1 && at::isFloatingType(loss_normalizer->scalar_type()) &&
                      loss_normalizer->device() == input.device(),
                  "loss_normalizer", "expected one floating element on ", input.device(), ", got shape ",
                  shape_str(*loss_normalizer));
  return loss_normalizer->reshape({}).to(at::kFloat).contiguous();
}

// The clipping bounds' argument names (the fused loss's epsilon_low / epsilon_high, the logits
// loss's eps_low / eps_high).
struct EpsNames {
  const char* low;
  const char* high;
};

// The loss's options, checked (every value finite, temperatures positive, delta positive, the
// sequence level only for the standard types). max_len is left to the caller.
inline kernels::GrpoOptions grpo_options(
    c10::string_view loss_type, c10::string_view importance_sampling_level, double beta, double epsilon_low,
    double epsilon_high, std::optional<double> delta, double temperature, bool use_bias_correction_kl,
    double sapo_temperature_pos, double sapo_temperature_neg, double vespo_k_pos, double vespo_lambda_pos,
    double vespo_k_neg, double vespo_lambda_neg, EpsNames eps = {"epsilon_low", "epsilon_high"}) {
  kernels::GrpoOptions o;
  o.type = parse_grpo_type(std::string_view(loss_type.data(), loss_type.size()));
  const std::string_view level(importance_sampling_level.data(), importance_sampling_level.size());
  LIGER_CHECK_ARG(level == "token" || level == "sequence", "importance_sampling_level",
                  "expected 'token' or 'sequence', got '", level, "'");
  o.seq = level == "sequence";
  LIGER_CHECK_ARG(!(o.seq && (o.type == Grpo::kCispo || o.type == Grpo::kSapo || o.type == Grpo::kVespo)),
                  "importance_sampling_level", "'sequence' is not supported for loss_type '",
                  std::string_view(loss_type.data(), loss_type.size()), "' (Liger's rule); use 'token'");
  const std::pair<double, const char*> finite[] = {{beta, "beta"},
                                                   {epsilon_low, eps.low},
                                                   {epsilon_high, eps.high},
                                                   {vespo_k_pos, "vespo_k_pos"},
                                                   {vespo_lambda_pos, "vespo_lambda_pos"},
                                                   {vespo_k_neg, "vespo_k_neg"},
                                                   {vespo_lambda_neg, "vespo_lambda_neg"}};
  for (const auto& [v, n] : finite) LIGER_CHECK_ARG(std::isfinite(v), n, "expected a finite value, got ", v);
  LIGER_CHECK_ARG(std::isfinite(temperature) && temperature > 0.0, "temperature",
                  "expected a positive value, got ", temperature);
  LIGER_CHECK_ARG(std::isfinite(sapo_temperature_pos) && sapo_temperature_pos > 0.0, "sapo_temperature_pos",
                  "expected a positive value, got ", sapo_temperature_pos);
  LIGER_CHECK_ARG(std::isfinite(sapo_temperature_neg) && sapo_temperature_neg > 0.0, "sapo_temperature_neg",
                  "expected a positive value, got ", sapo_temperature_neg);
  if (delta)
    LIGER_CHECK_ARG(std::isfinite(*delta) && *delta > 0.0, "delta", "expected a positive value, got ",
                    *delta);
  // The token math is float32, as the ATen ops it replaced (a double scalar met a float32 tensor).
  auto f = [](double v) { return static_cast<float>(v); };
  o.beta = f(beta);
  o.eps_low = f(epsilon_low);
  o.eps_high = f(epsilon_high);
  o.has_delta = delta.has_value();
  o.delta = delta ? f(*delta) : 0.f;
  o.inv_temperature = f(1.0 / temperature);
  o.bias_kl = use_bias_correction_kl;
  o.sapo_pos = f(sapo_temperature_pos);
  o.sapo_neg = f(sapo_temperature_neg);
  o.vk_pos = f(vespo_k_pos);
  o.vl_pos = f(vespo_lambda_pos);
  o.vk_neg = f(vespo_k_neg);
  o.vl_neg = f(vespo_lambda_neg);
  return o;
}

}  // namespace grpo_checks
}  // namespace liger_cpp
