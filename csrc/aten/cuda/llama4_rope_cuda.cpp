// Llama 4 complex RoPE CUDA host wrapper: checks (llama4_rope_checks.h), device guard, current
// stream, then the ATen-free launcher (csrc/kernels/rope/llama4_rope.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aten/checks/llama4_rope_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/rope/llama4_rope.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace llama4_rope_cuda_impl {

namespace k = kernels;

k::Llama4RopeOperand operand(const at::Tensor& in, const at::Tensor& out) {
  k::Llama4RopeOperand o{};
  o.in = in.data_ptr();
  o.in_sb = llama4_stride(in, 0);
  o.in_ss = llama4_stride(in, 1);
  o.in_sh = llama4_stride(in, 2);
  o.out = out.data_ptr();
  o.out_sb = llama4_stride(out, 0);
  o.out_ss = llama4_stride(out, 1);
  o.out_sh = llama4_stride(out, 2);
  o.heads = in.size(2);
  return o;
}

std::tuple<at::Tensor, at::Tensor> llama4_rope_cuda(const at::Tensor& q, const at::Tensor& kk,
                                                    const at::Tensor& freqs, bool heads_first, bool conj,
                                                    const char* qn, const char* kn) {
  const c10::cuda::CUDAGuard guard(q.device());
  const Llama4RopeProblem p = prepare_llama4_rope(q, kk, freqs, heads_first, /*cuda=*/true, qn, kn);
  if (q.numel() + kk.numel() == 0) return {p.q_out, p.k_out};
  k::Llama4RopeArgs a{};
  a.q = operand(p.q, p.q_out_v);
  a.k = operand(p.k, p.k_out_v);
  a.freqs = p.freqs.data_ptr<float>();
  a.f_sb = llama4_stride(p.freqs, 0);
  a.f_ss = p.freqs.stride(1);
  a.batch = p.batch;
  a.seq = p.seq;
  a.pairs = p.pairs;
  a.conj = conj;
  a.dtype = to_kernel_dtype(q.scalar_type(), qn);
  LIGER_CUDA_CHECK(k::llama4_rope(a, sm_count(), at::cuda::getCurrentCUDAStream()));
  return {p.q_out, p.k_out};
}

std::tuple<at::Tensor, at::Tensor> llama4_rope_fwd_cuda(const at::Tensor& q, const at::Tensor& kk,
                                                        const at::Tensor& freqs, bool heads_first) {
  return llama4_rope_cuda(q, kk, freqs, heads_first, /*conj=*/false, "q", "k");
}

std::tuple<at::Tensor, at::Tensor> llama4_rope_bwd_cuda(const at::Tensor& dq, const at::Tensor& dk,
                                                        const at::Tensor& freqs, bool heads_first) {
  return llama4_rope_cuda(dq, dk, freqs, heads_first, /*conj=*/true, "dq_out", "dk_out");
}

}  // namespace llama4_rope_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace llama4_rope_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("llama4_rope_fwd", &llama4_rope_fwd_cuda);
  m.impl("llama4_rope_bwd", &llama4_rope_bwd_cuda);
}

}  // namespace liger_cpp
