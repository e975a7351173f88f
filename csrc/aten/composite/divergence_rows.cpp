// Device dispatch of the RL / distillation row kernels (csrc/aten/checks/divergence_core.h).
#include "aten/checks/common.h"
#include "aten/checks/divergence_core.h"

namespace liger_cpp {

#ifdef LIGER_CPP_WITH_CUDA
#define LIGER_DIV_DISPATCH(t, cpu, cuda, a) \
  do {                                      \
    if ((t).is_cuda()) {                    \
      cuda(a);                              \
      return;                               \
    }                                       \
    cpu(a);                                 \
  } while (0)
#else
#define LIGER_DIV_DISPATCH(t, cpu, cuda, a)                                                        \
  do {                                                                                             \
    if ((t).is_cuda())                                                                             \
      LIGER_FAIL("argument 'input' is on ", (t).device(), ", but this build has no CUDA kernels"); \
    cpu(a);                                                                                        \
  } while (0)
#endif

void distill_rows(const DistillRows& a) { LIGER_DIV_DISPATCH(a.s, distill_rows_cpu, distill_rows_cuda, a); }
void logprob_rows_fwd(const LogprobRows& a) {
  LIGER_DIV_DISPATCH(a.z, logprob_rows_fwd_cpu, logprob_rows_fwd_cuda, a);
}
void logprob_rows_bwd(const LogprobRows& a) {
  LIGER_DIV_DISPATCH(a.z, logprob_rows_bwd_cpu, logprob_rows_bwd_cuda, a);
}
void pointwise_div(const PointwiseDiv& a) {
  LIGER_DIV_DISPATCH(a.x, pointwise_div_cpu, pointwise_div_cuda, a);
}

}  // namespace liger_cpp
