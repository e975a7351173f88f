// Probe: layouts of DyT's forward, y = gamma * tanh(alpha * x) + beta, bf16 x / y / parameters, at
// 16384 x 4096, 8192 x 8192 and 32768 x 2048. The library's kernel (csrc/kernels/dyt/dyt.cu) takes
// 256 threads a block, one 16-byte vector a thread across the row and U = 4 rows a thread, one
// group of rows a block; it runs at 84-86 % of the copy bandwidth on an H100 against Liger's
// Triton kernel's 93 % (one row chunk of up to 4096 columns a program). Its SASS loads gamma and
// beta as 16 2-byte loads a thread and uses 80 registers (3 blocks an SM: 48 KiB of loads in flight
// an SM). Variants: "lib" (a copy of the library's), "vp" (16-byte parameter loads, values kept
// packed until used), "chunk" (Liger's grid: a block per (row, column chunk), NV vectors a thread),
// "persist" (row groups strided over a grid of a few blocks an SM, parameters loaded once).
// Diagnostic rows: "copy" (the bandwidth C), "no tanh" (gamma * alpha * x + beta with the chunk
// layout: is it the math?). Prints median ms, % of C and the max |diff| against "lib" (bitwise
// equal is expected: the same tanhf). Kernel time only, no L2 flush (the tensors are 128 MiB).
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/dyt scripts/probes/dyt_fwd_layouts.cu
//   /tmp/dyt
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x)                                                           \
  do {                                                                  \
    cudaError_t e_ = (x);                                               \
    if (e_ != cudaSuccess) {                                            \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

using bf = __nv_bfloat16;

__device__ __forceinline__ void unpack(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ uint4 pack(const float (&f)[8]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

__device__ __forceinline__ uint4 ldg(const bf* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ void stg(bf* p, const uint4& v) { *reinterpret_cast<uint4*>(p) = v; }

template <bool TANH>
__device__ __forceinline__ uint4 dyt8(const uint4& xr, float a, const uint4& gr, const uint4& br) {
  float x[8], g[8], b[8], o[8];
  unpack(xr, x);
  unpack(gr, g);
  unpack(br, b);
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = TANH ? g[j] * tanhf(a * x[j]) + b[j] : g[j] * (a * x[j]) + b[j];
  return pack(o);
}

// ---- lib: the library's kernel (scalar parameter loads, floats held) ----
constexpr int kU = 4;
__global__ void __launch_bounds__(256) lib_kernel(const bf* __restrict__ x, const bf* __restrict__ alpha,
                                                  const bf* __restrict__ gamma, const bf* __restrict__ beta,
                                                  bf* __restrict__ y, int64_t rows, int64_t cols, int64_t per_group) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 8;
  if (c0 >= cols) return;
  const float a = __bfloat162float(alpha[0]);
  float g[8], b[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    g[j] = __bfloat162float(gamma[c0 + j]);
    b[j] = __bfloat162float(beta[c0 + j]);
  }
  const int64_t rb = static_cast<int64_t>(blockIdx.x) * per_group;
  const int64_t re = rb + per_group < rows ? rb + per_group : rows;
  const int64_t ty = blockDim.y;
  for (int64_t r0 = rb + threadIdx.y; r0 < re; r0 += kU * ty) {
    float xv[kU][8];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (r0 + u * ty < re) unpack(ldg(x + (r0 + u * ty) * cols + c0), xv[u]);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (r0 + u * ty >= re) continue;
      float o[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = g[j] * tanhf(a * xv[u][j]) + b[j];
      stg(y + (r0 + u * ty) * cols + c0, pack(o));
    }
  }
}

// ---- vp: the library's grid, parameters as 16-byte loads, x held packed ----
template <int U, int MINB>
__global__ void __launch_bounds__(256, MINB)
    vp_kernel(const bf* __restrict__ x, const bf* __restrict__ alpha, const bf* __restrict__ gamma,
              const bf* __restrict__ beta, bf* __restrict__ y, int64_t rows, int64_t cols, int64_t per_group) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 8;
  if (c0 >= cols) return;
  const float a = __bfloat162float(alpha[0]);
  const uint4 g = ldg(gamma + c0), b = ldg(beta + c0);
  const int64_t rb = static_cast<int64_t>(blockIdx.x) * per_group;
  const int64_t re = rb + per_group < rows ? rb + per_group : rows;
  const int64_t ty = blockDim.y;
  for (int64_t r0 = rb + threadIdx.y; r0 < re; r0 += U * ty) {
    uint4 xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u * ty < re) xv[u] = ldg(x + (r0 + u * ty) * cols + c0);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u * ty < re) stg(y + (r0 + u * ty) * cols + c0, dyt8<true>(xv[u], a, g, b));
  }
}

// ---- chunk: Liger's grid (column chunks, rows), NV vectors a thread strided by the block ----
template <int TPB, int NV, bool TANH>
__global__ void __launch_bounds__(TPB) chunk_kernel(const bf* __restrict__ x, const bf* __restrict__ alpha,
                                                    const bf* __restrict__ gamma, const bf* __restrict__ beta,
                                                    bf* __restrict__ y, int64_t cols) {
  const int64_t row = blockIdx.y;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * TPB * NV * 8;
  const float a = __bfloat162float(alpha[0]);
  uint4 xv[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int64_t c = base + (k * TPB + threadIdx.x) * 8;
    if (c < cols) xv[k] = ldg(x + row * cols + c);
  }
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int64_t c = base + (k * TPB + threadIdx.x) * 8;
    if (c < cols) stg(y + row * cols + c, dyt8<TANH>(xv[k], a, ldg(gamma + c), ldg(beta + c)));
  }
}

// ---- persist: grid of B blocks an SM over (row groups, column tiles), parameters loaded once ----
template <int U, int MINB>
__global__ void __launch_bounds__(256, MINB)
    persist_kernel(const bf* __restrict__ x, const bf* __restrict__ alpha, const bf* __restrict__ gamma,
                   const bf* __restrict__ beta, bf* __restrict__ y, int64_t rows, int64_t cols) {
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 8;
  if (c0 >= cols) return;
  const float a = __bfloat162float(alpha[0]);
  const uint4 g = ldg(gamma + c0), b = ldg(beta + c0);
  const int64_t step = static_cast<int64_t>(gridDim.x) * U;
  for (int64_t r0 = blockIdx.x; r0 < rows; r0 += step) {
    uint4 xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u * gridDim.x < rows) xv[u] = ldg(x + (r0 + u * gridDim.x) * cols + c0);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r0 + u * gridDim.x < rows) stg(y + (r0 + u * gridDim.x) * cols + c0, dyt8<true>(xv[u], a, g, b));
  }
}

__global__ void copy_kernel(const uint4* __restrict__ s, uint4* __restrict__ d, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    d[i] = __ldg(s + i);
}

template <typename F>
float time_ms(F&& launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) launch();
  CK(cudaGetLastError());
  std::vector<float> ms;
  for (int rep = 0; rep < 41; ++rep) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, sms);
  const int64_t n = int64_t{1} << 26;  // 64 Mi elements in every shape
  bf *x, *y, *ref, *p;
  CK(cudaMalloc(&x, n * 2));
  CK(cudaMalloc(&y, n * 2));
  CK(cudaMalloc(&ref, n * 2));
  CK(cudaMalloc(&p, (2 * 8192 + 8) * 2));
  {
    std::vector<bf> h(1 << 20);
    uint64_t st = 12345;
    for (auto& v : h) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      v = __float2bfloat16(((st >> 40) / 16777216.0f - 0.5f) * 6.f);
    }
    for (int64_t i = 0; i < n; i += h.size()) CK(cudaMemcpy(x + i, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    std::vector<bf> hp(2 * 8192 + 8);
    for (size_t i = 0; i < hp.size(); ++i) hp[i] = __float2bfloat16(0.5f + 0.001f * (i % 997));
    CK(cudaMemcpy(p, hp.data(), hp.size() * 2, cudaMemcpyHostToDevice));
  }
  const bf* alpha = p + 2 * 8192;
  const bf* gamma = p;
  const bf* beta = p + 8192;
  const double gb = 2.0 * n * 2 / 1e9;
  const float copy_ms = time_ms([&] { copy_kernel<<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(x),
                                                                 reinterpret_cast<uint4*>(y), n / 8); });
  printf("copy %.4f ms, C = %.0f GB/s\n", copy_ms, gb / copy_ms * 1e3);
  const int64_t shapes[][2] = {{16384, 4096}, {8192, 8192}, {32768, 2048}};
  std::vector<bf> hr(n), ho(n);
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    const int64_t nv = cols / 8;
    const int tx = nv < 256 ? static_cast<int>(nv) : 256;
    const int ty = 256 / tx;
    const unsigned col_tiles = static_cast<unsigned>((nv + tx - 1) / tx);
    const int64_t per_group = kU * ty;
    const dim3 lgrid(static_cast<unsigned>((rows + per_group - 1) / per_group), col_tiles), lblock(tx, ty);
    const float lib_ms = time_ms([&] { lib_kernel<<<lgrid, lblock>>>(x, alpha, gamma, beta, ref, rows, cols, per_group); });
    CK(cudaMemcpy(hr.data(), ref, n * 2, cudaMemcpyDeviceToHost));
    auto report = [&](const char* name, float ms, bool check = true) {
      double d = 0;
      if (check) {
        CK(cudaMemcpy(ho.data(), y, n * 2, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < n; ++i)
          d = std::max(d, (double)std::fabs(__bfloat162float(ho[i]) - __bfloat162float(hr[i])));
      }
      printf("%5lld x %-5lld %-22s %.4f ms  %5.1f %%C  max|diff| %s%.1e\n", (long long)rows, (long long)cols, name,
             ms, 100.0 * copy_ms / ms, check ? "" : "(not checked) ", d);
    };
    report("lib", lib_ms, false);
#define VP(U, MINB)                                                                                     \
  {                                                                                                     \
    const int64_t pg = (U) * ty;                                                                        \
    const dim3 g(static_cast<unsigned>((rows + pg - 1) / pg), col_tiles);                               \
    report("vp U" #U " minb" #MINB,                                                                     \
           time_ms([&] { vp_kernel<U, MINB><<<g, lblock>>>(x, alpha, gamma, beta, y, rows, cols, pg); })); \
  }
    VP(4, 1) VP(4, 4) VP(2, 8) VP(8, 2) VP(8, 4) VP(1, 8)
#define CHUNK(TPB, NV, TANH, NAME)                                                                      \
  {                                                                                                     \
    const dim3 g(static_cast<unsigned>((cols + (TPB) * (NV) * 8 - 1) / ((TPB) * (NV) * 8)),             \
                 static_cast<unsigned>(rows));                                                          \
    report(NAME, time_ms([&] { chunk_kernel<TPB, NV, TANH><<<g, TPB>>>(x, alpha, gamma, beta, y, cols); }), \
           TANH);                                                                                       \
  }
    CHUNK(128, 4, true, "chunk 128x4") CHUNK(128, 2, true, "chunk 128x2") CHUNK(256, 2, true, "chunk 256x2")
    CHUNK(256, 1, true, "chunk 256x1") CHUNK(64, 4, true, "chunk 64x4") CHUNK(128, 4, false, "chunk 128x4 no tanh")
#define PERSIST(U, MINB, BPS)                                                                           \
  {                                                                                                     \
    const dim3 g(std::max(1u, static_cast<unsigned>(sms * (BPS)) / col_tiles), col_tiles);                                        \
    report("persist U" #U " minb" #MINB " " #BPS "/SM",                                                 \
           time_ms([&] { persist_kernel<U, MINB><<<g, lblock>>>(x, alpha, gamma, beta, y, rows, cols); })); \
  }
    PERSIST(4, 4, 2) PERSIST(4, 4, 4) PERSIST(2, 8, 4) PERSIST(8, 2, 2) PERSIST(2, 8, 8)
  }
  return 0;
}
