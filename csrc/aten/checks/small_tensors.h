// Small internal tensors without dispatcher round trips, for the composites' bookkeeping (the
// cross-entropy scales, per-row buffers, 0-d results). At an eager call's sizes an at::empty or a
// narrow through the dispatcher costs more than the loop that fills it; these build the same tensors
// directly. Only for tensors that never require grad and never reach tracing (the composites run
// on real CPU / CUDA tensors: under fake tensors the Python fake kernels run instead).
#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

namespace liger_cpp {

// at::empty(sizes, options) (contiguous); on the CPU without the dispatcher.
inline at::Tensor small_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (options.device().is_cpu())
    return at::detail::empty_cpu(sizes, options.dtype().toScalarType(), /*pin_memory=*/false, std::nullopt);
  return at::empty(sizes, options);
}

// t.narrow(0, offset, length) of a contiguous 1-D tensor, built without the dispatcher: a view
// sharing t's storage (no autograd view tracking: internal tensors only).
inline at::Tensor small_slice(const at::Tensor& t, int64_t offset, int64_t length) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(t.storage()),
                                                   t.key_set(), t.dtype());
  impl->set_storage_offset(t.storage_offset() + offset);
  impl->set_sizes_contiguous({length});
  return at::Tensor(std::move(impl));
}

}  // namespace liger_cpp
