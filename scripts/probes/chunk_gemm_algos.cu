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
  int m, n, k;  // column-major C[m, n] = op(A)[m, k] op(B)[k, n]
  cublasOperation_t ta;
  int lda, ldb;
};

// Column-major views. logits: C^T [V, R] = W [V, H] (row-major = col-major [H, V], op T) x X^T
// [H, R] (X row-major = col-major [H, R], op N). dX: C^T [H, R] = W^T [H, V] (col-major [H, V],
// op N) x G^T [V, R] (G row-major = col-major [V, R], op N).
Gemm logits(int R, int V, int H) { return {"logits", V, R, H, CUBLAS_OP_T, H, H}; }
Gemm dx(int R, int V, int H) { return {"dX", H, R, V, CUBLAS_OP_N, H, V}; }

// One GEMM's buffers (filled) and cuBLASLt descriptors.
struct Problem {
  Gemm g;
  __nv_bfloat16 *A = nullptr, *B = nullptr, *C = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;

  explicit Problem(const Gemm& gm) : g(gm) {
    const size_t na = size_t(g.m) * g.k, nb = size_t(g.k) * g.n, nc = size_t(g.m) * g.n;
    CK(cudaMalloc(&A, na * 2));
    CK(cudaMalloc(&B, nb * 2));
    CK(cudaMalloc(&C, nc * 2));
    fill<<<1024, 256>>>(A, na, 1u);
    fill<<<1024, 256>>>(B, nb, 2u);
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opN = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.ta, sizeof(g.ta)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
    if (g.ta == CUBLAS_OP_T)
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, g.k, g.m, g.lda));
    else
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, g.m, g.k, g.lda));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, g.k, g.n, g.ldb));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, g.m, g.n, g.m));
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;
  ~Problem() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
  }

  int heuristic(cublasLtHandle_t h, size_t ws_bytes, cublasLtMatmulHeuristicResult_t* res, int max) const {
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof(ws_bytes)));
    int n = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, max, res, &n));
    cublasLtMatmulPreferenceDestroy(pref);
    return n;
  }

  float median_ms(cublasLtHandle_t h, const cublasLtMatmulAlgo_t& algo, void* ws, size_t ws_bytes) const {
    const float alpha = 1.f, beta = 0.f;
    return median_ms_of(
        [&] {
          return cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &algo, ws, ws_bytes, 0) ==
                 CUBLAS_STATUS_SUCCESS;
        },
        1, 12);
  }
};

// Every heuristic algorithm at the chunk's rows, beside the full-M GEMM's first algorithm scaled to
// those rows.
void run_one(cublasLtHandle_t h, const Gemm& part, const Gemm& full, void* ws, size_t ws_bytes) {
  float full_ms = -1.f;
  {
    Problem f(full);
    cublasLtMatmulHeuristicResult_t r;
    if (f.heuristic(h, ws_bytes, &r, 1) == 1)
      full_ms = f.median_ms(h, r.algo, ws, ws_bytes) * part.n / full.n;
  }
  Problem p(part);
  cublasLtMatmulHeuristicResult_t res[16];
  const int n = p.heuristic(h, ws_bytes, res, 16);
  const double gflop = 2.0 * part.m * double(part.n) * part.k / 1e9;
  std::printf("  %s m %d n %d k %d: %d algorithms; the full-M GEMM's time for these rows %.3f ms\n",
              part.what, part.m, part.n, part.k, n, full_ms);
  for (int i = 0; i < n; ++i) {
    const float ms = p.median_ms(h, res[i].algo, ws, ws_bytes);
    if (ms < 0.f) continue;
    std::printf("    #%d %.3f ms (%.0f TFLOP/s) tile=%d stages=%d splitk=%d cluster=%d ws=%zu\n", i, ms,
                gflop / ms, config_attr(res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
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
