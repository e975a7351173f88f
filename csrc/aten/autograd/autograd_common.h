// Helpers shared by the C++ autograd of every op (csrc/aten/autograd/<op>_autograd.cpp).
//
// Why autograd lives here, in C++ on the Autograd dispatch key, for every op: a Python autograd
// formula (torch.library.register_autograd) costs Python on the way in (the generated
// autograd.Function: redispatch, fill_defaults, setup_context) and, on the way back, the engine's
// thread takes the GIL to run a Python backward that only calls one more op. For the small calls
// a training step is full of (norms, GLUs, RoPE at short sequences) that was more host time than
// the kernels take; in C++ an eager call costs about what PyTorch's own op costs
// (benchmarks/bench_host_cost.py, docs/adding_an_op.md).
//
// The pattern (see rms_norm_autograd.cpp for the simplest complete example):
// - The Autograd kernel first checks whether any gradient can be needed (grad mode on and a
//   differentiable input requiring grad); if not, it calls the op below autograd directly, with
//   no node at all (what PyTorch's generated VariableType kernels do).
// - Otherwise a torch::autograd::Function whose forward calls the op below autograd
//   (AutoDispatchBelowADInplaceOrView) and returns only the differentiable outputs; the others
//   (statistics, metrics, gradients computed in the forward) leave through an out-pointer, so they
//   are non-differentiable without mark_non_differentiable (which compiled autograd rejects for
//   C++ nodes), and set_materialize_grads(false) keeps unused outputs' gradients undefined (no
//   zero-filled tensors).
// - The backward casts an incoming gradient of another floating dtype to the output's dtype (as
//   PyTorch's own ops do), computes only the gradients needs_input_grad asks for, and calls the
//   backward op below autograd. Under create_graph=True its results get an Error node so that a
//   second backward raises a clear error (the ops are once differentiable), not a silent None.
// - In-place options (the declared mutations of csrc/schema.cpp) are taken only in eager mode:
//   never while tracing (fake or functional tensors: torch.compile, AOT autograd, opcheck), where
//   the functional op is traced instead. tracing() is the C++ form of the Python paths'
//   torch.compiler.is_compiling() / is_fake() checks.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "aten/op_handle.h"

namespace liger_cpp {
namespace autograd {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using liger_cpp::find_op;  // the op's handle (aten/op_handle.h)

// Fake or functional tensors (torch.compile, AOT autograd, opcheck): only functional code then.
inline bool tracing(const at::Tensor& t) {
  return t.defined() && t.key_set().has_any(
                            c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
}

inline bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool requires_grad(const std::optional<at::Tensor>& t) { return t.has_value() && requires_grad(*t); }

// Whether autograd may ask for a gradient of any of these inputs (grad mode on, one requires grad).
template <typename... T>
bool any_requires_grad(const T&... t) {
  return at::GradMode::is_enabled() && (requires_grad(t) || ...);
}

inline at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

// needs_input_grad's index of each tensor argument: Function::apply numbers only the tensor
// arguments that are defined (an absent optional tensor takes no slot), while backward returns one
// entry per argument.
class InputSlots {
 public:
  // Call with each tensor argument in order; returns its needs_input_grad index, or -1 if absent.
  int add(bool defined) { return defined ? next_++ : -1; }

 private:
  int next_ = 0;
};

inline bool needs(AutogradContext* ctx, int slot) { return slot >= 0 && ctx->needs_input_grad(slot); }

// A gradient for an output of dtype `dtype`: one of another floating dtype is cast (PyTorch's
// own backward formulas accept any floating grad_output the same way).
inline at::Tensor grad_as(const at::Tensor& g, at::ScalarType dtype) {
  if (!g.defined() || g.scalar_type() == dtype) return g;
  return g.to(dtype);
}

// torch holds autograd nodes by std::shared_ptr up to 2.11 and by c10::intrusive_ptr in newer
// releases (2.15): NodePtr is whichever get_current_node() returns, make_node makes one of those.
using NodePtr = decltype(torch::autograd::get_current_node());
template <class T, class... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>)
    return std::make_shared<T>(std::forward<Args>(args)...);
  else
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
}

// The backward's results, made to raise on a second backward when the graph of this backward is
// being recorded (create_graph=True): the ops have no double-backward formula. Without this the
// results would not require grad and a second torch.autograd.grad would fail with a confusing
// message (or, with allow_unused, silently give None). The results get an Error node whose edges
// lead to the node's own inputs (and to graph_inputs: e.g. incoming gradients that require grad),
// so any second backward that reaches them raises. @once_differentiable in Python does the same,
// minus the edges.
inline variable_list once_differentiable(variable_list grads, const char* op,
                                         std::initializer_list<at::Tensor> graph_inputs = {}) {
  if (!at::GradMode::is_enabled()) return grads;
  // The edges: those of the node being run (its forward's inputs), and those of graph_inputs.
  torch::autograd::edge_list edges;
  if (const NodePtr self = torch::autograd::get_current_node()) edges = self->next_edges();
  variable_list roots;
  for (const at::Tensor& t : graph_inputs)
    if (t.defined() && t.requires_grad() && !tracing(t)) roots.push_back(t);
  for (torch::autograd::Edge& e : torch::autograd::collect_next_edges(roots)) edges.push_back(std::move(e));
  if (std::none_of(edges.begin(), edges.end(), [](const torch::autograd::Edge& e) { return e.is_valid(); }))
    return grads;
  const NodePtr node = make_node<torch::autograd::Error>(
      std::string("liger_cpp: ") + op +
          " has no double-backward formula: a gradient of its gradient (create_graph=True, then a second "
          "backward) is not supported",
      std::move(edges));
  for (at::Tensor& g : grads) {
    if (!g.defined() || tracing(g) || !at::isFloatingType(g.scalar_type())) continue;
    g = g.tensor_data();  // same storage and version counter, a fresh autograd history
    torch::autograd::set_history(g, node);
  }
  return grads;
}

}  // namespace autograd
}  // namespace liger_cpp
