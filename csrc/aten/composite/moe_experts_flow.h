// The orchestration of liger::moe_experts_{fwd,bwd} (csrc/schema.cpp), written once for both
// devices: a Backend supplies the routing, the row kernels and the grouped GEMMs
// (csrc/aten/cpu/moe_experts_cpu.cpp: loops and at::mm per expert; csrc/aten/cuda/
// moe_experts_cuda.cpp: csrc/kernels/moe and at::_grouped_mm).
//
// Backend interface (R: the routing tensors offsets, sorted_slot, slot_row, sorted_expert):
//   routing(idx, E, R&)                       stable sort of the slots by expert
//   gather(src [T, C], R, k) -> [S, C]        routed rows of src, zero for dropped rows
//   gmm(a [S, K], w [E, K, N], R) -> [S, N]   row r times w[expert of r] (routed rows only)
//   gmm_wgrad(at [K, S], b [S, N], R) -> [E, K, N] per expert at[:, rows_e] @ b[rows_e] (0 if none)
//   act_fwd(gu, bias, R, opts) -> a [S, I]
//   act_bwd(gu, bias, d_act, w32, g_rows, down_bias, R, opts, &d_gu, &act_w, &dw32)
//   combine(y [S, C], w32 or undefined, bias or undefined, R, T, k) -> [T, C]
//   segsum(m [S, C], w32 or undefined, R) -> [E, C]
#pragma once

#include <ATen/ATen.h>

#include <string_view>
#include <tuple>
#include <vector>

#include "aten/checks/moe_checks.h"

namespace liger_cpp {

struct MoeRouting {
  at::Tensor offsets, sorted_slot, slot_row, sorted_expert;  // int32: [E], [S], [S], [S]
  // The offsets read back to the host, once per forward or backward, by a backend whose GEMMs
  // loop over the experts on the host (CUDA float16 / float32): one synchronisation a call, not one
  // a GEMM. Empty until then.
  mutable std::vector<int64_t> host_offsets{};
};

struct MoeOpts {
  MoeActivation act;
  bool transposed, interleaved;
  double alpha, limit;
  int64_t E, I;
};

using MoeFwdOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using MoeBwdOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The GEMMs' weights as [E, K, N] views (x @ w[e]): gate_up [E, H, 2I], down [E, I, H].
inline at::Tensor moe_gate_up_kn(const at::Tensor& w, bool transposed) {
  return transposed ? w : w.transpose(1, 2);
}
inline at::Tensor moe_down_kn(const at::Tensor& w, bool transposed) {
  return transposed ? w : w.transpose(1, 2);
}

template <typename Backend>
MoeFwdOut moe_experts_fwd_flow(const at::Tensor& hidden, const at::Tensor& top_k_index,
                               const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                               const at::Tensor& down_proj, const c10::optional<at::Tensor>& gate_up_bias_,
                               const c10::optional<at::Tensor>& down_bias_, std::string_view activation,
                               bool transposed, bool interleaved, double alpha, double limit) {
  const at::Tensor gub = gate_up_bias_.has_value() ? *gate_up_bias_ : at::Tensor();
  const at::Tensor db = down_bias_.has_value() ? *down_bias_ : at::Tensor();
  const MoeShape sh = check_moe_inputs(hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gub, db,
                                       transposed, Backend::kCuda);
  const MoeOpts o{parse_moe_activation(activation), transposed, interleaved, alpha, limit, sh.E, sh.I};
  const typename Backend::Guard guard(hidden.device());
  MoeRouting R;
  Backend::routing(top_k_index.contiguous(), sh.E, R);
  const at::Tensor w32 = top_k_weights.to(Backend::weight_dtype(hidden)).contiguous().view({-1});
  const at::Tensor x = hidden.contiguous();
  // Each [S, *] intermediate is released as soon as the next step has read it (the caching allocator
  // hands its block to the next one): at S = 131072, H 2048 the routed rows alone are 512 MiB.
  at::Tensor xs = Backend::gather(x, R, sh.k);
  const at::Tensor gu = Backend::gmm(xs, moe_gate_up_kn(gate_up_proj, transposed), R);
  xs = at::Tensor();
  const at::Tensor a = Backend::act_fwd(gu, gub, R, o);
  const at::Tensor y = Backend::gmm(a, moe_down_kn(down_proj, transposed), R);
  at::Tensor out = Backend::combine(y, w32, db, R, sh.T, sh.k);
  return {out, gu, R.offsets, R.sorted_slot, R.slot_row, R.sorted_expert};
}

template <typename Backend>
MoeBwdOut moe_experts_bwd_flow(const at::Tensor& grad_out, const at::Tensor& hidden,
                               const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                               const at::Tensor& down_proj, const c10::optional<at::Tensor>& gate_up_bias_,
                               const c10::optional<at::Tensor>& down_bias_, const at::Tensor& gate_up,
                               const at::Tensor& offsets, const at::Tensor& sorted_slot,
                               const at::Tensor& slot_row, const at::Tensor& sorted_expert,
                               std::string_view activation, bool transposed, bool interleaved, double alpha,
                               double limit, bool compute_dx, bool compute_experts) {
  const at::Tensor gub = gate_up_bias_.has_value() ? *gate_up_bias_ : at::Tensor();
  const at::Tensor db = down_bias_.has_value() ? *down_bias_ : at::Tensor();
  const int64_t T = hidden.size(0), k = top_k_weights.size(1);
  // The index's checks ran in the forward; its shape is the weights'.
  const MoeShape sh = check_moe_inputs(hidden, at::Tensor(), top_k_weights, gate_up_proj, down_proj, gub, db,
                                       transposed, Backend::kCuda);
  LIGER_CHECK_ARG(grad_out.sizes() == hidden.sizes(), "grad_out", "expected hidden's shape ",
                  shape_str(hidden), ", got ", shape_str(grad_out));
  const int64_t S = T * k;
  const std::pair<const at::Tensor*, const char*> meta[] = {{&offsets, "offsets"},
                                                            {&sorted_slot, "sorted_slot"},
                                                            {&slot_row, "slot_row"},
                                                            {&sorted_expert, "sorted_expert"}};
  for (const auto& [t, name] : meta) {
    const int64_t want = t == &offsets ? sh.E : S;
    LIGER_CHECK_ARG(t->scalar_type() == at::kInt && t->dim() == 1 && t->size(0) == want &&
                        t->is_contiguous() && t->device() == hidden.device(),
                    name, "expected the forward's int32 routing tensor of ", want, " elements");
  }
  LIGER_CHECK_ARG(gate_up.dim() == 2 && gate_up.size(0) == S && gate_up.size(1) == 2 * sh.I &&
                      gate_up.scalar_type() == hidden.scalar_type(),
                  "gate_up", "expected the forward's [S, 2I] gate_up output");
  const MoeOpts o{parse_moe_activation(activation), transposed, interleaved, alpha, limit, sh.E, sh.I};
  const typename Backend::Guard guard(hidden.device());
  const MoeRouting R{offsets, sorted_slot, slot_row, sorted_expert};
  const at::Tensor w32 = top_k_weights.to(Backend::weight_dtype(hidden)).contiguous().view({-1});
  const at::Tensor g = grad_out.to(hidden.scalar_type()).contiguous();
  at::Tensor grows = Backend::gather(g, R, k);  // dOut's rows in routed order, unweighted
  // dA' = G W_down_e^T: down's [E, H, I] view.
  at::Tensor d_act = Backend::gmm(grows, moe_down_kn(down_proj, transposed).transpose(1, 2), R);
  at::Tensor d_gu, act_w, dw32;
  Backend::act_bwd(gate_up, gub, d_act, w32, grows, db, R, o, d_gu, act_w, dw32);
  // As in the forward, intermediates go as soon as they are read: d_act here, w a after d(down_proj),
  // the routed rows of dOut and of x after their weight gradients, d gu after dXs. The weight
  // gradients' GEMMs are the backward's peak, and d_act and w a were 2 x [S, I] of it.
  d_act = at::Tensor();
  // Gradients not asked for (and absent biases') are empty tensors, each its own.
  const auto none = [&] { return at::empty({0}, hidden.options()); };
  at::Tensor d_down = none(), d_db = none(), d_gate_up = none(), d_gub = none(), dx = none();
  if (compute_experts) {
    // d(down_proj): [E, H, I] = G^T (w a) per expert, or [E, I, H] = (w a)^T G when transposed.
    d_down = transposed ? Backend::gmm_wgrad(act_w.t(), grows, R) : Backend::gmm_wgrad(grows.t(), act_w, R);
    act_w = at::Tensor();
    if (db.defined()) d_db = Backend::segsum(grows, w32, R);
    grows = at::Tensor();
    const at::Tensor xs = Backend::gather(hidden.contiguous(), R, k);
    d_gate_up = transposed ? Backend::gmm_wgrad(xs.t(), d_gu, R) : Backend::gmm_wgrad(d_gu.t(), xs, R);
    if (gub.defined()) d_gub = Backend::segsum(d_gu, at::Tensor(), R);
  }
  act_w = at::Tensor();  // without compute_experts neither was read after the activation backward
  grows = at::Tensor();
  if (compute_dx) {
    // dXs = dGU W_gate_up_e^T: gate_up's [E, 2I, H] view; dX[t] = sum of its k rows.
    const at::Tensor dxs = Backend::gmm(d_gu, moe_gate_up_kn(gate_up_proj, transposed).transpose(1, 2), R);
    d_gu = at::Tensor();
    dx = Backend::combine(dxs, at::Tensor(), at::Tensor(), R, T, k);
  }
  at::Tensor dw = dw32.view({T, k}).to(top_k_weights.scalar_type());
  return {dx, dw, d_gate_up, d_down, d_gub, d_db};
}

}  // namespace liger_cpp
