// SwiGLU / GeGLU CUDA host wrapper: checks the inputs, guards the device, takes
// the current stream, maps dtypes and calls the ATen-free launchers.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aten/checks/common.h"
#include "aten/checks/glu_checks.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/glu/glu.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace glu_cuda_impl {

namespace k = kernels;

at::Tensor glu_fwd_cuda(const at::Tensor& A, const at::Tensor& B, GluKind kind) {
  check_glu_inputs(A, B, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(A.device());
  at::Tensor c = at::empty(A.sizes(), A.options());
  if (A.numel() == 0) return c;
  const at::Tensor a2 = glu_rows(A), b2 = glu_rows(B);
  const at::Tensor c2 = c.view({-1, A.size(-1)});
  k::GluFwdArgs p{};
  p.a = a2.data_ptr();
  p.a_row_stride = a2.stride(0);
  p.b = b2.data_ptr();
  p.b_row_stride = b2.stride(0);
  p.c = c2.data_ptr();
  p.c_row_stride = c2.stride(0);
  p.rows = a2.size(0);
  p.cols = a2.size(1);
  p.act = static_cast<k::GluAct>(kind);
  p.dtype = to_kernel_dtype(A.scalar_type(), "a");
  LIGER_CUDA_CHECK(k::glu_fwd(p, sm_count(), at::cuda::getCurrentCUDAStream()));
  return c;
}

// Runs the backward into da2/db2 (which may be a2/b2).
void glu_bwd_into(const at::Tensor& dC, const at::Tensor& a2, const at::Tensor& b2, GluKind kind,
                  const at::Tensor& da2, const at::Tensor& db2) {
  const at::Tensor dc2 = glu_rows(dC);
  k::GluBwdArgs p{};
  p.dc = dc2.data_ptr();
  p.dc_row_stride = dc2.stride(0);
  p.a = a2.data_ptr();
  p.a_row_stride = a2.stride(0);
  p.b = b2.data_ptr();
  p.b_row_stride = b2.stride(0);
  p.da = da2.data_ptr();
  p.da_row_stride = da2.stride(0);
  p.db = db2.data_ptr();
  p.db_row_stride = db2.stride(0);
  p.rows = a2.size(0);
  p.cols = a2.size(1);
  p.act = static_cast<k::GluAct>(kind);
  p.dtype = to_kernel_dtype(a2.scalar_type(), "a");
  LIGER_CUDA_CHECK(k::glu_bwd(p, sm_count(), at::cuda::getCurrentCUDAStream()));
}

std::tuple<at::Tensor, at::Tensor> glu_bwd_cuda(const at::Tensor& dC, const at::Tensor& A,
                                                const at::Tensor& B, GluKind kind) {
  check_glu_bwd(dC, A, B, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(A.device());
  at::Tensor da = at::empty(A.sizes(), A.options());
  at::Tensor db = at::empty(A.sizes(), A.options());
  if (A.numel() == 0) return {da, db};
  glu_bwd_into(dC, glu_rows(A), glu_rows(B), kind, da.view({-1, A.size(-1)}), db.view({-1, A.size(-1)}));
  return {da, db};
}

void glu_bwd_inplace_cuda(const at::Tensor& dC, at::Tensor& A, at::Tensor& B, GluKind kind) {
  check_glu_bwd_inplace(dC, A, B, /*cuda=*/true);
  const c10::cuda::CUDAGuard guard(A.device());
  if (A.numel() > 0) {
    const at::Tensor a2 = A.view({-1, A.size(-1)}), b2 = B.view({-1, A.size(-1)});
    glu_bwd_into(dC, a2, b2, kind, a2, b2);
  }
  mark_written(A);
  mark_written(B);
}

at::Tensor swiglu_fwd_cuda(const at::Tensor& a, const at::Tensor& b, bool /*in_place*/) {
  return glu_fwd_cuda(a, b, GluKind::kSilu);
}
std::tuple<at::Tensor, at::Tensor> swiglu_bwd_cuda(const at::Tensor& dc, const at::Tensor& a,
                                                   const at::Tensor& b) {
  return glu_bwd_cuda(dc, a, b, GluKind::kSilu);
}
void swiglu_bwd_inplace_cuda(const at::Tensor& dc, at::Tensor& a, at::Tensor& b) {
  glu_bwd_inplace_cuda(dc, a, b, GluKind::kSilu);
}
at::Tensor geglu_fwd_cuda(const at::Tensor& a, const at::Tensor& b, c10::string_view approximate,
                          bool /*in_place*/) {
  return glu_fwd_cuda(a, b, parse_gelu_approximate(approximate));
}
std::tuple<at::Tensor, at::Tensor> geglu_bwd_cuda(const at::Tensor& dc, const at::Tensor& a,
                                                  const at::Tensor& b, c10::string_view approximate) {
  return glu_bwd_cuda(dc, a, b, parse_gelu_approximate(approximate));
}
void geglu_bwd_inplace_cuda(const at::Tensor& dc, at::Tensor& a, at::Tensor& b,
                            c10::string_view approximate) {
  glu_bwd_inplace_cuda(dc, a, b, parse_gelu_approximate(approximate));
}

}  // namespace glu_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace glu_cuda_impl;  // NOLINT(build/namespaces)

  m.impl("swiglu_fwd", &swiglu_fwd_cuda);
  m.impl("swiglu_bwd", &swiglu_bwd_cuda);
  m.impl("swiglu_bwd_", &swiglu_bwd_inplace_cuda);
  m.impl("geglu_fwd", &geglu_fwd_cuda);
  m.impl("geglu_bwd", &geglu_bwd_cuda);
  m.impl("geglu_bwd_", &geglu_bwd_inplace_cuda);
}

}  // namespace liger_cpp
