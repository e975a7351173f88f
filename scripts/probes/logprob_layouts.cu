// Probe: layouts of the token log-prob forward (selective log-probs: one read of a bf16 row of V
// logits, the online max / sum, the target's log-prob) at 8 x 1025 rows x V 151936 and others.
// The library's kernel (csrc/kernels/divergence/divergence.cu logprob_fwd_kernel) takes a block of
// 1024 threads a row, two blocks an SM: 0.872 ms on an H100 against Liger's Triton kernel's 0.826
// (one warp a row, 2048-element tiles, 4 stages). Variants here: TPR threads a row (32 .. 1024),
// 256 / TPR rows a block, NV 16-byte vectors a thread in flight; dense rows, every other row ignored
// and 7 of 8 rows ignored (padding), and 1032 rows (a GRPO chunk). Prints median ms and GB/s read.
// Read with care: the rows without "lib" combine the warps' partials with a loop of every thread
// over all warps (slow at 1024 threads: the "(lib)" row, 1.06 ms); "lib reduce" is the library's
// block max then block sum, with which 1024 threads run as fast as 256 here (0.784 ms,
// `benchmarks/results/2026-12-07-h100-row-threads-ab.txt`). Kernel time only, no L2 flush.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/lp scripts/probes/logprob_layouts.cu
//   /tmp/lp
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));        \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

struct Online {
  float m = -INFINITY, s = 0.f;
  __device__ __forceinline__ void add(const float (&x)[8], float c, float k) {
    float vm = x[0];
#pragma unroll
    for (int e = 1; e < 8; ++e) vm = fmaxf(vm, x[e]);
    if (vm > m) {
      if (m != -INFINITY) s *= ex2((m - vm) * c * kLog2e);
      m = vm;
    }
    const float mb = m == -INFINITY ? 0.f : m;
#pragma unroll
    for (int e = 0; e < 8; ++e) s += ex2((x[e] - mb) * k);
  }
};

__device__ __forceinline__ void unpack(const uint4& v, float (&x)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

// Combine (m, s) over the TPR threads of a row: shuffles within a warp, shared memory across warps.
template <int TPR>
__device__ __forceinline__ void row_reduce(float& m, float& s, float c, float* sm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float M = fmaxf(m, m2);
    s = (M == -INFINITY) ? 0.f : s * __expf((m - M) * c) + s2 * __expf((m2 - M) * c);
    m = M;
  }
  if constexpr (TPR > 32) {
    constexpr int W = TPR / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float* rm = sm + threadIdx.y * 2 * W;
    if (lane == 0) {
      rm[w] = m;
      rm[W + w] = s;
    }
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < W; ++i) M = fmaxf(M, rm[i]);
    float S = 0.f;
    if (M != -INFINITY)
      for (int i = 0; i < W; ++i) S += rm[W + i] * __expf((rm[i] - M) * c);
    m = M;
    s = S;
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// The library's reductions (row_common.cuh): the block's max, then the block's sum (two barriers each).
__device__ __forceinline__ float bmax(float v, float* sc) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sc[w] = v;
  __syncthreads();
  return warp_max(lane < nw ? sc[lane] : -INFINITY);
}
__device__ __forceinline__ float bsum(float v, float* sc) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sc[w] = v;
  __syncthreads();
  return warp_sum(lane < nw ? sc[lane] : 0.f);
}

template <int TPR, int NV, int MINB, bool LDG = true, bool LIBRED = false>
__global__ void __launch_bounds__(TPR >= 256 ? TPR : 256, MINB)
    lp_kernel(const __nv_bfloat16* __restrict__ z, const int64_t* __restrict__ tgt, float* __restrict__ out,
              int64_t rows, int64_t V, float c) {
  __shared__ float sm[2 * 32];
  constexpr int RPB = TPR >= 256 ? 1 : 256 / TPR;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.y;
  if (r >= rows) return;  // (TPR > 32 with several rows a block: rows is a multiple of RPB here)
  const int64_t y = tgt[r];
  if (y < 0) {
    if (threadIdx.x == 0) out[r] = 0.f;
    return;
  }
  const float k = c * kLog2e;
  const uint4* p = reinterpret_cast<const uint4*>(z + r * V);
  const int64_t nvec = V / 8;
  Online o;
  int64_t j = threadIdx.x;
  for (; j + (NV - 1) * TPR < nvec; j += NV * TPR) {
    uint4 v[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) v[i] = LDG ? __ldg(p + j + i * TPR) : p[j + i * TPR];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float x[8];
      unpack(v[i], x);
      o.add(x, c, k);
    }
  }
  for (; j < nvec; j += TPR) {
    float x[8];
    unpack(__ldg(p + j), x);
    o.add(x, c, k);
  }
  float m = o.m, s = o.s;
  if constexpr (LIBRED) {  // (TPR >= 256: one row a block)
    const float M = bmax(m, sm);
    const float f = m == -INFINITY ? 0.f : expf((m - M) * c);
    s = bsum(s * f, sm);
    m = M;
  } else {
    row_reduce<TPR>(m, s, c, sm);
  }
  if (threadIdx.x == 0) out[r] = (__bfloat162float(z[r * V + y]) - m) * c - logf(s);
}

template <int TPR, int NV, int MINB, bool LDG = true, bool LIBRED = false>
float run(const __nv_bfloat16* z, const int64_t* t, float* o, int64_t rows, int64_t V, float c) {
  constexpr int RPB = TPR >= 256 ? 1 : 256 / TPR;
  const dim3 block(TPR, RPB);
  const unsigned grid = static_cast<unsigned>((rows + RPB - 1) / RPB);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) lp_kernel<TPR, NV, MINB, LDG, LIBRED><<<grid, block>>>(z, t, o, rows, V, c);
  CK(cudaGetLastError());
  std::vector<float> ms;
  for (int rep = 0; rep < 25; ++rep) {
    CK(cudaEventRecord(a));
    lp_kernel<TPR, NV, MINB, LDG, LIBRED><<<grid, block>>>(z, t, o, rows, V, c);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float x;
    CK(cudaEventElapsedTime(&x, a, b));
    ms.push_back(x);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main() {
  const int64_t V = 151936;
  const int64_t max_rows = 16400;
  __nv_bfloat16* z;
  int64_t* t;
  float *o, *ref;
  CK(cudaMalloc(&z, max_rows * V * 2));
  CK(cudaMalloc(&t, max_rows * 8));
  CK(cudaMalloc(&o, max_rows * 4));
  CK(cudaMalloc(&ref, max_rows * 4));
  {  // random logits (normal-ish: sum of uniforms) times 4
    std::vector<__nv_bfloat16> h(V * 64);
    uint64_t st = 12345;
    for (auto& v : h) {
      float s = 0.f;
      for (int i = 0; i < 4; ++i) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        s += (st >> 40) / 16777216.0f - 0.5f;
      }
      v = __float2bfloat16(s * 4.f);
    }
    for (int64_t r = 0; r < max_rows; r += 64)
      CK(cudaMemcpy(z + r * V, h.data(), std::min<int64_t>(64, max_rows - r) * V * 2, cudaMemcpyHostToDevice));
  }
  const float c = 1.f / 0.9f;
  struct Case {
    const char* name;
    int64_t rows;
    int ignore_every;  // 0: none ignored; n: rows with r % n != 0 ignored (n = 8: 7 of 8), 2: every other
  } cases[] = {{"8200 dense", 8200, 0}, {"8200 half ignored", 8200, 2}, {"8200 7/8 ignored", 8200, 8},
               {"1032 dense", 1032, 0}, {"16400 dense", 16400, 0}};
  for (const Case& cs : cases) {
    std::vector<int64_t> ht(cs.rows);
    int64_t active = 0;
    for (int64_t r = 0; r < cs.rows; ++r) {
      const bool ign = cs.ignore_every > 0 && r % cs.ignore_every != 0;
      ht[r] = ign ? -100 : (r * 7919) % V;
      active += !ign;
    }
    CK(cudaMemcpy(t, ht.data(), cs.rows * 8, cudaMemcpyHostToDevice));
    const double gb = active * V * 2 / 1e9;
    run<1024, 2, 2>(z, t, ref, cs.rows, V, c);  // the library's layout: the reference values
    std::vector<float> hr(cs.rows), ho(cs.rows);
    CK(cudaMemcpy(hr.data(), ref, cs.rows * 4, cudaMemcpyDeviceToHost));
    auto report = [&](const char* v, float ms) {
      CK(cudaMemcpy(ho.data(), o, cs.rows * 4, cudaMemcpyDeviceToHost));
      double d = 0;
      for (int64_t r = 0; r < cs.rows; ++r) d = std::max(d, (double)std::fabs(ho[r] - hr[r]));
      printf("%-18s %-22s %.4f ms  %5.0f GB/s  max|diff| %.1e\n", cs.name, v, ms, gb / ms * 1e3, d);
    };
    report("tpr1024 nv2 (lib)", run<1024, 2, 2>(z, t, o, cs.rows, V, c));
    report("tpr256 nv2 plain ld", run<256, 2, 8, false>(z, t, o, cs.rows, V, c));
    report("tpr256 nv2 lib reduce", run<256, 2, 8, true, true>(z, t, o, cs.rows, V, c));
    report("tpr256 nv2 plain+lib", run<256, 2, 8, false, true>(z, t, o, cs.rows, V, c));
    report("tpr1024 nv2 plain+lib", run<1024, 2, 2, false, true>(z, t, o, cs.rows, V, c));
    report("tpr512 nv2", run<512, 2, 4>(z, t, o, cs.rows, V, c));
    report("tpr256 nv2", run<256, 2, 8>(z, t, o, cs.rows, V, c));
    report("tpr128 nv2", run<128, 2, 8>(z, t, o, cs.rows, V, c));
    report("tpr64 nv2", run<64, 2, 8>(z, t, o, cs.rows, V, c));
    report("tpr32 nv2", run<32, 2, 8>(z, t, o, cs.rows, V, c));
    report("tpr32 nv4", run<32, 4, 4>(z, t, o, cs.rows, V, c));
    report("tpr64 nv4", run<64, 4, 4>(z, t, o, cs.rows, V, c));
    report("tpr256 nv4", run<256, 4, 4>(z, t, o, cs.rows, V, c));
    report("tpr1024 nv4", run<1024, 4, 1>(z, t, o, cs.rows, V, c));
  }
  return 0;
}
