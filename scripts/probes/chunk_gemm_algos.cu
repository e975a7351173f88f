// Probe (not part of the extension), beside dw_gemm_algos.cu: the chunk loops' two other GEMMs at
// a chunk's rows R, the logits L[R, V] = X[R, H] W[V, H]^T and dX[R, H] = G[R, V] W[V, H] (bf16,
// float32 compute, beta 0), every algorithm cuBLASLt's heuristic returns (split-K included) timed
// against its first (what ATen's cuBLAS path roughly takes) and the same GEMM at the full M rows
// per row. Why: at Llama 4's head (632-row chunks) the FLCE call's logits and dX GEMMs ran 13 % and
// 21 % slower than the full-size ones (scripts/probes/flce_chunk_breakdown.py).
//   nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/chunk_gemm_algos \
//     scripts/probes/chunk_gemm_algos.cu -lcublasLt
#include "dw_gemm_probe.cuh"

struct Gemm {
  const char* what;
  int m, n, k;  // column-major C[m, n] = op(A)[m, k] op(B)[k, n], A and B packed
  cublasOperation_t ta;
  LtGemm make() const { return LtGemm(m, n, k, ta, CUBLAS_OP_N, 1u, 2u, 3u); }  // C++17: no copy
};

// Column-major views. logits: C^T [V, R] = W [V, H] (row-major = col-major [H, V], op T) x X^T
// [H, R] (X row-major = col-major [H, R], op N). dX: C^T [H, R] = W^T [H, V] (col-major [H, V],
// op N) x G^T [V, R] (G row-major = col-major [V, R], op N). The heuristic is told 16-byte
// alignment (LtGemm::heuristic), as the extension's dW path tells it.
Gemm logits(int R, int V, int H) { return {"logits", V, R, H, CUBLAS_OP_T}; }
Gemm dx(int R, int V, int H) { return {"dX", H, R, V, CUBLAS_OP_N}; }

// Every heuristic algorithm at the chunk's rows, beside the full-M GEMM's first algorithm scaled to
// those rows.
void run_one(cublasLtHandle_t h, const Gemm& part, const Gemm& full, void* ws, size_t ws_bytes) {
  float full_ms = -1.f;
  {
    const LtGemm f = full.make();
    cublasLtMatmulHeuristicResult_t r;
    if (f.heuristic(h, ws_bytes, &r, 1) == 1)
      full_ms = f.median_ms(h, r.algo, 0.f, ws, ws_bytes, 1, 12) * part.n / full.n;
  }
  const LtGemm p = part.make();
  cublasLtMatmulHeuristicResult_t res[16];
  const int n = p.heuristic(h, ws_bytes, res, 16);
  std::printf("  %s m %d n %d k %d: %d algorithms; the full-M GEMM's time for these rows %.3f ms\n",
              part.what, part.m, part.n, part.k, n, full_ms);
  for (int i = 0; i < n; ++i) {
    const float ms = p.median_ms(h, res[i].algo, 0.f, ws, ws_bytes, 1, 12);
    if (ms < 0.f) continue;
    std::printf("    #%d %.3f ms (%.0f TFLOP/s) tile=%d stages=%d splitk=%d cluster=%d ws=%zu\n", i, ms,
                p.gflop() / ms, config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), res[i].workspaceSize);
  }
  std::fflush(stdout);
}

int main() {
  struct Head {
    const char* name;
    int M, R, V, H;
  };
  const Head heads[] = {{"llama4", 8192, 632, 202048, 5120},
                        {"llama4 (640 rows)", 8192, 640, 202048, 5120},
                        {"llama4 (512 rows)", 8192, 512, 202048, 5120},
                        {"gemma2", 8192, 512, 256000, 2304},
                        {"llama3", 8192, 1024, 128256, 4096}};
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  const size_t ws_bytes = 32ull << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  for (const Head& hd : heads) {
    std::printf("%s: M %d, chunk rows %d, V %d, H %d\n", hd.name, hd.M, hd.R, hd.V, hd.H);
    run_one(h, logits(hd.R, hd.V, hd.H), logits(hd.M, hd.V, hd.H), ws, ws_bytes);
    run_one(h, dx(hd.R, hd.V, hd.H), dx(hd.M, hd.V, hd.H), ws, ws_bytes);
  }
  std::printf("done\n");
  return 0;
}
