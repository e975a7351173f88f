// The chunk loops' weight-gradient GEMM, dW[V, H] (+)= G[R, V]^T X[R, H] for a chunk of R rows
// (FLCE, the preference, RL and distillation losses), through cuBLASLt with a chosen algorithm.
//
// Why not ATen's addmm_: with R of 512-1024 rows (the chunks that keep the logits within their
// budget) the GEMM is short in K and every chunk after the first re-reads and re-writes dW (beta 1).
// cuBLAS's default choice then runs at 470-580 TFLOP/s on an H100 where one of the algorithms that
// cuBLASLt's heuristic also returns, tile 128 x 160 with 64-deep stages, runs at 520-720 and hides
// most of the re-read at 1024 rows (benchmarks/results/2026-12-06-*-dw_gemm_probe.txt,
// scripts/probes/dw_gemm_algos.cu).
//
// The rule is fixed, not timed: on sm_90 for 16-bit operands and at most kMaxRows rows, take the
// first of the heuristic's results with that tile and stage count; otherwise ATen. Timing the
// candidates at the first call would make the weight gradient's rounding depend on a measurement;
// this way one shape always runs one algorithm (no split-K: deterministic), like ATen's own choice.
// The plan (descriptors and algorithm) is computed once per shape and kept. Three sm_90a kernels of
// our own for this GEMM lost to this rule at every head and were deleted (docs/kernels/rl_losses.md).
#include "aten/cuda/dw_gemm_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "aten/cuda/cuda_common.h"
#include "kernels/common/plan_override.h"

namespace liger_cpp::cuda {
namespace {

constexpr int64_t kMaxRows = 1024;  // above it ATen's choice is as fast or faster (probe, R 2048)
constexpr int kTile = CUBLASLT_MATMUL_TILE_128x160;
constexpr int kStages = CUBLASLT_MATMUL_STAGES_64xAUTO;

struct Plan {
  bool ok = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

// device, dtype, R, V, H, ld of G, ld of X, workspace limit
using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, size_t>;

bool lt_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

int config_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int v = -1;
  size_t written = 0;
  if (!lt_ok(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written))) return -1;
  return v;
}

// Column-major view: D^T [H, V] = X^T [H, R] (X row-major, op N) x G [R, V] (G row-major [R, V] is
// column-major [V, R]: op T). Every pointer is 16-byte aligned (checked by the caller); the
// heuristic is told so, not the 256 bytes it assumes by default.
Plan make_plan(cublasLtHandle_t handle, cudaDataType_t type, int64_t R, int64_t V, int64_t H, int64_t ldg,
               int64_t ldx, size_t ws_limit) {
  Plan p;
  if (!lt_ok(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F))) return p;
  const cublasOperation_t op_n = CUBLAS_OP_N, op_t = CUBLAS_OP_T;
  bool ok = lt_ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_n, sizeof(op_n))) &&
            lt_ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_t, sizeof(op_t))) &&
            lt_ok(cublasLtMatrixLayoutCreate(&p.la, type, H, R, ldx)) &&
            lt_ok(cublasLtMatrixLayoutCreate(&p.lb, type, V, R, ldg)) &&
            lt_ok(cublasLtMatrixLayoutCreate(&p.lc, type, H, V, H));
  cublasLtMatmulPreference_t pref = nullptr;
  ok = ok && lt_ok(cublasLtMatmulPreferenceCreate(&pref));
  const uint32_t align = 16;
  ok = ok && lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &ws_limit, sizeof(ws_limit)));
  for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    ok = ok && lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof(align)));
  constexpr int kAsk = 16;
  cublasLtMatmulHeuristicResult_t res[kAsk];
  int n = 0;
  ok = ok &&
       lt_ok(cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, kAsk, res, &n));
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; ok && i < n; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws_limit) continue;
    if (config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID) != kTile ||
        config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID) != kStages ||
        config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1)
      continue;
    p.algo = res[i].algo;
    p.workspace = res[i].workspaceSize;
    p.ok = true;
    break;
  }
  return p;  // descriptors of a plan that is not ok are kept too (a few bytes; never used)
}

const Plan& plan_for(const Key& key, cublasLtHandle_t handle, cudaDataType_t type) {
  static std::mutex mu;
  static std::map<Key, Plan> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it == plans.end()) {
    const auto& [dev, dt, R, V, H, ldg, ldx, ws] = key;
    it = plans.emplace(key, make_plan(handle, type, R, V, H, ldg, ldx, ws)).first;
  }
  return it->second;
}

}  // namespace

bool dw_gemm_lt(const at::Tensor& dw, const at::Tensor& g, const at::Tensor& x, bool accumulate) {
  const at::ScalarType st = dw.scalar_type();
  if (st != at::kBFloat16 && st != at::kHalf) return false;
  if (g.scalar_type() != st || x.scalar_type() != st || !g.is_cuda() || !x.is_cuda()) return false;
  if (dw.dim() != 2 || g.dim() != 2 || x.dim() != 2) return false;
  const int64_t R = g.size(0), V = g.size(1), H = x.size(1);
  if (R == 0 || R > kMaxRows || x.size(0) != R || dw.size(0) != V || dw.size(1) != H) return false;
  if (!dw.is_contiguous() || g.stride(1) != 1 || x.stride(1) != 1) return false;
  const int64_t ldg = g.stride(0), ldx = x.stride(0);
  constexpr int64_t kInt32 = INT32_MAX;
  if (V > kInt32 || H > kInt32 || ldg > kInt32 || ldx > kInt32 || ldg < V || ldx < H) return false;
  if (ldg % 8 || ldx % 8 || H % 8) return false;
  if (!aligned_16B(dw.data_ptr()) || !aligned_16B(g.data_ptr()) || !aligned_16B(x.data_ptr())) return false;
  const c10::cuda::CUDAGuard guard(dw.device());
  namespace po = kernels::plan_override;
  if (po::forced(po::Key::kDwGemm) == 1) return false;                   // dw_gemm=aten
  if (at::cuda::getCurrentDeviceProperties()->major != 9) return false;  // the rule was measured on sm_90

  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  void* ws = at::cuda::getCUDABlasLtWorkspace();
  const size_t ws_size = at::cuda::getCUDABlasLtWorkspaceSize();
  const cudaDataType_t type = st == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  const Plan& p =
      plan_for(Key{dw.get_device(), static_cast<int>(st), R, V, H, ldg, ldx, ws_size}, handle, type);
  if (!p.ok) return false;
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  const cublasStatus_t s =
      cublasLtMatmul(handle, p.desc, &alpha, x.data_ptr(), p.la, g.data_ptr(), p.lb, &beta, dw.data_ptr(),
                     p.lc, dw.data_ptr(), p.lc, &p.algo, ws, p.workspace, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(lt_ok(s), "liger_cpp: cublasLtMatmul (weight gradient) failed with status ",
              static_cast<int>(s));
  return true;
}

}  // namespace liger_cpp::cuda
