// liger::moe_experts_{fwd,bwd} on the CPU: the orchestration of csrc/aten/composite/moe_experts_flow.h
// with plain loops (the routing's stable counting sort, the activation, the combine) and one at::mm
// per expert. float32 math (float64 for float64), one rounding per output, as the CUDA kernels.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <type_traits>
#include <vector>

#include "aten/composite/moe_experts_flow.h"

namespace liger_cpp {
namespace moe_experts_cpu_impl {

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The activation and its partial derivatives (csrc/kernels/moe/moe.h states them).
template <typename A>
void act_eval(MoeActivation act, A g, A u, A alpha, A limit, A& a, A& dg, A& du) {
  if (act == MoeActivation::kGptOss) {
    const bool g_in = !(g > limit);
    const A gc = g_in ? g : limit;
    const bool u_in = !(u > limit) && !(u < -limit);
    const A uc = u > limit ? limit : (u < -limit ? -limit : u);
    const A s = A(1) / (A(1) + std::exp(-alpha * gc));
    const A glu = gc * s;
    a = (uc + A(1)) * glu;
    dg = g_in ? (uc + A(1)) * (s + alpha * gc * s * (A(1) - s)) : A(0);
    du = u_in ? glu : A(0);
    return;
  }
  A f, fd;
  if (act == MoeActivation::kSilu) {
    const A s = A(1) / (A(1) + std::exp(-g));
    f = g * s;
    fd = s * (A(1) + g * (A(1) - s));
  } else {
    const A c = A(0.7978845608028654), q = A(0.044715);
    const A t = std::tanh(c * (g + q * g * g * g));
    f = A(0.5) * g * (A(1) + t);
    fd = A(0.5) * (A(1) + t) + A(0.5) * g * (A(1) - t * t) * c * (A(1) + A(3) * q * g * g);
  }
  a = f * u;
  dg = fd * u;
  du = f;
}

struct CpuBackend {
  static constexpr bool kCuda = false;
  struct Guard {
    explicit Guard(const c10::Device&) {}
  };
  static at::ScalarType weight_dtype(const at::Tensor& h) {
    return h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  }

  static void routing(const at::Tensor& idx, int64_t E, MoeRouting& R) {
    check_moe_index_range(idx, E);
    const at::Tensor e64 = idx.to(at::kLong).view({-1});
    const int64_t S = e64.numel();
    const int64_t* ep = e64.data_ptr<int64_t>();
    auto opt = idx.options().dtype(at::kInt);
    R.offsets = at::empty({E}, opt);
    R.sorted_slot = at::empty({S}, opt);
    R.slot_row = at::empty({S}, opt);
    R.sorted_expert = at::empty({S}, opt);
    std::vector<int64_t> next(E + 1, 0);
    for (int64_t s = 0; s < S; ++s) ++next[ep[s] + 1];
    int32_t* off = R.offsets.data_ptr<int32_t>();
    for (int64_t e = 0; e < E; ++e) {
      next[e + 1] += next[e];
      off[e] = static_cast<int32_t>(next[e + 1]);
    }
    int32_t *ss = R.sorted_slot.data_ptr<int32_t>(), *sr = R.slot_row.data_ptr<int32_t>(),
            *se = R.sorted_expert.data_ptr<int32_t>();
    for (int64_t s = 0; s < S; ++s) {  // slot order: the sort is stable
      const int64_t r = next[ep[s]]++;
      ss[r] = static_cast<int32_t>(s);
      sr[s] = static_cast<int32_t>(r);
      se[r] = static_cast<int32_t>(ep[s]);
    }
  }

  static at::Tensor gather(const at::Tensor& src, const MoeRouting& R, int64_t k) {
    const at::Tensor tok = at::floor_divide(R.sorted_slot.to(at::kLong), k);
    return src.index_select(0, tok);
  }

  static at::Tensor gmm(const at::Tensor& a, const at::Tensor& w, const MoeRouting& R) {
    at::Tensor out = at::zeros({a.size(0), w.size(2)}, a.options());
    const int32_t* off = R.offsets.data_ptr<int32_t>();
    int64_t begin = 0;
    for (int64_t e = 0; e < w.size(0); ++e) {
      const int64_t end = off[e];
      if (end > begin) out.slice(0, begin, end).copy_(at::mm(a.slice(0, begin, end), w[e]));
      begin = end;
    }
    return out;
  }

  static at::Tensor gmm_wgrad(const at::Tensor& at_, const at::Tensor& b, const MoeRouting& R) {
    const int64_t E = R.offsets.size(0);
    at::Tensor out = at::zeros({E, at_.size(0), b.size(1)}, b.options());
    const int32_t* off = R.offsets.data_ptr<int32_t>();
    int64_t begin = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t end = off[e];
      if (end > begin) out[e].copy_(at::mm(at_.slice(1, begin, end), b.slice(0, begin, end)));
      begin = end;
    }
    return out;
  }

  static at::Tensor act_fwd(const at::Tensor& gu, const at::Tensor& bias, const MoeRouting& R,
                            const MoeOpts& o) {
    const int64_t S = gu.size(0), I = o.I;
    at::Tensor out = at::zeros({S, I}, gu.options());
    const at::Tensor g = gu.contiguous();
    const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gu.scalar_type(), "moe_act_fwd_cpu", [&] {
      using A = acc_of<scalar_t>;
      const scalar_t* gp = g.data_ptr<scalar_t>();
      const scalar_t* bp = b.defined() ? b.data_ptr<scalar_t>() : nullptr;
      scalar_t* op = out.data_ptr<scalar_t>();
      const int32_t* se = R.sorted_expert.data_ptr<int32_t>();
      at::parallel_for(0, S, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t e = se[r];
          for (int64_t i = 0; i < I; ++i) {
            const int64_t gi = o.interleaved ? 2 * i : i, ui = o.interleaved ? 2 * i + 1 : I + i;
            A gv = static_cast<A>(gp[r * 2 * I + gi]), uv = static_cast<A>(gp[r * 2 * I + ui]);
            if (bp) {
              gv += static_cast<A>(bp[e * 2 * I + gi]);
              uv += static_cast<A>(bp[e * 2 * I + ui]);
            }
            A a, dg, du;
            act_eval<A>(o.act, gv, uv, A(o.alpha), A(o.limit), a, dg, du);
            op[r * I + i] = static_cast<scalar_t>(a);
          }
        }
      });
    });
    return out;
  }

  static void act_bwd(const at::Tensor& gu_, const at::Tensor& bias_, const at::Tensor& d_act_,
                      const at::Tensor& w32, const at::Tensor& grows_, const at::Tensor& down_bias_,
                      const MoeRouting& R, const MoeOpts& o, at::Tensor& d_gu, at::Tensor& act_w,
                      at::Tensor& dw32) {
    const int64_t S = gu_.size(0), I = o.I, H = grows_.size(1);
    const at::Tensor gu = gu_.contiguous(), da = d_act_.contiguous(), grows = grows_.contiguous();
    const at::Tensor bias = bias_.defined() ? bias_.contiguous() : bias_;
    const at::Tensor dbias = down_bias_.defined() ? down_bias_.contiguous() : down_bias_;
    d_gu = at::empty({S, 2 * I}, gu.options());
    act_w = at::empty({S, I}, gu.options());
    dw32 = at::empty({S}, w32.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gu.scalar_type(), "moe_act_bwd_cpu", [&] {
      using A = acc_of<scalar_t>;
      using W = A;  // w32 is float32 (float64 for float64)
      const scalar_t* gp = gu.data_ptr<scalar_t>();
      const scalar_t* bp = bias.defined() ? bias.data_ptr<scalar_t>() : nullptr;
      const scalar_t* dap = da.data_ptr<scalar_t>();
      const scalar_t* grp = grows.data_ptr<scalar_t>();
      const scalar_t* dbp = dbias.defined() ? dbias.data_ptr<scalar_t>() : nullptr;
      const W* wp = w32.data_ptr<W>();
      scalar_t* dgp = d_gu.data_ptr<scalar_t>();
      scalar_t* awp = act_w.data_ptr<scalar_t>();
      W* dwp = dw32.data_ptr<W>();
      const int32_t* se = R.sorted_expert.data_ptr<int32_t>();
      const int32_t* ss = R.sorted_slot.data_ptr<int32_t>();
      at::parallel_for(0, S, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t e = se[r], slot = ss[r];
          const A w = static_cast<A>(wp[slot]);
          A dot = 0;
          for (int64_t i = 0; i < I; ++i) {
            const int64_t gi = o.interleaved ? 2 * i : i, ui = o.interleaved ? 2 * i + 1 : I + i;
            A gv = static_cast<A>(gp[r * 2 * I + gi]), uv = static_cast<A>(gp[r * 2 * I + ui]);
            if (bp) {
              gv += static_cast<A>(bp[e * 2 * I + gi]);
              uv += static_cast<A>(bp[e * 2 * I + ui]);
            }
            A a, dg, du;
            act_eval<A>(o.act, gv, uv, A(o.alpha), A(o.limit), a, dg, du);
            const A d = static_cast<A>(dap[r * I + i]);
            dot += d * a;
            dgp[r * 2 * I + gi] = static_cast<scalar_t>(w * d * dg);
            dgp[r * 2 * I + ui] = static_cast<scalar_t>(w * d * du);
            awp[r * I + i] = static_cast<scalar_t>(w * a);
          }
          if (dbp)
            for (int64_t h = 0; h < H; ++h)
              dot += static_cast<A>(grp[r * H + h]) * static_cast<A>(dbp[e * H + h]);
          dwp[slot] = static_cast<W>(dot);
        }
      });
    });
  }

  static at::Tensor combine(const at::Tensor& y_, const at::Tensor& w32, const at::Tensor& bias_,
                            const MoeRouting& R, int64_t T, int64_t k) {
    const int64_t C = y_.size(1);
    const at::Tensor y = y_.contiguous();
    const at::Tensor bias = bias_.defined() ? bias_.contiguous() : bias_;
    at::Tensor out = at::empty({T, C}, y.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, y.scalar_type(), "moe_combine_cpu", [&] {
      using A = acc_of<scalar_t>;
      const scalar_t* yp = y.data_ptr<scalar_t>();
      const scalar_t* bp = bias.defined() ? bias.data_ptr<scalar_t>() : nullptr;
      const A* wp = w32.defined() ? w32.data_ptr<A>() : nullptr;
      scalar_t* op = out.data_ptr<scalar_t>();
      const int32_t* sr = R.slot_row.data_ptr<int32_t>();
      const int32_t* se = R.sorted_expert.data_ptr<int32_t>();
      at::parallel_for(0, T, 4, [&](int64_t t0, int64_t t1) {
        std::vector<A> acc(C);
        for (int64_t t = t0; t < t1; ++t) {
          std::fill(acc.begin(), acc.end(), A(0));
          for (int64_t j = 0; j < k; ++j) {
            const int64_t s = t * k + j, r = sr[s], e = se[r];
            const A c = wp ? wp[s] : A(1);
            for (int64_t h = 0; h < C; ++h) {
              A v = static_cast<A>(yp[r * C + h]);
              if (bp) v += static_cast<A>(bp[e * C + h]);
              acc[h] += c * v;
            }
          }
          for (int64_t h = 0; h < C; ++h) op[t * C + h] = static_cast<scalar_t>(acc[h]);
        }
      });
    });
    return out;
  }

  static at::Tensor segsum(const at::Tensor& m_, const at::Tensor& w32, const MoeRouting& R) {
    const int64_t E = R.offsets.size(0), C = m_.size(1);
    const at::Tensor m = m_.contiguous();
    at::Tensor out = at::empty({E, C}, m.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, m.scalar_type(), "moe_segsum_cpu", [&] {
      using A = acc_of<scalar_t>;
      const scalar_t* mp = m.data_ptr<scalar_t>();
      const A* wp = w32.defined() ? w32.data_ptr<A>() : nullptr;
      scalar_t* op = out.data_ptr<scalar_t>();
      const int32_t* off = R.offsets.data_ptr<int32_t>();
      const int32_t* ss = R.sorted_slot.data_ptr<int32_t>();
      at::parallel_for(0, E, 1, [&](int64_t e0, int64_t e1) {
        std::vector<A> acc(C);
        for (int64_t e = e0; e < e1; ++e) {
          std::fill(acc.begin(), acc.end(), A(0));
          for (int64_t r = e ? off[e - 1] : 0; r < off[e]; ++r) {
            const A c = wp ? wp[ss[r]] : A(1);
            for (int64_t h = 0; h < C; ++h) acc[h] += c * static_cast<A>(mp[r * C + h]);
          }
          for (int64_t h = 0; h < C; ++h) op[e * C + h] = static_cast<scalar_t>(acc[h]);
        }
      });
    });
    return out;
  }
};

MoeFwdOut moe_experts_fwd_cpu(const at::Tensor& hidden, const at::Tensor& top_k_index,
                              const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                              const at::Tensor& down_proj, const c10::optional<at::Tensor>& gate_up_bias,
                              const c10::optional<at::Tensor>& down_bias, c10::string_view activation,
                              bool transposed, bool interleaved, double alpha, double limit) {
  return moe_experts_fwd_flow<CpuBackend>(
      hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
      std::string_view(activation.data(), activation.size()), transposed, interleaved, alpha, limit);
}

MoeBwdOut moe_experts_bwd_cpu(const at::Tensor& grad_out, const at::Tensor& hidden,
                              const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                              const at::Tensor& down_proj, const c10::optional<at::Tensor>& gate_up_bias,
                              const c10::optional<at::Tensor>& down_bias, const at::Tensor& gate_up,
                              const at::Tensor& offsets, const at::Tensor& sorted_slot,
                              const at::Tensor& slot_row, const at::Tensor& sorted_expert,
                              c10::string_view activation, bool transposed, bool interleaved, double alpha,
                              double limit, bool compute_dx, bool compute_experts) {
  return moe_experts_bwd_flow<CpuBackend>(
      grad_out, hidden, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, gate_up, offsets,
      sorted_slot, slot_row, sorted_expert, std::string_view(activation.data(), activation.size()),
      transposed, interleaved, alpha, limit, compute_dx, compute_experts);
}

}  // namespace moe_experts_cpu_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace moe_experts_cpu_impl;  // NOLINT(build/namespaces)
  m.impl("moe_experts_fwd", &moe_experts_fwd_cpu);
  m.impl("moe_experts_bwd", &moe_experts_bwd_cpu);
}

}  // namespace liger_cpp
