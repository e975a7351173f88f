// SwiGLU / GeGLU on the CPU: element-wise loops over the flattened (rows, F)
// problem with at::parallel_for, float32 math (float64 for float64 inputs), one
// rounding to the output dtype. Same math and options as the CUDA kernels
// (csrc/kernels/glu/glu.h).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "aten/checks/common.h"
#include "aten/checks/glu_checks.h"
#include "aten/checks/small_tensors.h"
#include "aten/cpu/cpu_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace glu_cpu_impl {

constexpr int64_t kGrain = 1 << 15;

using cpu::acc_of;

// act(x) and, when d is non-null, act'(x).
template <typename acc_t>
inline acc_t glu_act(GluKind kind, acc_t x, acc_t* d) {
  const acc_t one = 1, half = 0.5;
  // GELU(+inf) = +inf as in PyTorch (the H200 image's build gave NaN there,
  // likely through a vectorised erf); -inf keeps IEEE's NaN, as PyTorch does.
  // The derivative there is NaN (inf * 0 in the formula), as PyTorch's GELU
  // backward and the CUDA kernels give it, not the limit 1: the CPU and CUDA
  // twins agree on every input (tests/test_failure_behaviour.py).
  if (kind != GluKind::kSilu && x == std::numeric_limits<acc_t>::infinity()) {
    if (d) *d = std::numeric_limits<acc_t>::quiet_NaN();
    return x;
  }
  switch (kind) {
    case GluKind::kSilu: {
      const acc_t s = one / (one + std::exp(-x));
      if (d) *d = s * (one + x * (one - s));
      return x * s;
    }
    case GluKind::kGeluTanh: {
      const acc_t k0 = static_cast<acc_t>(0.7978845608028654), k1 = static_cast<acc_t>(0.044715);
      const acc_t x2 = x * x;
      const acc_t t = std::tanh(k0 * (x + k1 * x2 * x));
      if (d) *d = half * (one + t) + half * x * (one - t * t) * k0 * (one + 3 * k1 * x2);
      return half * x * (one + t);
    }
    case GluKind::kGeluErf:
    default: {
      const acc_t cdf = half * (one + std::erf(x * static_cast<acc_t>(0.7071067811865476)));
      if (d) *d = cdf + x * static_cast<acc_t>(0.3989422804014327) * std::exp(-half * x * x);
      return x * cdf;
    }
  }
}

// Calls f(row, col, i_end_in_row) over [begin, end) of the flattened index in
// runs that stay within one row.
template <typename F>
void for_rows(int64_t rows, int64_t cols, F&& f) {
  at::parallel_for(0, rows * cols, kGrain, [&](int64_t b, int64_t e) {
    int64_t r = b / cols, c = b % cols;
    while (b < e) {
      const int64_t n = std::min(cols - c, e - b);
      f(r, c, c + n);
      b += n;
      ++r;
      c = 0;
    }
  });
}

// One GLU operand as a row matrix: its data and row stride (rows and cols are a's).
template <typename T>
struct Operand {
  T* p;
  int64_t stride;
};

template <typename T>
Operand<T> operand(const at::Tensor& t) {
  cpu::Rows r;
  TORCH_INTERNAL_ASSERT(cpu::flat_rows(t, r));
  return {static_cast<T*>(t.data_ptr()), r.stride};
}

template <typename T>
void fwd_rows(Operand<const T> a, Operand<const T> b, Operand<T> c, int64_t rows, int64_t cols,
              GluKind kind) {
  using acc_t = acc_of<T>;
  for_rows(rows, cols, [&](int64_t r, int64_t c0, int64_t c1) {
    const T* ar = a.p + r * a.stride;
    const T* br = b.p + r * b.stride;
    T* cr = c.p + r * c.stride;
    for (int64_t k = c0; k < c1; ++k)
      cr[k] = static_cast<T>(glu_act<acc_t>(kind, static_cast<acc_t>(ar[k]), nullptr) *
                             static_cast<acc_t>(br[k]));
  });
}

// da/db may be a/b (in place): every element is read before it is written.
template <typename T>
void bwd_rows(Operand<const T> g, Operand<const T> a, Operand<const T> b, Operand<T> da, Operand<T> db,
              int64_t rows, int64_t cols, GluKind kind) {
  using acc_t = acc_of<T>;
  for_rows(rows, cols, [&](int64_t r, int64_t c0, int64_t c1) {
    const T* gr = g.p + r * g.stride;
    const T* ar = a.p + r * a.stride;
    const T* br = b.p + r * b.stride;
    T* dar = da.p + r * da.stride;
    T* dbr = db.p + r * db.stride;
    for (int64_t k = c0; k < c1; ++k) {
      const acc_t gk = static_cast<acc_t>(gr[k]), bk = static_cast<acc_t>(br[k]);
      acc_t d;
      const acc_t y = glu_act<acc_t>(kind, static_cast<acc_t>(ar[k]), &d);
      dar[k] = static_cast<T>(gk * bk * d);
      dbr[k] = static_cast<T>(gk * y);
    }
  });
}

at::Tensor glu_fwd_cpu(const at::Tensor& A, const at::Tensor& B, GluKind kind) {
  check_glu_inputs(A, B, /*cuda=*/false);
  at::Tensor c = small_empty(A.sizes(), A.options());
  if (A.numel() == 0) return c;
  cpu::Rows ar, br;
  const at::Tensor a2 = cpu::as_rows(A, ar), b2 = cpu::as_rows(B, br);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, A.scalar_type(), "glu_fwd_cpu", [&] {
    fwd_rows<scalar_t>(operand<const scalar_t>(a2), operand<const scalar_t>(b2), operand<scalar_t>(c),
                       ar.rows, ar.cols, kind);
  });
  return c;
}

// The backward into da/db (which may be a/b); all row matrices of a's rows and cols.
void glu_bwd_into(const at::Tensor& dC, const at::Tensor& a2, const at::Tensor& b2, GluKind kind,
                  const at::Tensor& da2, const at::Tensor& db2) {
  cpu::Rows gr, ar;
  const at::Tensor dc2 = cpu::as_rows(dC, gr);
  cpu::flat_rows(a2, ar);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a2.scalar_type(), "glu_bwd_cpu", [&] {
    bwd_rows<scalar_t>(operand<const scalar_t>(dc2), operand<const scalar_t>(a2), operand<const scalar_t>(b2),
                       operand<scalar_t>(da2), operand<scalar_t>(db2), ar.rows, ar.cols, kind);
  });
}

std::tuple<at::Tensor, at::Tensor> glu_bwd_cpu(const at::Tensor& dC, const at::Tensor& A, const at::Tensor& B,
                                               GluKind kind) {
  check_glu_bwd(dC, A, B, /*cuda=*/false);
  at::Tensor da = small_empty(A.sizes(), A.options());
  at::Tensor db = small_empty(A.sizes(), A.options());
  if (A.numel() == 0) return {da, db};
  cpu::Rows r;
  glu_bwd_into(dC, cpu::as_rows(A, r), cpu::as_rows(B, r), kind, da, db);
  return {da, db};
}

void glu_bwd_inplace_cpu(const at::Tensor& dC, at::Tensor& A, at::Tensor& B, GluKind kind) {
  check_glu_bwd_inplace(dC, A, B, /*cuda=*/false);
  if (A.numel() > 0) glu_bwd_into(dC, A, B, kind, A, B);
  mark_written(A);
  mark_written(B);
}

at::Tensor swiglu_fwd_cpu(const at::Tensor& a, const at::Tensor& b, bool /*in_place*/) {
  return glu_fwd_cpu(a, b, GluKind::kSilu);
}
std::tuple<at::Tensor, at::Tensor> swiglu_bwd_cpu(const at::Tensor& dc, const at::Tensor& a,
                                                  const at::Tensor& b) {
  return glu_bwd_cpu(dc, a, b, GluKind::kSilu);
}
void swiglu_bwd_inplace_cpu(const at::Tensor& dc, at::Tensor& a, at::Tensor& b) {
  glu_bwd_inplace_cpu(dc, a, b, GluKind::kSilu);
}
at::Tensor geglu_fwd_cpu(const at::Tensor& a, const at::Tensor& b, c10::string_view approximate,
                         bool /*in_place*/) {
  return glu_fwd_cpu(a, b, parse_gelu_approximate(approximate));
}
std::tuple<at::Tensor, at::Tensor> geglu_bwd_cpu(const at::Tensor& dc, const at::Tensor& a,
                                                 const at::Tensor& b, c10::string_view approximate) {
  return glu_bwd_cpu(dc, a, b, parse_gelu_approximate(approximate));
}
void geglu_bwd_inplace_cpu(const at::Tensor& dc, at::Tensor& a, at::Tensor& b, c10::string_view approximate) {
  glu_bwd_inplace_cpu(dc, a, b, parse_gelu_approximate(approximate));
}

}  // namespace glu_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace glu_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("swiglu_fwd", &swiglu_fwd_cpu);
  m.impl("swiglu_bwd", &swiglu_bwd_cpu);
  m.impl("swiglu_bwd_", &swiglu_bwd_inplace_cpu);
  m.impl("geglu_fwd", &geglu_fwd_cpu);
  m.impl("geglu_bwd", &geglu_bwd_cpu);
  m.impl("geglu_bwd_", &geglu_bwd_inplace_cpu);
}

}  // namespace liger_cpp
