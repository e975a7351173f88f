// Log-probabilities of given tokens from given logits at a temperature, without a (rows x V)
// log-softmax (Liger's fused_selective_log_softmax, TRL's selective_log_softmax): the token
// log-prob row kernel (csrc/kernels/divergence/divergence.h; CPU twin in float64) on the logits
// as given, scaled by 1 / temperature as it reads them. Math: the schema (csrc/schema.cpp).
// Until 2026-12-06 (afternoon) another temperature ran on float32 copies of row chunks divided by
// it: 9.37 ms against Liger's Triton kernel's 0.853 at 8 x 1024 x 151936 bf16 on an H100.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/divergence_core.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace selective_logprobs_impl {

at::Tensor selective_logprobs(const at::Tensor& logits, const at::Tensor& target, double temperature,
                              int64_t ignore_index) {
  const c10::DeviceGuard device_guard(logits.device());
  const bool cuda = logits.is_cuda();
  LIGER_CHECK_ARG(logits.dim() >= 1 && logits.size(-1) > 0, "logits",
                  "expected shape (..., V) with V > 0, got ", shape_str(logits));
  LIGER_CHECK_ARG(is_float_type(logits.scalar_type(), !cuda), "logits",
                  "expected float32, float16 or bfloat16", cuda ? "" : " (or float64 on CPU)", ", got ",
                  dtype_str(logits.scalar_type()));
  const int64_t V = logits.size(-1), rows = logits.numel() / V;
  const at::Tensor t = row_token_ids(target, rows, logits, "logits");
  LIGER_CHECK_ARG(std::isfinite(temperature) && temperature > 0.0, "temperature",
                  "expected a positive value, got ", temperature);
  check_ce_target_values(t, V, ignore_index);
  at::Tensor out = at::empty({rows}, logits.options().dtype(at::kFloat));
  if (rows > 0) {
    const at::Tensor z = as_rows(logits);  // a view where the leading dimensions flatten, else a copy
    LogprobRows l;
    l.ignore_index = ignore_index;
    l.z = z;
    l.z_scale = 1.0 / temperature;  // the kernel scales as it reads: the logits are read once
    l.target = t;
    l.logp = out;
    logprob_rows_fwd(l);
  }
  return out.view(target.sizes());
}

}  // namespace selective_logprobs_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  m.impl("selective_logprobs", &selective_logprobs_impl::selective_logprobs);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  m.impl("selective_logprobs", &selective_logprobs_impl::selective_logprobs);
}
#endif

}  // namespace liger_cpp
