// Paired preference losses (DPO and its variants, ORPO, CPO, SimPO) fused with
// the lm_head and chunked over pairs, as Liger's chunked_loss: the (2B*T x V)
// logits never exist at once. Device-generic orchestration: ATen GEMMs (cuBLAS
// on CUDA) and the cross-entropy row step (csrc/aten/checks/cross_entropy_core.h).
//
// Layout (Liger's): input [2B, T, H], chosen sequences 0..B-1 stacked over the
// rejected ones B..2B-1; target [2B, T]. Per-token log-prob logp_t = -(lse -
// x_y) is the row step's loss; the gradient of sum_t k_t * logp_t w.r.t. the
// logits is k_t * (onehot - p) = -k_t * (p - onehot): the row step's gradient
// with ce_scale = -k_t. Per chunk of pairs [p0, p1) (rows of chosen p0..p1-1
// then rejected B+p0..B+p1-1 in one reused logits buffer):
//   ref logits (no grad) -> row step -> per-sequence reference logps
//   policy logits        -> row step (no grad) -> per-sequence logps s = sum_t w_t logp_t
//                           (w_t = mask_t, or mask_t / len with average_log_prob)
//   pair loss L(s_c, s_r) and dL/ds (closed forms below, tiny device tensors)
//   k_t = dL/ds / n_pairs * w_t - [chosen] alpha * mask_t / N_chosen (NLL term)
//   row step again on the same logits with ce_scale = -k_t, in place -> dlogits
//   dX rows = dlogits @ W, dW += dlogits^T @ x, dB += column sums
// All normalisers stay device tensors: no host synchronisation on CUDA.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/linear_chunks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_preference_impl {

enum class Pref {
  kSigmoid,
  kIpo,
  kHinge,
  kExoPair,
  kNcaPair,
  kRobust,
  kBcoPair,
  kSppoHard,
  kApoZero,
  kApoDown,
  kDiscopop,
  kOrpo,
  kCpo,
  kSimpo
};

Pref parse_loss_type(std::string_view s) {
  static const std::pair<const char*, Pref> names[] = {
      {"sigmoid", Pref::kSigmoid},   {"ipo", Pref::kIpo},
      {"hinge", Pref::kHinge},       {"exo_pair", Pref::kExoPair},
      {"nca_pair", Pref::kNcaPair},  {"robust", Pref::kRobust},
      {"bco_pair", Pref::kBcoPair},  {"sppo_hard", Pref::kSppoHard},
      {"apo_zero", Pref::kApoZero},  {"apo_down", Pref::kApoDown},
      {"discopop", Pref::kDiscopop}, {"orpo", Pref::kOrpo},
      {"cpo", Pref::kCpo},           {"simpo", Pref::kSimpo}};
  for (const auto& [n, p] : names)
    if (s == n) return p;
  LIGER_FAIL(
      "argument 'loss_type': expected one of sigmoid, ipo, hinge, exo_pair, nca_pair, robust, bco_pair, ",
      "sppo_hard, apo_zero, apo_down, discopop (DPO), orpo, cpo, simpo, got '", s, "'");
}

struct PairOpts {
  Pref type = Pref::kSigmoid;
  double beta = 0.1, label_smoothing = 0.0, gamma = 0.5, tau = 0.05;
};

struct PairOut {
  at::Tensor losses;    // [P] per-pair loss (before / n_pairs)
  at::Tensor dc, dr;    // [P] d losses / d chosen_logps, d rejected_logps
  at::Tensor rc, rr;    // [P] chosen / rejected rewards
  at::Tensor ratio;     // ORPO: [P] logsigmoid(log_odds), else undefined
  at::Tensor log_odds;  // ORPO: [P] log_odds, else undefined
};

at::Tensor logsig(const at::Tensor& x) { return at::log_sigmoid(x); }

// Per-pair loss and its derivatives. c, r: policy sequence logps; ref_c, ref_r:
// the reference model's (zeros without one). The formulas are Liger's (DPO
// family, ORPO, CPO, SimPO) and TRL's for ipo.
PairOut pair_math(const PairOpts& o, const at::Tensor& c, const at::Tensor& r, const at::Tensor& ref_c,
                  const at::Tensor& ref_r) {
  PairOut out;
  const double b = o.beta, ls = o.label_smoothing;
  if (o.type == Pref::kOrpo) {
    // log_odds = (c - r) - (log1p(-e^c) - log1p(-e^r)); loss = -beta logsigmoid(log_odds)
    const at::Tensor lo = (c - r) - (at::log1p(-at::exp(c)) - at::log1p(-at::exp(r)));
    out.losses = -b * logsig(lo);
    const at::Tensor g = -b * at::sigmoid(-lo);  // d loss / d lo
    // d lo / dc = 1 / (1 - e^c) = -1 / expm1(c)
    out.dc = g * (-1.0 / at::expm1(c));
    out.dr = g * (1.0 / at::expm1(r));
    out.rc = b * c;
    out.rr = b * r;
    out.ratio = logsig(lo);
    out.log_odds = lo;
    return out;
  }
  if (o.type == Pref::kCpo || o.type == Pref::kSimpo) {
    const at::Tensor d = b * (c - r) - (o.type == Pref::kSimpo ? o.gamma : 0.0);
    out.losses = -(1.0 - ls) * logsig(d) - ls * logsig(-d);
    const at::Tensor g = -(1.0 - ls) * at::sigmoid(-d) + ls * at::sigmoid(d);
    out.dc = b * g;
    out.dr = -b * g;
    out.rc = b * c;
    out.rr = b * r;
    return out;
  }
  // The DPO family: log-ratios against the reference model.
  const at::Tensor cl = c - ref_c, rl = r - ref_r;
  const at::Tensor a = b * cl, bb = b * rl;  // chosen / rejected rewards
  const at::Tensor d = a - bb;               // logits_diff = beta * (cl - rl)
  out.rc = a;
  out.rr = bb;
  at::Tensor gd;  // d loss / d d, for the types that depend on d only
  switch (o.type) {
    case Pref::kSigmoid:
      out.losses = -logsig(d);
      gd = -at::sigmoid(-d);
      break;
    case Pref::kIpo: {
      // TRL: (logits - 1 / (2 beta))^2 with logits = cl - rl (no beta inside).
      const at::Tensor h = (cl - rl) - 1.0 / (2.0 * b);
      out.losses = h * h;
      out.dc = 2.0 * h;
      out.dr = -2.0 * h;
      return out;
    }
    case Pref::kHinge:
      out.losses = at::relu(1.0 - d);
      gd = -(d < 1.0).to(d.scalar_type());  // relu'(0) = 0, as PyTorch's
      break;
    case Pref::kExoPair:
      // sigma(d)(logsig(d) - log(1-eps)) + sigma(-d)(logsig(-d) - log eps);
      // derivative sigma(d) sigma(-d) (d - log(1-eps) + log eps).
      out.losses =
          at::sigmoid(d) * (logsig(d) - std::log1p(-ls)) + at::sigmoid(-d) * (logsig(-d) - std::log(ls));
      gd = at::sigmoid(d) * at::sigmoid(-d) * (d - std::log1p(-ls) + std::log(ls));
      break;
    case Pref::kNcaPair:
      out.losses = -logsig(a) - 0.5 * logsig(-a) - 0.5 * logsig(-bb);
      out.dc = b * (-at::sigmoid(-a) + 0.5 * at::sigmoid(a));
      out.dr = b * (0.5 * at::sigmoid(bb));
      return out;
    case Pref::kRobust:
      out.losses = (-(1.0 - ls) * logsig(d) + ls * logsig(-d)) / (1.0 - 2.0 * ls);
      gd = -((1.0 - ls) * at::sigmoid(-d) + ls * at::sigmoid(d)) / (1.0 - 2.0 * ls);
      break;
    case Pref::kBcoPair:
      out.losses = -logsig(a) - logsig(-bb);
      out.dc = -b * at::sigmoid(-a);
      out.dr = b * at::sigmoid(bb);
      return out;
    case Pref::kSppoHard: {
      const at::Tensor hc = cl - 0.5 / b, hr = rl + 0.5 / b;
      out.losses = hc * hc + hr * hr;
      out.dc = 2.0 * hc;
      out.dr = 2.0 * hr;
      return out;
    }
    case Pref::kApoZero: {
      const at::Tensor sa = at::sigmoid(a), sb = at::sigmoid(bb);
      out.losses = (1.0 - sa) + sb;
      out.dc = -b * sa * (1.0 - sa);
      out.dr = b * sb * (1.0 - sb);
      return out;
    }
    case Pref::kApoDown: {
      const at::Tensor sa = at::sigmoid(a), sd = at::sigmoid(d);
      out.losses = sa + (1.0 - sd);
      const at::Tensor gdd = -sd * at::sigmoid(-d);
      out.dc = b * (sa * at::sigmoid(-a) + gdd);
      out.dr = -b * gdd;
      return out;
    }
    case Pref::kDiscopop: {
      const at::Tensor m = at::sigmoid(d / o.tau), e = at::exp(-d), lsd = logsig(d);
      out.losses = -lsd * (1.0 - m) + e * m;
      const at::Tensor dm = m * (1.0 - m) / o.tau;
      gd = -at::sigmoid(-d) * (1.0 - m) + lsd * dm - e * m + e * dm;
      break;
    }
    default:
      LIGER_FAIL("argument 'loss_type': unhandled preference loss");
  }
  out.dc = b * gd;
  out.dr = -b * gd;
  return out;
}

struct Pref3 {
  at::Tensor x;       // [2B*T, H] rows
  at::Tensor w;       // [V, H]
  at::Tensor bias;    // [V] or undefined
  at::Tensor target;  // [2B*T] int64
  at::Tensor rx, rw, rb;
  int64_t B = 0, T = 0, H = 0, V = 0;
};

// One head of the pair layout: input (2B, T, H) (target's first two dimensions), then the checks every
// chunk loop's head takes (dtype, weight (V, H), bias (V,), devices).
void check_linear(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  const char* iname, const char* wname, const char* bname, int64_t B2, int64_t T) {
  LIGER_CHECK_ARG(input.dim() == 3 && input.size(0) == B2 && input.size(1) == T && input.size(2) > 0, iname,
                  "expected shape (", B2, ", ", T, ", H) (chosen stacked over rejected, target's first two ",
                  "dimensions), got ", shape_str(input));
  heads::check_head(input, weight, bias, iname, wname, bname, 3);
}

// Where a chunk covers some of the pairs, its chosen rows (p0..) and rejected rows (B+p0..) are
// two blocks of x. The policy's rows are copied into one [n, H] matrix (`scratch`, n x H: a few
// MiB) so that its logits GEMM and its dW GEMM are one call each: as two blocks, dW was re-read and
// re-written twice a chunk. The reference's logits and the dX rows go block by block (no copies).
at::Tensor pair_rows(const at::Tensor& x, at::Tensor& scratch, int64_t B, int64_t T, int64_t p0, int64_t cp) {
  if (cp == B) return x;
  const int64_t half = cp * T;
  at::Tensor out = scratch.narrow(0, 0, 2 * half);
  out.narrow(0, 0, half).copy_(x.narrow(0, p0 * T, half));
  out.narrow(0, half, half).copy_(x.narrow(0, (B + p0) * T, half));
  return out;
}

void pair_logits(const at::Tensor& out, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                 int64_t B, int64_t T, int64_t p0, int64_t cp) {
  if (cp == B) return heads::logits_gemm(out, x, w, b);
  const int64_t half = cp * T;
  heads::logits_gemm(out.narrow(0, 0, half), x.narrow(0, p0 * T, half), w, b);
  heads::logits_gemm(out.narrow(0, half, half), x.narrow(0, (B + p0) * T, half), w, b);
}

void pair_dx(const at::Tensor& dx, const at::Tensor& dl, const at::Tensor& w, int64_t B, int64_t T,
             int64_t p0, int64_t cp) {
  const int64_t half = cp * T;
  at::Tensor chosen = dx.narrow(0, p0 * T, half), rejected = dx.narrow(0, (B + p0) * T, half);
  at::mm_out(chosen, dl.narrow(0, 0, half), w);
  at::mm_out(rejected, dl.narrow(0, half, half), w);
}

using PrefResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                              at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

PrefResult preference_fwd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                          const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& ref_input,
                          const std::optional<at::Tensor>& ref_weight,
                          const std::optional<at::Tensor>& ref_bias, c10::string_view loss_type,
                          int64_t ignore_index, double beta, double alpha, bool compute_nll_loss,
                          bool average_log_prob, double label_smoothing, double gamma, double discopop_tau,
                          int64_t chunk_size, bool compute_dx, bool compute_dw, bool compute_db) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  PairOpts o;
  o.type = parse_loss_type(std::string_view(loss_type.data(), loss_type.size()));
  o.beta = beta;
  o.label_smoothing = label_smoothing;
  o.gamma = gamma;
  o.tau = discopop_tau;
  LIGER_CHECK_ARG(std::isfinite(beta) && beta != 0.0, "beta", "expected a finite non-zero value, got ", beta);
  LIGER_CHECK_ARG(std::isfinite(alpha), "alpha", "expected a finite value, got ", alpha);
  LIGER_CHECK_ARG(label_smoothing >= 0.0 && label_smoothing <= 1.0, "label_smoothing",
                  "expected a value in [0, 1], got ", label_smoothing);
  if (o.type == Pref::kExoPair)
    LIGER_CHECK_ARG(
        label_smoothing > 0.0 && label_smoothing < 1.0, "label_smoothing",
        "expected a value in (0, 1) for loss_type 'exo_pair' (its loss has log(label_smoothing)), got ",
        label_smoothing);
  if (o.type == Pref::kRobust)
    LIGER_CHECK_ARG(
        label_smoothing < 0.5, "label_smoothing",
        "expected a value in [0, 0.5) for loss_type 'robust' (it divides by 1 - 2 label_smoothing), got ",
        label_smoothing);
  if (o.type == Pref::kDiscopop)
    LIGER_CHECK_ARG(std::isfinite(discopop_tau) && discopop_tau > 0.0, "discopop_tau",
                    "expected a positive value, got ", discopop_tau);
  LIGER_CHECK_ARG(chunk_size >= 1, "chunk_size", "expected a positive number of pairs per chunk, got ",
                  chunk_size);

  LIGER_CHECK_ARG(target.dim() == 2 && target.size(0) % 2 == 0 && target.size(0) > 0, "target",
                  "expected shape (2B, T) (chosen rows stacked over rejected rows), got ", shape_str(target));
  check_index_dtype(target, "target", "class indices");
  LIGER_CHECK_ARG(target.device() == input.device(), "target", "expected device ", input.device(),
                  " (input's), got ", target.device());
  Pref3 f;
  f.B = target.size(0) / 2;
  f.T = target.size(1);
  check_linear(input, weight, bias, "input", "weight", "bias", 2 * f.B, f.T);
  f.H = input.size(2);
  f.V = weight.size(0);
  f.x = as_rows(input);
  f.w = heads::gemm_ready(weight);
  if (bias.has_value() && bias->defined()) f.bias = *bias;
  f.target = target.reshape({-1}).to(at::kLong).contiguous();
  const bool use_ref = ref_weight.has_value() && ref_weight->defined();
  const bool dpo = o.type != Pref::kOrpo && o.type != Pref::kCpo && o.type != Pref::kSimpo;
  if (use_ref) {
    LIGER_CHECK_ARG(dpo, "ref_weight",
                    "a reference model is only used by the DPO loss types, got loss_type '",
                    std::string_view(loss_type.data(), loss_type.size()), "'");
    LIGER_CHECK_ARG(ref_input.has_value() && ref_input->defined(), "ref_input",
                    "expected the reference model's hidden states (2B, T, H') with ref_weight, got None");
    check_linear(*ref_input, *ref_weight, ref_bias, "ref_input", "ref_weight", "ref_bias", 2 * f.B, f.T);
    LIGER_CHECK_ARG(ref_input->device() == input.device() && ref_input->scalar_type() == input.scalar_type(),
                    "ref_input", "expected input's device and dtype, got ", ref_input->device(), " ",
                    dtype_str(ref_input->scalar_type()));
    LIGER_CHECK_ARG(ref_weight->size(0) == f.V, "ref_weight", "expected ", f.V,
                    " rows (weight's vocabulary: the targets index both), got shape ",
                    shape_str(*ref_weight));
    f.rx = as_rows(*ref_input);
    f.rw = heads::gemm_ready(*ref_weight);
    if (ref_bias.has_value() && ref_bias->defined()) f.rb = *ref_bias;
  } else {
    LIGER_CHECK_ARG(!(ref_input.has_value() && ref_input->defined()), "ref_input",
                    "expected None without ref_weight (no reference model)");
  }
  check_ce_target_values(f.target, f.V, ignore_index);

  const int64_t B = f.B, T = f.T, V = f.V;
  const bool fp64 = input.scalar_type() == at::kDouble;
  const at::ScalarType acc = fp64 ? at::kDouble : at::kFloat;
  const auto f32 = input.options().dtype(at::kFloat);
  const auto facc = input.options().dtype(acc);
  const int64_t cpairs = std::min(chunk_size, B);
  const bool want_grad = compute_dx || compute_dw || (compute_db && f.bias.defined());

  // Token masks and weights, [2B, T] float32 on the device.
  const at::Tensor mask = (f.target != ignore_index).to(at::kFloat).view({2 * B, T});
  const at::Tensor len = mask.sum(1, /*keepdim=*/true);
  // A sequence with no scored token averages to 0 (not 0/0).
  const at::Tensor tokw = average_log_prob ? mask / len.clamp_min(1.0) : mask;
  const at::Tensor n_chosen = mask.narrow(0, 0, B).sum();
  const at::Tensor inv_nc = at::where(n_chosen > 0, 1.0 / n_chosen.clamp_min(1.0), at::zeros_like(n_chosen));
  const double inv_pairs = 1.0 / static_cast<double>(B);

  at::Tensor rows_loss = at::empty({2 * cpairs * T}, f32);  // the row step's lse - x_y = -logp_t
  at::Tensor ref_rows = at::empty({2 * cpairs * T}, f32);
  at::Tensor chosen_logps = at::empty({B}, f32), rejected_logps = at::empty({B}, f32);
  at::Tensor chosen_rewards = at::empty({B}, f32), rejected_rewards = at::empty({B}, f32);
  at::Tensor loss_sum = at::zeros({}, f32), nll_sum = at::zeros({}, f32);
  at::Tensor csum = at::zeros({}, facc), rsum = at::zeros({}, facc);
  at::Tensor ratio_sum = at::zeros({}, f32), lo_sum = at::zeros({}, f32);

  // dW: the first chunk's GEMM writes it (beta 0): no zero fill.
  heads::Grads g = heads::alloc_grads(f.x, f.w, f.bias, compute_dx, compute_dw, compute_db);
  const at::Tensor dx = g.dx;
  at::Tensor xs;  // the policy's rows of a chunk that covers some of the pairs
  if (cpairs < B) xs = at::empty({2 * cpairs * T, f.H}, f.x.options());

  at::Tensor buf = at::empty({2 * cpairs * T, V}, input.options());
  const at::Tensor no_scale = at::ones({1}, f32);
  for (int64_t p0 = 0; p0 < B; p0 += cpairs) {
    const int64_t cp = std::min(cpairs, B - p0), n = 2 * cp * T;
    at::Tensor lc = buf.narrow(0, 0, n);
    const at::Tensor tc =
        at::cat({f.target.narrow(0, p0 * T, cp * T), f.target.narrow(0, (B + p0) * T, cp * T)});
    const at::Tensor wc = at::cat({tokw.narrow(0, p0, cp), tokw.narrow(0, B + p0, cp)});  // [2cp, T]
    CeRows r;
    r.target = tc;
    r.ce_scale = no_scale;
    r.z_scale = no_scale;
    r.ignore_index = ignore_index;

    at::Tensor ref_c, ref_r;
    if (use_ref) {
      pair_logits(lc, f.rx, f.rw, f.rb, B, T, p0, cp);
      r.logits = lc;
      r.loss = ref_rows.narrow(0, 0, n);
      ce_rows(r);
      const at::Tensor s = -(r.loss.view({2 * cp, T}) * wc).sum(1);
      ref_c = s.narrow(0, 0, cp);
      ref_r = s.narrow(0, cp, cp);
    } else {
      ref_c = at::zeros({cp}, f32);
      ref_r = ref_c;
    }

    const at::Tensor xc = pair_rows(f.x, xs, B, T, p0, cp);
    heads::logits_gemm(lc, xc, f.w, f.bias);
    // Logits means (Liger's metrics): sums of all logits of each half.
    const at::Tensor halves = at::sum(lc.view({2, cp * T * V}), at::IntArrayRef{1}, false, acc);  // one pass
    csum.add_(halves[0]);
    rsum.add_(halves[1]);
    at::Tensor rl = rows_loss.narrow(0, 0, n);
    r.logits = lc;
    r.loss = rl;
    ce_rows(r);
    const at::Tensor lrows = rl.view({2 * cp, T});
    const at::Tensor s = -(lrows * wc).sum(1);
    const at::Tensor c = s.narrow(0, 0, cp), rj = s.narrow(0, cp, cp);
    chosen_logps.narrow(0, p0, cp).copy_(c);
    rejected_logps.narrow(0, p0, cp).copy_(rj);
    PairOut po = pair_math(o, c, rj, ref_c, ref_r);
    loss_sum.add_(po.losses.sum());
    chosen_rewards.narrow(0, p0, cp).copy_(po.rc);
    rejected_rewards.narrow(0, p0, cp).copy_(po.rr);
    if (po.ratio.defined()) {
      ratio_sum.add_(po.ratio.sum());
      lo_sum.add_(po.log_odds.sum());
    }
    const at::Tensor mc = mask.narrow(0, p0, cp);
    if (compute_nll_loss) nll_sum.add_((lrows.narrow(0, 0, cp) * mc).sum());
    if (!want_grad) continue;

    // ce_scale = -k_t = -(dL/ds / n_pairs) w_t (+ alpha mask_t / N_chosen on chosen rows)
    at::Tensor k = at::cat({po.dc, po.dr}).mul(-inv_pairs).unsqueeze(1) * wc;  // [2cp, T]
    if (compute_nll_loss) k.narrow(0, 0, cp).add_(mc * (inv_nc * alpha));
    r.ce_scale = k.reshape({n}).contiguous();
    r.dlogits = lc;
    r.loss = ref_rows.narrow(0, 0, n);  // scratch: the row losses are known already
    ce_rows(r);
    if (cp < B && dx.defined()) {
      pair_dx(dx, lc, f.w, B, T, p0, cp);
      g.dx = at::Tensor();  // written above
    }
    heads::chunk_grads(lc, xc, f.w, g, 0);
    g.dx = dx;
  }

  const at::Tensor nll = compute_nll_loss ? (nll_sum * inv_nc) : at::zeros({}, f32);
  const at::Tensor loss = loss_sum * inv_pairs + alpha * nll;
  const double denom = static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(V);
  const at::Tensor cmean = (csum / denom).to(at::kFloat), rmean = (rsum / denom).to(at::kFloat);
  at::Tensor extra = at::empty({0}, f32);
  if (o.type == Pref::kOrpo) extra = at::stack({ratio_sum * inv_pairs, lo_sum * inv_pairs});
  auto [dX, dW, dB] = heads::finish_grads(g, input, f.bias);
  return {loss,           chosen_logps,     rejected_logps, cmean, rmean, nll,
          chosen_rewards, rejected_rewards, extra,          dX,    dW,    dB};
}

using KtoResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// KTO (unpaired): per sequence i, lr_i = s_i - ref_s_i (s_i without a reference model),
// z_i = beta (lr_i - kl_i) m_i with m_i = +1 (desirable) / -1, loss = sum_i (1 - sigmoid(z_i)) / B;
// d loss_i / d s_i = -beta m_i sigmoid(z_i) sigmoid(-z_i). Chunks of chunk_size sequences.
KtoResult kto_fwd(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
                  const at::Tensor& preference_labels, const std::optional<at::Tensor>& bias,
                  const std::optional<at::Tensor>& ref_input, const std::optional<at::Tensor>& ref_weight,
                  const std::optional<at::Tensor>& ref_bias, const std::optional<at::Tensor>& kl,
                  int64_t ignore_index, double beta, bool average_log_prob, int64_t chunk_size,
                  bool compute_dx, bool compute_dw, bool compute_db) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  LIGER_CHECK_ARG(std::isfinite(beta), "beta", "expected a finite value, got ", beta);
  LIGER_CHECK_ARG(chunk_size >= 1, "chunk_size", "expected a positive number of sequences per chunk, got ",
                  chunk_size);
  LIGER_CHECK_ARG(target.dim() == 2 && target.size(0) > 0, "target", "expected shape (B, T), got ",
                  shape_str(target));
  check_index_dtype(target, "target", "class indices");
  LIGER_CHECK_ARG(target.device() == input.device(), "target", "expected device ", input.device(),
                  " (input's), got ", target.device());
  const int64_t B = target.size(0), T = target.size(1);
  check_linear(input, weight, bias, "input", "weight", "bias", B, T);
  const int64_t V = weight.size(0);
  LIGER_CHECK_ARG(preference_labels.dim() == 1 && preference_labels.size(0) == B, "preference_labels",
                  "expected shape (", B, ",) (one label per sequence), got ", shape_str(preference_labels));
  LIGER_CHECK_ARG(preference_labels.device() == input.device(), "preference_labels", "expected device ",
                  input.device(), ", got ", preference_labels.device());
  const at::Tensor x = as_rows(input), w = heads::gemm_ready(weight);
  const at::Tensor b = bias.has_value() && bias->defined() ? *bias : at::Tensor();
  const at::Tensor tgt = target.reshape({-1}).to(at::kLong).contiguous();
  const bool use_ref = ref_weight.has_value() && ref_weight->defined();
  at::Tensor rx, rw, rb;
  if (use_ref) {
    LIGER_CHECK_ARG(ref_input.has_value() && ref_input->defined(), "ref_input",
                    "expected the reference model's hidden states (B, T, H') with ref_weight, got None");
    check_linear(*ref_input, *ref_weight, ref_bias, "ref_input", "ref_weight", "ref_bias", B, T);
    LIGER_CHECK_ARG(ref_input->device() == input.device() && ref_input->scalar_type() == input.scalar_type(),
                    "ref_input", "expected input's device and dtype, got ", ref_input->device(), " ",
                    dtype_str(ref_input->scalar_type()));
    LIGER_CHECK_ARG(ref_weight->size(0) == V, "ref_weight", "expected ", V,
                    " rows (weight's vocabulary: the targets index both), got shape ",
                    shape_str(*ref_weight));
    rx = as_rows(*ref_input);
    rw = heads::gemm_ready(*ref_weight);
    if (ref_bias.has_value() && ref_bias->defined()) rb = *ref_bias;
  } else {
    LIGER_CHECK_ARG(!(ref_input.has_value() && ref_input->defined()), "ref_input",
                    "expected None without ref_weight (no reference model)");
  }
  const auto f32 = input.options().dtype(at::kFloat);
  at::Tensor klv = at::zeros({1}, f32);
  if (kl.has_value() && kl->defined()) {
    LIGER_CHECK_ARG(kl->numel() == 1 || kl->numel() == B, "kl", "expected 1 or ", B, " elements, got shape ",
                    shape_str(*kl));
    LIGER_CHECK_ARG(kl->device() == input.device() && at::isFloatingType(kl->scalar_type()), "kl",
                    "expected a floating tensor on input's device, got ", dtype_str(kl->scalar_type()));
    klv = kl->reshape({-1}).to(at::kFloat);
  }
  check_ce_target_values(tgt, V, ignore_index);

  const bool fp64 = input.scalar_type() == at::kDouble;
  const at::ScalarType acc = fp64 ? at::kDouble : at::kFloat;
  const int64_t cs = std::min(chunk_size, B);
  const bool want_grad = compute_dx || compute_dw || (compute_db && b.defined());
  const at::Tensor mask = (tgt != ignore_index).to(at::kFloat).view({B, T});
  const at::Tensor tokw = average_log_prob ? mask / mask.sum(1, true).clamp_min(1.0) : mask;
  const at::Tensor lab = preference_labels.to(at::kBool);
  const at::Tensor labf = lab.to(at::kFloat), sign = labf * 2.0 - 1.0;

  at::Tensor rows_loss = at::empty({cs * T}, f32), scratch = at::empty({cs * T}, f32);
  at::Tensor seq = at::empty({B}, f32), ref_seq = at::zeros({B}, f32);
  at::Tensor lsum = at::empty({B}, input.options().dtype(acc));  // per-sequence sums of the logits
  heads::Grads g = heads::alloc_grads(x, w, b, compute_dx, compute_dw, compute_db);
  at::Tensor buf = at::empty({cs * T, V}, input.options());
  const at::Tensor no_scale = at::ones({1}, f32);
  at::Tensor loss_sum = at::zeros({}, f32);
  for (int64_t s0 = 0; s0 < B; s0 += cs) {
    const int64_t c = std::min(cs, B - s0), n = c * T;
    at::Tensor lc = buf.narrow(0, 0, n);
    const at::Tensor xc = x.narrow(0, s0 * T, n);
    const at::Tensor wc = tokw.narrow(0, s0, c);
    CeRows r;
    r.target = tgt.narrow(0, s0 * T, n);
    r.ce_scale = no_scale;
    r.z_scale = no_scale;
    r.ignore_index = ignore_index;
    if (use_ref) {
      heads::logits_gemm(lc, rx.narrow(0, s0 * T, n), rw, rb);
      r.logits = lc;
      r.loss = scratch.narrow(0, 0, n);
      ce_rows(r);
      ref_seq.narrow(0, s0, c).copy_(-(r.loss.view({c, T}) * wc).sum(1));
    }
    heads::logits_gemm(lc, xc, w, b);
    lsum.narrow(0, s0, c).copy_(at::sum(lc.reshape({c, T * V}), at::IntArrayRef{1}, false, acc));
    r.logits = lc;
    r.loss = rows_loss.narrow(0, 0, n);
    ce_rows(r);
    const at::Tensor sc = -(r.loss.view({c, T}) * wc).sum(1);
    seq.narrow(0, s0, c).copy_(sc);
    const at::Tensor kc = klv.numel() == 1 ? klv : klv.narrow(0, s0, c);
    const at::Tensor mc = sign.narrow(0, s0, c);
    const at::Tensor z = beta * (sc - ref_seq.narrow(0, s0, c) - kc) * mc;
    loss_sum.add_((1.0 - at::sigmoid(z)).sum());
    if (!want_grad) continue;
    // ce_scale = -d loss / d logp_t = beta m sigmoid(z) sigmoid(-z) / B * w_t
    const at::Tensor k =
        ((beta / static_cast<double>(B)) * mc * at::sigmoid(z) * at::sigmoid(-z)).unsqueeze(1) * wc;
    r.ce_scale = k.reshape({n}).contiguous();
    r.dlogits = lc;
    r.loss = scratch.narrow(0, 0, n);
    ce_rows(r);
    heads::chunk_grads(lc, xc, w, g, s0 * T);
  }
  const at::Tensor loss = loss_sum / static_cast<double>(B);
  const at::Tensor rewards = beta * (seq - ref_seq);
  const at::Tensor nlab = 1.0 - labf;
  auto [dx, dw, db] = heads::finish_grads(g, input, b);
  return {loss,
          (seq * labf).sum(),
          (seq * nlab).sum(),
          (lsum * labf.to(lsum.scalar_type())).sum().to(at::kFloat),
          (lsum * nlab.to(lsum.scalar_type())).sum().to(at::kFloat),
          (rewards * labf).sum(),
          (rewards * nlab).sum(),
          dx,
          dw,
          db};
}

}  // namespace fused_linear_preference_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_linear_preference_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_preference_fwd", &preference_fwd);
  m.impl("fused_linear_kto_fwd", &kto_fwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_linear_preference_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_preference_fwd", &preference_fwd);
  m.impl("fused_linear_kto_fwd", &kto_fwd);
}
#endif

}  // namespace liger_cpp
