// RoPE / mRoPE CUDA host wrapper: checks the inputs (csrc/aten/checks/rope_checks.h),
// guards the device, takes the current stream, maps dtypes and calls the
// ATen-free launcher; q and k go through one launch.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/rope_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/rope/rope.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace rope_cuda_impl {

namespace k = kernels;

k::RopeOperand operand(const at::Tensor& in, const at::Tensor& out) {
  k::RopeOperand o{};
  o.in = in.data_ptr();
  o.in_sb = rope_stride(in, 0);
  o.in_sh = rope_stride(in, 1);
  o.in_ss = rope_stride(in, 2);
  o.out = out.data_ptr();
  o.out_sb = rope_stride(out, 0);
  o.out_sh = rope_stride(out, 1);
  o.out_ss = rope_stride(out, 2);
  o.heads = in.size(1);
  return o;
}

std::tuple<at::Tensor, at::Tensor> rope_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                             const at::Tensor& sin, int64_t unsqueeze_dim,
                                             const c10::IntArrayRef* sections, bool backward) {
  const char* qn = backward ? "dq_out" : "q";
  const char* kn = backward ? "dk_out" : "k";
  // k, cos and sin are checked against q's device in prepare_rope.
  LIGER_CHECK_ARG(q.is_cuda(), qn, "expected a CUDA tensor, got device ", q.device());
  const c10::cuda::CUDAGuard guard(q.device());
  const RopeProblem p = prepare_rope(q, k, cos, sin, unsqueeze_dim, sections, /*cuda=*/true, qn, kn);
  if (p.batch * p.seq == 0 || p.q.numel() + p.k.numel() == 0) return {p.q_out, p.k_out};
  k::RopeArgs a{};
  a.q = operand(p.q, p.q_out_v);
  a.k = operand(p.k, p.k_out_v);
  a.cos = p.cos.data_ptr();
  a.cos_sp = rope_stride(p.cos, 0);
  a.cos_sb = rope_stride(p.cos, 1);
  a.cos_ss = rope_stride(p.cos, 2);
  a.sin = p.sin.data_ptr();
  a.sin_sp = rope_stride(p.sin, 0);
  a.sin_sb = rope_stride(p.sin, 1);
  a.sin_ss = rope_stride(p.sin, 2);
  a.batch = p.batch;
  a.seq = p.seq;
  a.head_dim = p.head_dim;
  a.section0 = p.section0;
  a.section1 = p.section1;
  a.backward = backward;
  a.dtype = to_kernel_dtype(p.q.scalar_type(), qn);
  a.cs_dtype = to_kernel_dtype(p.cos.scalar_type(), "cos");
  LIGER_CUDA_CHECK(k::rope(a, sm_count(), at::cuda::getCurrentCUDAStream()));
  return {p.q_out, p.k_out};
}

std::tuple<at::Tensor, at::Tensor> rope_fwd_cuda(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& cos, const at::Tensor& sin,
                                                 int64_t unsqueeze_dim) {
  return rope_cuda(q, k, cos, sin, unsqueeze_dim, nullptr, false);
}
std::tuple<at::Tensor, at::Tensor> rope_bwd_cuda(const at::Tensor& dq, const at::Tensor& dk,
                                                 const at::Tensor& cos, const at::Tensor& sin,
                                                 int64_t unsqueeze_dim) {
  return rope_cuda(dq, dk, cos, sin, unsqueeze_dim, nullptr, true);
}
std::tuple<at::Tensor, at::Tensor> mrope_fwd_cuda(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& cos, const at::Tensor& sin,
                                                  c10::IntArrayRef mrope_section, int64_t unsqueeze_dim) {
  return rope_cuda(q, k, cos, sin, unsqueeze_dim, &mrope_section, false);
}
std::tuple<at::Tensor, at::Tensor> mrope_bwd_cuda(const at::Tensor& dq, const at::Tensor& dk,
                                                  const at::Tensor& cos, const at::Tensor& sin,
                                                  c10::IntArrayRef mrope_section, int64_t unsqueeze_dim) {
  return rope_cuda(dq, dk, cos, sin, unsqueeze_dim, &mrope_section, true);
}

}  // namespace rope_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace rope_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("rope_fwd", &rope_fwd_cuda);
  m.impl("rope_bwd", &rope_bwd_cuda);
  m.impl("mrope_fwd", &mrope_fwd_cuda);
  m.impl("mrope_bwd", &mrope_bwd_cuda);
}

}  // namespace liger_cpp
