// Fused linear cross entropy: CE(logit_scale * (x @ W^T + b), y) without ever
// holding the (rows x V) logits. Device-generic orchestration: ATen GEMMs
// (cuBLAS on CUDA) and the cross-entropy row step (csrc/aten/checks/cross_entropy_core.h),
// so the same code runs on the CPU (CI) and on CUDA.
//
// Per chunk of token rows [s, e):
//   L      = logit_scale * (x[s:e] @ W^T + b)        one reused chunk buffer, input dtype
//   ce_rows(L): loss, z-loss, argmax per row, and dL written over L itself
//              (our own buffer, so in place is safe), scaled by the device
//              scales (1/N for a mean, grad_output per row, times logit_scale:
//              the chain rule of the scaling, folded in before rounding)
//   dX[s:e] = dL @ W                                  mm_out into dX's rows
//   dW     += dL^T @ x[s:e]                           first chunk beta 0, then beta 1
//   dB     += column sums of dL                       float32 (float64 for float64)
// With use_token_scaling (TRL's DFT loss, Liger's option) each row's loss (CE and
// z-loss) is multiplied by p_y = softmax(L)[y], the probability of its target
// under the logits the loss sees (scaled and softcapped, before label
// smoothing), detached: p_y comes from a first pass of the row step over the
// chunk, and the gradient scales carry it, so dL is p_y times the unscaled
// gradient. The mean's normaliser is unchanged.
// The mean normaliser stays a device tensor: nothing here synchronises with the
// host on CUDA (the target check is an async assert there, unless the opt-in
// liger_cpp.set_check_targets asks for a synchronising check).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/linear_chunks.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace fused_linear_cross_entropy_impl {

// Chunk budget when chunk_rows is 0: the chunk's logits take about this many
// MiB. Every chunk after the first re-reads and re-writes dW in its GEMM's
// epilogue, so fewer, larger chunks are faster, and rows in multiples of the
// GEMMs' 128-row tiles waste none: 251 MiB gives 1024-row chunks at V = 128256
// bf16 (Llama 3's vocabulary). On the H200, fwd+bwd over the three GEMMs at
// M8192 H4096 / M32768 H2048 / M32768 H4096: 1.062 / 1.111 / 1.050 x against
// 1.106 / 1.144 / 1.071 x for 240 MiB (912- / 968-row chunks), with the peak
// within dX + dW + 256 MiB (1317 of 1322 MiB at M8192; benchmarks/results/
// 2026-11-30-h200-fused_linear_cross_entropy-chunk-1b5a435-{240,251}). 128 MiB was
// slower still (45.5 against 43.2 ms at 3170160).
constexpr double kMaxChunkMiB = 251.0;
// Below that, the chunk takes no more rows than the larger of Liger's chunk at
// the same shape (next_pow2(ceil(M / ceil(V / H))) rows) and a quarter of dW's
// bytes (H / 4 rows), and at least kMinChunkMiB. In training the FLCE runs at
// the step's memory peak (every layer's activations saved), where the chunk
// adds to it. At Llama 3.2 1B's shape, B8 T2048 (M 16384, H 2048), 1024-row
// chunks put the step's peak 0.09 GiB above Liger's (26.43 against 26.34 GiB;
// 69.6 / 69.8 k tokens/s) and 512-row chunks (Liger's) at Liger's (26.34;
// 68.8 / 68.6 k; Liger 67.9 / 67.1 k) (benchmarks/results/2026-12-01-h200-
// e2e-1b-b8t2048-chunk-*-fc945a3); at B4 T8192 (M 32768) the peak lies
// elsewhere (45.19 GiB either way) and 512 rows only cost speed (56.6 against
// 57.1 k; Liger 56.8 k, -e2e-1b-b4t8192-*-3b7287d), while Liger's own chunk there
// is 1024 rows. The FLCE alone at M16384 H2048: 44.1 ms (1.205 x T3GEMM, 691
// MiB) with 512-row chunks, 42.0 (1.147 x, 817 MiB) with 1024, Liger 42.8
// (1.168 x, 691 MiB) (-fused_linear_cross_entropy-chunkrule-a708369).
constexpr double kMinChunkMiB = 64.0;

// LIGER_CPP_FLCE_CHUNK_MB, read once per process: a fixed budget in MiB, or none when unset or
// empty. An invalid value raises on every call (the static is not initialised until it parses).
std::optional<double> env_chunk_budget_mib() {
  static const std::optional<double> value = []() -> std::optional<double> {
    const char* s = std::getenv("LIGER_CPP_FLCE_CHUNK_MB");
    if (s == nullptr || *s == '\0') return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || *end != '\0' || !std::isfinite(v) || !(v > 0))
      LIGER_FAIL("environment variable LIGER_CPP_FLCE_CHUNK_MB: expected a positive number of MiB, got '", s,
                 "'");
    return v;
  }();
  return value;
}

// The chunk budget in MiB: the caller's (chunk_budget_mib), else LIGER_CPP_FLCE_CHUNK_MB's, else
// the automatic one above.
double chunk_budget_mib(int64_t M, int64_t V, int64_t H, int64_t elem_size, std::optional<double> requested) {
  if (requested.has_value()) return *requested;
  if (const std::optional<double> env = env_chunk_budget_mib()) return *env;
  const int64_t liger_chunks = std::max<int64_t>(1, (V + H - 1) / H);
  int64_t liger_rows = 1;
  while (liger_rows < (M + liger_chunks - 1) / liger_chunks) liger_rows *= 2;
  const double rows = std::max(static_cast<double>(liger_rows), static_cast<double>(H) / 4.0);
  const double mib = rows * static_cast<double>(V) * static_cast<double>(elem_size) / 1048576.0;
  return std::clamp(mib, kMinChunkMiB, kMaxChunkMiB);
}

// Rows per chunk. An explicit chunk_rows is used as given (tests force small,
// uneven chunks). Otherwise: as many rows as the budget (chunk_budget_mib) allows, a multiple of 8
// (keeps every chunk of x 16-byte aligned for any H), then evened out over the
// chunks that count needs, so the last chunk is not a sliver.
int64_t pick_chunk_rows(int64_t M, int64_t V, int64_t H, int64_t elem_size, int64_t requested,
                        std::optional<double> budget_mib) {
  if (M == 0) return 0;
  if (requested > 0) return std::min(requested, M);
  const double per_row = static_cast<double>(V) * static_cast<double>(elem_size);
  int64_t rows = static_cast<int64_t>(
      std::floor(chunk_budget_mib(M, V, H, elem_size, budget_mib) * 1048576.0 / per_row));
  if (rows >= 8) rows -= rows % 8;
  rows = std::max<int64_t>(rows, 1);
  if (rows >= M) return M;
  const int64_t chunks = (M + rows - 1) / rows;
  int64_t even = (M + chunks - 1) / chunks;
  if (rows >= 8) even = (even + 7) / 8 * 8;
  return std::min(even, rows);
}

// Validated, flattened arguments shared by the forward and the backward.
struct Flce {
  at::Tensor x;          // [M, H], unit last stride
  at::Tensor w;          // [V, H], a GEMM-ready layout
  at::Tensor target;     // [M] int64, contiguous
  at::Tensor bias;       // [V] input dtype, or undefined
  at::Tensor ce_weight;  // [V] float32 contiguous, or undefined
  int64_t M = 0, H = 0, V = 0;
  int64_t ignore_index = -100;
  double label_smoothing = 0, lse_square_scale = 0, softcap = 0, logit_scale = 1;
  Reduction reduction = Reduction::kMean;
  bool accum_fp32 = false;     // dW accumulated in a float32 buffer (low-precision inputs only)
  bool token_scaling = false;  // each row's loss times the detached probability of its target
  int64_t chunk = 0;
};

Flce prepare(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
             const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& ce_weight,
             int64_t ignore_index, double lse_square_scale, double label_smoothing,
             c10::string_view reduction, double softcap, double logit_scale,
             std::optional<at::ScalarType> accum_dtype, int64_t chunk_rows, bool use_token_scaling,
             std::optional<double> chunk_budget_mib) {
  Flce f;
  f.reduction = parse_reduction(std::string_view(reduction.data(), reduction.size()));
  const bool cuda = input.is_cuda();
  LIGER_CHECK_ARG(input.dim() >= 1, "input", "expected a tensor of shape (..., H), got a scalar");
  LIGER_CHECK_ARG(input.size(-1) > 0, "input", "expected a non-empty hidden dimension, got shape ",
                  shape_str(input));
  LIGER_CHECK_ARG(is_float_type(input.scalar_type(), !cuda), "input", "expected float32, float16 or bfloat16",
                  cuda ? "" : " (or float64 on CPU)", ", got ", dtype_str(input.scalar_type()));
  f.H = input.size(-1);
  LIGER_CHECK_ARG(weight.dim() == 2 && weight.size(1) == f.H, "weight", "expected shape (V, ", f.H,
                  ") to match input's hidden size, got ", shape_str(weight));
  LIGER_CHECK_ARG(weight.size(0) > 0, "weight", "expected a non-empty vocabulary dimension, got shape ",
                  shape_str(weight), " (a parameter not gathered yet, e.g. under DeepSpeed ZeRO-3?)");
  LIGER_CHECK_ARG(weight.device() == input.device(), "weight", "expected device ", input.device(),
                  " (input's), got ", weight.device());
  LIGER_CHECK_ARG(weight.scalar_type() == input.scalar_type(), "weight", "expected input's dtype (",
                  dtype_str(input.scalar_type()), "), got ", dtype_str(weight.scalar_type()));
  f.V = weight.size(0);
  LIGER_CHECK_ARG(target.device() == input.device(), "target", "expected device ", input.device(),
                  " (input's), got ", target.device());
  check_index_dtype(target, "target", "class indices");
  f.M = input.numel() / f.H;
  LIGER_CHECK_ARG(target.numel() == f.M, "target", "expected ", f.M,
                  " elements (one per row of input, shape ", shape_str(input), "), got shape ",
                  shape_str(target));
  if (bias.has_value() && bias->defined()) {
    const at::Tensor& b = *bias;
    LIGER_CHECK_ARG(b.dim() == 1 && b.size(0) == f.V, "bias", "expected shape (", f.V,
                    ",) to match weight's first dimension, got ", shape_str(b));
    LIGER_CHECK_ARG(b.device() == input.device(), "bias", "expected device ", input.device(),
                    " (input's), got ", b.device());
    LIGER_CHECK_ARG(b.scalar_type() == input.scalar_type(), "bias", "expected input's dtype (",
                    dtype_str(input.scalar_type()), "), got ", dtype_str(b.scalar_type()));
    f.bias = b;
  }
  if (ce_weight.has_value() && ce_weight->defined()) {
    const at::Tensor& cw = *ce_weight;
    LIGER_CHECK_ARG(cw.dim() == 1 && cw.size(0) == f.V, "ce_weight", "expected shape (", f.V,
                    ",) (one weight per class), got ", shape_str(cw));
    LIGER_CHECK_ARG(cw.device() == input.device(), "ce_weight", "expected device ", input.device(),
                    " (input's), got ", cw.device());
    LIGER_CHECK_ARG(at::isFloatingType(cw.scalar_type()), "ce_weight", "expected a floating dtype, got ",
                    dtype_str(cw.scalar_type()));
    f.ce_weight = cw.to(at::kFloat).contiguous();
  }
  LIGER_CHECK_ARG(label_smoothing >= 0.0 && label_smoothing <= 1.0, "label_smoothing",
                  "expected a value in [0, 1], got ", label_smoothing);
  LIGER_CHECK_ARG(std::isfinite(lse_square_scale), "lse_square_scale", "expected a finite value, got ",
                  lse_square_scale);
  LIGER_CHECK_ARG(std::isfinite(softcap) && softcap >= 0.0, "softcap",
                  "expected a positive value (0: no softcap), got ", softcap);
  LIGER_CHECK_ARG(std::isfinite(logit_scale), "logit_scale", "expected a finite value, got ", logit_scale);
  LIGER_CHECK_ARG(chunk_rows >= 0, "chunk_rows", "expected a non-negative row count (0: automatic), got ",
                  chunk_rows);
  if (chunk_budget_mib.has_value())
    LIGER_CHECK_ARG(std::isfinite(*chunk_budget_mib) && *chunk_budget_mib > 0, "chunk_budget_mib",
                    "expected None or a positive number of MiB, got ", *chunk_budget_mib);
  f.token_scaling = use_token_scaling;
  if (accum_dtype.has_value()) {
    const at::ScalarType a = *accum_dtype;
    LIGER_CHECK_ARG(a == at::kFloat || (a == at::kDouble && input.scalar_type() == at::kDouble),
                    "accum_dtype", "expected None or torch.float32, got ", dtype_str(a));
    f.accum_fp32 =
        a == at::kFloat && (input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16);
  }
  f.ignore_index = ignore_index;
  f.label_smoothing = label_smoothing;
  f.lse_square_scale = lse_square_scale;
  f.softcap = softcap;
  f.logit_scale = logit_scale;

  f.x = as_rows(input);
  f.w = heads::gemm_ready(weight);
  f.target = target.reshape({f.M}).to(at::kLong).contiguous();
  f.chunk = pick_chunk_rows(f.M, f.V, f.H, input.element_size(), chunk_rows, chunk_budget_mib);
  // The target values are checked by ce_prologue, which every caller runs first.
  return f;
}

// The loop's gradients: the chunk loops' shared set (dX rows, dW in weight's dtype, dB; written by
// heads::chunk_grads) and, with accum_fp32, dW's float32 accumulator in place of its dW.
struct Grads {
  heads::Grads g;
  at::Tensor dw32;  // [V, H] float32, or undefined
  bool any() const { return g.any() || dw32.defined(); }
};

// The chunk loop. ce_scale / z_scale: float32 with 1 or M elements (already
// including logit_scale); weight_sum: ce_prologue's sum of the class weights
// (one [1] tensor for every chunk), or undefined without class weights. Writes loss_rows (and z_rows, argmax
// when defined) and, for each defined member of g, that gradient.
void chunk_loop(const Flce& f, const at::Tensor& ce_scale, const at::Tensor& z_scale,
                const at::Tensor& weight_sum, at::Tensor& loss_rows, const at::Tensor& z_rows,
                const at::Tensor& argmax, Grads& g) {
  const bool want_grad = g.any();
  if (f.M == 0) return;
  at::Tensor buf = at::empty({f.chunk, f.V}, f.x.options());
  // Token scaling: each chunk's target log-probabilities x_y - lse first (the row step without
  // smoothing, class weights or z-loss), into this buffer.
  at::Tensor tgt_nll = f.token_scaling ? at::empty({f.chunk}, f.x.options().dtype(at::kFloat)) : at::Tensor();
  const at::Tensor one = f.token_scaling ? at::ones({1}, f.x.options().dtype(at::kFloat)) : at::Tensor();
  for (int64_t s = 0; s < f.M; s += f.chunk) {
    const int64_t n = std::min(f.chunk, f.M - s);
    const bool first = s == 0;
    at::Tensor lc = buf.narrow(0, 0, n);
    const at::Tensor xc = f.x.narrow(0, s, n);
    // Logits: logit_scale * (xc @ W^T + b), the scale as the GEMM's alpha (and beta for the bias).
    heads::logits_gemm(lc, xc, f.w, f.bias, f.logit_scale);

    CeRows r;
    r.logits = lc;
    r.target = f.target.narrow(0, s, n);
    r.weight = f.ce_weight;
    r.weight_sum = weight_sum;
    if (want_grad) r.dlogits = lc;
    r.loss = loss_rows.narrow(0, s, n);
    if (z_rows.defined()) r.z_loss = z_rows.narrow(0, s, n);
    if (argmax.defined()) r.argmax = argmax.narrow(0, s, n);
    r.ce_scale = ce_scale.numel() == 1 ? ce_scale : ce_scale.narrow(0, s, n);
    r.z_scale = z_scale.numel() == 1 ? z_scale : z_scale.narrow(0, s, n);
    r.ignore_index = f.ignore_index;
    r.label_smoothing = f.label_smoothing;
    r.lse_square_scale = f.lse_square_scale;
    r.softcap = f.softcap;
    at::Tensor p;  // token scaling: p_y = softmax(logits)[y] per row, detached
    if (f.token_scaling) {
      CeRows q;
      q.logits = lc;
      q.target = r.target;
      q.loss = tgt_nll.narrow(0, 0, n);
      q.ce_scale = one;
      q.z_scale = one;
      q.ignore_index = f.ignore_index;
      q.softcap = f.softcap;
      ce_rows(q);
      p = at::exp(-q.loss);  // ignored rows: 1, but their loss and gradient are 0 anyway
      r.ce_scale = (r.ce_scale * p).contiguous();
      r.z_scale = (r.z_scale * p).contiguous();
    }
    ce_rows(r);
    if (p.defined()) {
      r.loss.mul_(p);
      if (r.z_loss.defined()) r.z_loss.mul_(p);
    }
    if (!want_grad) continue;

    heads::chunk_grads(lc, xc, f.w, g.g, s);  // dX rows, dW (beta 0 on the first chunk), dB
    if (g.dw32.defined()) heads::accumulate_dw_fp32(g.dw32, lc.t(), xc, first);
  }
}

// Allocates the gradients a loop will write (zeros when there are no rows).
Grads alloc_grads(const Flce& f, bool compute_dx, bool compute_dw, bool compute_db) {
  Grads g;
  g.g = heads::alloc_grads(f.x, f.w, f.bias, compute_dx, compute_dw && !f.accum_fp32, compute_db);
  if (compute_dw && f.accum_fp32) {
    const at::TensorOptions o = f.w.options().dtype(at::kFloat);
    g.dw32 = f.M == 0 ? at::zeros({f.V, f.H}, o) : at::empty({f.V, f.H}, o);
  }
  return g;
}

// Gradients in the dtypes autograd expects: dX with input's shape, dW in
// weight's dtype, dB in bias's; empty (0,) tensors for those not computed.
std::tuple<at::Tensor, at::Tensor, at::Tensor> finish_grads(const Flce& f, const at::Tensor& input,
                                                            const at::Tensor& weight, Grads& g) {
  auto [dx, dw, db] = heads::finish_grads(g.g, input, f.bias);
  if (g.dw32.defined()) {
    dw = g.dw32.to(weight.scalar_type());
    g.dw32.reset();  // frees the float32 accumulator before returning
  }
  return {dx, dw, db};
}

at::Tensor times_logit_scale(const at::Tensor& s, double logit_scale) {
  return logit_scale == 1.0 ? s : (s * logit_scale).contiguous();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> flce_fwd(
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& ce_weight, int64_t ignore_index,
    double lse_square_scale, double label_smoothing, c10::string_view reduction, double softcap,
    double logit_scale, bool return_z_loss, bool return_token_accuracy, bool return_predicted_tokens,
    bool compute_dx, bool compute_dw, bool compute_db, std::optional<at::ScalarType> accum_dtype,
    int64_t chunk_rows, bool use_token_scaling, std::optional<double> chunk_budget_mib) {
  const c10::DeviceGuard device_guard(input.device());
  // The GEMMs run in the dtype they are given, whatever autocast state the caller has.
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  Flce f =
      prepare(input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing,
              reduction, softcap, logit_scale, accum_dtype, chunk_rows, use_token_scaling, chunk_budget_mib);
  const auto f32 = input.options().dtype(at::kFloat);
  const bool want_argmax = return_token_accuracy || return_predicted_tokens;
  const bool want_z = return_z_loss || f.lse_square_scale != 0.0;

  // Target check, gradient scales and the class weights' sum: one launch on CUDA.
  const at::Tensor scales = ce_prologue(f.target, f.ce_weight, f.V, f.ignore_index, f.reduction);
  const CeScales sc = split_ce_scales(scales, f.ce_weight.defined());
  at::Tensor loss_rows = at::empty({f.M}, f32);
  at::Tensor z_rows = want_z ? at::empty({f.M}, f32) : at::Tensor();
  at::Tensor argmax = want_argmax ? at::empty({f.M}, input.options().dtype(at::kLong)) : at::Tensor();
  Grads g = alloc_grads(f, compute_dx, compute_dw, compute_db);
  chunk_loop(f, times_logit_scale(sc.ce, f.logit_scale), times_logit_scale(sc.z, f.logit_scale),
             sc.weight_sum, loss_rows, z_rows, argmax, g);

  const at::IntArrayRef tshape = target.sizes();
  at::Tensor loss, z_loss = at::empty({0}, f32), accuracy = at::empty({0}, f32);
  at::Tensor predicted = at::empty({0}, input.options().dtype(at::kLong));
  if (f.reduction == Reduction::kNone) {
    loss = (want_z ? loss_rows + z_rows : loss_rows).view(tshape);
    if (return_z_loss) z_loss = z_rows.view(tshape);
  } else {  // mean or sum (ce_prologue's scales are 1 for a sum)
    at::Tensor z;
    std::tie(loss, z) = ce_reduce_rows(loss_rows, want_z ? z_rows : at::Tensor(), scales);
    if (return_z_loss) z_loss = z;
  }
  if (return_token_accuracy) {
    const at::Tensor valid = f.target != f.ignore_index;
    const at::Tensor correct = ((argmax == f.target) & valid).to(at::kFloat);
    if (f.reduction == Reduction::kNone) {
      accuracy = correct.view(tshape);
    } else {
      // Mean over the rows that count; 0 (not NaN) when every row is ignored.
      const at::Tensor n = valid.sum().to(at::kFloat);
      accuracy = at::where(n > 0, correct.sum() / n.clamp_min(1), at::zeros({}, f32));
    }
  }
  if (return_predicted_tokens) predicted = argmax.view(tshape);
  auto [dx, dw, db] = finish_grads(f, input, weight, g);
  return {loss, z_loss, accuracy, predicted, dx, dw, db};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flce_bwd(
    const at::Tensor& grad_loss, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& target,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& ce_weight, int64_t ignore_index,
    double lse_square_scale, double label_smoothing, c10::string_view reduction, double softcap,
    double logit_scale, bool compute_dx, bool compute_dw, bool compute_db,
    std::optional<at::ScalarType> accum_dtype, int64_t chunk_rows, bool use_token_scaling,
    std::optional<double> chunk_budget_mib) {
  const c10::DeviceGuard device_guard(input.device());
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  Flce f =
      prepare(input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing,
              reduction, softcap, logit_scale, accum_dtype, chunk_rows, use_token_scaling, chunk_budget_mib);
  const int64_t want = f.reduction == Reduction::kNone ? f.M : 1;
  LIGER_CHECK_ARG(grad_loss.device() == input.device(), "grad_loss", "expected device ", input.device(),
                  " (input's), got ", grad_loss.device());
  LIGER_CHECK_ARG(at::isFloatingType(grad_loss.scalar_type()), "grad_loss", "expected a floating dtype, got ",
                  dtype_str(grad_loss.scalar_type()));
  LIGER_CHECK_ARG(grad_loss.numel() == want, "grad_loss", "expected ", want,
                  f.reduction == Reduction::kNone ? " elements (one per row: reduction 'none')"
                                                  : " element (a reduced loss)",
                  ", got shape ", shape_str(grad_loss));
  // Per-row gradient scales: the reduction's normaliser times grad_output,
  // folded into dlogits before any GEMM sums over rows (Liger #488/#968).
  const CeScales sc = split_ce_scales(ce_prologue(f.target, f.ce_weight, f.V, f.ignore_index, f.reduction),
                                      f.ce_weight.defined());
  const at::Tensor g = grad_loss.reshape({want}).to(at::kFloat);
  const at::Tensor ce_scale = (sc.ce * g * f.logit_scale).contiguous();
  const at::Tensor z_scale = (sc.z * g * f.logit_scale).contiguous();
  const auto f32 = input.options().dtype(at::kFloat);
  at::Tensor loss_rows = at::empty({f.M}, f32);  // written by the row step, not returned
  at::Tensor z_rows = f.lse_square_scale != 0.0 ? at::empty({f.M}, f32) : at::Tensor();
  Grads gr = alloc_grads(f, compute_dx, compute_dw, compute_db);
  if (gr.any()) chunk_loop(f, ce_scale, z_scale, sc.weight_sum, loss_rows, z_rows, at::Tensor(), gr);
  return finish_grads(f, input, weight, gr);
}

// t[r, :] *= g for the gradients computed in the forward (mean / sum): the
// backward of a reduced loss. Empty tensors are skipped.
void flce_scale_(const at::Tensor& dX, const at::Tensor& dW, const at::Tensor& dB,
                 const at::Tensor& grad_output) {
  LIGER_CHECK_ARG(grad_output.numel() == 1, "grad_output",
                  "expected one element (a reduced loss), got shape ", shape_str(grad_output));
  LIGER_CHECK_ARG(at::isFloatingType(grad_output.scalar_type()), "grad_output",
                  "expected a floating dtype, got ", dtype_str(grad_output.scalar_type()));
  const char* names[3] = {"dX", "dW", "dB"};
  const at::Tensor* ts[3] = {&dX, &dW, &dB};
  for (int i = 0; i < 3; ++i) {
    const at::Tensor& t = *ts[i];
    if (t.numel() == 0) continue;
    LIGER_CHECK_ARG(t.device() == grad_output.device(), names[i], "expected device ", grad_output.device(),
                    " (grad_output's), got ", t.device());
    LIGER_CHECK_ARG(t.is_contiguous() && is_float_type(t.scalar_type(), !t.is_cuda()), names[i],
                    "expected a contiguous floating tensor, got dtype ", dtype_str(t.scalar_type()));
  }
  const c10::DeviceGuard device_guard(grad_output.device());
  const at::Tensor g = grad_output.reshape({1}).to(at::kFloat).contiguous();
  for (int i = 0; i < 3; ++i) {
    const at::Tensor& t = *ts[i];
    if (t.numel() == 0) continue;
    ce_scale_rows_(t.dim() >= 2 ? t.view({-1, t.size(-1)}) : t.view({1, -1}), g);
    mark_written(t);
  }
}

}  // namespace fused_linear_cross_entropy_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace fused_linear_cross_entropy_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_cross_entropy_fwd", &flce_fwd);
  m.impl("fused_linear_cross_entropy_bwd", &flce_bwd);
  m.impl("fused_linear_cross_entropy_scale_", &flce_scale_);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace fused_linear_cross_entropy_impl;  // NOLINT(build/namespaces)

  m.impl("fused_linear_cross_entropy_fwd", &flce_fwd);
  m.impl("fused_linear_cross_entropy_bwd", &flce_bwd);
  m.impl("fused_linear_cross_entropy_scale_", &flce_scale_);
}
#endif

}  // namespace liger_cpp
