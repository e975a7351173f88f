// The RL / distillation row kernels on CUDA: maps the ATen-side structs
// (csrc/aten/checks/divergence_core.h) onto csrc/kernels/divergence/divergence.h on the current
// stream. Callers have validated shapes, dtypes and devices.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "aten/checks/divergence_core.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/divergence/divergence.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace divergence_cuda_impl {
template <typename T>
T* ptr_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
}  // namespace divergence_cuda_impl

void distill_rows_cuda(const DistillRows& c) {
  const c10::cuda::CUDAGuard guard(c.s.device());
  kernels::DistillRowsArgs a{};
  a.s = c.s.data_ptr();
  a.s_row_stride = c.s.stride(0);
  a.t = c.t.data_ptr();
  a.t_row_stride = c.t.stride(0);
  a.target = divergence_cuda_impl::ptr_or_null<int64_t>(c.target);
  a.soft = c.soft.data_ptr<float>();
  a.hard = c.hard.data_ptr<float>();
  a.scales = divergence_cuda_impl::ptr_or_null<float>(c.scales);
  a.rows = c.s.size(0);
  a.cols = c.s.size(1);
  a.student_cols = c.student_cols;
  a.ignore_index = c.ignore_index;
  a.inv_temperature = static_cast<float>(c.inv_temperature);
  a.beta = static_cast<float>(c.beta);
  a.eps = static_cast<float>(c.eps);
  a.loss = c.loss;
  a.mask_soft = c.mask_soft;
  a.with_hard = c.with_hard;
  a.dtype = to_kernel_dtype(c.s.scalar_type(), "student logits");
  a.t_dtype = to_kernel_dtype(c.t.scalar_type(), "teacher logits / target probabilities");
  LIGER_CUDA_CHECK(kernels::distill_rows(a, at::cuda::getCurrentCUDAStream()));
}

namespace divergence_cuda_impl {
kernels::LogprobRowsArgs logprob_args(const LogprobRows& c) {
  kernels::LogprobRowsArgs a{};
  a.z = c.z.data_ptr();
  a.row_stride = c.z.stride(0);
  a.target = c.target.data_ptr<int64_t>();
  a.logp = ptr_or_null<float>(c.logp);
  a.entropy = ptr_or_null<float>(c.entropy);
  a.stats = ptr_or_null<float>(c.stats);
  a.g_lp = ptr_or_null<float>(c.g_lp);
  a.g_ent = ptr_or_null<float>(c.g_ent);
  a.scale = static_cast<float>(c.scale);
  a.z_scale = static_cast<float>(c.z_scale);
  a.dz = c.dz.defined() ? c.dz.data_ptr() : nullptr;
  a.dz_row_stride = c.dz.defined() ? c.dz.stride(0) : 0;
  a.rows = c.z.size(0);
  a.cols = c.z.size(1);
  a.ignore_index = c.ignore_index;
  a.dtype = to_kernel_dtype(c.z.scalar_type(), "logits");
  a.sm_count = sm_count();
  return a;
}
}  // namespace divergence_cuda_impl

void logprob_rows_fwd_cuda(const LogprobRows& c) {
  const c10::cuda::CUDAGuard guard(c.z.device());
  LIGER_CUDA_CHECK(
      kernels::logprob_rows_fwd(divergence_cuda_impl::logprob_args(c), at::cuda::getCurrentCUDAStream()));
}

void logprob_rows_bwd_cuda(const LogprobRows& c) {
  const c10::cuda::CUDAGuard guard(c.z.device());
  LIGER_CUDA_CHECK(
      kernels::logprob_rows_bwd(divergence_cuda_impl::logprob_args(c), at::cuda::getCurrentCUDAStream()));
}

namespace divergence_cuda_impl {
kernels::CeTvdArgs ce_tvd_args(const CeTvdRows& c) {
  kernels::CeTvdArgs a{};
  a.s = c.s.const_data_ptr();
  a.s_row_stride = c.s.stride(0);
  a.t = c.t.const_data_ptr();
  a.t_row_stride = c.t.stride(0);
  a.target = c.target.const_data_ptr<int64_t>();
  a.ce = ptr_or_null<float>(c.ce);
  a.tvd = ptr_or_null<float>(c.tvd);
  a.stats = ptr_or_null<float>(c.stats);
  a.grad_ce = ptr_or_null<float>(c.grad_ce);
  a.grad_tvd = ptr_or_null<float>(c.grad_tvd);
  a.grad = c.grad.defined() ? c.grad.data_ptr() : nullptr;
  a.grad_row_stride = c.grad.defined() ? c.grad.stride(0) : 0;
  a.rows = c.s.size(0);
  a.cols = c.s.size(1);
  a.ignore_index = c.ignore_index;
  a.dtype = to_kernel_dtype(c.s.scalar_type(), "student_logits");
  return a;
}
}  // namespace divergence_cuda_impl

void ce_tvd_rows_fwd_cuda(const CeTvdRows& c) {
  const c10::cuda::CUDAGuard guard(c.s.device());
  LIGER_CUDA_CHECK(
      kernels::ce_tvd_fwd(divergence_cuda_impl::ce_tvd_args(c), at::cuda::getCurrentCUDAStream()));
}

void ce_tvd_rows_bwd_cuda(const CeTvdRows& c) {
  const c10::cuda::CUDAGuard guard(c.s.device());
  LIGER_CUDA_CHECK(
      kernels::ce_tvd_bwd(divergence_cuda_impl::ce_tvd_args(c), at::cuda::getCurrentCUDAStream()));
}

void pointwise_div_cuda(const PointwiseDiv& c) {
  const c10::cuda::CUDAGuard guard(c.x.device());
  kernels::PointwiseDivArgs a{};
  a.x = c.x.data_ptr();
  a.x_row_stride = c.x.stride(0);
  a.y = c.y.data_ptr();
  a.y_row_stride = c.y.stride(0);
  a.labels = divergence_cuda_impl::ptr_or_null<int64_t>(c.labels);
  a.loss_rows = divergence_cuda_impl::ptr_or_null<float>(c.loss_rows);
  a.loss_elems = divergence_cuda_impl::ptr_or_null<float>(c.loss_elems);
  a.grad = c.grad.defined() ? c.grad.data_ptr() : nullptr;
  a.grad_row_stride = c.grad.defined() ? c.grad.stride(0) : 0;
  a.grad_scale = divergence_cuda_impl::ptr_or_null<float>(c.grad_scale);
  a.kind = static_cast<int>(c.kind);
  a.beta = static_cast<float>(c.beta);
  a.eps = static_cast<float>(c.eps);
  a.log_target = c.log_target;
  a.rows = c.x.size(0);
  a.cols = c.x.size(1);
  a.ignore_index = c.ignore_index;
  a.dtype = to_kernel_dtype(c.x.scalar_type(), "input");
  a.sm_count = sm_count();
  LIGER_CUDA_CHECK(kernels::pointwise_div_rows(a, at::cuda::getCurrentCUDAStream()));
}

void grpo_prologue_cuda(const at::Tensor& mask, const at::Tensor& given, const at::Tensor& stats) {
  const c10::cuda::CUDAGuard guard(mask.device());
  LIGER_CUDA_CHECK(kernels::grpo_prologue(mask.const_data_ptr<float>(), mask.size(0), mask.size(1),
                                          given.defined() ? given.const_data_ptr<float>() : nullptr,
                                          stats.data_ptr<float>(), at::cuda::getCurrentCUDAStream()));
}

void grpo_token_math_cuda(const kernels::GrpoTokenArgs& a, const at::Device& device) {
  const c10::cuda::CUDAGuard guard(device);
  LIGER_CUDA_CHECK(kernels::grpo_token_math(a, at::cuda::getCurrentCUDAStream()));
}

void grpo_finish_cuda(const at::Tensor& partial, const at::Tensor& n_all, const at::Tensor& loss,
                      const at::Tensor& kl, const at::Tensor& clip) {
  const c10::cuda::CUDAGuard guard(partial.device());
  LIGER_CUDA_CHECK(kernels::grpo_finish(
      partial.const_data_ptr<float>(), partial.size(0), n_all.const_data_ptr<float>(), loss.data_ptr<float>(),
      kl.data_ptr<float>(), clip.data_ptr<float>(), at::cuda::getCurrentCUDAStream()));
}

}  // namespace liger_cpp
