// Probe (not part of the extension): the chunk loops' weight-gradient GEMM as a kernel of ours on
// sm_90a, dW[V, H] (+)= G[R, V]^T X[R, H], 16-bit operands and dW, float32 accumulation, one rounding
// to dW's dtype. See dw_gemm_sm90.cu for why and its status.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace liger_cpp::kernels {

struct DwGemmArgs {
  const void* g;  // [R, V], row stride ldg elements (>= V), unit column stride
  const void* x;  // [R, H], row stride ldx elements (>= H)
  void* dw;       // [V, H] contiguous; read first when accumulate
  int64_t R, V, H, ldg, ldx;
  bool accumulate;
  bool fp16;              // float16 operands and dW (else bfloat16)
  int cluster = 1;        // 2: clusters of two blocks sharing X's slice by TMA multicast (dw_gemm_sm90.cu)
  bool pingpong = false;  // 128 x 128 tiles, one a consumer warpgroup in turn (dw_gemm_sm90.cu)
};

// Whether the kernel takes these arguments: its body was built for the current device (sm_90a),
// H, ldg and ldx multiples of 8, every pointer 16-byte aligned, sizes within TMA's 32-bit coordinates.
// The caller checks the device is of compute capability 9.0.
bool dw_gemm_sm90_supported(const DwGemmArgs& a);

// Queues the GEMM on `stream`; `sms` is the device's multiprocessor count (one persistent block
// each). Errors: the driver's tensor-map encoder missing or refusing the shapes, or a launch error.
cudaError_t dw_gemm_sm90(const DwGemmArgs& a, int sms, cudaStream_t stream);

}  // namespace liger_cpp::kernels
