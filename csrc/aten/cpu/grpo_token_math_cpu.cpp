// CPU twin of GRPO's per-token math (csrc/kernels/divergence/grpo_token_math.h holds the formulas,
// shared with the CUDA kernel): a sequence at a time with at::parallel_for, the element math in
// float32 as on the GPU, the sequence sums in float64.
#include <ATen/Parallel.h>

#include "aten/checks/divergence_core.h"
#include "aten/cpu/cpu_common.h"
#include "kernels/divergence/grpo_token_math.h"

namespace liger_cpp {

void grpo_token_math_cpu(const kernels::GrpoTokenArgs& a) {
  namespace g = kernels::grpo;
  const int64_t L = a.L;
  cpu::parallel(a.S, 1, a.S * L * 16, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      double seq_sum = 0.0;
      if (g::needs_seq_pass(a.o))
        for (int64_t l = 0; l < L; ++l) seq_sum += g::seq_term(a, s, l);
      const g::Seq q = g::sequence(a, s, static_cast<float>(seq_sum));
      const float neg_inv_t = -a.o.inv_temperature;
      float* out = a.ce_scale + s * L;
      double loss = 0.0, kl = 0.0, clipped = 0.0, wdl = 0.0, wkl0 = 0.0;
      for (int64_t l = 0; l < L; ++l) {
        const g::Token t = g::token(a, q, s, l);
        g::store_token(a, t, s, l);
        loss += t.loss;
        kl += t.kl;
        clipped += t.clipped;
        wdl += t.wdl;
        wkl0 += t.wkl0;
        out[l] = a.o.seq ? t.k : t.k * neg_inv_t;
        a.nll[s * a.nll_stride + l] = g::log_prob(a, s, l);  // in place: -nll
      }
      if (a.o.seq)
        for (int64_t l = 0; l < L; ++l)
          out[l] =
              g::seq_k(a, q, out[l], static_cast<float>(wdl), static_cast<float>(wkl0), s, l) * neg_inv_t;
      a.partial[s * 3 + 0] = static_cast<float>(loss);
      a.partial[s * 3 + 1] = static_cast<float>(kl);
      a.partial[s * 3 + 2] = static_cast<float>(clipped);
    }
  });
}

void grpo_prologue_cpu(const at::Tensor& mask, const at::Tensor& given, const at::Tensor& stats) {
  const int64_t B = mask.size(0), T = mask.size(1);
  const float* m = mask.const_data_ptr<float>();
  float* st = stats.data_ptr<float>();
  double n = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    double v = 0.0;
    for (int64_t t = 0; t < T; ++t) v += m[b * T + t];
    st[b] = static_cast<float>(v);
    n += st[b];
  }
  st[B] = static_cast<float>(n);
  st[B + 1] = given.defined() ? *given.const_data_ptr<float>() : (st[B] < 1.f ? 1.f : st[B]);
}

void grpo_finish_cpu(const at::Tensor& partial, const at::Tensor& n_all, const at::Tensor& loss,
                     const at::Tensor& kl, const at::Tensor& clip) {
  const float* p = partial.const_data_ptr<float>();
  double v[3] = {0.0, 0.0, 0.0};
  for (int64_t r = 0, rows = partial.size(0); r < rows; ++r)
    for (int j = 0; j < 3; ++j) v[j] += p[r * 3 + j];
  const float n = *n_all.const_data_ptr<float>(), denom = n < 1.f ? 1.f : n;
  *loss.data_ptr<float>() = static_cast<float>(v[0]);
  *kl.data_ptr<float>() = static_cast<float>(v[1]) / denom;
  *clip.data_ptr<float>() = static_cast<float>(v[2]) / denom;
}

}  // namespace liger_cpp
