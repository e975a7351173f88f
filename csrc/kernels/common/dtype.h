// ATen-free description of the element types the CUDA kernels accept.
// The host wrappers map at::ScalarType onto this enum, so kernels never see ATen.
#pragma once

namespace liger_cpp::kernels {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline int dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

}  // namespace liger_cpp::kernels
