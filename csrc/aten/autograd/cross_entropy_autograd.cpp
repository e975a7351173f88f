// Autograd for liger::cross_entropy_fwd (the default, out-of-place path of
// liger_cpp.ops.cross_entropy) and liger::cross_entropy_fwd_ (the opt-in
// in-place path), in C++ on the Autograd dispatch key (why: autograd_common.h;
// here the Python backward only launched one scaling kernel, a no-op for
// grad_output = 1 on CUDA).
//
// Semantics (unchanged from the Python version it replaces):
// - The forward computes the loss and, with compute_grad, the gradient for
//   grad_output = 1 (dlogits, the op's one logits-sized buffer). z_loss,
//   dlogits and argmax are non-differentiable: the node's only output is the
//   loss, so no zero-filled logits-sized "gradient" is ever materialised.
// - The backward scales dlogits in place by grad_output
//   (liger::cross_entropy_scale_grad_) and hands that buffer out as the
//   logits' gradient: no second buffer (AccumulateGrad steals it).
// - A second backward through the same graph (retain_graph) cannot scale the
//   handed-out buffer again; it recomputes the gradient from the logits, held
//   by WEAK reference (keeping them alive would cost a logits-sized buffer
//   whenever the caller drops them), and from target and weight (small, held
//   strongly), after checking their version counters; otherwise a clear error.
// - Under tracing (fake / functional tensors: torch.compile, opcheck's AOT
//   test) the backward is the functional expression dlogits * grad_output, as
//   the compiler needs; nothing is kept for recomputation then.
// - In place (cross_entropy_fwd_, inplace=True): the forward's mutating op
//   writes the gradient into the logits (bumping their version counter) and
//   the logits are saved after that write; the backward scales them in place
//   and hands them out. A second backward cannot recompute (the logits' storage
//   held the only copy) and raises. The Python entry point never takes this
//   path under torch.compile.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "aten/autograd/autograd_common.h"
#include "aten/checks/common.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace cross_entropy_autograd_impl {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using CeOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using CeSig = CeOut(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t, double,
                    double, double, c10::string_view, bool, bool);
using ScaleSig = void(at::Tensor&, const at::Tensor&);

constexpr int kNumArgs = 11;  // arguments of CrossEntropyFunction::forward, one gradient slot each
// CrossEntropyFunction's saved_data["flags"] bits.
constexpr int64_t kComputeGrad = 1, kPerRow = 2, kConsumed = 4;

const c10::TypedOperatorHandle<CeSig>& ce_fwd_op() {
  static const auto op = find_op<CeSig>("liger::cross_entropy_fwd");
  return op;
}

const c10::TypedOperatorHandle<ScaleSig>& scale_grad_op() {
  static const auto op = find_op<ScaleSig>("liger::cross_entropy_scale_grad_");
  return op;
}

using autograd::once_differentiable;
using autograd::tracing;

// What a second backward needs to recompute the gradient (see the file comment).
struct Recompute {
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  explicit Recompute(const at::Tensor& t) : logits(t.getIntrusivePtr()) {}
  WeakImpl logits;
  uint32_t logits_version = 0;
  at::Tensor target;
  uint32_t target_version = 0;
  std::optional<at::Tensor> weight;
  uint32_t weight_version = 0;
  int64_t ignore_index = -100;
  double label_smoothing = 0, lse_square_scale = 0, softcap = 0;
  std::string reduction;
};

// The Recompute state rides in saved_data as the context of an empty CPU tensor's storage (freed
// with it), not as an IValue capsule: compiled autograd hashes every saved_data entry and a
// capsule is unhashable, while a tensor is simply lifted (and never read under tracing).
void delete_recompute(void* p) { delete static_cast<Recompute*>(p); }

at::Tensor hold(std::unique_ptr<Recompute> r) {
  void* raw = r.release();
  return at::for_blob(raw, {0}).context(raw, &delete_recompute).options(at::kByte).make_tensor();
}

const Recompute* held(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  const c10::DataPtr& p = t.storage().data_ptr();
  return p.get_deleter() == &delete_recompute ? static_cast<const Recompute*>(p.get_context()) : nullptr;
}

[[noreturn]] void second_backward_error(const char* why) {
  LIGER_FAIL(
      "cross_entropy: a second backward through the same graph (retain_graph=True) needs the gradient "
      "again, but the first backward handed out its buffer and ",
      why,
      ". Keep the logits (and target, weight) unmodified and referenced until the last backward, or use "
      "inplace=False.");
}

at::Tensor recompute(AutogradContext* ctx) {
  const auto it = ctx->saved_data.find("recompute");
  const Recompute* r = it == ctx->saved_data.end() ? nullptr : held(it->second.toTensor());
  if (r == nullptr) second_backward_error("nothing was kept to recompute it");
  auto impl = r->logits.lock();
  if (!impl.defined()) second_backward_error("the logits are no longer referenced");
  const at::Tensor logits(std::move(impl));
  const bool weight_changed = r->weight.has_value() && r->weight->_version() != r->weight_version;
  if (logits._version() != r->logits_version || r->target._version() != r->target_version || weight_changed)
    second_backward_error("the logits, target or weight were modified in place");
  const at::AutoDispatchBelowADInplaceOrView below;
  return std::get<2>(ce_fwd_op().call(logits, r->target, r->weight, r->ignore_index, r->label_smoothing,
                                      r->lse_square_scale, r->softcap, r->reduction, /*compute_grad=*/true,
                                      /*return_argmax=*/false));
}

// dl * grad_output as a functional expression (fp32 math, one rounding): the traced path.
at::Tensor scaled_out_of_place(const at::Tensor& dl, const at::Tensor& grad_output, bool per_row) {
  const auto acc = dl.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor g = grad_output.to(acc);
  if (per_row) g = g.reshape_symint(dl.sym_sizes().slice(0, dl.dim() - 1)).unsqueeze(-1);
  return (dl.to(acc) * g).to(dl.scalar_type());
}

struct CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t ignore_index,
                               double label_smoothing, double lse_square_scale, double softcap,
                               c10::string_view reduction, bool compute_grad, bool return_argmax,
                               CeOut* result) {
    // Function::apply only turns grad mode off: without this guard the call would come back here.
    auto [loss, z_loss, dlogits, argmax] = [&] {
      const at::AutoDispatchBelowADInplaceOrView below;
      return ce_fwd_op().call(logits, target, weight, ignore_index, label_smoothing, lse_square_scale,
                              softcap, reduction, compute_grad, return_argmax);
    }();
    // z_loss, dlogits and argmax are non-differentiable: they leave through `result`, not as outputs
    // of the node (mark_non_differentiable would do the same, but then CppNode fails compiled
    // autograd's assertion that the context's non_differentiable_ set is empty). With dlogits an
    // output, autograd also handed the backward a zero-filled logits-sized "gradient" for it unless
    // grads were not materialised (found with the memory profiler at the H200's peak); the node's
    // one output now is the loss, and a missing loss gradient means no gradient, not zeros.
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({dlogits});
    // One entry for the flags (each saved_data insert is a string-keyed hash-map node).
    ctx->saved_data["flags"] =
        static_cast<int64_t>((compute_grad ? kComputeGrad : 0) | (reduction == "none" ? kPerRow : 0));
    if (compute_grad && !tracing(logits)) {
      auto r = std::make_unique<Recompute>(logits);
      r->logits_version = logits._version();
      r->target = target;
      r->target_version = target._version();
      if (weight.has_value() && weight->defined()) {
        r->weight = *weight;
        r->weight_version = weight->_version();
      }
      r->ignore_index = ignore_index;
      r->label_smoothing = label_smoothing;
      r->lse_square_scale = lse_square_scale;
      r->softcap = softcap;
      r->reduction = std::string(reduction);
      ctx->saved_data["recompute"] = hold(std::move(r));
    }
    *result = {loss, z_loss, dlogits, argmax};
    return {loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(kNumArgs);
    const at::Tensor& dloss = grads[0];
    if (!ctx->needs_input_grad(0) || !dloss.defined()) return out;
    const int64_t flags = ctx->saved_data["flags"].toInt();
    if (!(flags & kComputeGrad)) {
      LIGER_FAIL(
          "cross_entropy_fwd was called with compute_grad=False, so it has no gradient for the logits; call "
          "it with compute_grad=True (liger_cpp.ops.cross_entropy does so when the logits require grad and "
          "grad mode is on)");
    }
    at::Tensor dl = (flags & kConsumed) ? recompute(ctx) : ctx->get_saved_variables()[0];
    if (tracing(dl)) {
      out[0] = scaled_out_of_place(dl, dloss, flags & kPerRow);
      return out;
    }
    // Scale the forward's buffer in place and hand it out: no second logits-sized buffer. A second
    // backward through this graph recomputes instead of scaling the handed-out buffer again.
    ctx->saved_data["flags"] = flags | kConsumed;
    {
      const at::AutoDispatchBelowADInplaceOrView below;  // dl never requires grad
      scale_grad_op().call(dl, dloss);
    }
    out[0] = std::move(dl);  // no reference left here: AccumulateGrad can take the buffer as .grad
    return once_differentiable(std::move(out), "cross_entropy", {dloss});
  }
};

using CeInplaceOut = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using CeInplaceSig = CeInplaceOut(at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t,
                                  double, double, double, c10::string_view, bool);

const c10::TypedOperatorHandle<CeInplaceSig>& ce_fwd_inplace_op() {
  static const auto op = autograd::find_op<CeInplaceSig>("liger::cross_entropy_fwd_");
  return op;
}

struct CrossEntropyInplaceFunction : public torch::autograd::Function<CrossEntropyInplaceFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t ignore_index,
                               double label_smoothing, double lse_square_scale, double softcap,
                               c10::string_view reduction, bool return_argmax, CeInplaceOut* result) {
    at::Tensor l = logits;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      *result = ce_fwd_inplace_op().call(l, target, weight, ignore_index, label_smoothing, lse_square_scale,
                                         softcap, reduction, return_argmax);
    }
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({logits});  // saved after the write: its version check passes until the next one
    ctx->saved_data["consumed"] = false;
    return {std::get<0>(*result)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(10);
    const at::Tensor& dloss = grads[0];
    if (!ctx->needs_input_grad(0) || !dloss.defined()) return out;
    if (ctx->saved_data["consumed"].toBool())
      second_backward_error("with inplace=True the logits' storage held the only copy");
    at::Tensor dl = ctx->get_saved_variables()[0];
    ctx->saved_data["consumed"] = true;
    {
      const at::AutoDispatchBelowADInplaceOrView below;
      scale_grad_op().call(dl, dloss);
    }
    out[0] = dl.detach();
    return once_differentiable(std::move(out), "cross_entropy", {dloss});
  }
};

CeInplaceOut cross_entropy_fwd_inplace_autograd(at::Tensor& logits, const at::Tensor& target,
                                                const std::optional<at::Tensor>& weight, int64_t ignore_index,
                                                double label_smoothing, double lse_square_scale,
                                                double softcap, c10::string_view reduction,
                                                bool return_argmax) {
  if (!autograd::any_requires_grad(logits)) {
    const at::AutoDispatchBelowADInplaceOrView below;
    return ce_fwd_inplace_op().call(logits, target, weight, ignore_index, label_smoothing, lse_square_scale,
                                    softcap, reduction, return_argmax);
  }
  CeInplaceOut result;
  variable_list r =
      CrossEntropyInplaceFunction::apply(logits, target, weight, ignore_index, label_smoothing,
                                         lse_square_scale, softcap, reduction, return_argmax, &result);
  std::get<0>(result) = std::move(r[0]);
  return result;
}

CeOut cross_entropy_fwd_autograd(const at::Tensor& logits, const at::Tensor& target,
                                 const std::optional<at::Tensor>& weight, int64_t ignore_index,
                                 double label_smoothing, double lse_square_scale, double softcap,
                                 c10::string_view reduction, bool compute_grad, bool return_argmax) {
  if (!autograd::any_requires_grad(logits)) {  // no node: nothing can ask for a gradient
    const at::AutoDispatchBelowADInplaceOrView below;
    return ce_fwd_op().call(logits, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap,
                            reduction, compute_grad, return_argmax);
  }
  CeOut result;
  variable_list r =
      CrossEntropyFunction::apply(logits, target, weight, ignore_index, label_smoothing, lse_square_scale,
                                  softcap, reduction, compute_grad, return_argmax, &result);
  std::get<0>(result) = std::move(r[0]);  // the loss with its autograd history
  return result;
}

}  // namespace cross_entropy_autograd_impl

TORCH_LIBRARY_IMPL(liger, Autograd, m) {
  using namespace cross_entropy_autograd_impl;  // NOLINT(build/namespaces)

  m.impl("cross_entropy_fwd", &cross_entropy_fwd_autograd);
  m.impl("cross_entropy_fwd_", &cross_entropy_fwd_inplace_autograd);
}

}  // namespace liger_cpp
