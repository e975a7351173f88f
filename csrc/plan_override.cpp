// torch.ops.liger._set_plan_override: the developer override of launch plans
// (csrc/kernels/common/plan_override.h), for tests and benchmarks.
#include "plan_override.h"

#include <c10/util/Exception.h>

#include <stdexcept>

#include "kernels/common/plan_override.h"

namespace liger_cpp {

std::string set_plan_override(std::string spec) {
  try {
    return kernels::plan_override::set(spec);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

}  // namespace liger_cpp
