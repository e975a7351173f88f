// Host-side helpers shared by the CPU and CUDA op implementations: argument
// checks with messages that name the argument, and option parsing.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>
#include <string_view>
#include <type_traits>

namespace liger_cpp {

// "(4, 64)": a tensor's shape for error messages, formatted here rather than
// through ArrayRef's stream operator.
inline std::string shape_str(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + (t.dim() == 1 ? ",)" : ")");
}

// A dtype's name for error messages (formatted here, not through c10's stream
// operators, which crashed when printed from this library on the H200 image).
inline const char* dtype_str(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kDouble:
      return "float64";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return "a non-float dtype";
  }
}

namespace detail {
// Error messages are assembled by plain string appends and thrown as
// c10::Error directly: c10's stream-based formatting segfaulted when used from
// this library as built by the H200 image's compiler (benchmarks/results/
// 2026-11-29 logs), and appends need no stream at all.
inline void append(std::string& s, const char* v) { s += v; }
inline void append(std::string& s, const std::string& v) { s += v; }
inline void append(std::string& s, std::string_view v) { s.append(v.data(), v.size()); }
inline void append(std::string& s, double v) { s += std::to_string(v); }
inline void append(std::string& s, at::ScalarType t) { s += dtype_str(t); }
inline void append(std::string& s, const c10::Device& d) { s += d.str(); }
inline void append(std::string& s, c10::IntArrayRef a) {
  s += "(";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  s += a.size() == 1 ? ",)" : ")";
}
template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
inline void append(std::string& s, I v) {
  s += std::to_string(v);
}

template <typename... A>
[[noreturn]] void fail(const char* func, const char* file, int line, const A&... a) {
  std::string msg;
  (append(msg, a), ...);
  throw c10::Error(c10::SourceLocation{func, file, static_cast<uint32_t>(line)}, std::move(msg));
}
}  // namespace detail

// Throws a RuntimeError "liger_cpp: argument 'name': ..." unless cond holds.
#define LIGER_CHECK_ARG(cond, name, ...)                                                     \
  do {                                                                                       \
    if (C10_UNLIKELY(!(cond)))                                                               \
      ::liger_cpp::detail::fail(__func__, __FILE__, __LINE__, "liger_cpp: argument '", name, \
                                "': ", __VA_ARGS__);                                         \
  } while (0)

// Throws a RuntimeError "liger_cpp: ..." (no condition).
#define LIGER_FAIL(...) ::liger_cpp::detail::fail(__func__, __FILE__, __LINE__, "liger_cpp: ", __VA_ARGS__)

enum class Casting : int { kLlama = 0, kGemma = 1, kNone = 2 };

inline Casting parse_casting(std::string_view mode) {
  if (mode == "llama") return Casting::kLlama;
  if (mode == "gemma") return Casting::kGemma;
  if (mode == "none") return Casting::kNone;
  LIGER_FAIL("argument 'casting_mode': expected 'llama', 'gemma' or 'none', got '", mode, "'");
}

// A backward's incoming gradient `name` (dy): x's shape, dtype and device (any strides).
inline void check_grad_like(const at::Tensor& dy, const at::Tensor& x, const char* name = "dy") {
  LIGER_CHECK_ARG(dy.sizes() == x.sizes(), name, "expected x's shape ", x.sizes(), ", got ", dy.sizes());
  LIGER_CHECK_ARG(dy.scalar_type() == x.scalar_type(), name, "expected x's dtype (",
                  dtype_str(x.scalar_type()), "), got ", dtype_str(dy.scalar_type()));
  LIGER_CHECK_ARG(dy.device() == x.device(), name, "expected device ", x.device(), " (x's), got ",
                  dy.device());
}

// The dtype the kernels read the parameters in: w's when it is x's or float32, else float32
// (the parameters are cast to it, the gradients cast back to each parameter's dtype): DyT, PolyNorm.
inline at::ScalarType param_work_dtype(const at::Tensor& x, const at::Tensor& w) {
  const at::ScalarType t = w.scalar_type();
  return t == x.scalar_type() || t == at::kFloat ? t : at::kFloat;
}

inline bool is_float_type(at::ScalarType t, bool allow_double) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || (allow_double && t == at::kDouble);
}

// Checks shared by the forward and backward of the row-wise norms: X is
// (..., N) with N > 0 and a unit last stride; W, when given, is (N,).
inline void check_norm_inputs(const at::Tensor& X, const c10::optional<at::Tensor>& W, bool cuda) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(X.dim() >= 1, "X", "expected a tensor of at least 1 dimension, got a scalar");
  LIGER_CHECK_ARG(X.size(-1) > 0, "X", "expected a non-empty last dimension, got shape ", shape_str(X));
  LIGER_CHECK_ARG(is_float_type(X.scalar_type(), allow_double), "X", "expected float32, float16 or bfloat16",
                  allow_double ? " (or float64 on CPU)" : "", ", got ", dtype_str(X.scalar_type()));
  if (W.has_value() && W->defined()) {
    const auto& w = *W;
    LIGER_CHECK_ARG(w.dim() == 1 && w.size(0) == X.size(-1), "W", "expected shape (", X.size(-1),
                    ",) to match X's last dimension, got ", shape_str(w));
    LIGER_CHECK_ARG(w.device() == X.device(), "W", "expected device ", X.device(), " (X's), got ",
                    w.device());
    LIGER_CHECK_ARG(
        w.scalar_type() == X.scalar_type() || w.scalar_type() == at::kFloat || X.scalar_type() == at::kFloat,
        "W", "expected X's dtype (", dtype_str(X.scalar_type()), ") or float32, got ",
        dtype_str(w.scalar_type()));
  }
}

// Output dtype of RMSNorm: HF's LlamaRMSNorm returns `weight * x.to(x.dtype)`,
// so llama mode promotes with the weight; gemma and none return X's dtype.
inline at::ScalarType rms_norm_out_dtype(const at::Tensor& X, const c10::optional<at::Tensor>& W,
                                         Casting casting) {
  if (casting == Casting::kLlama && W.has_value() && W->defined())
    return at::promote_types(X.scalar_type(), W->scalar_type());
  return X.scalar_type();
}

// Records an in-place write in t's version counter, so autograd sees it: a
// tensor saved for backward and overwritten afterwards then raises instead of
// giving a wrong gradient. (The dispatcher's default Autograd fallback for
// custom ops skips ADInplaceOrView, so the implementations do it themselves.)
inline void mark_written(const at::Tensor& t) {
  if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

// An index tensor (token ids, class indices, labels: `what`) is int64 or int32; every op that
// takes one accepts both and says so in the same words.
inline void check_index_dtype(const at::Tensor& t, const char* name, const char* what) {
  LIGER_CHECK_ARG(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, name,
                  "expected int64 (or int32) ", what, ", got ", dtype_str(t.scalar_type()));
}

// `target` as token ids, one per row of `rows_of` (the argument named `rows_name`, `rows` rows):
// checked (that many elements, int64 or int32, rows_of's device) and returned flat, int64, contiguous.
inline at::Tensor row_token_ids(const at::Tensor& target, int64_t rows, const at::Tensor& rows_of,
                                const char* rows_name) {
  LIGER_CHECK_ARG(target.numel() == rows, "target", "expected ", rows, " elements (one per row of ",
                  rows_name, ", shape ", shape_str(rows_of), "), got shape ", shape_str(target));
  check_index_dtype(target, "target", "token ids");
  LIGER_CHECK_ARG(target.device() == rows_of.device(), "target", "expected device ", rows_of.device(),
                  ", got ", target.device());
  return target.reshape({rows}).to(at::kLong).contiguous();
}

// X viewed as (rows, N) with unit column stride; copies only when the leading
// dimensions cannot be flattened into one row stride.
inline at::Tensor as_rows(const at::Tensor& X) {
  const int64_t n = X.size(-1);
  at::Tensor x = X.stride(-1) == 1 ? X : X.contiguous();
  if (x.dim() == 1) return x.view({1, n});
  at::Tensor r = x.dim() == 2 ? x : x.reshape({-1, n});
  if (r.size(0) > 1 && r.stride(1) != 1) r = r.contiguous();
  return r;
}

}  // namespace liger_cpp
