// The cross-entropy row step on the CPU (math: csrc/aten/checks/cross_entropy_core.h):
// one row at a time with at::parallel_for; row sums in float64 (a sequential
// float32 sum over 100k+ classes loses more than the GPU's tree sums),
// element-wise math in float32 (float64 for float64 logits).
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace cross_entropy_cpu_impl {

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;
using sum_t = double;

constexpr int64_t kStackCols = 256;

template <typename T>
void ce_rows_impl(const CeRows& a) {
  using acc_t = acc_of<T>;
  const int64_t rows = a.logits.size(0), V = a.logits.size(1);
  const int64_t ls_stride = a.logits.stride(0);
  const T* logits = a.logits.data_ptr<T>();
  const int64_t* target = a.target.data_ptr<int64_t>();
  const float* w = a.weight.defined() ? a.weight.data_ptr<float>() : nullptr;
  T* dl = a.dlogits.defined() ? a.dlogits.data_ptr<T>() : nullptr;
  const int64_t dl_stride = dl ? a.dlogits.stride(0) : 0;
  float* loss = a.loss.data_ptr<float>();
  float* zl = a.z_loss.defined() ? a.z_loss.data_ptr<float>() : nullptr;
  int64_t* am = a.argmax.defined() ? a.argmax.data_ptr<int64_t>() : nullptr;
  const float* ce_scale = a.ce_scale.data_ptr<float>();
  const float* z_scale = a.z_scale.data_ptr<float>();
  const int64_t cs_stride = a.ce_scale.numel() == 1 ? 0 : 1, zs_stride = a.z_scale.numel() == 1 ? 0 : 1;
  const acc_t ls = static_cast<acc_t>(a.label_smoothing), lss = static_cast<acc_t>(a.lse_square_scale);
  const acc_t sc = static_cast<acc_t>(a.softcap);
  const acc_t eps = ls / static_cast<acc_t>(V);
  sum_t wsum = static_cast<sum_t>(V);
  if (w) {
    wsum = 0;
    for (int64_t j = 0; j < V; ++j) wsum += w[j];
  }
  const acc_t nan = std::numeric_limits<acc_t>::quiet_NaN();

  at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
    // x: the (softcapped) row; ex: exp(x_j - max). Rows of up to kStackCols classes live on the
    // stack (no allocation per call at small sizes).
    acc_t stack[2 * kStackCols];
    std::vector<acc_t> heap(V > kStackCols ? 2 * V : 0);
    acc_t* x = V > kStackCols ? heap.data() : stack;
    acc_t* ex = x + (V > kStackCols ? V : kStackCols);
    for (int64_t r = b; r < e; ++r) {
      const int64_t y = target[r];
      T* dr = dl ? dl + r * dl_stride : nullptr;
      if (y == a.ignore_index || y < 0 || y >= V) {
        const bool ignored = y == a.ignore_index;
        loss[r] = ignored ? 0.f : static_cast<float>(nan);
        if (zl) zl[r] = ignored ? 0.f : static_cast<float>(nan);
        if (am) am[r] = -1;
        if (dr)
          for (int64_t j = 0; j < V; ++j) dr[j] = static_cast<T>(ignored ? acc_t(0) : nan);
        continue;
      }
      // Load (and softcap) the row; max, first argmax, and the weighted sum of x.
      const T* xr = logits + r * ls_stride;
      acc_t m = -std::numeric_limits<acc_t>::infinity();
      int64_t arg = 0;
      bool seen_nan = false;
      sum_t wx = 0;
      for (int64_t j = 0; j < V; ++j) {
        acc_t v = static_cast<acc_t>(xr[j]);
        if (sc > 0) v = sc * std::tanh(v / sc);
        x[j] = v;
        if (std::isnan(v)) seen_nan = true;
        if (v > m) {
          m = v;
          arg = j;
        }
        wx += static_cast<sum_t>(w ? w[j] : 1.f) * v;
      }
      sum_t s = 0;  // exp in the accumulation type (one per class, reused for p), summed in float64
      for (int64_t j = 0; j < V; ++j) {
        ex[j] = std::exp(x[j] - m);
        s += static_cast<sum_t>(ex[j]);
      }
      const sum_t lse_d = seen_nan ? static_cast<sum_t>(nan) : static_cast<sum_t>(m) + std::log(s);
      const acc_t lse = static_cast<acc_t>(lse_d);
      const acc_t wy = w ? w[y] : acc_t(1);
      // The loss's constants in float64 (1 - 0.1f is not 0.9): no systematic bias in the sums.
      sum_t ce = (1 - a.label_smoothing) * static_cast<sum_t>(wy) * (lse_d - x[y]);
      // Only with smoothing: a masked class (x_j = -inf) makes wx infinite, and 0 * inf is NaN.
      if (eps != 0) ce += a.label_smoothing / static_cast<sum_t>(V) * (lse_d * wsum - wx);
      const sum_t z = a.lse_square_scale * lse_d * lse_d;
      loss[r] = static_cast<float>(ce);
      if (zl) zl[r] = static_cast<float>(z);
      if (am) am[r] = arg;
      if (!dr) continue;
      const acc_t cs = ce_scale[r * cs_stride], zs = z_scale[r * zs_stride];
      // Grouped as ca * (p_j - [j == y]) + cb * (sum(w) * p_j - w_j) + zc * p_j: the target's
      // p_y - 1 is formed before any scaling or rounding (p_y near 1 cancels exactly; Liger PR
      // #1268), and the terms vanish exactly where they should (V = 1, no smoothing).
      const acc_t ca = cs * (1 - ls) * wy, cb = cs * eps, zc = zs * 2 * lss * lse;
      const acc_t ws = static_cast<acc_t>(wsum);
      // p_j = exp(x_j - m) / s, not exp(x_j - lse): x_j - m is exact near the max, where p is
      // large, whereas lse = m + log(s) rounded to the accumulation type carries an absolute error
      // of half an ulp of |lse| into every exponent.
      const acc_t inv_s = seen_nan ? nan : static_cast<acc_t>(1.0 / s);
      for (int64_t j = 0; j < V; ++j) {
        const acc_t p = ex[j] * inv_s;
        acc_t g = ca * (j == y ? p - 1 : p) + zc * p;
        if (eps != 0) g += cb * (ws * p - (w ? w[j] : acc_t(1)));
        if (sc > 0) g *= 1 - (x[j] / sc) * (x[j] / sc);
        dr[j] = static_cast<T>(g);
      }
    }
  });
}

}  // namespace cross_entropy_cpu_impl

void ce_rows_cpu(const CeRows& a) {
  if (a.logits.size(0) == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.logits.scalar_type(), "liger_ce_rows_cpu",
                                  [&] { cross_entropy_cpu_impl::ce_rows_impl<scalar_t>(a); });
}

void ce_scale_rows_cpu_(const at::Tensor& d, const at::Tensor& g) {
  const int64_t rows = d.size(0), V = d.size(1), stride = d.stride(0);
  if (rows == 0) return;
  const float* gp = g.data_ptr<float>();
  const int64_t gs = g.numel() == 1 ? 0 : 1;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, d.scalar_type(), "liger_ce_scale_rows_cpu", [&] {
    using acc_t = cross_entropy_cpu_impl::acc_of<scalar_t>;
    scalar_t* p = d.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const acc_t f = gp[r * gs];
        if (f == acc_t(1)) continue;
        scalar_t* dr = p + r * stride;
        for (int64_t j = 0; j < V; ++j) dr[j] = static_cast<scalar_t>(static_cast<acc_t>(dr[j]) * f);
      }
    });
  });
}

}  // namespace liger_cpp
