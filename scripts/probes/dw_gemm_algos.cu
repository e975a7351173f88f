// Probe (not part of the extension): how fast can the chunk loop's weight-gradient GEMM accumulate,
// dW[V, H] += G[R, V]^T X[R, H] in bf16 with float32 compute and beta = 1, when cuBLASLt's other
// algorithms are tried? The chunk loops (FLCE, distillation, KL, GRPO) run it once per chunk; on the
// H200 it costs about 1 + 330 / R of its FLOP time (re-reading and re-writing dW), which is what keeps
// FLCE at Gemma's heads and JSD distillation above 1.10 x their GEMM floor. Prints, per shape, the
// heuristic's first algorithm and the fastest of up to 64 it returns, with beta = 1 and beta = 0.
//   nvcc -O2 -std=c++17 -o /tmp/dw_gemm_algos scripts/probes/dw_gemm_algos.cu -lcublasLt
#include "dw_gemm_probe.cuh"

int main() {
  const Shape shapes[] = {
      {"gemma2 FLCE R512", 512, 256000, 2304},   {"gemma2 FLCE R1024", 1024, 256000, 2304},
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
    const DwProblem pb(sh);
    cublasLtMatmulHeuristicResult_t res[64];
    const int n = pb.heuristic(h, ws_bytes, res, 64);
    const double flop_ms = pb.gflop();
    for (float beta : {1.f, 0.f}) {
      float first = -1, best = 1e30f;
      int best_i = -1;
      for (int i = 0; i < n; ++i) {
        const float ms = pb.median_ms(h, res[i].algo, beta, ws, ws_bytes, 2, 15);
        if (i == 0) first = ms;
        if (beta == 1.f)
          std::printf("    #%d %.3f ms id=%d tile=%d stages=%d splitk=%d ws=%zu\n", i, ms,
                      config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_ID),
                      config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                      config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                      config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), res[i].workspaceSize);
        if (ms > 0 && ms < best) best = ms, best_i = i;
      }
      int id = -1, tile = -1, stages = -1, splitk = -1, swizzle = -1;
      if (best_i >= 0) {
        const cublasLtMatmulAlgo_t& a = res[best_i].algo;
        id = config_attr(a, CUBLASLT_ALGO_CONFIG_ID);
        tile = config_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID);
        stages = config_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID);
        splitk = config_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
        swizzle = config_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
      }
      std::printf(
          "%-20s beta=%g algos=%2d heuristic#0 %.3f ms (%.0f TFLOP/s)  best #%d %.3f ms (%.0f TFLOP/s) id=%d "
          "tile=%d stages=%d splitk=%d swz=%d\n",
          sh.name, beta, n, first, flop_ms / first, best_i, best, flop_ms / best, id, tile, stages, splitk,
          swizzle);
    }
  }
  return 0;
}
