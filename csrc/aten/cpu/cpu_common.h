// Helpers shared by the CPU twins (csrc/aten/cpu/*_cpu.cpp): row views computed from sizes and
// strides (no ATen view ops), parameter vectors read straight from their storage, and a
// parallel_for that runs small problems inline. At the sizes of an eager call on small tensors the
// fixed costs (dispatcher round trips of view / to / zeros / sum, thread-pool hand-offs) are most of
// a CPU op's time; the loops themselves are a few hundred nanoseconds.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <type_traits>
#include <vector>

namespace liger_cpp {
namespace cpu {

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// A (rows, cols) matrix over a tensor's data: cols = the last dimension (unit stride), rows = the
// product of the others, one row stride.
struct Rows {
  int64_t rows = 0, cols = 0, stride = 0;
};

// Whether t's elements form such a matrix without a copy; fills r when they do.
inline bool flat_rows(const at::Tensor& t, Rows& r) {
  const int64_t d = t.dim();
  r.cols = d == 0 ? 1 : t.size(-1);
  if (d > 0 && r.cols > 1 && t.stride(-1) != 1) return false;
  r.rows = r.cols > 0 ? t.numel() / r.cols : 0;
  r.stride = r.cols;
  bool found = false;
  int64_t expected = 0;
  for (int64_t i = d - 2; i >= 0; --i) {
    const int64_t n = t.size(i);
    if (n == 1) continue;
    if (!found) {
      r.stride = t.stride(i);
      expected = r.stride * n;
      found = true;
    } else if (t.stride(i) != expected) {
      return false;
    } else {
      expected *= n;
    }
  }
  return true;
}

// t itself when its elements form a row matrix, else a contiguous copy; r describes the result.
inline at::Tensor as_rows(const at::Tensor& t, Rows& r) {
  if (flat_rows(t, r)) return t;
  at::Tensor c = t.contiguous();
  flat_rows(c, r);
  return c;
}

// at::parallel_for over [0, n), inline when `work` (elements touched) is small: below about 32k
// elements a thread-pool hand-off costs more than the loop.
template <typename F>
inline void parallel(int64_t n, int64_t grain, int64_t work, const F& f) {
  if (n <= 0) return;
  if (work < (int64_t{1} << 15) || at::get_num_threads() == 1) {
    f(int64_t{0}, n);
    return;
  }
  at::parallel_for(0, n, grain, f);
}

// A 1-D parameter (N,) of any floating dtype and stride, in the accumulation type, plus `add`;
// empty without one.
template <typename acc_t>
std::vector<acc_t> param_vector(const c10::optional<at::Tensor>& t, double add = 0.0) {
  std::vector<acc_t> out;
  if (!(t.has_value() && t->defined())) return out;
  const at::Tensor& p = *t;
  const int64_t n = p.numel(), s = p.dim() == 0 ? 1 : p.stride(0);
  out.resize(n);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.scalar_type(), "liger_param_vector", [&] {
    const scalar_t* d = p.const_data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<acc_t>(d[i * s]) + static_cast<acc_t>(add);
  });
  return out;
}

// dst (contiguous, n elements, any floating dtype) = sum over blocks of partial[block * n + i], in
// block order: a deterministic reduction of per-block partial sums.
inline void sum_blocks_into(const at::Tensor& dst, const std::vector<double>& partial, int64_t blocks,
                            int64_t n) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dst.scalar_type(), "liger_sum_blocks", [&] {
    scalar_t* d = dst.data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t b = 0; b < blocks; ++b) s += partial[b * n + i];
      d[i] = static_cast<scalar_t>(s);
    }
  });
}

}  // namespace cpu
}  // namespace liger_cpp
