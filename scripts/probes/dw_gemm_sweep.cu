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
#include <chrono>

#include "dw_gemm_probe.cuh"

struct Timed {
  float ms;
  int id, tile, stages, cluster, swizzle;
};

// The ids an algorithm's capability attribute lists (tiles, stage counts).
std::vector<int> cap_ids(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t sz = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &sz);
  std::vector<int> v(sz / sizeof(int));
  if (sz) cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), sz, &sz);
  return v;
}

// The ten fastest, sorted.
void print_fastest(std::vector<Timed>& t, double gflop) {
  std::sort(t.begin(), t.end(), [](const Timed& a, const Timed& b) { return a.ms < b.ms; });
  for (size_t i = 0; i < t.size() && i < 10; ++i)
    std::printf("  %.3f ms (%.0f TFLOP/s) id=%d tile=%d stages=%d cluster=%d swizzle=%d\n", t[i].ms,
                gflop / t[i].ms, t[i].id, t[i].tile, t[i].stages, t[i].cluster, t[i].swizzle);
  std::fflush(stdout);
}

int main() {
  const Shape shapes[] = {{"gemma2 FLCE R512", 512, 256000, 2304}, {"jsd student R1024", 1024, 151936, 2048}};
  const double budget_s = 15.0;  // phase 2, per shape
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  const size_t ws_bytes = 32ull << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
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
    const DwProblem pb(sh);
    // Phase 1: the heuristic's own results (the nvjet kernels), each with its cluster shape and stage
    // count varied.
    {
      cublasLtMatmulHeuristicResult_t res[16];
      const int n = pb.heuristic(h, ws_bytes, res, 16);
      std::vector<Timed> mine;
      int checked = 0;
      for (int i = 0; i < n; ++i) {
        const int id = config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_ID);
        const int tile = config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
        const int st0 = config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
        std::vector<int> stages = cap_ids(res[i].algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
        if (std::find(stages.begin(), stages.end(), st0) == stages.end()) stages.push_back(st0);
        for (int st : stages)
          for (int cl : clusters) {
            cublasLtMatmulAlgo_t a = res[i].algo;
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st, sizeof(st));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof(cl));
            ++checked;
            if (!pb.check(h, a, ws_bytes)) continue;
            const float ms = pb.median_ms(h, a, 1.f, ws, ws_bytes, 1, 5);
            if (ms >= 0) mine.push_back({ms, id, tile, st, cl, 0});
          }
      }
      std::printf("%s, the heuristic's %d results varied: %d checked, %zu ran\n", sh.name, n, checked,
                  mine.size());
      print_fastest(mine, pb.gflop());
    }
    // Phase 2: every configuration of the ids cublasLtMatmulAlgoGetIds lists (swizzling not swept).
    std::vector<Timed> all;
    int valid = 0;
    bool out_of_time = false;
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < n_ids && !out_of_time; ++k) {
      cublasLtMatmulAlgo_t algo;
      if (cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                 CUDA_R_16BF, ids[k], &algo) != CUBLAS_STATUS_SUCCESS)
        continue;
      std::vector<int> tiles = cap_ids(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
      std::vector<int> stages = cap_ids(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
      if (tiles.empty()) tiles.push_back(0);
      if (stages.empty()) stages.push_back(0);
      for (int tile : tiles)
        for (int st : stages)
          for (int cl : clusters) {
            if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s) {
              out_of_time = true;
              break;
            }
            cublasLtMatmulAlgo_t a = algo;
            const int one = 1, swz = 0;
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st, sizeof(st));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof(one));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof(cl));
            if (!pb.check(h, a, ws_bytes)) continue;
            ++valid;
            const float ms = pb.median_ms(h, a, 1.f, ws, ws_bytes, 1, 3);
            if (ms >= 0) all.push_back({ms, ids[k], tile, st, cl, swz});
          }
    }
    if (cudaGetLastError() != cudaSuccess) std::printf("(a CUDA error was raised and cleared)\n");
    std::printf("%s: %d valid configurations, %zu timed%s\n", sh.name, valid, all.size(),
                out_of_time ? " (time budget reached)" : "");
    print_fastest(all, pb.gflop());
  }
  return 0;
}
