// liger::glu_mlp_fwd / glu_mlp_bwd / glu_mlp_bwd_: a bias-free GLU MLP (HF LlamaMLP, GemmaMLP) as
// one op, registered for both devices. Math: csrc/schema.cpp.
//
// Why one op: at batch 1 a training step is bound by the host, and an MLP written as three
// nn.Linear calls and a GLU costs about sixty dispatcher calls and fifteen autograd nodes (linear,
// matmul's fold, t, mm, _unsafe_view; in the backward UnsafeView, Mm, T, View and AccumulateGrad
// nodes and the add of x's two gradients). Here it is one call and one node around the same GEMMs:
// the forward makes nn.Linear's mm calls on the same (M, H) rows, so a, b, c and y are bitwise
// HF's; the backward makes autograd's mm calls for dc and the weight gradients, and accumulates dx
// in one addmm (float32 accumulation, one rounding, where autograd adds two rounded products).
// The gated activation is liger_cpp's GLU op (its CPU twin or CUDA kernel).
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <string>
#include <string_view>
#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/linear_chunks.h"
#include "aten/checks/projection_checks.h"
#include "aten/glu_ops.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles the host files as one unity translation unit.
namespace glu_mlp_impl {

using Quad = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

enum class Act { kSilu, kGeluTanh, kGeluErf };

Act parse_activation(c10::string_view s) {
  const std::string_view v(s.data(), s.size());
  if (v == "silu") return Act::kSilu;
  if (v == "gelu_tanh") return Act::kGeluTanh;
  if (v == "gelu") return Act::kGeluErf;
  LIGER_FAIL("argument 'activation': expected 'silu', 'gelu_tanh' or 'gelu', got '", v, "'");
}

// The GLU ops' approximate argument (aten/glu_ops.h): nullptr for SiLU.
const char* approximate(Act act) {
  return act == Act::kSilu ? nullptr : act == Act::kGeluTanh ? "tanh" : "none";
}

struct Sizes {
  int64_t M, H, I, O;
};

Sizes check_inputs(const at::Tensor& x, const at::Tensor& wg, const at::Tensor& wu, const at::Tensor& wd) {
  projections::check_input(x);
  const int64_t H = x.size(-1);
  projections::check_weight(wg, "w_gate", x, -1, H);
  const int64_t I = wg.size(0);
  projections::check_weight(wu, "w_up", x, I, H);
  projections::check_weight(wd, "w_down", x, -1, I);
  return {H == 0 ? 0 : x.numel() / H, H, I, wd.size(0)};
}

using projections::rows;

Quad fwd(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down,
         c10::string_view activation) {
  const Act act = parse_activation(activation);
  const Sizes s = check_inputs(x, w_gate, w_up, w_down);
  const c10::DeviceGuard guard(x.device());
  const at::Tensor x2 = rows(x, s.M, s.H);
  at::Tensor a = at::mm(x2, w_gate.t());
  at::Tensor b = at::mm(x2, w_up.t());
  at::Tensor c = glu_ops::fwd(a, b, approximate(act), false);
  std::vector<int64_t> y_sizes = x.sizes().vec();
  y_sizes.back() = s.O;
  at::Tensor y = at::empty(y_sizes, x.options());
  at::Tensor y2 = y.view({s.M, s.O});
  at::mm_out(y2, c, w_down.t());
  return {y, a, b, c};
}

void check_saved(const at::Tensor& t, const char* name, const Sizes& s, const at::Tensor& x) {
  LIGER_CHECK_ARG(t.dim() == 2 && t.size(0) == s.M && t.size(1) == s.I, name, "expected shape (", s.M, ", ",
                  s.I, ") (the forward's), got ", shape_str(t));
  LIGER_CHECK_ARG(t.scalar_type() == x.scalar_type() && t.device() == x.device(), name,
                  "expected x's dtype and device");
}

Quad bwd_impl(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
              const at::Tensor& w_down, at::Tensor& a, at::Tensor& b, at::Tensor& c,
              c10::string_view activation, std::array<bool, 4> mask, bool in_place) {
  const Act act = parse_activation(activation);
  const Sizes s = check_inputs(x, w_gate, w_up, w_down);
  check_saved(a, "a", s, x);
  check_saved(b, "b", s, x);
  check_saved(c, "c", s, x);
  LIGER_CHECK_ARG(dy.numel() == s.M * s.O && dy.dim() >= 1 && dy.size(-1) == s.O, "dy",
                  "expected the forward output's shape (", s.M, " rows of ", s.O, "), got ", shape_str(dy));
  LIGER_CHECK_ARG(dy.scalar_type() == x.scalar_type() && dy.device() == x.device(), "dy",
                  "expected x's dtype and device, got ", dtype_str(dy.scalar_type()), " on ", dy.device());
  if (in_place) {
    LIGER_CHECK_ARG(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(), "a",
                    "the in-place backward needs contiguous a, b and c, got strides ", a.strides(), ", ",
                    b.strides(), " and ", c.strides());
    LIGER_CHECK_ARG(at::get_overlap_status(a, b) == at::MemOverlapStatus::No, "b",
                    "the in-place backward needs a and b in separate memory");
    LIGER_CHECK_ARG(at::get_overlap_status(a, c) == at::MemOverlapStatus::No &&
                        at::get_overlap_status(b, c) == at::MemOverlapStatus::No,
                    "c", "the in-place backward needs c in memory separate from a and b");
  }
  const c10::DeviceGuard guard(x.device());
  const at::Tensor dy2 = dy.dim() == 2 ? dy : dy.reshape({s.M, s.O});
  const auto none = [&] { return at::empty({0}, x.options()); };
  at::Tensor dx = none(), dwg = none(), dwu = none(), dwd = none();
  if (mask[3]) dwd = at::mm(dy2.t(), c);
  if (mask[0] || mask[1] || mask[2]) {
    at::Tensor dc;
    if (in_place) {  // c has been read (dW_down above): dc takes its memory
      dc = c;
      at::mm_out(dc, dy2, w_down);
      mark_written(c);
    } else {
      dc = at::mm(dy2, w_down);
    }
    at::Tensor da, db;
    if (in_place) {
      glu_ops::bwd_inplace(dc, a, b, approximate(act));  // marks a and b written
      da = a;
      db = b;
    } else {
      std::tie(da, db) = glu_ops::bwd(dc, a, b, approximate(act));
    }
    if (mask[0]) {
      dx = at::empty(x.sizes(), x.options());
      at::Tensor dx2 = dx.view({s.M, s.H});
      at::mm_out(dx2, da, w_gate);
      dx2.addmm_(db, w_up);
    }
    const at::Tensor x2 = (mask[1] || mask[2]) ? rows(x, s.M, s.H) : at::Tensor();
    if (mask[1]) dwg = at::mm(da.t(), x2);
    if (mask[2]) dwu = at::mm(db.t(), x2);
  }
  return {dx, dwg, dwu, dwd};
}

// Without autograd (no gradient can be needed): y only.
at::Tensor forward_only(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
                        const at::Tensor& w_down, c10::string_view activation, bool /*in_place*/) {
  return std::get<0>(fwd(x, w_gate, w_up, w_down, activation));
}

Quad bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
         const at::Tensor& w_down, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c,
         c10::string_view activation, std::array<bool, 4> output_mask) {
  at::Tensor a_ = a, b_ = b, c_ = c;  // read only (in_place=false)
  return bwd_impl(dy, x, w_gate, w_up, w_down, a_, b_, c_, activation, output_mask, false);
}

Quad bwd_inplace(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
                 const at::Tensor& w_down, at::Tensor& a, at::Tensor& b, at::Tensor& c,
                 c10::string_view activation, std::array<bool, 4> output_mask) {
  return bwd_impl(dy, x, w_gate, w_up, w_down, a, b, c, activation, output_mask, true);
}

// ---- glu_mlp_tiled: the same MLP over shards of the rows, recomputed in the backward ----

// Rows a shard: ceil(M / shards), as torch.chunk (the Python tiled MLP's shards).
int64_t shard_step(int64_t M, int64_t shards) {
  LIGER_CHECK_ARG(shards >= 1, "shards", "expected a positive number of shards, got ", shards);
  return M == 0 ? 1 : (M + shards - 1) / shards;
}

at::Tensor tiled_fwd(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
                     const at::Tensor& w_down, c10::string_view activation, int64_t shards) {
  const Act act = parse_activation(activation);
  const Sizes s = check_inputs(x, w_gate, w_up, w_down);
  const int64_t step = shard_step(s.M, shards);
  const c10::DeviceGuard guard(x.device());
  const at::Tensor x2 = rows(x, s.M, s.H);
  std::vector<int64_t> y_sizes = x.sizes().vec();
  y_sizes.back() = s.O;
  at::Tensor y = at::empty(y_sizes, x.options());
  at::Tensor y2 = y.view({s.M, s.O});
  for (int64_t r0 = 0; r0 < s.M; r0 += step) {
    const int64_t n = std::min(step, s.M - r0);
    const at::Tensor xs = x2.narrow(0, r0, n);
    const at::Tensor c = glu_ops::fwd(at::mm(xs, w_gate.t()), at::mm(xs, w_up.t()), approximate(act), false);
    at::Tensor ys = y2.narrow(0, r0, n);
    at::mm_out(ys, c, w_down.t());
  }
  return y;
}

// dw (+)= lhs rhs: into the float32 accumulator for 16-bit weights (heads::accumulate_dw_fp32:
// cuBLAS with a float32 C on CUDA), in the weight's own dtype otherwise.
void accumulate(at::Tensor& dw, const at::Tensor& lhs, const at::Tensor& rhs, bool first, bool low) {
  if (low) {
    heads::accumulate_dw_fp32(dw, lhs, rhs, first);
  } else if (first) {
    at::mm_out(dw, lhs, rhs);
  } else {
    dw.addmm_(lhs, rhs);
  }
}

Quad tiled_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up,
               const at::Tensor& w_down, c10::string_view activation, int64_t shards,
               std::array<bool, 4> mask) {
  const Act act = parse_activation(activation);
  const Sizes s = check_inputs(x, w_gate, w_up, w_down);
  const int64_t step = shard_step(s.M, shards);
  LIGER_CHECK_ARG(dy.numel() == s.M * s.O && dy.dim() >= 1 && dy.size(-1) == s.O, "dy",
                  "expected the forward output's shape (", s.M, " rows of ", s.O, "), got ", shape_str(dy));
  LIGER_CHECK_ARG(dy.scalar_type() == x.scalar_type() && dy.device() == x.device(), "dy",
                  "expected x's dtype and device, got ", dtype_str(dy.scalar_type()), " on ", dy.device());
  const c10::DeviceGuard guard(x.device());
  const at::Tensor x2 = rows(x, s.M, s.H);
  const at::Tensor dy2 = dy.reshape({s.M, s.O});
  const bool low = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  const auto none = [&] { return at::empty({0}, x.options()); };
  // the weight gradients' accumulators (zeros where no shard will write them)
  const auto acc = [&](bool want, const at::Tensor& w) {
    if (!want) return none();
    const auto opts = w.options().dtype(low ? at::kFloat : w.scalar_type());
    return s.M == 0 ? at::zeros(w.sizes(), opts) : at::empty(w.sizes(), opts);
  };
  at::Tensor dwg = acc(mask[1], w_gate), dwu = acc(mask[2], w_up), dwd = acc(mask[3], w_down);
  at::Tensor dx = mask[0] ? at::empty(x.sizes(), x.options()) : none();
  at::Tensor dx2 = mask[0] ? dx.view({s.M, s.H}) : dx;
  const bool inputs_grad = mask[0] || mask[1] || mask[2];
  for (int64_t r0 = 0; r0 < s.M; r0 += step) {
    const int64_t n = std::min(step, s.M - r0);
    const bool first = r0 == 0;
    const at::Tensor xs = x2.narrow(0, r0, n), dys = dy2.narrow(0, r0, n);
    at::Tensor a = at::mm(xs, w_gate.t()), b = at::mm(xs, w_up.t());
    at::Tensor c = glu_ops::fwd(a, b, approximate(act), false);
    if (mask[3]) accumulate(dwd, dys.t(), c, first, low);
    if (!inputs_grad) continue;
    at::mm_out(c, dys, w_down);                       // dc, in c's memory: c has been read
    glu_ops::bwd_inplace(c, a, b, approximate(act));  // da into a, db into b
    if (mask[0]) {
      at::Tensor dxs = dx2.narrow(0, r0, n);
      at::mm_out(dxs, a, w_gate);
      dxs.addmm_(b, w_up);
    }
    if (mask[1]) accumulate(dwg, a.t(), xs, first, low);
    if (mask[2]) accumulate(dwu, b.t(), xs, first, low);
  }
  if (mask[1]) dwg = dwg.to(w_gate.scalar_type());  // one rounding of the float32 sums
  if (mask[2]) dwu = dwu.to(w_up.scalar_type());
  if (mask[3]) dwd = dwd.to(w_down.scalar_type());
  return {dx, dwg, dwu, dwd};
}

}  // namespace glu_mlp_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  m.impl("glu_mlp", &glu_mlp_impl::forward_only);
  m.impl("glu_mlp_fwd", &glu_mlp_impl::fwd);
  m.impl("glu_mlp_bwd", &glu_mlp_impl::bwd);
  m.impl("glu_mlp_bwd_", &glu_mlp_impl::bwd_inplace);
  m.impl("glu_mlp_tiled", &glu_mlp_impl::tiled_fwd);
  m.impl("glu_mlp_tiled_bwd", &glu_mlp_impl::tiled_bwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  m.impl("glu_mlp", &glu_mlp_impl::forward_only);
  m.impl("glu_mlp_fwd", &glu_mlp_impl::fwd);
  m.impl("glu_mlp_bwd", &glu_mlp_impl::bwd);
  m.impl("glu_mlp_bwd_", &glu_mlp_impl::bwd_inplace);
  m.impl("glu_mlp_tiled", &glu_mlp_impl::tiled_fwd);
  m.impl("glu_mlp_tiled_bwd", &glu_mlp_impl::tiled_bwd);
}
#endif

}  // namespace liger_cpp
