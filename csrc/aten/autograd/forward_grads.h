// The one home of the ops that compute their gradients in the forward, chunk by chunk while the
// logits are at hand, and hand them out in the backward (fused linear cross entropy with reduction
// mean / sum, the preference losses, KTO, GRPO, the distillation losses, the divergences):
// - the backward scales the forward's gradients by grad_output in place and hands those buffers
//   out (no second dX / dW-sized allocation; on CUDA a unit grad_output costs no pass), through
//   liger::fused_linear_cross_entropy_scale_ (scale_in_place);
// - under tracing (fake / functional tensors: torch.compile, opcheck) the backward is the
//   functional expression grad * grad_output (scaled) and nothing is kept for a rerun.
// Two ways to use it:
// - save_forward_grads / take_forward_grads, for an op with its own autograd Function (FLCE,
//   the preference losses, KTO): a second backward through the same graph raises;
// - FwdGradFunction (apply), a whole node described by an OpSpec (GRPO, distillation, the
//   divergences): a second backward (retain_graph, gradcheck's reentrancy check) reruns the op from
//   its arguments, the large ones (hidden states, weights, logits) held by WEAK reference (keeping
//   them alive would cost their memory whenever the caller drops them), after checking every
//   tensor's version counter; otherwise a clear error. The replay state rides in saved_data as the
//   context of an empty CPU tensor's storage (freed with it): compiled autograd hashes every
//   saved_data entry, and a tensor is simply lifted.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/autograd.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "aten/autograd/autograd_common.h"
#include "aten/checks/common.h"

namespace liger_cpp::fwdgrad {

using autograd::AutogradContext;
using autograd::tracing;

// The untyped handle (boxed calls, for a rerun), looked up once per op.
inline const c10::OperatorHandle& find_schema(const char* name) {
  // The dispatcher's handles live as long as the library: a reference to a static copy per name.
  return *new c10::OperatorHandle(c10::Dispatcher::singleton().findSchemaOrThrow(name, ""));
}

// The boxed arguments of one call, for a rerun.
struct Replay {
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Weak {
    size_t index;
    WeakImpl impl;
    int64_t version;
  };
  struct Strong {
    size_t index;
    int64_t version;
  };
  explicit Replay(const c10::OperatorHandle& o) : op(o) {}
  c10::OperatorHandle op;
  std::vector<c10::IValue> args;  // the weakly held tensors' slots are None
  std::vector<Weak> weak;
  std::vector<Strong> strong;
};

// Records args (one IValue per schema argument) with the tensors at `weak_indices` held weakly.
inline std::unique_ptr<Replay> make_replay(const c10::OperatorHandle& op, std::vector<c10::IValue> args,
                                           const std::vector<size_t>& weak_indices) {
  auto r = std::make_unique<Replay>(op);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor t = args[i].toTensor();
    bool is_weak = false;
    for (size_t w : weak_indices) is_weak |= w == i;
    if (is_weak) {
      r->weak.push_back({i, Replay::WeakImpl(t.getIntrusivePtr()), t._version()});
      args[i] = c10::IValue();
    } else {
      r->strong.push_back({i, t._version()});
    }
  }
  r->args = std::move(args);
  return r;
}

template <typename R>
void delete_held(void* p) {
  delete static_cast<R*>(p);
}

template <typename R>
at::Tensor hold(std::unique_ptr<R> r) {
  void* raw = r.release();
  return at::for_blob(raw, {0}).context(raw, &delete_held<R>).options(at::kByte).make_tensor();
}

template <typename R>
const R* held(const torch::autograd::AutogradContext* ctx, const char* key) {
  const auto it = ctx->saved_data.find(key);
  if (it == ctx->saved_data.end()) return nullptr;
  const at::Tensor t = it->second.toTensor();
  if (!t.defined() || !t.has_storage()) return nullptr;
  const c10::DataPtr& p = t.storage().data_ptr();
  return p.get_deleter() == &delete_held<R> ? static_cast<const R*>(p.get_context()) : nullptr;
}

[[noreturn]] inline void second_backward_error(const char* op, const char* why) {
  LIGER_FAIL(op,
             ": a second backward through the same graph (retain_graph=True) needs the gradients again, "
             "but the first backward handed out their buffers and ",
             why,
             ". Keep the inputs (hidden states, weights) unmodified and referenced until the last backward, "
             "or run the forward again.");
}

// Reruns the recorded call with `overrides` (argument index, value) and returns its outputs.
inline std::vector<c10::IValue> rerun(const Replay* r, const char* op,
                                      const std::vector<std::pair<size_t, c10::IValue>>& overrides) {
  if (r == nullptr) second_backward_error(op, "nothing was kept to recompute them");
  std::vector<c10::IValue> stack = r->args;
  for (const Replay::Weak& w : r->weak) {
    auto impl = w.impl.lock();
    if (!impl.defined()) second_backward_error(op, "an input is no longer referenced");
    at::Tensor t(std::move(impl));
    if (t._version() != w.version) second_backward_error(op, "an input was modified in place");
    stack[w.index] = std::move(t);
  }
  for (const Replay::Strong& s : r->strong)
    if (stack[s.index].toTensor()._version() != s.version)
      second_backward_error(op, "an input was modified in place");
  for (const auto& [i, v] : overrides) stack[i] = v;
  {
    const at::AutoDispatchBelowADInplaceOrView below;
    r->op.callBoxed(&stack);
  }
  return stack;
}

// t * g in t's dtype (float32 math, float64 for float64; one rounding): the traced path. g is a
// scalar (the loss's gradient), or has t's number of elements (reduction none).
inline at::Tensor scaled(const at::Tensor& t, const at::Tensor& g) {
  if (!t.defined() || t.sym_numel() == 0) return t;
  const auto acc = t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor gg = g.dim() == 0 ? g.to(acc) : g.to(acc).reshape_symint(t.sym_sizes());
  return (t.to(acc) * gg).to(t.scalar_type());
}

// dX, dW, dB *= g in place (g: one element; rows whose factor is exactly 1 are skipped on CUDA),
// through liger::fused_linear_cross_entropy_scale_, which records the writes in their version
// counters.
inline void scale_in_place(at::Tensor& dx, at::Tensor& dw, at::Tensor& db, const at::Tensor& g) {
  // The signature its kernels are registered with (csrc/aten/composite/fused_linear_cross_entropy.cpp).
  using Sig = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
  static const auto op = autograd::find_op<Sig>("liger::fused_linear_cross_entropy_scale_");
  auto none = [&] { return at::empty({0}, g.options()); };
  at::Tensor a = dx.defined() ? dx : none(), b = dw.defined() ? dw : none(), c = db.defined() ? db : none();
  const at::AutoDispatchBelowADInplaceOrView below;
  op.call(a, b, c, g);
}

// For an op with its own Function, in its forward: keeps dX, dW, dB ((0,) tensors for those not
// computed) and which were.
inline void save_forward_grads(AutogradContext* ctx, const at::Tensor& dx, const at::Tensor& dw,
                               const at::Tensor& db, bool computed_dx, bool computed_dw, bool computed_db) {
  ctx->save_for_backward({dx, dw, db});
  ctx->saved_data["computed_dx"] = computed_dx;
  ctx->saved_data["computed_dw"] = computed_dw;
  ctx->saved_data["computed_db"] = computed_db;
  ctx->saved_data["scaled"] = false;
}

// In its backward: the saved gradients times grad_loss (one element), those not needed undefined.
// op / entry_point name the op and the call that sets its compute_* flags (for the error when a
// needed gradient was not computed); second_backward: the message of a second backward.
inline std::array<at::Tensor, 3> take_forward_grads(AutogradContext* ctx, const at::Tensor& grad_loss,
                                                    std::array<bool, 3> needed, const char* op,
                                                    const char* entry_point, const char* second_backward) {
  static const char* const kNames[3] = {"dx", "dw", "db"};
  static const char* const kKeys[3] = {"computed_dx", "computed_dw", "computed_db"};
  for (int i = 0; i < 3; ++i)
    if (needed[i] && !ctx->saved_data[kKeys[i]].toBool())
      LIGER_FAIL(op, " ran with compute_", kNames[i], "=False, but that gradient is needed; call ",
                 entry_point, " (it sets the flags)");
  if (ctx->saved_data["scaled"].toBool()) LIGER_FAIL(second_backward);
  torch::autograd::variable_list saved = ctx->get_saved_variables();
  std::array<at::Tensor, 3> out;
  if (tracing(grad_loss) || tracing(saved[0])) {
    for (int i = 0; i < 3; ++i)
      if (needed[i]) out[i] = scaled(saved[i], grad_loss.reshape({}));
    return out;
  }
  scale_in_place(saved[0], saved[1], saved[2], grad_loss);
  ctx->saved_data["scaled"] = true;
  for (int i = 0; i < 3; ++i)
    if (needed[i]) out[i] = std::move(saved[i]);
  return out;
}

// How one op returns its forward-computed gradients.
struct OpSpec {
  const char* name;  // "liger::..." for messages
  const c10::OperatorHandle* op;
  size_t grad_out[3];                    // output indices of the gradients of diff inputs 0, 1, 2
  int flag_arg[3];                       // argument indices of their compute_* flags (-1: none)
  std::vector<size_t> weak;              // arguments held weakly for a rerun
  bool elementwise_grad_output = false;  // grad_output may have the gradient's shape (reduction none)
};

struct Call {
  const OpSpec* spec;
  std::vector<c10::IValue> args;     // the op's arguments
  std::vector<c10::IValue> outputs;  // filled by the forward
};

// The autograd node of such an op: its differentiable inputs (up to three, e.g. input, weight,
// bias; None where absent) are the node's inputs, its first output (the loss) the node's only
// output; every other output leaves through Call::outputs without history (non-differentiable).
struct FwdGradFunction : public torch::autograd::Function<FwdGradFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const std::optional<at::Tensor>& d0,
                                                const std::optional<at::Tensor>& d1,
                                                const std::optional<at::Tensor>& d2, Call* call) {
    const OpSpec& spec = *call->spec;
    std::vector<c10::IValue> stack = call->args;
    {
      // Function::apply only turns grad mode off: without this guard the call would come back here.
      const at::AutoDispatchBelowADInplaceOrView below;
      spec.op->callBoxed(&stack);
    }
    ctx->set_materialize_grads(false);
    std::vector<at::Tensor> grads;
    bool traced = false;
    for (int i = 0; i < 3; ++i) {
      const at::Tensor g = stack[spec.grad_out[i]].toTensor();
      grads.push_back(g);
      traced |= tracing(g);
    }
    ctx->save_for_backward(grads);
    const std::optional<at::Tensor>* d[3] = {&d0, &d1, &d2};
    std::vector<int64_t> edge;
    int next = 0;
    for (int i = 0; i < 3; ++i) {
      const bool defined = d[i]->has_value() && (*d[i])->defined();
      edge.push_back(defined ? next++ : -1);
      // computed: the flag was set (or the op has no flag for it, e.g. the divergences).
      const bool computed = spec.flag_arg[i] < 0 ? defined : call->args[spec.flag_arg[i]].toBool();
      ctx->saved_data[std::string("computed") + static_cast<char>('0' + i)] = computed && defined;
    }
    ctx->saved_data["edges"] = edge;
    ctx->saved_data["consumed"] = false;
    if (!traced && !tracing(stack[0].toTensor())) {
      ctx->saved_data["replay"] = hold(make_replay(*spec.op, call->args, spec.weak));
    }
    ctx->saved_data["spec"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(call->spec));
    at::Tensor loss = stack[0].toTensor();
    call->outputs = std::move(stack);
    return {loss};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    torch::autograd::variable_list out(4);
    const at::Tensor& g = grad_outputs[0];
    if (!g.defined()) return out;
    const OpSpec& spec =
        *reinterpret_cast<const OpSpec*>(static_cast<intptr_t>(ctx->saved_data["spec"].toInt()));
    const std::vector<int64_t> edge = ctx->saved_data["edges"].toIntVector();
    bool need[3], any = false;
    for (int i = 0; i < 3; ++i) {
      need[i] = edge[i] >= 0 && ctx->needs_input_grad(static_cast<size_t>(edge[i]));
      any |= need[i];
      if (need[i] && !ctx->saved_data[std::string("computed") + static_cast<char>('0' + i)].toBool())
        LIGER_FAIL(
            spec.name,
            " ran with its compute_* flag for an input that now needs a gradient unset; call it through "
            "its liger_cpp Python entry point (which sets the flags from requires_grad)");
    }
    if (!any) return out;
    // Checked before the saved gradients are unpacked: the first backward scaled them in place.
    if (ctx->saved_data["consumed"].toBool()) {
      // A second backward: rerun the op for the gradients needed, then scale them functionally.
      std::vector<std::pair<size_t, c10::IValue>> flags;
      for (int i = 0; i < 3; ++i)
        if (spec.flag_arg[i] >= 0) flags.emplace_back(static_cast<size_t>(spec.flag_arg[i]), need[i]);
      const std::vector<c10::IValue> again = rerun(held<Replay>(ctx, "replay"), spec.name, flags);
      for (int i = 0; i < 3; ++i)
        if (need[i]) out[i] = scaled(again[spec.grad_out[i]].toTensor(), g);
      return out;
    }
    std::vector<at::Tensor> grads = ctx->get_saved_variables();
    bool traced = tracing(g);
    for (const at::Tensor& t : grads) traced |= tracing(t);
    if (traced) {
      for (int i = 0; i < 3; ++i)
        if (need[i]) out[i] = scaled(grads[i], g);
      return out;
    }
    // Scale the forward's buffers in place and hand them out (AccumulateGrad can take them as .grad).
    ctx->saved_data["consumed"] = true;
    for (int i = 0; i < 3; ++i)
      if (!need[i]) grads[i] = at::Tensor();  // not scaled (slots may share one tensor)
    if (g.dim() == 0) {
      scale_in_place(grads[0], grads[1], grads[2], g);
    } else {
      TORCH_CHECK(spec.elementwise_grad_output, "liger_cpp: ", spec.name, ": expected a scalar grad_output");
      const at::AutoDispatchBelowADInplaceOrView below;
      for (int i = 0; i < 3; ++i)
        if (need[i]) grads[i].mul_(g.reshape(grads[i].sizes()));
    }
    for (int i = 0; i < 3; ++i)
      if (need[i]) out[i] = std::move(grads[i]);
    return out;
  }
};

// Runs `call` through FwdGradFunction; returns the op's outputs, the loss with its history.
inline std::vector<c10::IValue> apply(Call& call, const std::optional<at::Tensor>& d0,
                                      const std::optional<at::Tensor>& d1,
                                      const std::optional<at::Tensor>& d2) {
  torch::autograd::variable_list r = FwdGradFunction::apply(d0, d1, d2, &call);
  call.outputs[0] = std::move(r[0]);
  return std::move(call.outputs);
}

}  // namespace liger_cpp::fwdgrad
