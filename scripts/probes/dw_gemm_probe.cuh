// Shared by the dW GEMM probes (dw_gemm_algos.cu, dw_gemm_sweep.cu; not part of the extension): the
// chunk loops' accumulating weight-gradient GEMM, dW[V, H] (+)= G[R, V]^T X[R, H] in bf16 with float32
// compute, its buffers and cuBLASLt descriptors for one shape, and the timing of one algorithm.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                       \
  do {                                                                              \
    auto e_ = (x);                                                                  \
    if (static_cast<int>(e_) != 0) {                                                \
      std::printf("error %d at %s:%d\n", static_cast<int>(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

// Small pseudo-random values (zeros would draw less power and run at a higher clock than real data),
// uniform in [-scale / 2, scale / 2); T is __nv_bfloat16 or __half.
template <class T>
__global__ void fill(T* p, size_t n, unsigned seed, float scale = 0.02f) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = T((float(x & 0xffff) / 65536.f - 0.5f) * scale);
  }
}

// *out = max |a - b| over n bf16 values (*out zeroed by the caller).
__global__ void max_diff(const __nv_bfloat16* a, const __nv_bfloat16* b, size_t n, float* out) {
  float m = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i])));
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));  // m >= 0: int order is float order
}

struct Shape {
  const char* name;
  int R, V, H;
};

// Median ms of `reps` event-timed calls of `call` (returns true on success) after `warm` untimed
// ones; -1 when an untimed call fails.
template <class F>
float median_ms_of(F&& call, int warm, int reps) {
  for (int i = 0; i < warm; ++i)
    if (!call()) return -1.f;
  cudaEvent_t s, e;
  cudaEventCreate(&s);
  cudaEventCreate(&e);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(s);
    call();
    cudaEventRecord(e);
    cudaEventSynchronize(e);
    float ms;
    cudaEventElapsedTime(&ms, s, e);
    t.push_back(ms);
  }
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

inline int config_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int v = -1;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

// A column-major cuBLASLt GEMM C[m, n] (+)= op(A)[m, k] op(B)[k, n] in bf16 with float32 compute, A and
// B stored packed as op asks ([m, k] or [k, m]; [k, n] or [n, k]), C [m, n] packed, its buffers
// filled (seeds a, b, c) and its descriptors. D is C.
struct LtGemm {
  int m, n, k;
  void *A = nullptr, *B = nullptr, *C = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;

  LtGemm(int m_, int n_, int k_, cublasOperation_t ta, cublasOperation_t tb, unsigned sa, unsigned sb,
         unsigned sc)
      : m(m_), n(n_), k(k_) {
    const size_t na = size_t(m) * k, nb = size_t(k) * n, nc = size_t(m) * n;
    CK(cudaMalloc(&A, na * 2));
    CK(cudaMalloc(&B, nb * 2));
    CK(cudaMalloc(&C, nc * 2));
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(A), na, sa);
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(B), nb, sb);
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(C), nc, sc);
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const int ar = ta == CUBLAS_OP_N ? m : k, br = tb == CUBLAS_OP_N ? k : n;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ar, ta == CUBLAS_OP_N ? k : m, ar));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, br, tb == CUBLAS_OP_N ? n : k, br));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m));
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
  }

  double gflop() const { return 2.0 * m * double(n) * k / 1e9; }

  // The heuristic's results (at most `max`) within the workspace, told 16-byte alignment as the
  // extension tells it (chunk rows start at any multiple of 8 rows).
  int heuristic(cublasLtHandle_t h, size_t ws_bytes, cublasLtMatmulHeuristicResult_t* res, int max) const {
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof(ws_bytes)));
    const uint32_t align = 16;
    for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CK(cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof(align)));
    int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, max, res, &got));
    cublasLtMatmulPreferenceDestroy(pref);
    return got;
  }

  bool check(cublasLtHandle_t h, const cublasLtMatmulAlgo_t& algo, size_t ws_bytes) const {
    cublasLtMatmulHeuristicResult_t r;
    return cublasLtMatmulAlgoCheck(h, desc, la, lb, lc, lc, &algo, &r) == CUBLAS_STATUS_SUCCESS &&
           r.workspaceSize <= ws_bytes;
  }

  cublasStatus_t run(cublasLtHandle_t h, const cublasLtMatmulAlgo_t& algo, float beta, void* ws,
                     size_t ws_bytes) const {
    const float alpha = 1.f;
    return cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &algo, ws, ws_bytes, 0);
  }

  // Median ms of `reps` timed calls after `warm` untimed ones; -1 when an untimed call fails.
  float median_ms(cublasLtHandle_t h, const cublasLtMatmulAlgo_t& algo, float beta, void* ws, size_t ws_bytes,
                  int warm, int reps) const {
    return median_ms_of([&] { return run(h, algo, beta, ws, ws_bytes) == CUBLAS_STATUS_SUCCESS; }, warm,
                        reps);
  }
};

// The chunk loops' dW GEMM of one shape. Column-major view: D^T [H, V] = X^T [H, R] (X row-major
// [R, H], ld H, op N) x G [R, V] (G row-major [R, V] is column-major [V, R] ld V: op T); G filled
// with seed 1, X with 2, W with 3.
struct DwProblem : LtGemm {
  Shape sh;
  void *G, *X, *W;  // B, A and C under the names of the chunk loop
  explicit DwProblem(const Shape& s)
      : LtGemm(s.H, s.V, s.R, CUBLAS_OP_N, CUBLAS_OP_T, 2u, 1u, 3u), sh(s), G(B), X(A), W(C) {}
};

// The extension's rule (csrc/aten/cuda/dw_gemm_cuda.cpp): the index of the heuristic's first result
// with tile 128 x 160 and 64-deep stages among res[0, n), else 0.
inline int rule_pick(const cublasLtMatmulHeuristicResult_t* res, int n) {
  for (int i = 0; i < n; ++i)
    if (config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID) == CUBLASLT_MATMUL_TILE_128x160 &&
        config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID) == CUBLASLT_MATMUL_STAGES_64xAUTO)
      return i;
  return 0;
}

// What each dW probe sets up once: cuBLASLt's handle, a 32 MiB workspace, a float for max_diff.
struct LtEnv {
  cublasLtHandle_t h;
  const size_t ws_bytes = 32ull << 20;
  void* ws = nullptr;
  float* dmax = nullptr;
  LtEnv() {
    CK(cublasLtCreate(&h));
    CK(cudaMalloc(&ws, ws_bytes));
    CK(cudaMalloc(&dmax, 4));
  }
  // max |a - b| over n bf16 values.
  float diff(const void* a, const void* b, size_t n) {
    CK(cudaMemset(dmax, 0, 4));
    max_diff<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), n,
                            dmax);
    float d = 0.f;
    CK(cudaMemcpy(&d, dmax, 4, cudaMemcpyDeviceToHost));
    return d;
  }
};

// One shape's problem, its starting dW (w0) and the extension's rule's result from it (ref, beta 1);
// dW is back at w0 when constructed. reset() puts it back again.
struct RuleCase {
  DwProblem p;
  size_t nW;
  __nv_bfloat16 *w0 = nullptr, *ref = nullptr;
  cublasLtMatmulHeuristicResult_t res[16];
  int pick = 0;
  RuleCase(const Shape& sh, const LtEnv& e) : p(sh), nW(size_t(sh.V) * sh.H) {
    CK(cudaMalloc(&w0, nW * 2));
    CK(cudaMalloc(&ref, nW * 2));
    CK(cudaMemcpy(w0, p.W, nW * 2, cudaMemcpyDeviceToDevice));
    pick = rule_pick(res, p.heuristic(e.h, e.ws_bytes, res, 16));
    CK(p.run(e.h, res[pick].algo, 1.f, e.ws, e.ws_bytes));
    CK(cudaMemcpy(ref, p.W, nW * 2, cudaMemcpyDeviceToDevice));
    reset();
  }
  RuleCase(const RuleCase&) = delete;
  RuleCase& operator=(const RuleCase&) = delete;
  ~RuleCase() {
    cudaFree(w0);
    cudaFree(ref);
  }
  void reset() const { CK(cudaMemcpy(p.W, w0, nW * 2, cudaMemcpyDeviceToDevice)); }
  // Median ms of the rule's algorithm (rank 0: the heuristic's first) at beta.
  float rule_ms(const LtEnv& e, float beta, bool first = false) const {
    return p.median_ms(e.h, res[first ? 0 : pick].algo, beta, e.ws, e.ws_bytes, 3, 15);
  }
};
