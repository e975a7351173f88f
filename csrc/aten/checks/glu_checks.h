// Argument checks and option parsing for the gated linear units (SwiGLU,
// GeGLU), shared by the CPU and CUDA ops.
#pragma once

#include <ATen/MemoryOverlap.h>

#include <string>
#include <string_view>

#include "aten/checks/common.h"

namespace liger_cpp {

enum class GluKind : int { kSilu = 0, kGeluTanh = 1, kGeluErf = 2 };

inline GluKind parse_gelu_approximate(std::string_view approximate) {
  if (approximate == "tanh") return GluKind::kGeluTanh;
  if (approximate == "none") return GluKind::kGeluErf;
  LIGER_FAIL("argument 'approximate': expected 'tanh' or 'none', got '", approximate, "'");
}

// One operand of a GLU: a's shape, dtype and device, unit last stride.
inline void check_glu_operand(const at::Tensor& t, const char* name, const at::Tensor& a, bool unit_stride) {
  LIGER_CHECK_ARG(t.sizes() == a.sizes(), name, "expected a's shape ", a.sizes(), ", got ", t.sizes());
  LIGER_CHECK_ARG(t.device() == a.device(), name, "expected device ", a.device(), " (a's), got ", t.device());
  LIGER_CHECK_ARG(t.scalar_type() == a.scalar_type(), name, "expected a's dtype (", a.scalar_type(),
                  "), got ", t.scalar_type());
  if (unit_stride)
    LIGER_CHECK_ARG(t.size(-1) <= 1 || t.stride(-1) == 1, name,
                    "expected a unit stride in the last dimension (rows may be strided), got strides ",
                    t.strides());
}

// a, b: (..., F), same shape, dtype and device, float32/float16/bfloat16
// (float64 on CPU), unit last stride (row strides are fine: halves of a fused
// gate_up projection).
inline void check_glu_inputs(const at::Tensor& a, const at::Tensor& b, bool cuda) {
  const bool allow_double = !cuda;
  LIGER_CHECK_ARG(a.dim() >= 1, "a", "expected a tensor of at least 1 dimension, got a scalar");
  LIGER_CHECK_ARG(is_float_type(a.scalar_type(), allow_double), "a", "expected float32, float16 or bfloat16",
                  allow_double ? " (or float64 on CPU)" : "", ", got ", a.scalar_type());
  check_glu_operand(a, "a", a, true);
  check_glu_operand(b, "b", a, true);
}

// dc may have any strides (autograd can send an expanded gradient); it is read only.
inline void check_glu_bwd(const at::Tensor& dc, const at::Tensor& a, const at::Tensor& b, bool cuda) {
  check_glu_inputs(a, b, cuda);
  check_glu_operand(dc, "dc", a, false);
}

// The in-place backward writes da into a and db into b: both must be
// contiguous and must not share memory.
inline void check_glu_bwd_inplace(const at::Tensor& dc, const at::Tensor& a, const at::Tensor& b, bool cuda) {
  check_glu_bwd(dc, a, b, cuda);
  LIGER_CHECK_ARG(a.is_contiguous(), "a", "the in-place backward needs a contiguous a, got strides ",
                  a.strides());
  LIGER_CHECK_ARG(b.is_contiguous(), "b", "the in-place backward needs a contiguous b, got strides ",
                  b.strides());
  LIGER_CHECK_ARG(at::get_overlap_status(a, b) == at::MemOverlapStatus::No, "b",
                  "the in-place backward needs a and b in separate memory");
}

// Flattened (rows, F) view of a GLU operand; copies only when the leading
// dimensions cannot be flattened into one row stride (or, for dc, when the last
// stride is not 1).
inline at::Tensor glu_rows(const at::Tensor& t) { return as_rows(t); }

}  // namespace liger_cpp
