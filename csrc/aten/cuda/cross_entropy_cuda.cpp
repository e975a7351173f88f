// Cross-entropy row step on CUDA: maps CeRows onto the ATen-free kernels
// (csrc/kernels/cross_entropy/cross_entropy.h) on the current stream. Callers (csrc/aten/composite/)
// have validated shapes, dtypes and devices.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/cross_entropy/cross_entropy.h"

namespace liger_cpp {

void ce_rows_cuda(const CeRows& c) {
  const c10::cuda::CUDAGuard guard(c.logits.device());
  kernels::CeRowsArgs a{};
  a.logits = c.logits.data_ptr();
  a.logits_row_stride = c.logits.stride(0);
  a.target = c.target.data_ptr<int64_t>();
  at::Tensor wsum;
  if (c.weight.defined()) {
    a.weight = c.weight.data_ptr<float>();
    wsum = c.weight_sum.defined() ? c.weight_sum : c.weight.sum().reshape({1});
    a.weight_sum = wsum.data_ptr<float>();
  }
  if (c.dlogits.defined()) {
    a.dlogits = c.dlogits.data_ptr();
    a.dlogits_row_stride = c.dlogits.stride(0);
  }
  a.loss = c.loss.data_ptr<float>();
  a.z_loss = c.z_loss.defined() ? c.z_loss.data_ptr<float>() : nullptr;
  a.argmax = c.argmax.defined() ? c.argmax.data_ptr<int64_t>() : nullptr;
  a.ce_scale = c.ce_scale.data_ptr<float>();
  a.ce_scale_stride = c.ce_scale.numel() == 1 ? 0 : 1;
  a.z_scale = c.z_scale.data_ptr<float>();
  a.z_scale_stride = c.z_scale.numel() == 1 ? 0 : 1;
  a.rows = c.logits.size(0);
  a.cols = c.logits.size(1);
  a.ignore_index = c.ignore_index;
  a.label_smoothing = static_cast<float>(c.label_smoothing);
  a.lse_square_scale = static_cast<float>(c.lse_square_scale);
  a.softcap = static_cast<float>(c.softcap);
  a.dtype = to_kernel_dtype(c.logits.scalar_type(), "logits");
  LIGER_CUDA_CHECK(kernels::ce_rows(a, sm_count(), at::cuda::getCurrentCUDAStream()));
}

at::Tensor ce_prologue_cuda(const at::Tensor& target, const at::Tensor& weight, int64_t V,
                            int64_t ignore_index, Reduction reduction) {
  const c10::cuda::CUDAGuard guard(target.device());
  at::Tensor scales = at::empty({3}, target.options().dtype(at::kFloat));
  LIGER_CUDA_CHECK(kernels::ce_prologue(target.data_ptr<int64_t>(), target.numel(), V, ignore_index,
                                        weight.defined() ? weight.data_ptr<float>() : nullptr,
                                        static_cast<int>(reduction), scales.data_ptr<float>(),
                                        at::cuda::getCurrentCUDAStream()));
  return scales;
}

std::pair<at::Tensor, at::Tensor> ce_reduce_rows_cuda(const at::Tensor& loss_rows, const at::Tensor& z_rows,
                                                      const at::Tensor& scales) {
  const c10::cuda::CUDAGuard guard(loss_rows.device());
  // Two allocations, not views of one: the op's outputs must not alias each other.
  at::Tensor loss = at::empty({}, loss_rows.options());
  at::Tensor z = at::empty({}, loss_rows.options());
  LIGER_CUDA_CHECK(kernels::ce_epilogue(loss_rows.data_ptr<float>(),
                                        z_rows.defined() ? z_rows.data_ptr<float>() : nullptr,
                                        loss_rows.numel(), scales.data_ptr<float>(), loss.data_ptr<float>(),
                                        z.data_ptr<float>(), at::cuda::getCurrentCUDAStream()));
  return {loss, z};
}

void ce_scale_rows_cuda_(const at::Tensor& d, const at::Tensor& g) {
  const c10::cuda::CUDAGuard guard(d.device());
  LIGER_CUDA_CHECK(kernels::ce_scale_rows(
      d.data_ptr(), d.stride(0), d.size(0), d.size(1), g.data_ptr<float>(), g.numel() == 1 ? 0 : 1,
      to_kernel_dtype(d.scalar_type(), "grad"), sm_count(), at::cuda::getCurrentCUDAStream()));
}

}  // namespace liger_cpp
