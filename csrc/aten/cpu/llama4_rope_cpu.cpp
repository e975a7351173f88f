// Llama 4 complex RoPE on the CPU: the CUDA kernel's math (csrc/kernels/rope/llama4_rope.h) over
// (b, s) rows with at::parallel_for; float32 math (float64 for float64), one rounding.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <type_traits>

#include "aten/checks/llama4_rope_checks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace llama4_rope_cpu_impl {

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T, typename F>
void rotate_rows(const Llama4RopeProblem& p, const at::Tensor& in, const at::Tensor& out, bool conj) {
  using acc_t = acc_of<T>;
  const int64_t heads = in.size(2), P = p.pairs;
  if (heads == 0) return;
  const T* x = in.data_ptr<T>();
  T* o = out.data_ptr<T>();
  const F* f = p.freqs.data_ptr<F>();
  const int64_t xb = in.stride(0), xs = in.stride(1), xh = in.stride(2);
  const int64_t ob = out.stride(0), os = out.stride(1), oh = out.stride(2);
  const int64_t fb = llama4_stride(p.freqs, 0), fs = p.freqs.stride(1);
  const acc_t sign = conj ? acc_t(-1) : acc_t(1);
  at::parallel_for(0, p.batch * p.seq, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / p.seq, s = r % p.seq;
      const F* fr = f + b * fb + s * fs;
      for (int64_t h = 0; h < heads; ++h) {
        const T* xr = x + b * xb + s * xs + h * xh;
        T* orow = o + b * ob + s * os + h * oh;
        for (int64_t j = 0; j < P; ++j) {
          const acc_t a = static_cast<acc_t>(xr[2 * j]), bb = static_cast<acc_t>(xr[2 * j + 1]);
          const acc_t c = static_cast<acc_t>(fr[2 * j]), sn = sign * static_cast<acc_t>(fr[2 * j + 1]);
          orow[2 * j] = static_cast<T>(a * c - bb * sn);
          orow[2 * j + 1] = static_cast<T>(a * sn + bb * c);
        }
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> llama4_rope_cpu(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& freqs, bool heads_first, bool conj,
                                                   const char* qn, const char* kn) {
  const Llama4RopeProblem p = prepare_llama4_rope(q, k, freqs, heads_first, /*cuda=*/false, qn, kn);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "llama4_rope_cpu", [&] {
    if (p.freqs.scalar_type() == at::kDouble) {
      rotate_rows<scalar_t, double>(p, p.q, p.q_out_v, conj);
      rotate_rows<scalar_t, double>(p, p.k, p.k_out_v, conj);
    } else {
      rotate_rows<scalar_t, float>(p, p.q, p.q_out_v, conj);
      rotate_rows<scalar_t, float>(p, p.k, p.k_out_v, conj);
    }
  });
  return {p.q_out, p.k_out};
}

std::tuple<at::Tensor, at::Tensor> llama4_rope_fwd_cpu(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& freqs, bool heads_first) {
  return llama4_rope_cpu(q, k, freqs, heads_first, /*conj=*/false, "q", "k");
}

std::tuple<at::Tensor, at::Tensor> llama4_rope_bwd_cpu(const at::Tensor& dq, const at::Tensor& dk,
                                                       const at::Tensor& freqs, bool heads_first) {
  return llama4_rope_cpu(dq, dk, freqs, heads_first, /*conj=*/true, "dq_out", "dk_out");
}

}  // namespace llama4_rope_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace llama4_rope_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("llama4_rope_fwd", &llama4_rope_fwd_cpu);
  m.impl("llama4_rope_bwd", &llama4_rope_bwd_cpu);
}

}  // namespace liger_cpp
