// Cross entropy and total variation distance of student logits against teacher logits, per row and
// unreduced (Liger's LigerFusedCETVDFunction): the row kernels of csrc/kernels/divergence/ce_tvd.cu
// (CPU twin in csrc/aten/cpu/divergence_cpu.cpp). Only O(rows) statistics are kept for the
// backward, which rebuilds both distributions from the logits the caller holds. Math: the schema.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <tuple>

#include "aten/checks/common.h"
#include "aten/checks/cross_entropy_core.h"
#include "aten/checks/divergence_core.h"

namespace liger_cpp {
// Named, not anonymous: the build compiles a folder's files as one unity translation unit.
namespace ce_tvd_impl {

struct Checked {
  at::Tensor s, t, target;
};

Checked check_rows(const at::Tensor& student, const at::Tensor& teacher, const at::Tensor& target,
                   int64_t ignore_index) {
  const bool cuda = student.is_cuda();
  LIGER_CHECK_ARG(student.dim() == 2 && student.size(1) > 0, "student_logits",
                  "expected shape (BT, V) with V > 0, got ", shape_str(student));
  LIGER_CHECK_ARG(is_float_type(student.scalar_type(), !cuda), "student_logits",
                  "expected float32, float16 or bfloat16", cuda ? "" : " (or float64 on CPU)", ", got ",
                  dtype_str(student.scalar_type()));
  LIGER_CHECK_ARG(teacher.sizes() == student.sizes(), "teacher_logits", "expected student_logits' shape ",
                  shape_str(student), ", got ", shape_str(teacher));
  LIGER_CHECK_ARG(teacher.scalar_type() == student.scalar_type() && teacher.device() == student.device(),
                  "teacher_logits", "expected student_logits' dtype and device (",
                  dtype_str(student.scalar_type()), " on ", student.device(), "), got ",
                  dtype_str(teacher.scalar_type()), " on ", teacher.device());
  LIGER_CHECK_ARG(target.dim() == 1, "target", "expected shape (", student.size(0), ",), got ",
                  shape_str(target));
  Checked c;
  c.target = row_token_ids(target, student.size(0), student, "student_logits");
  check_ce_target_values(c.target, student.size(1), ignore_index);
  c.s = as_rows(student);
  c.t = as_rows(teacher);
  return c;
}

// float32 statistics and outputs, float64 for float64 logits (CPU only).
at::ScalarType out_dtype(const at::Tensor& s) {
  return s.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ce_tvd_fwd(const at::Tensor& student_logits,
                                                          const at::Tensor& teacher_logits,
                                                          const at::Tensor& target, int64_t ignore_index) {
  const c10::DeviceGuard device_guard(student_logits.device());
  const Checked c = check_rows(student_logits, teacher_logits, target, ignore_index);
  const int64_t rows = c.s.size(0);
  const auto opts = c.s.options().dtype(out_dtype(c.s));
  CeTvdRows a;
  a.s = c.s;
  a.t = c.t;
  a.target = c.target;
  a.ce = at::empty({rows}, opts);
  a.tvd = at::empty({rows}, opts);
  a.stats = at::empty({rows, 3}, opts);
  a.ignore_index = ignore_index;
  if (rows > 0) ce_tvd_rows_fwd(a);
  return {a.ce, a.tvd, a.stats};
}

at::Tensor ce_tvd_bwd(const std::optional<at::Tensor>& grad_ce, const std::optional<at::Tensor>& grad_tvd,
                      const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                      const at::Tensor& target, const at::Tensor& stats, int64_t ignore_index) {
  const c10::DeviceGuard device_guard(student_logits.device());
  const Checked c = check_rows(student_logits, teacher_logits, target, ignore_index);
  const int64_t rows = c.s.size(0);
  const at::ScalarType od = out_dtype(c.s);
  LIGER_CHECK_ARG(stats.dim() == 2 && stats.size(0) == rows && stats.size(1) == 3 &&
                      stats.scalar_type() == od && stats.device() == c.s.device(),
                  "stats", "expected ce_tvd_fwd's statistics (", rows, ", 3) ", dtype_str(od), ", got ",
                  shape_str(stats), " ", dtype_str(stats.scalar_type()));
  auto grad_arg = [&](const std::optional<at::Tensor>& g, const char* name) {
    if (!g.has_value() || !g->defined()) return at::Tensor();
    LIGER_CHECK_ARG(g->numel() == rows && g->device() == c.s.device(), name, "expected ", rows,
                    " elements on ", c.s.device(), ", got shape ", shape_str(*g), " on ", g->device());
    return g->reshape({rows}).to(od).contiguous();
  };
  CeTvdRows a;
  a.s = c.s;
  a.t = c.t;
  a.target = c.target;
  a.stats = stats.contiguous();
  a.grad_ce = grad_arg(grad_ce, "grad_ce");
  a.grad_tvd = grad_arg(grad_tvd, "grad_tvd");
  a.grad = at::empty({rows, c.s.size(1)}, c.s.options());
  a.ignore_index = ignore_index;
  if (rows > 0) ce_tvd_rows_bwd(a);
  return a.grad;
}

}  // namespace ce_tvd_impl

TORCH_LIBRARY_IMPL(liger, CPU, m) {
  using namespace ce_tvd_impl;  // NOLINT(build/namespaces)
  m.impl("ce_tvd_fwd", &ce_tvd_fwd);
  m.impl("ce_tvd_bwd", &ce_tvd_bwd);
}

#ifdef LIGER_CPP_WITH_CUDA
TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace ce_tvd_impl;  // NOLINT(build/namespaces)
  m.impl("ce_tvd_fwd", &ce_tvd_fwd);
  m.impl("ce_tvd_bwd", &ce_tvd_bwd);
}
#endif

}  // namespace liger_cpp
