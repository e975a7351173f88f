// Device dispatch of the RL / distillation row kernels (csrc/aten/checks/divergence_core.h).
#include "aten/checks/common.h"
#include "aten/checks/divergence_core.h"

namespace liger_cpp {

#ifdef LIGER_CPP_WITH_CUDA
#define LIGER_DIV_DISPATCH(t, cpu, cuda, ...) \
  do {                                        \
    if ((t).is_cuda()) {                      \
      cuda(__VA_ARGS__);                      \
      return;                                 \
    }                                         \
    cpu(__VA_ARGS__);                         \
  } while (0)
#else
#define LIGER_DIV_DISPATCH(t, cpu, cuda, ...)                                                      \
  do {                                                                                             \
    if ((t).is_cuda())                                                                             \
      LIGER_FAIL("argument 'input' is on ", (t).device(), ", but this build has no CUDA kernels"); \
    cpu(__VA_ARGS__);                                                                              \
  } while (0)
#endif

void distill_rows(const DistillRows& a) { LIGER_DIV_DISPATCH(a.s, distill_rows_cpu, distill_rows_cuda, a); }
void logprob_rows_fwd(const LogprobRows& a) {
  LIGER_DIV_DISPATCH(a.z, logprob_rows_fwd_cpu, logprob_rows_fwd_cuda, a);
}
void logprob_rows_bwd(const LogprobRows& a) {
  LIGER_DIV_DISPATCH(a.z, logprob_rows_bwd_cpu, logprob_rows_bwd_cuda, a);
}
void ce_tvd_rows_fwd(const CeTvdRows& a) {
  LIGER_DIV_DISPATCH(a.s, ce_tvd_rows_fwd_cpu, ce_tvd_rows_fwd_cuda, a);
}
void ce_tvd_rows_bwd(const CeTvdRows& a) {
  LIGER_DIV_DISPATCH(a.s, ce_tvd_rows_bwd_cpu, ce_tvd_rows_bwd_cuda, a);
}
void pointwise_div(const PointwiseDiv& a) {
  LIGER_DIV_DISPATCH(a.x, pointwise_div_cpu, pointwise_div_cuda, a);
}

void grpo_prologue(const at::Tensor& mask, const at::Tensor& given, const at::Tensor& stats) {
  LIGER_DIV_DISPATCH(mask, grpo_prologue_cpu, grpo_prologue_cuda, mask, given, stats);
}
void grpo_token_math(const kernels::GrpoTokenArgs& a, const at::Device& device) {
  if (device.is_cuda()) {
#ifdef LIGER_CPP_WITH_CUDA
    grpo_token_math_cuda(a, device);
    return;
#else
    LIGER_FAIL("argument '_input' is on ", device, ", but this build has no CUDA kernels");
#endif
  }
  grpo_token_math_cpu(a);
}
void grpo_finish(const at::Tensor& partial, const at::Tensor& n_all, const at::Tensor& loss,
                 const at::Tensor& kl, const at::Tensor& clip) {
  LIGER_DIV_DISPATCH(partial, grpo_finish_cpu, grpo_finish_cuda, partial, n_all, loss, kl, clip);
}

}  // namespace liger_cpp
