// RoPE / mRoPE on the CPU: loops over tokens with at::parallel_for; for each
// token the cos/sin rows are gathered once (plane per column for mRoPE) and
// applied to every head of q and k. float32 math (float64 for float64 inputs),
// one rounding to the output dtype. Same math as the CUDA kernel
// (csrc/kernels/rope/rope.h).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

#include "aten/checks/common.h"
#include "aten/checks/rope_checks.h"
#include "aten/checks/small_tensors.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace rope_cpu_impl {

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// T: q/k dtype, C: cos/sin dtype (float32 or T).
template <typename T, typename C>
void rope_rows(const RopeProblem& p, bool backward) {
  using acc_t = acc_of<T>;
  const int64_t S = p.seq, D = p.head_dim, half = D / 2;
  struct Operand {
    const T* in;
    int64_t sb, sh, ss;
    T* out;
    int64_t ob, oh, os;
    int64_t heads;
  };
  const Operand ops[2] = {
      {p.q.data_ptr<T>(), p.q.stride(0), p.q.stride(1), p.q.stride(2), p.q_out_v.data_ptr<T>(),
       p.q_out_v.stride(0), p.q_out_v.stride(1), p.q_out_v.stride(2), p.q.size(1)},
      {p.k.data_ptr<T>(), p.k.stride(0), p.k.stride(1), p.k.stride(2), p.k_out_v.data_ptr<T>(),
       p.k_out_v.stride(0), p.k_out_v.stride(1), p.k_out_v.stride(2), p.k.size(1)},
  };
  const C* cos = p.cos.data_ptr<C>();
  const C* sin = p.sin.data_ptr<C>();
  const int64_t c_sp = rope_stride(p.cos, 0), c_sb = rope_stride(p.cos, 1), c_ss = rope_stride(p.cos, 2);
  const int64_t s_sp = rope_stride(p.sin, 0), s_sb = rope_stride(p.sin, 1), s_ss = rope_stride(p.sin, 2);
  const int64_t s0 = p.section0, s01 = p.section0 + p.section1;
  const int64_t per_token = std::max<int64_t>(1, (ops[0].heads + ops[1].heads) * D);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / per_token);

  at::parallel_for(0, p.batch * S, grain, [&](int64_t t0, int64_t t1) {
    // c, sn: this token's cos/sin rows; in the backward sn holds the transposed
    // rotation's sines (sn[j] = -sin[j+h], sn[j+h] = -sin[j]), so one loop does both.
    std::vector<acc_t> c(D), sn(D);
    for (int64_t tok = t0; tok < t1; ++tok) {
      const int64_t b = tok / S, s = tok % S;
      for (int64_t j = 0; j < D; ++j) {
        const int64_t jj = j < half ? j : j - half;
        const int64_t plane = jj < s0 ? 0 : (jj < s01 ? 1 : 2);
        c[j] = static_cast<acc_t>(cos[plane * c_sp + b * c_sb + s * c_ss + j]);
        sn[j] = static_cast<acc_t>(sin[plane * s_sp + b * s_sb + s * s_ss + j]);
      }
      if (backward)
        for (int64_t j = 0; j < half; ++j) {
          const acc_t lo = sn[j];
          sn[j] = -sn[j + half];
          sn[j + half] = -lo;
        }
      for (const Operand& o : ops) {
        for (int64_t hd = 0; hd < o.heads; ++hd) {
          const T* x = o.in + b * o.sb + hd * o.sh + s * o.ss;
          T* y = o.out + b * o.ob + hd * o.oh + s * o.os;
          for (int64_t j = 0; j < half; ++j) {
            const acc_t x0 = static_cast<acc_t>(x[j]), x1 = static_cast<acc_t>(x[j + half]);
            y[j] = static_cast<T>(x0 * c[j] - x1 * sn[j]);
            y[j + half] = static_cast<T>(x1 * c[j + half] + x0 * sn[j + half]);
          }
        }
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> rope_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                            const at::Tensor& sin, int64_t unsqueeze_dim,
                                            const c10::IntArrayRef* sections, bool backward) {
  const char* qn = backward ? "dq_out" : "q";
  const char* kn = backward ? "dk_out" : "k";
  const RopeProblem p = prepare_rope(q, k, cos, sin, unsqueeze_dim, sections, /*cuda=*/false, qn, kn);
  if (p.batch * p.seq == 0) return {p.q_out, p.k_out};
  const bool cs_float = p.cos.scalar_type() == at::kFloat;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.q.scalar_type(), "rope_cpu", [&] {
    if (cs_float)
      rope_rows<scalar_t, float>(p, backward);
    else
      rope_rows<scalar_t, scalar_t>(p, backward);
  });
  return {p.q_out, p.k_out};
}

std::tuple<at::Tensor, at::Tensor> rope_fwd_cpu(const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& cos, const at::Tensor& sin,
                                                int64_t unsqueeze_dim) {
  return rope_cpu(q, k, cos, sin, unsqueeze_dim, nullptr, false);
}
std::tuple<at::Tensor, at::Tensor> rope_bwd_cpu(const at::Tensor& dq, const at::Tensor& dk,
                                                const at::Tensor& cos, const at::Tensor& sin,
                                                int64_t unsqueeze_dim) {
  return rope_cpu(dq, dk, cos, sin, unsqueeze_dim, nullptr, true);
}
std::tuple<at::Tensor, at::Tensor> mrope_fwd_cpu(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& cos, const at::Tensor& sin,
                                                 c10::IntArrayRef mrope_section, int64_t unsqueeze_dim) {
  return rope_cpu(q, k, cos, sin, unsqueeze_dim, &mrope_section, false);
}
std::tuple<at::Tensor, at::Tensor> mrope_bwd_cpu(const at::Tensor& dq, const at::Tensor& dk,
                                                 const at::Tensor& cos, const at::Tensor& sin,
                                                 c10::IntArrayRef mrope_section, int64_t unsqueeze_dim) {
  return rope_cpu(dq, dk, cos, sin, unsqueeze_dim, &mrope_section, true);
}

}  // namespace rope_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace rope_cpu_impl;  // NOLINT(build/namespaces)

  m.impl("rope_fwd", &rope_fwd_cpu);
  m.impl("rope_bwd", &rope_bwd_cpu);
  m.impl("mrope_fwd", &mrope_fwd_cpu);
  m.impl("mrope_bwd", &mrope_bwd_cpu);
}

}  // namespace liger_cpp
