// RMSNorm CPU entry points, reused by the FusedAddRMSNorm CPU op.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

namespace liger_cpp {

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cpu_impl(const at::Tensor& X,
                                                         const c10::optional<at::Tensor>& W, double eps,
                                                         double offset, c10::string_view casting_mode);
std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cpu_impl(const at::Tensor& dY, const at::Tensor& X,
                                                         const c10::optional<at::Tensor>& W,
                                                         const at::Tensor& RSTD, double offset,
                                                         c10::string_view casting_mode, bool compute_dw);

}  // namespace liger_cpp
