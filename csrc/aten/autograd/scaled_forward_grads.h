// The backward of a reduced loss whose gradients its forward computed (fused linear cross entropy
// with reduction mean / sum, the chunked preference losses, KTO): the forward computes dX, dW, dB
// chunk by chunk while each chunk's logits are at hand (only those autograd will ask for) and
// saves them; the backward scales them by the scalar grad_output, in place eagerly (one
// liger::fused_linear_cross_entropy_scale_ call; on CUDA a unit grad_output is skipped on the
// device) or out of place while traced (a functional expression the compiler can plan). A second
// backward through the same graph cannot scale the handed-out buffers again and raises.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <string>

#include "aten/autograd/autograd_common.h"
#include "aten/checks/common.h"

namespace liger_cpp {
namespace autograd {

// Called in the forward: keeps dX, dW, dB ((0,) tensors for those not computed) and which were.
inline void save_forward_grads(AutogradContext* ctx, const at::Tensor& dx, const at::Tensor& dw,
                               const at::Tensor& db, bool computed_dx, bool computed_dw, bool computed_db) {
  ctx->save_for_backward({dx, dw, db});
  ctx->saved_data["computed_dx"] = computed_dx;
  ctx->saved_data["computed_dw"] = computed_dw;
  ctx->saved_data["computed_db"] = computed_db;
  ctx->saved_data["scaled"] = false;
}

// t * g in float32 (float64 for float64), one rounding: symbolic shapes allowed (no numel() here).
inline at::Tensor scaled_out_of_place(const at::Tensor& t, const at::Tensor& g) {
  const auto acc = t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return (t.to(acc) * g.reshape({}).to(acc)).to(t.scalar_type());
}

// Called in the backward: the saved gradients times grad_loss (one element), those not needed
// undefined. op / entry_point name the op and the call that sets its compute_* flags (for the
// error when a needed gradient was not computed); second_backward: the message of a second backward.
inline std::array<at::Tensor, 3> take_forward_grads(AutogradContext* ctx, const at::Tensor& grad_loss,
                                                    std::array<bool, 3> needed, const char* op,
                                                    const char* entry_point, const char* second_backward) {
  static const char* const kNames[3] = {"dx", "dw", "db"};
  static const char* const kKeys[3] = {"computed_dx", "computed_dw", "computed_db"};
  for (int i = 0; i < 3; ++i)
    if (needed[i] && !ctx->saved_data[kKeys[i]].toBool())
      LIGER_FAIL(op, " ran with compute_", kNames[i], "=False, but that gradient is needed; call ",
                 entry_point, " (it sets the flags)");
  if (ctx->saved_data["scaled"].toBool()) LIGER_FAIL(second_backward);
  variable_list saved = ctx->get_saved_variables();
  std::array<at::Tensor, 3> out;
  if (tracing(grad_loss) || tracing(saved[0])) {
    for (int i = 0; i < 3; ++i)
      if (needed[i]) out[i] = scaled_out_of_place(saved[i], grad_loss);
    return out;
  }
  // The signature its kernels are registered with (csrc/aten/composite/fused_linear_cross_entropy.cpp).
  using ScaleSig = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
  static const auto scale = find_op<ScaleSig>("liger::fused_linear_cross_entropy_scale_");
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    scale.call(saved[0], saved[1], saved[2], grad_loss);
  }
  ctx->saved_data["scaled"] = true;
  for (int i = 0; i < 3; ++i)
    if (needed[i]) out[i] = std::move(saved[i]);
  return out;
}

}  // namespace autograd
}  // namespace liger_cpp
