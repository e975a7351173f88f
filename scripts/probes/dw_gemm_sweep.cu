// Probe (not part of the extension), beside dw_gemm_algos.cu: the heuristic offers only eight
// algorithms for the chunk loops' accumulating dW GEMM (dW[V, H] += G[R, V]^T X[R, H], bf16, float32
// compute, beta 1). Does any configuration it does not offer (every algorithm id x tile x stage
// count x cluster shape that cublasLtMatmulAlgoCheck accepts) hide the re-read of dW at Gemma's
// 512-row chunks? Phase 1 varies the cluster shape and stage count of each of the heuristic's own
// results; phase 2 sweeps the ids cublasLtMatmulAlgoGetIds lists. Prints, per shape and phase, how many
// configurations were valid and timed, and the ten fastest (phase 1: median of 5; phase 2: of 3 after
// 1, within a time budget per shape).
//   nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/dw_gemm_sweep \
//     scripts/probes/dw_gemm_sweep.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
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

struct Timed {
  float ms;
  int id, tile, stages, cluster, swizzle;
};

int main() {
  const Shape shapes[] = {{"gemma2 FLCE R512", 512, 256000, 2304}, {"jsd student R1024", 1024, 151936, 2048}};
  const double budget_s = 15.0;  // phase 2, per shape
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  const size_t ws_bytes = 32ull << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  cudaEvent_t s, e;
  cudaEventCreate(&s);
  cudaEventCreate(&e);
  int ids[256];
  int n_ids = 0;
  CK(cublasLtMatmulAlgoGetIds(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                              CUDA_R_16BF, 256, ids, &n_ids));
  // The heuristic's eight were all id 66 (sm_90 nvjet kernels) on the H100: sweep it first.
  std::stable_partition(ids, ids + n_ids, [](int id) { return id == 66; });
  std::printf("%d algorithm ids:", n_ids);
  for (int i = 0; i < n_ids; ++i) std::printf(" %d", ids[i]);
  std::printf("\n");
  std::fflush(stdout);
  const int clusters[] = {
      CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
      CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1,
      CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x2x1, CUBLASLT_CLUSTER_SHAPE_2x4x1};
  for (const Shape& sh : shapes) {
    const size_t nG = size_t(sh.R) * sh.V, nX = size_t(sh.R) * sh.H, nW = size_t(sh.V) * sh.H;
    void *G, *X, *W;
    CK(cudaMalloc(&G, nG * 2));
    CK(cudaMalloc(&X, nX * 2));
    CK(cudaMalloc(&W, nW * 2));
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(G), nG, 1u);
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(X), nX, 2u);
    fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(W), nW, 3u);
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opN = CUBLAS_OP_N, opT = CUBLAS_OP_T;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opN, sizeof(opN)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opT, sizeof(opT)));
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, sh.H, sh.R, sh.H));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, sh.V, sh.R, sh.V));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, sh.H, sh.V, sh.H));
    const float alpha = 1.f, beta = 1.f;
    // Phase 1: the heuristic's own results (the nvjet kernels), each with its cluster shape and stage
    // count varied (16-byte alignment, as the extension tells the heuristic).
    {
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                              sizeof(ws_bytes)));
      const uint32_t align = 16;
      for (auto a : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                     CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        CK(cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof(align)));
      cublasLtMatmulHeuristicResult_t res[16];
      int n = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 16, res, &n));
      cublasLtMatmulPreferenceDestroy(pref);
      std::vector<Timed> mine;
      int checked = 0;
      for (int i = 0; i < n; ++i) {
        size_t w = 0;
        int id = -1, tile = -1, st0 = -1;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                             &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st0, sizeof(st0),
                                             &w);
        size_t sz = 0;
        cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_STAGES_IDS, nullptr, 0, &sz);
        std::vector<int> stages(sz / sizeof(int));
        if (sz)
          cublasLtMatmulAlgoCapGetAttribute(&res[i].algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages.data(), sz,
                                            &sz);
        if (std::find(stages.begin(), stages.end(), st0) == stages.end()) stages.push_back(st0);
        for (int st : stages)
          for (int cl : clusters) {
            cublasLtMatmulAlgo_t a = res[i].algo;
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st, sizeof(st));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof(cl));
            cublasLtMatmulHeuristicResult_t r;
            ++checked;
            if (cublasLtMatmulAlgoCheck(h, desc, la, lb, lc, lc, &a, &r) != CUBLAS_STATUS_SUCCESS) continue;
            if (r.workspaceSize > ws_bytes) continue;
            if (cublasLtMatmul(h, desc, &alpha, X, la, G, lb, &beta, W, lc, W, lc, &a, ws, ws_bytes, 0) !=
                CUBLAS_STATUS_SUCCESS)
              continue;
            std::vector<float> t;
            for (int j = 0; j < 5; ++j) {
              cudaEventRecord(s);
              cublasLtMatmul(h, desc, &alpha, X, la, G, lb, &beta, W, lc, W, lc, &a, ws, ws_bytes, 0);
              cudaEventRecord(e);
              cudaEventSynchronize(e);
              float ms;
              cudaEventElapsedTime(&ms, s, e);
              t.push_back(ms);
            }
            std::sort(t.begin(), t.end());
            mine.push_back({t[2], id, tile, st, cl, 0});
          }
      }
      std::sort(mine.begin(), mine.end(), [](const Timed& a, const Timed& b) { return a.ms < b.ms; });
      std::printf("%s, the heuristic's %d results varied: %d checked, %zu ran\n", sh.name, n, checked,
                  mine.size());
      for (size_t i = 0; i < mine.size() && i < 10; ++i)
        std::printf("  %.3f ms id=%d tile=%d stages=%d cluster=%d\n", mine[i].ms, mine[i].id, mine[i].tile,
                    mine[i].stages, mine[i].cluster);
      std::fflush(stdout);
    }
    // Phase 2: every configuration of the ids cublasLtMatmulAlgoGetIds lists.
    std::vector<Timed> all;
    int valid = 0;
    bool out_of_time = false;
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < n_ids && !out_of_time; ++k) {
      cublasLtMatmulAlgo_t algo;
      if (cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                 CUDA_R_16BF, ids[k], &algo) != CUBLAS_STATUS_SUCCESS)
        continue;
      size_t sz = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, nullptr, 0, &sz);
      std::vector<int> tiles(std::max<size_t>(sz / sizeof(int), 1), 0);
      if (sz) cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles.data(), sz, &sz);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, nullptr, 0, &sz);
      std::vector<int> stages(std::max<size_t>(sz / sizeof(int), 1), 0);
      if (sz) cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages.data(), sz, &sz);
      for (int tile : tiles)
        for (int st : stages)
          for (int cl : clusters)
            for (int swz = 0; swz <= 0; ++swz) {  // swizzling: not swept (time)
              if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s) {
                out_of_time = true;
                break;
              }
              cublasLtMatmulAlgo_t a = algo;
              const int one = 1;
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st, sizeof(st));
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof(one));
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz));
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl,
                                                   sizeof(cl));
              cublasLtMatmulHeuristicResult_t r;
              if (cublasLtMatmulAlgoCheck(h, desc, la, lb, lc, lc, &a, &r) != CUBLAS_STATUS_SUCCESS) continue;
              if (r.workspaceSize > ws_bytes) continue;
              ++valid;
              if (cublasLtMatmul(h, desc, &alpha, X, la, G, lb, &beta, W, lc, W, lc, &a, ws, ws_bytes, 0) !=
                  CUBLAS_STATUS_SUCCESS)
                continue;
              std::vector<float> t;
              for (int i = 0; i < 3; ++i) {
                cudaEventRecord(s);
                cublasLtMatmul(h, desc, &alpha, X, la, G, lb, &beta, W, lc, W, lc, &a, ws, ws_bytes, 0);
                cudaEventRecord(e);
                cudaEventSynchronize(e);
                float ms;
                cudaEventElapsedTime(&ms, s, e);
                t.push_back(ms);
              }
              std::sort(t.begin(), t.end());
              all.push_back({t[1], ids[k], tile, st, cl, swz});
            }
    }
    if (cudaGetLastError() != cudaSuccess) std::printf("(a CUDA error was raised and cleared)\n");
    std::sort(all.begin(), all.end(), [](const Timed& a, const Timed& b) { return a.ms < b.ms; });
    const double gf = 2.0 * sh.R * double(sh.V) * sh.H / 1e9;
    std::printf("%s: %d valid configurations, %zu timed%s\n", sh.name, valid, all.size(),
                out_of_time ? " (time budget reached)" : "");
    for (size_t i = 0; i < all.size() && i < 10; ++i)
      std::printf("  %.3f ms (%.0f TFLOP/s) id=%d tile=%d stages=%d cluster=%d swizzle=%d\n", all[i].ms,
                  gf / all[i].ms, all[i].id, all[i].tile, all[i].stages, all[i].cluster, all[i].swizzle);
    std::fflush(stdout);
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
