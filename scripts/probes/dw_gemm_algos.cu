// Probe (not part of the extension): how fast can the chunk loop's weight-gradient GEMM accumulate,
// dW[V, H] += G[R, V]^T X[R, H] in bf16 with float32 compute and beta = 1, when cuBLASLt's other
// algorithms are tried? The chunk loops (FLCE, distillation, KL, GRPO) run it once per chunk; on the
// H200 it costs about 1 + 330 / R of its FLOP time (re-reading and re-writing dW), which is what keeps
// FLCE at Gemma's heads and JSD distillation above 1.10 x their GEMM floor. Prints, per shape, the
// heuristic's first algorithm and the fastest of up to 64 it returns, with beta = 1 and beta = 0.
//   nvcc -O2 -std=c++17 -o /tmp/dw_gemm_algos scripts/probes/dw_gemm_algos.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                              \
  do {                                                                     \
    auto e_ = (x);                                                         \
    if (static_cast<int>(e_) != 0) {                                       \
      std::printf("error %d at %s:%d\n", static_cast<int>(e_), __FILE__, __LINE__); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

// Small pseudo-random values (zeros would draw less power and run at a higher clock than real data).
__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((float(x & 0xffff) / 65536.f - 0.5f) * 0.02f);
  }
}

struct Shape {
  const char* name;
  int R, V, H;
};

static float time_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t* algo,
                       const void* A, const void* B, void* C, float beta, void* ws, size_t ws_bytes, int reps) {
  const float alpha = 1.f;
  cudaEvent_t s, e;
  cudaEventCreate(&s);
  cudaEventCreate(&e);
  for (int i = 0; i < 2; ++i)
    if (cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, algo, ws, ws_bytes, 0) != 0) return -1.f;
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(s);
    cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, algo, ws, ws_bytes, 0);
    cudaEventRecord(e);
    cudaEventSynchronize(e);
    float ms;
    cudaEventElapsedTime(&ms, s, e);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(s);
  cudaEventDestroy(e);
  return t[t.size() / 2];
}

int main() {
  const Shape shapes[] = {{"gemma2 FLCE R512", 512, 256000, 2304},   {"gemma2 FLCE R1024", 1024, 256000, 2304},
                          {"gemma3 FLCE R512", 512, 262144, 2304},   {"jsd student R1024", 1024, 151936, 2048},
                          {"jsd student R2048", 2048, 151936, 2048}, {"kl student R1024", 1024, 151936, 2048},
                          {"qwen FLCE R512", 512, 151936, 4096},     {"qwen FLCE R1024", 1024, 151936, 4096},
                          {"llama3 FLCE R512", 512, 128256, 4096},   {"llama3 FLCE R1024", 1024, 128256, 4096},
                          {"llama4 FLCE R512", 512, 202048, 5120},   {"H8192 V128256 R512", 512, 128256, 8192},
                          {"H2048 V128256 R256", 256, 128256, 2048}, {"H2048 V128256 R768", 768, 128256, 2048}};
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  const size_t ws_bytes = 64ull << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  for (const Shape& sh : shapes) {
    const size_t nG = size_t(sh.R) * sh.V, nX = size_t(sh.R) * sh.H, nW = size_t(sh.V) * sh.H;
    void *G, *X, *W;
    CK(cudaMalloc(&G, nG * 2));
    CK(cudaMalloc(&X, nX * 2));
    CK(cudaMalloc(&W, nW * 2));
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(G), nG, 1u);
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(X), nX, 2u);
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(W), nW, 3u);
    // column-major: D^T [H, V] = X^T [H, R] (X row-major [R, H], ld H, op N) x G [R, V] (G row-major
    // [R, V] is column-major [V, R] ld V: op T)
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opN = CUBLAS_OP_N, opT = CUBLAS_OP_T;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opN, sizeof(opN)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opT, sizeof(opT)));
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, sh.H, sh.R, sh.H));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, sh.V, sh.R, sh.V));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, sh.H, sh.V, sh.H));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof(ws_bytes)));
    // 16-byte alignment, as the extension tells the heuristic (chunk rows start at any multiple of 8)
    const uint32_t align = 16;
    for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CK(cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof(align)));
    cublasLtMatmulHeuristicResult_t res[64];
    int n = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 64, res, &n));
    const double flop_ms = 2.0 * sh.R * double(sh.V) * sh.H / 1e9;  // GFLOP
    for (float beta : {1.f, 0.f}) {
      float first = -1, best = 1e30f;
      int best_i = -1;
      for (int i = 0; i < n; ++i) {
        const float ms = time_algo(h, desc, la, lb, lc, &res[i].algo, X, G, W, beta, ws, ws_bytes, 15);
        if (i == 0) first = ms;
        if (beta == 1.f) {
          int aid = -1, atile = -1, astages = -1, asplit = -1;
          size_t w;
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &aid, sizeof(aid), &w);
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &atile, sizeof(atile), &w);
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &astages, sizeof(astages), &w);
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &asplit, sizeof(asplit), &w);
          std::printf("    #%d %.3f ms id=%d tile=%d stages=%d splitk=%d ws=%zu\n", i, ms, aid, atile, astages, asplit,
                      res[i].workspaceSize);
        }
        if (ms > 0 && ms < best) best = ms, best_i = i;
      }
      int id = -1, tile = -1, stages = -1, splitk = -1, swizzle = -1;
      if (best_i >= 0) {
        size_t w;
        cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[best_i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle), &w);
      }
      std::printf("%-20s beta=%g algos=%2d heuristic#0 %.3f ms (%.0f TFLOP/s)  best #%d %.3f ms (%.0f TFLOP/s) id=%d tile=%d stages=%d splitk=%d swz=%d\n",
                  sh.name, beta, n, first, flop_ms / first, best_i, best, flop_ms / best, id, tile, stages, splitk, swizzle);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(G);
    cudaFree(X);
    cudaFree(W);
  }
  return 0;
}
