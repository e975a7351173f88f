// DyT on the CPU: the CUDA kernels' maths (csrc/kernels/dyt/dyt.h) as loops with cpu::parallel;
// float32 element-wise maths (float64 for float64), the parameter gradients as float64 sums over
// fixed blocks of rows added in block order (deterministic).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "aten/checks/dyt_checks.h"
#include "aten/cpu/cpu_common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace dyt_cpu_impl {

using Opt = std::optional<at::Tensor>;
using Quad = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Rows a block of the backward's partial sums: at least 64, at most 256 blocks.
int64_t rows_per_block(int64_t rows) { return std::max<int64_t>(64, (rows + 255) / 256); }

at::Tensor dyt_fwd_cpu(const at::Tensor& X, const at::Tensor& alpha, const at::Tensor& gamma,
                       const Opt& beta) {
  check_dyt_inputs(X, alpha, gamma, beta, /*cuda=*/false);
  const at::Tensor x = X.contiguous();
  at::Tensor y = at::empty(X.sizes(), X.options());
  const int64_t cols = x.size(-1), rows = cols > 0 ? x.numel() / cols : 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "dyt_fwd_cpu", [&] {
    using acc_t = cpu::acc_of<scalar_t>;
    const acc_t a = cpu::param_vector<acc_t>(alpha)[0];
    const std::vector<acc_t> g = cpu::param_vector<acc_t>(gamma), b = cpu::param_vector<acc_t>(beta);
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    cpu::parallel(rows, 16, rows * cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const acc_t v =
              g[c] * std::tanh(a * static_cast<acc_t>(xp[r * cols + c])) + (b.empty() ? acc_t(0) : b[c]);
          yp[r * cols + c] = static_cast<scalar_t>(v);
        }
    });
  });
  return y;
}

Quad dyt_bwd_cpu(const at::Tensor& dY, const at::Tensor& X, const at::Tensor& alpha, const at::Tensor& gamma,
                 const Opt& beta) {
  check_dyt_inputs(X, alpha, gamma, beta, /*cuda=*/false);
  check_grad_like(dY, X);
  const at::Tensor x = X.contiguous(), dy = dY.contiguous();
  at::Tensor dx = at::empty(X.sizes(), X.options());
  const bool has_beta = beta.has_value() && beta->defined();
  at::Tensor dalpha = at::empty(alpha.sizes(), alpha.options()),
             dgamma = at::empty(gamma.sizes(), gamma.options());
  at::Tensor dbeta = at::empty(gamma.sizes(), has_beta ? beta->options() : gamma.options());
  const int64_t cols = x.size(-1), rows = cols > 0 ? x.numel() / cols : 0;
  const int64_t per = rows_per_block(rows), blocks = (rows + per - 1) / per;
  std::vector<double> pg(blocks * cols, 0.0), pb(blocks * cols, 0.0), pa(blocks, 0.0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, X.scalar_type(), "dyt_bwd_cpu", [&] {
    using acc_t = cpu::acc_of<scalar_t>;
    const acc_t a = cpu::param_vector<acc_t>(alpha)[0];
    const std::vector<acc_t> g = cpu::param_vector<acc_t>(gamma);
    const scalar_t *xp = x.const_data_ptr<scalar_t>(), *gp = dy.const_data_ptr<scalar_t>();
    scalar_t* dp = dx.data_ptr<scalar_t>();
    cpu::parallel(blocks, 1, rows * cols, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        double* sg = pg.data() + blk * cols;
        double* sb = pb.data() + blk * cols;
        double sa = 0.0;
        const int64_t r_end = std::min(rows, (blk + 1) * per);
        for (int64_t r = blk * per; r < r_end; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const acc_t xv = static_cast<acc_t>(xp[r * cols + c]), gv = static_cast<acc_t>(gp[r * cols + c]);
            const acc_t t = std::tanh(a * xv), d = acc_t(1) - t * t, gd = gv * g[c];
            dp[r * cols + c] = static_cast<scalar_t>(gd * a * d);
            sg[c] += static_cast<double>(gv * t);
            sb[c] += static_cast<double>(gv);
            sa += static_cast<double>(gd * xv * d);
          }
        pa[blk] = sa;
      }
    });
  });
  cpu::sum_blocks_into(dgamma, pg, blocks, cols);
  cpu::sum_blocks_into(dbeta, pb, blocks, cols);
  cpu::sum_blocks_into(dalpha, pa, blocks, 1);
  return {dx, dalpha, dgamma, dbeta};
}

}  // namespace dyt_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace dyt_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("dyt_fwd", &dyt_fwd_cpu);
  m.impl("dyt_bwd", &dyt_bwd_cpu);
}

}  // namespace liger_cpp
