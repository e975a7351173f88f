// CPU twins of the RL / distillation row kernels (math: csrc/kernels/divergence/divergence.h):
// one row at a time with at::parallel_for, everything in float64 (row sums over 100k+ classes and
// the element math), one rounding of each output to its dtype.
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <vector>

#include "aten/checks/common.h"
#include "aten/checks/divergence_core.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace divergence_cpu_impl {

constexpr double kInf = std::numeric_limits<double>::infinity();

// (max, log sum exp(x - max)) of a row; max -inf (and log 0 = -inf) for an empty or all -inf row.
struct Lse {
  double m = -kInf, log_s = -kInf;
  double lse() const { return m + log_s; }
};

Lse row_lse(const std::vector<double>& x, int64_t n) {
  Lse r;
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    nan |= std::isnan(x[j]);
    r.m = std::max(r.m, x[j]);
  }
  if (nan) return {std::nan(""), std::nan("")};
  if (r.m == -kInf) return r;
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - r.m);
  r.log_s = std::log(s);
  return r;
}

double logaddexp(double a, double b) {
  const double m = std::max(a, b);
  if (m == -kInf) return -kInf;
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

double pdiff(double p, double a, double b) { return p > 0 ? p * (a - b) : 0.0; }

// T: the student logits, U: the teacher logits or target probabilities, O: the row losses.
template <typename T, typename U, typename O>
void distill_impl(const DistillRows& a) {
  const int64_t rows = a.s.size(0), V = a.s.size(1), Vs = a.student_cols;
  T* s_all = a.s.data_ptr<T>();
  const U* t_all = a.t.data_ptr<U>();
  const int64_t ss = a.s.stride(0), ts = a.t.stride(0);
  const int64_t* target = a.target.defined() ? a.target.data_ptr<int64_t>() : nullptr;
  O* soft_out = a.soft.data_ptr<O>();
  O* hard_out = a.hard.data_ptr<O>();
  const bool grad = a.scales.defined();
  const double cs = grad ? a.scales[0].item<double>() * a.inv_temperature : 0.0;
  const double chs = grad ? a.scales[1].item<double>() : 0.0;
  const double invT = a.inv_temperature, beta = a.beta;
  const double lb = beta > 0 ? std::log(beta) : -kInf, l1b = beta < 1 ? std::log1p(-beta) : -kInf;
  const bool cosine = a.loss == 1, kl = a.loss == 2;
  at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
    std::vector<double> raw(V), zs(V), zt(V);
    for (int64_t r = b; r < e; ++r) {
      T* s = s_all + r * ss;
      const U* t = t_all + r * ts;
      const int64_t y = target ? target[r] : -1;
      const bool valid = target == nullptr || y != a.ignore_index;
      if (!valid && (a.mask_soft || kl)) {
        soft_out[r] = hard_out[r] = static_cast<O>(0);
        if (grad)
          for (int64_t j = 0; j < V; ++j) s[j] = static_cast<T>(0);
        continue;
      }
      const bool hard = valid && target != nullptr && !kl && a.with_hard;
      for (int64_t j = 0; j < V; ++j) {
        raw[j] = static_cast<double>(s[j]);
        zs[j] = raw[j] * invT;
        zt[j] = kl ? static_cast<double>(t[j]) : static_cast<double>(t[j]) * invT;  // KL: q itself
      }
      const Lse lh = hard ? row_lse(raw, Vs) : Lse{};
      double soft = 0, K = 0, nu = 1, nv = 1, c = 0, Q = 0;
      Lse ls, lt;
      if (cosine) {
        double uu = 0, vv = 0, uv = 0;
        for (int64_t j = 0; j < V; ++j) {
          uu += zs[j] * zs[j];
          vv += zt[j] * zt[j];
          uv += zs[j] * zt[j];
        }
        nu = std::max(std::sqrt(uu), 1e-12);
        nv = std::max(std::sqrt(vv), 1e-12);
        c = uv / (nu * nv);
        soft = beta * (1 - c);
      } else if (kl) {
        ls = row_lse(zs, V);
        for (int64_t j = 0; j < V; ++j) {
          const double q = zt[j];
          Q += q;
          soft += q * (std::log(std::max(q, a.eps)) - ((zs[j] - ls.m) - ls.log_s));
        }
      } else {
        ls = row_lse(zs, V);
        lt = row_lse(zt, V);
        for (int64_t j = 0; j < V; ++j) {
          const double lS = (zs[j] - ls.m) - ls.log_s, lP = (zt[j] - lt.m) - lt.log_s;
          const double S = std::exp(lS), P = std::exp(lP);
          if (beta == 0) {
            soft += pdiff(P, lP, lS);
          } else if (beta == 1) {
            soft += pdiff(S, lS, lP);
          } else {
            const double lM = logaddexp(lP + lb, lS + l1b);
            const double ks = pdiff(S, lS, lM);
            soft += beta * pdiff(P, lP, lM) + (1 - beta) * ks;
            K += ks;
          }
        }
        if (beta == 1) K = soft;
      }
      soft_out[r] = static_cast<O>(soft);
      hard_out[r] = hard ? static_cast<O>(lh.lse() - raw[y]) : static_cast<O>(0);
      if (!grad) continue;
      const double ch = hard ? chs : 0.0;
      for (int64_t j = 0; j < V; ++j) {
        if (j >= Vs) {
          s[j] = static_cast<T>(0);
          continue;
        }
        double d;
        if (cosine) {
          d = cs * (-beta) * (zt[j] / (nu * nv) - c * zs[j] / (nu * nu));
        } else if (kl) {
          d = cs * (std::exp((zs[j] - ls.m) - ls.log_s) * Q - zt[j]);
        } else {
          const double lS = (zs[j] - ls.m) - ls.log_s, lP = (zt[j] - lt.m) - lt.log_s;
          const double S = std::exp(lS), P = std::exp(lP);
          if (beta == 0)
            d = cs * (S - P);
          else if (beta == 1)
            d = cs * (S > 0 ? S * ((lS - lP) - K) : 0.0);
          else
            d = cs * (1 - beta) * (S > 0 ? S * ((lS - logaddexp(lP + lb, lS + l1b)) - K) : 0.0);
        }
        if (ch != 0) {
          const double p = std::exp((raw[j] - lh.m) - lh.log_s);
          d += ch * (j == y ? p - 1 : p);
        }
        s[j] = static_cast<T>(d);
      }
    }
  });
}

template <typename T>
void logprob_fwd_impl(const LogprobRows& a) {
  const int64_t rows = a.z.size(0), V = a.z.size(1), zs = a.z.stride(0);
  const T* z_all = a.z.data_ptr<T>();
  const int64_t* target = a.target.data_ptr<int64_t>();
  float* logp = a.logp.data_ptr<float>();
  float* ent = a.entropy.defined() ? a.entropy.data_ptr<float>() : nullptr;
  float* stats = a.stats.defined() ? a.stats.data_ptr<float>() : nullptr;
  at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
    std::vector<double> x(V);
    for (int64_t r = b; r < e; ++r) {
      const int64_t y = target[r];
      if (y == a.ignore_index) {
        logp[r] = 0.f;
        if (ent) ent[r] = 0.f;
        if (stats) stats[2 * r] = stats[2 * r + 1] = 0.f;
        continue;
      }
      const T* z = z_all + r * zs;
      for (int64_t j = 0; j < V; ++j) x[j] = static_cast<double>(z[j]) * a.z_scale;
      const Lse l = row_lse(x, V);
      logp[r] = static_cast<float>((x[y] - l.m) - l.log_s);
      if (ent) {
        double u = 0;  // sum p (z - max)
        for (int64_t j = 0; j < V; ++j) {
          const double p = std::exp((x[j] - l.m) - l.log_s);
          if (p > 0) u += p * (x[j] - l.m);
        }
        ent[r] = static_cast<float>(l.log_s - u);
      }
      if (stats) {
        stats[2 * r] = static_cast<float>(l.m);
        stats[2 * r + 1] = static_cast<float>(l.log_s);
      }
    }
  });
}

template <typename T>
void logprob_bwd_impl(const LogprobRows& a) {
  const int64_t rows = a.z.size(0), V = a.z.size(1), zs = a.z.stride(0);
  const T* z_all = a.z.data_ptr<T>();
  T* dz_all = a.dz.defined() ? a.dz.data_ptr<T>() : a.z.data_ptr<T>();
  const int64_t dzs = a.dz.defined() ? a.dz.stride(0) : zs;
  const int64_t* target = a.target.data_ptr<int64_t>();
  const float* stats = a.stats.data_ptr<float>();
  const float* ent = a.entropy.defined() ? a.entropy.data_ptr<float>() : nullptr;
  const float* glp = a.g_lp.defined() ? a.g_lp.data_ptr<float>() : nullptr;
  const float* gent = a.g_ent.defined() ? a.g_ent.data_ptr<float>() : nullptr;
  at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* z = z_all + r * zs;
      T* dz = dz_all + r * dzs;
      const int64_t y = target[r];
      if (y == a.ignore_index) {
        for (int64_t j = 0; j < V; ++j) dz[j] = static_cast<T>(0);
        continue;
      }
      const double m = stats[2 * r], log_s = stats[2 * r + 1];
      const double gl = glp ? glp[r] * a.scale : 0.0, ge = gent ? gent[r] * a.scale : 0.0;
      const double mu = m + (log_s - (ent ? ent[r] : 0.0));
      for (int64_t j = 0; j < V; ++j) {
        const double x = static_cast<double>(z[j]) * a.z_scale;
        const double p = std::exp((x - m) - log_s);
        double d = -gl * (j == y ? p - 1 : p);
        if (ge != 0) d -= ge * p * (x - mu);
        dz[j] = static_cast<T>(d);
      }
    }
  });
}

template <typename T>
void pointwise_impl(const PointwiseDiv& a) {
  const int64_t rows = a.x.size(0), V = a.x.size(1);
  const T* x_all = a.x.data_ptr<T>();
  const T* y_all = a.y.data_ptr<T>();
  const int64_t xs = a.x.stride(0), ys = a.y.stride(0);
  const int64_t* labels = a.labels.defined() ? a.labels.data_ptr<int64_t>() : nullptr;
  float* lrows = a.loss_rows.defined() ? a.loss_rows.data_ptr<float>() : nullptr;
  float* lel = a.loss_elems.defined() ? a.loss_elems.data_ptr<float>() : nullptr;
  T* g_all = a.grad.defined() ? a.grad.data_ptr<T>() : nullptr;
  const int64_t gs = a.grad.defined() ? a.grad.stride(0) : 0;
  const double scale = a.grad.defined() ? static_cast<double>(a.grad_scale.item<float>()) : 0.0;
  const double beta = a.beta, eps = a.eps;
  at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* x = x_all + r * xs;
      const T* yv = y_all + r * ys;
      const bool ignored = labels != nullptr && labels[r] == a.ignore_index;
      double acc = 0;
      for (int64_t j = 0; j < V; ++j) {
        const double xi = static_cast<double>(x[j]), yi = static_cast<double>(yv[j]);
        double l = 0, d = 0;
        if (!ignored) {
          if (a.kind == DivKind::kJsd) {
            const double P = std::exp(yi), Q = std::exp(xi);
            if (beta == 0) {
              l = pdiff(P, yi, xi);
              d = -P;
            } else if (beta == 1) {
              l = pdiff(Q, xi, yi);
              d = l + Q;
            } else {
              const double lM = logaddexp(std::log(beta) + yi, std::log1p(-beta) + xi);
              const double lq = pdiff(Q, xi, lM);
              l = beta * pdiff(P, yi, lM) + (1 - beta) * lq;
              d = (1 - beta) * lq;
            }
          } else if (a.kind == DivKind::kKl) {
            if (a.log_target) {
              const double P = std::exp(yi);
              l = P * (yi - xi);
              d = -P;
            } else {
              l = yi * (std::log(std::max(yi, eps)) - xi);
              d = -yi;
            }
          } else {
            l = 0.5 * std::abs(xi - yi);
            d = xi > yi ? 0.5 : (xi < yi ? -0.5 : 0.0);
          }
        }
        if (lel) lel[r * V + j] = static_cast<float>(l);
        acc += l;
        if (g_all) g_all[r * gs + j] = static_cast<T>(d * scale);
      }
      if (lrows) lrows[r] = static_cast<float>(acc);
    }
  });
}

// CE + TVD of a row pair (CeTvdRows): the statistics in float64, outputs of type O (float32, or
// float64 for float64 logits).
template <typename T, typename O>
void ce_tvd_fwd_impl(const CeTvdRows& a) {
  const int64_t rows = a.s.size(0), V = a.s.size(1), ss = a.s.stride(0), ts = a.t.stride(0);
  const T* s_all = a.s.const_data_ptr<T>();
  const T* t_all = a.t.const_data_ptr<T>();
  const int64_t* target = a.target.const_data_ptr<int64_t>();
  O* ce = a.ce.data_ptr<O>();
  O* tvd = a.tvd.data_ptr<O>();
  O* st = a.stats.data_ptr<O>();
  at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
    std::vector<double> x(V), u(V);
    for (int64_t r = b; r < e; ++r) {
      const int64_t y = target[r];
      if (y == a.ignore_index) {
        ce[r] = tvd[r] = st[3 * r] = st[3 * r + 1] = st[3 * r + 2] = O(0);
        continue;
      }
      for (int64_t j = 0; j < V; ++j) {
        x[j] = static_cast<double>(s_all[r * ss + j]);
        u[j] = static_cast<double>(t_all[r * ts + j]);
      }
      const Lse ls = row_lse(x, V), lt = row_lse(u, V);
      const double lse_s = ls.m + ls.log_s, lse_t = lt.m + lt.log_s;
      double abs_sum = 0, sigma = 0;
      for (int64_t j = 0; j < V; ++j) {
        const double p = std::exp(x[j] - lse_s), q = std::exp(u[j] - lse_t);
        abs_sum += std::abs(p - q);
        sigma += p > q ? p : (p < q ? -p : 0.0);
      }
      ce[r] = static_cast<O>(lse_s - x[y]);
      tvd[r] = static_cast<O>(0.5 * abs_sum);
      st[3 * r] = static_cast<O>(lse_s);
      st[3 * r + 1] = static_cast<O>(lse_t);
      st[3 * r + 2] = static_cast<O>(sigma);
    }
  });
}

template <typename T, typename O>
void ce_tvd_bwd_impl(const CeTvdRows& a) {
  const int64_t rows = a.s.size(0), V = a.s.size(1), ss = a.s.stride(0), ts = a.t.stride(0);
  const int64_t gs = a.grad.stride(0);
  const T* s_all = a.s.const_data_ptr<T>();
  const T* t_all = a.t.const_data_ptr<T>();
  T* g_all = a.grad.data_ptr<T>();
  const int64_t* target = a.target.const_data_ptr<int64_t>();
  const O* st = a.stats.const_data_ptr<O>();
  const O* gce = a.grad_ce.defined() ? a.grad_ce.const_data_ptr<O>() : nullptr;
  const O* gtvd = a.grad_tvd.defined() ? a.grad_tvd.const_data_ptr<O>() : nullptr;
  at::parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      T* g = g_all + r * gs;
      const int64_t y = target[r];
      if (y == a.ignore_index) {
        for (int64_t j = 0; j < V; ++j) g[j] = static_cast<T>(0);
        continue;
      }
      const double c = gce ? static_cast<double>(gce[r]) : 0.0, h = gtvd ? 0.5 * gtvd[r] : 0.0;
      const double lse_s = st[3 * r], lse_t = st[3 * r + 1], sigma = st[3 * r + 2];
      for (int64_t j = 0; j < V; ++j) {
        const double p = std::exp(static_cast<double>(s_all[r * ss + j]) - lse_s);
        const double q = std::exp(static_cast<double>(t_all[r * ts + j]) - lse_t);
        const double sg = p > q ? 1.0 : (p < q ? -1.0 : 0.0);
        g[j] = static_cast<T>(c * (j == y ? p - 1 : p) + h * p * (sg - sigma));
      }
    }
  });
}

}  // namespace divergence_cpu_impl

void ce_tvd_rows_fwd_cpu(const CeTvdRows& a) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.s.scalar_type(), "liger_ce_tvd_fwd_cpu", [&] {
    if (a.ce.scalar_type() == at::kDouble)
      divergence_cpu_impl::ce_tvd_fwd_impl<scalar_t, double>(a);
    else
      divergence_cpu_impl::ce_tvd_fwd_impl<scalar_t, float>(a);
  });
}

void ce_tvd_rows_bwd_cpu(const CeTvdRows& a) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.s.scalar_type(), "liger_ce_tvd_bwd_cpu", [&] {
    if (a.stats.scalar_type() == at::kDouble)
      divergence_cpu_impl::ce_tvd_bwd_impl<scalar_t, double>(a);
    else
      divergence_cpu_impl::ce_tvd_bwd_impl<scalar_t, float>(a);
  });
}

void distill_rows_cpu(const DistillRows& a) {
  // The teacher row: the student's dtype, or (KL's target probabilities) float32 / float64; the row
  // losses: float32, or float64 (KL of float64 logits).
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.s.scalar_type(), "liger_distill_rows_cpu", [&] {
    using T = scalar_t;
    auto run = [&](auto o) {
      using O = decltype(o);
      const at::ScalarType u = a.t.scalar_type();
      if (u == a.s.scalar_type())
        divergence_cpu_impl::distill_impl<T, T, O>(a);
      else if (u == at::kFloat)
        divergence_cpu_impl::distill_impl<T, float, O>(a);
      else if (u == at::kDouble)
        divergence_cpu_impl::distill_impl<T, double, O>(a);
      else
        LIGER_FAIL("distillation rows: the teacher / target dtype ", dtype_str(u), " with logits of ",
                   dtype_str(a.s.scalar_type()), " (expected the logits' dtype, float32 or float64)");
    };
    if (a.soft.scalar_type() == at::kDouble)
      run(double{});
    else
      run(float{});
  });
}

void logprob_rows_fwd_cpu(const LogprobRows& a) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.z.scalar_type(), "liger_logprob_rows_fwd_cpu",
                                  [&] { divergence_cpu_impl::logprob_fwd_impl<scalar_t>(a); });
}

void logprob_rows_bwd_cpu(const LogprobRows& a) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.z.scalar_type(), "liger_logprob_rows_bwd_cpu",
                                  [&] { divergence_cpu_impl::logprob_bwd_impl<scalar_t>(a); });
}

void pointwise_div_cpu(const PointwiseDiv& a) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.x.scalar_type(), "liger_pointwise_div_cpu",
                                  [&] { divergence_cpu_impl::pointwise_impl<scalar_t>(a); });
}

}  // namespace liger_cpp
