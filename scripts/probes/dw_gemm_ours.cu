// Probe (not part of the extension): the sm_90a dW kernel of dw_gemm_sm90.cu (beside it)
// against the extension's cuBLASLt rule (tile 128 x 160, 64-deep stages) at the chunk loops' shapes:
// correctness against a float32 reference (accumulating and not, bf16 and fp16 at an odd shape) and
// the median time of each.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/dw_gemm_ours \
//     scripts/probes/dw_gemm_ours.cu scripts/probes/dw_gemm_sm90.cu -lcublasLt
#include <cuda_fp16.h>

#include <string>

#include "dw_gemm_probe.cuh"
#include "dw_gemm_sm90.h"

using liger_cpp::kernels::DwGemmArgs;

// ref[v, h] = w0[v, h] (when accumulating) + sum_k g[k, v] x[k, h], float32 (type T: bf16 or half).
template <class T>
__global__ void ref_kernel(const T* g, const T* x, const T* w0, float* ref, int R, int V, int H, int acc) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x, v = blockIdx.y;
  if (h >= H) return;
  float s = 0.f;
  for (int k = 0; k < R; ++k) s += float(g[size_t(k) * V + v]) * float(x[size_t(k) * H + h]);
  ref[size_t(v) * H + h] = (acc ? float(w0[size_t(v) * H + h]) : 0.f) + s;
}

// Elements whose error exceeds 1/2 ulp of the 16-bit result (2^-8 / 2^-11 relative) plus the float32
// sum's own rounding (1e-5 relative of the sum of |terms|, bounded here by 1e-3 of |ref| + 1e-6).
template <class T>
__global__ void count_bad(const T* out, const float* ref, size_t n, float rel, unsigned* bad, float* maxerr) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float o = float(out[i]), r = ref[i], e = fabsf(o - r);
    if (!(e <= rel * fabsf(r) + 1e-5f)) atomicAdd(bad, 1u);
    atomicMax(reinterpret_cast<int*>(maxerr), __float_as_int(e));
  }
}

int sms() {
  int d = 0, n = 0;
  cudaGetDevice(&d);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d);
  return n;
}

// Correctness of ours at one shape: not accumulating and accumulating, against ref_kernel.
template <class T>
bool check(int R, int V, int H, bool fp16, int cluster, bool ping) {
  T *g, *x, *w, *w0;
  float *ref, *maxerr;
  unsigned* bad;
  const size_t nw = size_t(V) * H;
  CK(cudaMalloc(&g, size_t(R) * V * sizeof(T)));
  CK(cudaMalloc(&x, size_t(R) * H * sizeof(T)));
  CK(cudaMalloc(&w, nw * sizeof(T)));
  CK(cudaMalloc(&w0, nw * sizeof(T)));
  CK(cudaMalloc(&ref, nw * 4));
  CK(cudaMalloc(&maxerr, 4));
  CK(cudaMalloc(&bad, 4));
  fill<T><<<1024, 256>>>(g, size_t(R) * V, 11u, 0.5f);
  fill<T><<<1024, 256>>>(x, size_t(R) * H, 12u, 0.5f);
  fill<T><<<1024, 256>>>(w0, nw, 13u, 0.5f);
  bool ok = true;
  for (int acc = 0; acc < 2; ++acc) {
    CK(cudaMemcpy(w, w0, nw * sizeof(T), cudaMemcpyDeviceToDevice));
    DwGemmArgs a{g, x, w, R, V, H, V, H, acc == 1, fp16, cluster, ping};
    const cudaError_t e = liger_cpp::kernels::dw_gemm_sm90(a, sms(), 0);
    CK(cudaDeviceSynchronize());
    ref_kernel<T><<<dim3((H + 127) / 128, V), 128>>>(g, x, w0, ref, R, V, H, acc);
    CK(cudaMemset(bad, 0, 4));
    CK(cudaMemset(maxerr, 0, 4));
    count_bad<T><<<1024, 256>>>(w, ref, nw, fp16 ? 1.5e-3f : 6e-3f, bad, maxerr);
    unsigned nb = 0;
    float me = 0.f;
    CK(cudaMemcpy(&nb, bad, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&me, maxerr, 4, cudaMemcpyDeviceToHost));
    std::printf(
        "  check %s %d %s R %d V %d H %d accumulate %d: launch %s, %u of %zu outside 1/2 ulp, max |err| "
        "%.3g\n",
        ping ? "pingpong" : "cluster", cluster, fp16 ? "fp16" : "bf16", R, V, H, acc, cudaGetErrorString(e),
        nb, nw, me);
    ok = ok && e == cudaSuccess && nb == 0;
  }
  cudaFree(g);
  cudaFree(x);
  cudaFree(w);
  cudaFree(w0);
  cudaFree(ref);
  cudaFree(maxerr);
  cudaFree(bad);
  return ok;
}

int main(int argc, char** argv) {
  // Arguments: "quick" (checks only), "coop" or "pingpong" (that kernel only: a hang of one, say a
  // barrier never completing, then leaves the other's figures).
  bool quick = false, want[2] = {true, true};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "quick") quick = true;
    if (arg == "coop") want[1] = false;
    if (arg == "pingpong") want[0] = false;
  }
  bool ok = true;
  // Both kernels (the cooperative 128 x 256 one, "cluster", and the ping-pong 128 x 128 one), each in
  // blocks alone and in clusters of two. Each variant's verdict is its own: a failing one is not timed.
  bool good[2][3] = {};
  for (int pp = 0; pp < 2; ++pp)
    for (int cl = 1; cl <= 2 && want[pp]; ++cl) {
      bool v = true;
      v &= check<__nv_bfloat16>(77, 1000, 264, false, cl, pp);
      v &= check<__half>(77, 1000, 264, true, cl, pp);
      // 33 row tiles: a cluster's second tile empty
      v &= check<__nv_bfloat16>(512, 4104, 2304, false, cl, pp);
      v &= check<__nv_bfloat16>(1024, 3000, 4096, false, cl, pp);
      v &= check<__nv_bfloat16>(64, 256, 256, false, cl, pp);
      v &= check<__nv_bfloat16>(5, 136, 8, false, cl, pp);
      // 32 K steps: the ring wraps within a tile
      v &= check<__nv_bfloat16>(2048, 1000, 264, false, cl, pp);
      std::printf("checks %s %d %s\n", pp ? "pingpong" : "cluster", cl, v ? "passed" : "FAILED");
      good[pp][cl] = v;
      ok &= v;
    }
  std::printf("checks %s\n", ok ? "passed" : "FAILED");
  std::fflush(stdout);
  if (quick) return ok ? 0 : 1;

  const Shape shapes[] = {
      {"gemma2 FLCE R512", 512, 256000, 2304},   {"gemma3 FLCE R512", 512, 262144, 2304},
      {"llama3 FLCE R1024", 1024, 128256, 4096}, {"jsd student R1024", 1024, 151936, 2048},
      {"qwen FLCE R864", 864, 151936, 4096},     {"llama4 FLCE R632", 632, 202048, 5120},
      {"h8192 R512", 512, 128256, 8192}};
  LtEnv env;
  const int n_sm = sms();
  for (const Shape& sh : shapes) {
    RuleCase rc(sh, env);
    const DwProblem& p = rc.p;
    const float t_lt = rc.rule_ms(env, 1.f), t_lt0 = rc.rule_ms(env, 0.f);
    for (int v = 0; v < 4; ++v) {
      const int pp = v / 2, cl = v % 2 + 1;
      if (!good[pp][cl]) continue;
      rc.reset();
      DwGemmArgs a{p.G, p.X, p.W, sh.R, sh.V, sh.H, sh.V, sh.H, true, false, cl, pp == 1};
      CK(liger_cpp::kernels::dw_gemm_sm90(a, n_sm, 0));
      const float dd = env.diff(p.W, rc.ref, rc.nW);
      const float t_us =
          median_ms_of([&] { return liger_cpp::kernels::dw_gemm_sm90(a, n_sm, 0) == cudaSuccess; }, 3, 15);
      a.accumulate = false;
      const float t_us0 =
          median_ms_of([&] { return liger_cpp::kernels::dw_gemm_sm90(a, n_sm, 0) == cudaSuccess; }, 3, 15);
      std::printf(
          "%-20s R %4d V %6d H %4d %s %d: beta 1 ours %.3f ms (%.0f TFLOP/s) cuBLASLt %.3f (%.0f) = "
          "%.3f x | "
          "beta 0 ours %.3f cuBLASLt %.3f | max |ours - cuBLASLt| %.3g\n",
          sh.name, sh.R, sh.V, sh.H, pp ? "pingpong" : "cluster", cl, t_us, p.gflop() / t_us, t_lt,
          p.gflop() / t_lt, t_us / t_lt, t_us0, t_lt0, dd);
    }
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}
