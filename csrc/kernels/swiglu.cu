// SwiGLU / GeGLU forward and backward kernels (see swiglu.h for the math).
//
// Purely element-wise and memory-bound. The [rows, cols] problem is cut into
// tiles of one row segment of kThreads * UNROLL * VEC elements; blocks walk the
// tiles grid-stride. Each thread issues all UNROLL loads of every operand (16
// bytes each when VEC = 16 / sizeof(T)) before any arithmetic, so several
// vectors per thread are in flight. Dense inputs are collapsed to a single row,
// so only the very last tile is partial. When a pointer or a row stride is not
// 16-byte aligned the same kernels run with VEC = 1. Offsets are int64.
// A/B variants, environment knobs read on every call: LIGER_CPP_GLU_GRID
// (small blocks, or the prefetch kernels glu_fwd_pipe / glu_bwd_pipe),
// LIGER_CPP_GLU_HINT (cache hints) and LIGER_CPP_GLU_SILU (the SiLU's division).
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "common.cuh"
#include "env_knob.h"
#include "launch_cache.h"
#include "swiglu.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kThreads = 256;
// Vectors per thread and operand, and the register cap through the minimum of
// resident blocks per SM, chosen with -Xptxas -v so that nothing spills:
// forward 4 x 2 loads of 16 B per thread, 2+ blocks/SM (<= 128 registers;
// 108-123 used); backward 2 x 3 loads, 2+ blocks/SM (more spill the GELUs).
// Measured alternatives (92e0066, LIGER_CPP_GLU_SHAPE, since removed; bf16
// 16384 x 14336 / 16384 x 8192, % of C fwd+bwd, this shape 93.1 / 92.8):
// 2 vectors per operand in 4+ blocks/SM 92.9 / 92.5; one vector in 8 blocks/SM
// (32 registers, the Triton kernels' shape) spills: 48.8 / 48.6. Nor did exp
// as one MUFU.EX2 for 2-byte types change anything (93.1 / 92.5). ncu against
// torch.compile's kernel (100-102 % of C; benchmarks/NOTES.md, Session 8):
// the same DRAM bytes, but its 128-thread blocks, one tile each, keep loads
// coming where these persistent blocks load, wait, compute and store in turn.
constexpr int kFwdUnroll = 4, kFwdMinBlocks = 2;
constexpr int kBwdUnroll = 2, kBwdMinBlocks = 2;
// The prefetch kernels (glu_fwd_pipe, glu_bwd_pipe): vectors per thread and
// operand in each of the two register sets, and the minimum of resident
// blocks, without spills for every dtype, activation and hint (-Xptxas -v,
// sm_90a): forward 2 x 2 x 2 loads of 16 B, 3+ blocks/SM (<= 80 registers;
// 62-80 used; 4 blocks/SM spill); backward 2 x 3 x 1, 3+ blocks/SM (54-80
// used; 2 vectors fit only 2 blocks/SM, 80-125 registers). More resident
// threads than the default kernels, each with the next tile in flight.
constexpr int kPipeFwdUnroll = 2, kPipeFwdMinBlocks = 3;
constexpr int kPipeBwdUnroll = 1, kPipeBwdMinBlocks = 3;

template <GluAct ACT>
struct Act;

template <>
struct Act<GluAct::kSilu> {
  static __device__ __forceinline__ float f(float x) { return x / (1.f + expf(-x)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float s = 1.f / (1.f + expf(-x));
    y = x * s;
    d = s * (1.f + x * (1.f - s));
  }
};

// SiLU's sigmoid with its reciprocal taken without an IEEE division (the
// default; LIGER_CPP_GLU_SILU=div selects x / (1 + e), see silu_rcp()). The
// division compiles to a checked slow path: FCHK, a branch and a convergence
// barrier per element (60 BSSY in the bf16 forward's SASS against 4 for
// GELU-tanh's), and ran at 75.4 % of C forward, 82.0 % fwd+bwd against 88.2 /
// 91.0 % for this form (4096 x 14336 bf16, H200,
// benchmarks/results/2026-11-30-h200-swiglu-quick-c1a3bfe.log). Here 1 / d,
// d = 1 + e >= 1, is rcp.approx (subnormal results kept) refined by one Newton
// step, within about 1 ulp of the rounded reciprocal; d = inf gives 0 (the
// limit) instead of the step's NaN. No branches.
__device__ __forceinline__ float sigmoid_of_exp_neg(float e) {
  const float d = 1.f + e;
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = fmaf(r, fmaf(-d, r, 1.f), r);
  return d == INFINITY ? 0.f : r;
}

template <>
struct Act<GluAct::kSiluRcp> {
  static __device__ __forceinline__ float f(float x) { return x * sigmoid_of_exp_neg(expf(-x)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float s = sigmoid_of_exp_neg(expf(-x));
    y = x * s;
    d = s * (1.f + x * (1.f - s));
  }
};

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <>
struct Act<GluAct::kGeluTanh> {
  static __device__ __forceinline__ float f(float x) {
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x * x * x));
    return 0.5f * x * (1.f + t);
  }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float x2 = x * x;
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x2 * x));
    y = 0.5f * x * (1.f + t);
    d = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCoef * x2);
  }
};

template <>
struct Act<GluAct::kGeluErf> {
  static __device__ __forceinline__ float f(float x) { return 0.5f * x * (1.f + erff(x * kInvSqrt2)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float cdf = 0.5f * (1.f + erff(x * kInvSqrt2));
    y = x * cdf;
    d = cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  }
};

// Cache hints for the single-use streams (LIGER_CPP_GLU_HINT, A/B), a bit mask
// and a template argument of the kernels, so that the default (kHintNone)
// instantiations compile to the same code as without it. Every byte of a, b,
// dc is read once and of c, da, db written once, and one operand (470 MB at
// 16384 x 14336 bf16) is ten times the L2: nothing is reused from a cache.
// kHintLoad: loads not allocated in L1 and evict_first in L2; kHintStore:
// st.global.cs (evict first). Only the 16-byte vector path takes them (the
// VEC = 1 kernels and the scalar ragged ends run unhinted). The hinted
// accesses are asm (load_16B_ordered / store_16B_ordered), so they also keep
// program order, which the plain ones of the default kernels already follow
// in their SASS (all loads of a tile, then arithmetic and stores).
constexpr int kHintNone = 0, kHintLoad = 1, kHintStore = 2, kHintStream = kHintLoad | kHintStore;

// One vector of an operand: an asm load (load_16B_ordered) for a 16-byte vector
// with the load hint or when ORDERED (issued where written: the prefetch
// kernels' next tile must not be sunk next to its use); else the plain load of
// the default kernels. NC: the operand is not written during the kernel (the
// forward's inputs; the backward's may be its outputs).
template <typename T, int VEC, bool NC, bool ORDERED, int HINT>
__device__ __forceinline__ Vec<T, VEC> glu_load(const T* p, uint64_t policy) {
  if constexpr (sizeof(Vec<T, VEC>) == 16 && (ORDERED || (HINT & kHintLoad) != 0)) {
    Vec<T, VEC> v;
    load_16B_ordered<NC, (HINT & kHintLoad) != 0>(v, p, policy);
    return v;
  } else {
    return load_vec<T, VEC>(p);
  }
}

// One vector of a result: an asm store (store_16B_ordered) for a 16-byte vector
// with the store hint or when ORDERED (the prefetch kernels, whose plain
// struct stores nvcc split into 16-bit stores); else the plain store of the
// default kernels.
template <typename T, int VEC, bool ORDERED, int HINT>
__device__ __forceinline__ void glu_store(T* p, const Vec<T, VEC>& v) {
  if constexpr (sizeof(Vec<T, VEC>) == 16 && (ORDERED || (HINT & kHintStore) != 0))
    store_16B_ordered<(HINT & kHintStore) != 0>(p, v);
  else
    store_vec<T, VEC>(p, v);
}

// The loads' L2 policy (evict_first) under kHintLoad; nothing is emitted otherwise.
template <int HINT>
__device__ __forceinline__ uint64_t glu_policy() {
  if constexpr ((HINT & kHintLoad) != 0)
    return l2_evict_policy<false>();
  else
    return 0;
}

template <typename T, int VEC, GluAct ACT, int kThreads = kThreads, int kFwdUnroll = kFwdUnroll,
          int kMinBlocks = kFwdMinBlocks, int HINT = kHintNone>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    glu_fwd_kernel(const T* __restrict__ a, int64_t as, const T* __restrict__ b, int64_t bs,
                   T* __restrict__ c, int64_t cs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kFwdUnroll * VEC;
  const uint64_t pol = glu_policy<HINT>();
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t row = t / tiles_per_row;
    const int64_t c0 = (t - row * tiles_per_row) * kTile;
    const T* ar = a + row * as;
    const T* br = b + row * bs;
    T* cr = c + row * cs;
    Vec<T, VEC> av[kFwdUnroll], bv[kFwdUnroll];
#pragma unroll
    for (int u = 0; u < kFwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        av[u] = glu_load<T, VEC, true, false, HINT>(ar + col, pol);
        bv[u] = glu_load<T, VEC, true, false, HINT>(br + col, pol);
      }
    }
#pragma unroll
    for (int u = 0; u < kFwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        Vec<T, VEC> cv;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          cv.v[j] = from_float<T>(Act<ACT>::f(to_float<T>(av[u].v[j])) * to_float<T>(bv[u].v[j]));
        glu_store<T, VEC, false, HINT>(cr + col, cv);
      } else if (VEC > 1 && col < cols) {  // ragged end of a row (vector path only)
        for (int64_t k = col; k < cols; ++k)
          cr[k] = from_float<T>(Act<ACT>::f(to_float<T>(ar[k])) * to_float<T>(br[k]));
      }
    }
  }
}

// No __restrict__: da/db may be a/b. All loads of a tile precede its stores, and
// an element is only ever written by the thread that read it.
template <typename T, int VEC, GluAct ACT, int kThreads = kThreads, int kBwdUnroll = kBwdUnroll,
          int kMinBlocks = kBwdMinBlocks, int HINT = kHintNone>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    glu_bwd_kernel(const T* dc, int64_t gs, const T* a, int64_t as, const T* b, int64_t bs, T* da,
                   int64_t das, T* db, int64_t dbs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kBwdUnroll * VEC;
  const uint64_t pol = glu_policy<HINT>();
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t row = t / tiles_per_row;
    const int64_t c0 = (t - row * tiles_per_row) * kTile;
    const T* gr = dc + row * gs;
    const T* ar = a + row * as;
    const T* br = b + row * bs;
    T* dar = da + row * das;
    T* dbr = db + row * dbs;
    Vec<T, VEC> gv[kBwdUnroll], av[kBwdUnroll], bv[kBwdUnroll];
#pragma unroll
    for (int u = 0; u < kBwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        gv[u] = glu_load<T, VEC, false, false, HINT>(gr + col, pol);
        av[u] = glu_load<T, VEC, false, false, HINT>(ar + col, pol);
        bv[u] = glu_load<T, VEC, false, false, HINT>(br + col, pol);
      }
    }
#pragma unroll
    for (int u = 0; u < kBwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        Vec<T, VEC> dav, dbv;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float g = to_float<T>(gv[u].v[j]);
          float y, d;
          Act<ACT>::fd(to_float<T>(av[u].v[j]), y, d);
          dav.v[j] = from_float<T>(g * to_float<T>(bv[u].v[j]) * d);
          dbv.v[j] = from_float<T>(g * y);
        }
        glu_store<T, VEC, false, HINT>(dar + col, dav);
        glu_store<T, VEC, false, HINT>(dbr + col, dbv);
      } else if (VEC > 1 && col < cols) {
        for (int64_t k = col; k < cols; ++k) {
          const float g = to_float<T>(gr[k]);
          const float bk = to_float<T>(br[k]);
          float y, d;
          Act<ACT>::fd(to_float<T>(ar[k]), y, d);
          dar[k] = from_float<T>(g * bk * d);
          dbr[k] = from_float<T>(g * y);
        }
      }
    }
  }
}

// Prefetch kernels (LIGER_CPP_GLU_GRID=prefetch): the persistent grid of
// glu_fwd_kernel / glu_bwd_kernel, software-pipelined over a block's tiles
// (as rms_bwd_pipe is over rows). Each thread issues the loads of its next
// tile (t + gridDim.x) into a second set of registers before it computes and
// stores tile t, then the sets swap: the loads of one tile are in flight while
// the previous one is computed and stored, where the default kernels load,
// wait, compute and store in turn (ncu: DRAM 82.5 % busy against 89.9 % for
// torch.compile's one-tile blocks). Two sets of U vectors per operand, so U is
// half of the default's unroll or less (kPipe* below, no spills). Each tile is
// fetched once; the next tile's elements are other elements than the current
// one's, so an element is still loaded (all operands) before it is stored, by
// the one thread that stores it, and da/db may alias a/b. The per-element math
// is glu_fwd_kernel's / glu_bwd_kernel's.
template <typename T, int VEC, GluAct ACT, int HINT = kHintNone, int U = kPipeFwdUnroll,
          int kMinBlocks = kPipeFwdMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    glu_fwd_pipe(const T* __restrict__ a, int64_t as, const T* __restrict__ b, int64_t bs, T* __restrict__ c,
                 int64_t cs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  using V = Vec<T, VEC>;
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * U * VEC;
  const uint64_t pol = glu_policy<HINT>();
  // Loads every whole vector of the tile at (row, c0) into av, bv.
  auto fetch = [&](int64_t row, int64_t c0, V(&av)[U], V(&bv)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        av[u] = glu_load<T, VEC, true, true, HINT>(a + row * as + col, pol);
        bv[u] = glu_load<T, VEC, true, true, HINT>(b + row * bs + col, pol);
      }
    }
  };
  int64_t t = blockIdx.x;
  if (t >= tiles) return;
  int64_t row = t / tiles_per_row;
  int64_t c0 = (t - row * tiles_per_row) * kTile;
  V av[U], bv[U];
  fetch(row, c0, av, bv);
  for (; t < tiles; t += gridDim.x) {
    // The next tile's loads first (none past the last tile).
    V an[U], bn[U];
    int64_t nrow = 0, nc0 = 0;
    if (t + gridDim.x < tiles) {
      nrow = (t + gridDim.x) / tiles_per_row;
      nc0 = (t + gridDim.x - nrow * tiles_per_row) * kTile;
      fetch(nrow, nc0, an, bn);
    }
    const T* ar = a + row * as;
    const T* br = b + row * bs;
    T* cr = c + row * cs;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        V cv;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          cv.v[j] = from_float<T>(Act<ACT>::f(to_float<T>(av[u].v[j])) * to_float<T>(bv[u].v[j]));
        glu_store<T, VEC, true, HINT>(cr + col, cv);
      } else if (VEC > 1 && col < cols) {  // ragged end of a row (vector path only)
        for (int64_t k = col; k < cols; ++k)
          cr[k] = from_float<T>(Act<ACT>::f(to_float<T>(ar[k])) * to_float<T>(br[k]));
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      av[u] = an[u];
      bv[u] = bn[u];
    }
    row = nrow;
    c0 = nc0;
  }
}

// No __restrict__: da/db may be a/b (see above).
template <typename T, int VEC, GluAct ACT, int HINT = kHintNone, int U = kPipeBwdUnroll,
          int kMinBlocks = kPipeBwdMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    glu_bwd_pipe(const T* dc, int64_t gs, const T* a, int64_t as, const T* b, int64_t bs, T* da, int64_t das,
                 T* db, int64_t dbs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  using V = Vec<T, VEC>;
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * U * VEC;
  const uint64_t pol = glu_policy<HINT>();
  auto fetch = [&](int64_t row, int64_t c0, V(&gv)[U], V(&av)[U], V(&bv)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        gv[u] = glu_load<T, VEC, false, true, HINT>(dc + row * gs + col, pol);
        av[u] = glu_load<T, VEC, false, true, HINT>(a + row * as + col, pol);
        bv[u] = glu_load<T, VEC, false, true, HINT>(b + row * bs + col, pol);
      }
    }
  };
  int64_t t = blockIdx.x;
  if (t >= tiles) return;
  int64_t row = t / tiles_per_row;
  int64_t c0 = (t - row * tiles_per_row) * kTile;
  V gv[U], av[U], bv[U];
  fetch(row, c0, gv, av, bv);
  for (; t < tiles; t += gridDim.x) {
    V gn[U], an[U], bn[U];
    int64_t nrow = 0, nc0 = 0;
    if (t + gridDim.x < tiles) {
      nrow = (t + gridDim.x) / tiles_per_row;
      nc0 = (t + gridDim.x - nrow * tiles_per_row) * kTile;
      fetch(nrow, nc0, gn, an, bn);
    }
    const T* gr = dc + row * gs;
    const T* ar = a + row * as;
    const T* br = b + row * bs;
    T* dar = da + row * das;
    T* dbr = db + row * dbs;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        V dav, dbv;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float g = to_float<T>(gv[u].v[j]);
          float y, d;
          Act<ACT>::fd(to_float<T>(av[u].v[j]), y, d);
          dav.v[j] = from_float<T>(g * to_float<T>(bv[u].v[j]) * d);
          dbv.v[j] = from_float<T>(g * y);
        }
        glu_store<T, VEC, true, HINT>(dar + col, dav);
        glu_store<T, VEC, true, HINT>(dbr + col, dbv);
      } else if (VEC > 1 && col < cols) {
        for (int64_t k = col; k < cols; ++k) {
          const float g = to_float<T>(gr[k]);
          const float bk = to_float<T>(br[k]);
          float y, d;
          Act<ACT>::fd(to_float<T>(ar[k]), y, d);
          dar[k] = from_float<T>(g * bk * d);
          dbr[k] = from_float<T>(g * y);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      gv[u] = gn[u];
      av[u] = an[u];
      bv[u] = bn[u];
    }
    row = nrow;
    c0 = nc0;
  }
}

// Rows of a dense (rows, cols) layout collapse into one row of rows * cols.
struct Shape {
  int64_t rows, cols;
};

inline Shape collapse(int64_t rows, int64_t cols, std::initializer_list<int64_t> strides) {
  if (rows <= 1) return {rows, cols};
  for (int64_t s : strides)
    if (s != cols) return {rows, cols};
  return {1, rows * cols};
}

// 16-byte vectors need every base pointer 16-byte aligned and, with several
// rows, every row stride a multiple of the vector.
inline bool vec_ok(int vec, int64_t rows, std::initializer_list<const void*> ptrs,
                   std::initializer_list<int64_t> strides) {
  for (const void* p : ptrs)
    if (!is_aligned(p, 16)) return false;
  if (rows > 1)
    for (int64_t s : strides)
      if (s % vec != 0) return false;
  return true;
}

// The grid: as many blocks as run at once, walking the tiles grid-stride.
// When tiles / blocks is not whole the last round runs only part of the
// blocks, but neither the fewest blocks for the same rounds nor one block per
// tile measured faster (92.1-92.8 % of C fwd+bwd against 92.4-93.0 % at 16384
// x 8192 / 14336 bf16, LIGER_CPP_GLU_GRID at c27c711, since removed).
inline int64_t grid_for(int64_t tiles, int64_t resident) { return tiles < resident ? tiles : resident; }

// LIGER_CPP_GLU_GRID (A/B, read on every call): persistent (the default above)
// or small: torch.compile's pointwise shape (ncu, 8192 x 14336 bf16 forward:
// 128-thread blocks, one 16-byte vector of each operand a thread, one block
// per tile, 32 registers, 85 % occupancy, DRAM 89.9 % against our 82.5 %):
// blocks of kSmallThreads, one vector per operand, one tile per block; the
// register cap from kSmallFwdBlocks / kSmallBwdBlocks resident per SM: 10 / 8
// (48 / 64 registers); 12 / 9 (40 / 56) spilled on sm_90a with nvcc 13.0 (bf16
// forward GELU-erf and SiLU-div, and with the cache hints bf16 backward too).
// prefetch: the persistent grid of glu_fwd_pipe / glu_bwd_pipe (the next
// tile's loads in flight while a tile is computed and stored).
constexpr int kSmallThreads = 128, kSmallFwdBlocks = 10, kSmallBwdBlocks = 8;
enum class GluGrid { kPersistent, kSmall, kPrefetch };
GluGrid glu_grid() {
  switch (env_choice("LIGER_CPP_GLU_GRID", {"persistent", "small", "prefetch"})) {
    case 1:
      return GluGrid::kSmall;
    case 2:
      return GluGrid::kPrefetch;
    default:
      return GluGrid::kPersistent;
  }
}

// LIGER_CPP_GLU_HINT (A/B, read on every call): the cache hints of the
// 16-byte vector path of every grid (kHint* above): none (the default),
// stream (loads and stores), load or store (one side only).
int glu_hint() {
  switch (env_choice("LIGER_CPP_GLU_HINT", {"none", "stream", "load", "store"})) {
    case 1:
      return kHintStream;
    case 2:
      return kHintLoad;
    case 3:
      return kHintStore;
    default:
      return kHintNone;
  }
}

// Calls f(std::integral_constant<int, HINT>{}).
template <typename F>
cudaError_t dispatch_hint(int hint, F&& f) {
  switch (hint) {
    case kHintStream:
      return f(std::integral_constant<int, kHintStream>{});
    case kHintLoad:
      return f(std::integral_constant<int, kHintLoad>{});
    case kHintStore:
      return f(std::integral_constant<int, kHintStore>{});
    default:
      return f(std::integral_constant<int, kHintNone>{});
  }
}

// Which SiLU runs: LIGER_CPP_GLU_SILU=div (IEEE division, the A/B
// reference) or rcp / unset (Act<kSiluRcp>, the default). Read on every call
// (one getenv per launch) so that the benchmark can A/B both in one process and
// the tests can run each.
bool silu_rcp() { return env_choice("LIGER_CPP_GLU_SILU", {"rcp", "div"}) != 1; }

template <typename F>
cudaError_t dispatch_act(GluAct act, F&& f) {
  switch (act) {
    case GluAct::kSilu:
      if (silu_rcp()) return f(std::integral_constant<GluAct, GluAct::kSiluRcp>{});
      return f(std::integral_constant<GluAct, GluAct::kSilu>{});
    case GluAct::kGeluTanh:
      return f(std::integral_constant<GluAct, GluAct::kGeluTanh>{});
    case GluAct::kGeluErf:
      return f(std::integral_constant<GluAct, GluAct::kGeluErf>{});
    case GluAct::kSiluRcp:
      return f(std::integral_constant<GluAct, GluAct::kSiluRcp>{});
  }
  return cudaErrorInvalidValue;
}

// Blocks per SM of a kernel at kThreads threads (8 when the query fails).
template <typename K>
int64_t resident_blocks(K* kern, int sm_count) {
  const int per_sm = cached_blocks_per_sm(reinterpret_cast<const void*>(kern), kThreads, 0);
  return static_cast<int64_t>(sm_count > 0 ? sm_count : 132) * (per_sm > 0 ? per_sm : 2048 / kThreads);
}

}  // namespace

cudaError_t glu_fwd(const GluFwdArgs& p, int sm_count, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  const Shape s = collapse(p.rows, p.cols, {p.a_row_stride, p.b_row_stride, p.c_row_stride});
  const GluGrid grid = glu_grid();
  const int hint = glu_hint();
  return dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    constexpr int kVec = 16 / sizeof(T);
    return dispatch_act(p.act, [&](auto act) {
      constexpr GluAct A = decltype(act)::value;
      const T* a = static_cast<const T*>(p.a);
      const T* b = static_cast<const T*>(p.b);
      T* c = static_cast<T*>(p.c);
      const bool vec =
          vec_ok(kVec, s.rows, {p.a, p.b, p.c}, {p.a_row_stride, p.b_row_stride, p.c_row_stride});
      // Persistent grids (default, prefetch): `unroll` vectors a thread and operand per tile.
      auto run = [&](auto* kern, int ve, int unroll) {
        const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kThreads) * unroll * ve);
        const int64_t tiles = tpr * s.rows;
        kern<<<grid_for(tiles, resident_blocks(kern, sm_count)), kThreads, 0, stream>>>(
            a, p.a_row_stride, b, p.b_row_stride, c, p.c_row_stride, s.cols, tpr, tiles);
        return cudaGetLastError();
      };
      auto small = [&](auto* kern, int ve) {
        const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kSmallThreads) * ve);
        const int64_t tiles = tpr * s.rows;
        kern<<<tiles, kSmallThreads, 0, stream>>>(a, p.a_row_stride, b, p.b_row_stride, c, p.c_row_stride,
                                                  s.cols, tpr, tiles);
        return cudaGetLastError();
      };
      // The hint only on the vector path: the VEC = 1 kernels are the unhinted ones.
      return dispatch_hint(vec ? hint : kHintNone, [&](auto h) {
        constexpr int H = decltype(h)::value;
        if (grid == GluGrid::kSmall &&
            s.rows * ceil_div(s.cols, kSmallThreads * (vec ? kVec : 1)) < INT32_MAX) {
          if (vec) return small(&glu_fwd_kernel<T, kVec, A, kSmallThreads, 1, kSmallFwdBlocks, H>, kVec);
          return small(&glu_fwd_kernel<T, 1, A, kSmallThreads, 1, kSmallFwdBlocks>, 1);
        }
        if (grid == GluGrid::kPrefetch) {
          if (vec) return run(&glu_fwd_pipe<T, kVec, A, H>, kVec, kPipeFwdUnroll);
          return run(&glu_fwd_pipe<T, 1, A>, 1, kPipeFwdUnroll);
        }
        if (vec)
          return run(&glu_fwd_kernel<T, kVec, A, kThreads, kFwdUnroll, kFwdMinBlocks, H>, kVec, kFwdUnroll);
        return run(&glu_fwd_kernel<T, 1, A>, 1, kFwdUnroll);
      });
    });
  });
}

cudaError_t glu_bwd(const GluBwdArgs& p, int sm_count, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  const Shape s = collapse(
      p.rows, p.cols, {p.dc_row_stride, p.a_row_stride, p.b_row_stride, p.da_row_stride, p.db_row_stride});
  const GluGrid grid = glu_grid();
  const int hint = glu_hint();
  return dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    constexpr int kVec = 16 / sizeof(T);
    return dispatch_act(p.act, [&](auto act) {
      constexpr GluAct A = decltype(act)::value;
      const T* dc = static_cast<const T*>(p.dc);
      const T* a = static_cast<const T*>(p.a);
      const T* b = static_cast<const T*>(p.b);
      T* da = static_cast<T*>(p.da);
      T* db = static_cast<T*>(p.db);
      const bool vec =
          vec_ok(kVec, s.rows, {p.dc, p.a, p.b, p.da, p.db},
                 {p.dc_row_stride, p.a_row_stride, p.b_row_stride, p.da_row_stride, p.db_row_stride});
      auto run = [&](auto* kern, int ve, int unroll) {
        const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kThreads) * unroll * ve);
        const int64_t tiles = tpr * s.rows;
        kern<<<grid_for(tiles, resident_blocks(kern, sm_count)), kThreads, 0, stream>>>(
            dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride, da, p.da_row_stride, db,
            p.db_row_stride, s.cols, tpr, tiles);
        return cudaGetLastError();
      };
      auto small = [&](auto* kern, int ve) {
        const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kSmallThreads) * ve);
        const int64_t tiles = tpr * s.rows;
        kern<<<tiles, kSmallThreads, 0, stream>>>(dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride,
                                                  da, p.da_row_stride, db, p.db_row_stride, s.cols, tpr,
                                                  tiles);
        return cudaGetLastError();
      };
      return dispatch_hint(vec ? hint : kHintNone, [&](auto h) {
        constexpr int H = decltype(h)::value;
        if (grid == GluGrid::kSmall &&
            s.rows * ceil_div(s.cols, kSmallThreads * (vec ? kVec : 1)) < INT32_MAX) {
          if (vec) return small(&glu_bwd_kernel<T, kVec, A, kSmallThreads, 1, kSmallBwdBlocks, H>, kVec);
          return small(&glu_bwd_kernel<T, 1, A, kSmallThreads, 1, kSmallBwdBlocks>, 1);
        }
        if (grid == GluGrid::kPrefetch) {
          if (vec) return run(&glu_bwd_pipe<T, kVec, A, H>, kVec, kPipeBwdUnroll);
          return run(&glu_bwd_pipe<T, 1, A>, 1, kPipeBwdUnroll);
        }
        if (vec)
          return run(&glu_bwd_kernel<T, kVec, A, kThreads, kBwdUnroll, kBwdMinBlocks, H>, kVec, kBwdUnroll);
        return run(&glu_bwd_kernel<T, 1, A>, 1, kBwdUnroll);
      });
    });
  });
}

}  // namespace liger_cpp::kernels
