// The SwiGLU / GeGLU kernels (glu.h states the math; glu.cu plans which one runs).
//
// Purely element-wise and memory-bound; every thread issues all its loads (16
// bytes each where VEC = 16 / sizeof(T)) before any arithmetic.
//  * dense (glu_fwd_dense / glu_bwd_dense): a dense problem collapsed to one row
//    of fewer than 2^31 - 2^16 elements, 16-byte aligned: one vector of each
//    operand a thread of a 128-thread block, one tile a block, 32-bit indices,
//    32 registers, 16 blocks an SM. torch.compile's pointwise shape; what it
//    needs is registers for occupancy (an int64 row division cost ~16).
//  * rows (glu_fwd_rows / glu_bwd_rows): the same for aligned rows with a row
//    stride (the two halves of a fused gate_up projection), the row from
//    blockIdx with 32-bit tile arithmetic, int64 row offsets.
//  * generic (glu_fwd_generic / glu_bwd_generic): any alignment (VEC = 1 when a
//    pointer or a row stride is not 16-byte aligned) and any size: tiles of one
//    row segment, int64 indices, blocks walking the tiles grid-stride. The
//    forward runs persistent blocks of 256 threads with 4 vectors of each
//    operand a thread (2+ blocks an SM: <= 128 registers, 108-123 used, no
//    spills); the backward one tile of 128 threads with one vector a thread per
//    block (8+ blocks an SM: <= 64 registers; 9 spilled with nvcc 13.0), the
//    faster shape in each direction (docs/kernels/glu.md).
// No __restrict__ on the backwards' operands: da / db may be a / b (the in-place
// backward). Every element is read by the thread that writes it, before it
// writes it.
#pragma once

#include <cstdint>

#include "kernels/common/common.cuh"
#include "kernels/glu/glu_act.cuh"

namespace liger_cpp::kernels {
namespace {

constexpr int kGenericFwdThreads = 256, kGenericFwdUnroll = 4, kGenericFwdMinBlocks = 2;
constexpr int kGenericBwdThreads = 128, kGenericBwdUnroll = 1, kGenericBwdMinBlocks = 8;
constexpr int kDenseThreads = 128, kDenseFwdBlocks = 16, kDenseBwdBlocks = 16;
constexpr int64_t kDenseMaxElems = INT32_MAX - 65536;  // 32-bit indices with room

// One element of the forward, c = act(a) * b, and of the backward, da = g * b * act'(a) and
// db = g * act(a), in fp32 (the kernels below differ only in how they index the operands).
template <typename T, GluAct ACT>
__device__ __forceinline__ T glu_fwd_elem(const T& a, const T& b) {
  return from_float<T>(Act<ACT>::f(to_float<T>(a)) * to_float<T>(b));
}

// By reference: g and a are read, then b, then da and db are written (da / db may be a / b). The
// backwards' ragged tails spell the element out instead: their loads in this order (g, b, a) keep
// the kernels' machine code as measured.
template <typename T, GluAct ACT>
__device__ __forceinline__ void glu_bwd_elem(const T& g_in, const T& a, const T& b, T& da, T& db) {
  const float g = to_float<T>(g_in);
  float y, d;
  Act<ACT>::fd(to_float<T>(a), y, d);
  da = from_float<T>(g * to_float<T>(b) * d);
  db = from_float<T>(g * y);
}

template <typename T, int VEC, GluAct ACT>
__global__ void __launch_bounds__(kGenericFwdThreads, kGenericFwdMinBlocks)
    glu_fwd_generic(const T* __restrict__ a, int64_t as, const T* __restrict__ b, int64_t bs,
                    T* __restrict__ c, int64_t cs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  constexpr int kThreads = kGenericFwdThreads, kFwdUnroll = kGenericFwdUnroll;
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kFwdUnroll * VEC;
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
        av[u] = load_vec<T, VEC>(ar + col);
        bv[u] = load_vec<T, VEC>(br + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kFwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        Vec<T, VEC> cv;
#pragma unroll
        for (int j = 0; j < VEC; ++j) cv.v[j] = glu_fwd_elem<T, ACT>(av[u].v[j], bv[u].v[j]);
        store_vec<T, VEC>(cr + col, cv);
      } else if (VEC > 1 && col < cols) {  // ragged end of a row (vector path only)
        for (int64_t k = col; k < cols; ++k) cr[k] = glu_fwd_elem<T, ACT>(ar[k], br[k]);
      }
    }
  }
}

template <typename T, int VEC, GluAct ACT>
__global__ void __launch_bounds__(kGenericBwdThreads, kGenericBwdMinBlocks)
    glu_bwd_generic(const T* dc, int64_t gs, const T* a, int64_t as, const T* b, int64_t bs, T* da,
                    int64_t das, T* db, int64_t dbs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  constexpr int kThreads = kGenericBwdThreads, kBwdUnroll = kGenericBwdUnroll;
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kBwdUnroll * VEC;
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
        gv[u] = load_vec<T, VEC>(gr + col);
        av[u] = load_vec<T, VEC>(ar + col);
        bv[u] = load_vec<T, VEC>(br + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kBwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        Vec<T, VEC> dav, dbv;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          glu_bwd_elem<T, ACT>(gv[u].v[j], av[u].v[j], bv[u].v[j], dav.v[j], dbv.v[j]);
        store_vec<T, VEC>(dar + col, dav);
        store_vec<T, VEC>(dbr + col, dbv);
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

// n < kDenseMaxElems; the thread at the end covers the ragged tail element by element.
template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, kDenseFwdBlocks)
    glu_fwd_dense(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int n) {
  constexpr int VEC = 16 / sizeof(T);
  const int i = (static_cast<int>(blockIdx.x) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  if (i + VEC <= n) {
    const Vec<T, VEC> av = load_vec<T, VEC>(a + i), bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> cv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) cv.v[j] = glu_fwd_elem<T, ACT>(av.v[j], bv.v[j]);
    store_vec<T, VEC>(c + i, cv);
  } else {
    for (int k = i; k < n; ++k) c[k] = glu_fwd_elem<T, ACT>(a[k], b[k]);
  }
}

template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, kDenseBwdBlocks)
    glu_bwd_dense(const T* dc, const T* a, const T* b, T* da, T* db, int n) {
  constexpr int VEC = 16 / sizeof(T);
  const int i = (static_cast<int>(blockIdx.x) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  if (i + VEC <= n) {
    const Vec<T, VEC> gv = load_vec<T, VEC>(dc + i), av = load_vec<T, VEC>(a + i),
                      bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> dav, dbv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) glu_bwd_elem<T, ACT>(gv.v[j], av.v[j], bv.v[j], dav.v[j], dbv.v[j]);
    store_vec<T, VEC>(da + i, dav);
    store_vec<T, VEC>(db + i, dbv);
  } else {
    for (int k = i; k < n; ++k) {
      const float g = to_float<T>(dc[k]);
      const float bk = to_float<T>(b[k]);
      float y, d;
      Act<ACT>::fd(to_float<T>(a[k]), y, d);
      da[k] = from_float<T>(g * bk * d);
      db[k] = from_float<T>(g * y);
    }
  }
}

// Blocks numbered row-major over (row, tile of kDenseThreads * VEC columns);
// rows and strides are 16-byte aligned, cols < kDenseMaxElems and rows * tiles
// per row <= INT32_MAX (the plan's conditions). A row's ragged end (cols % VEC)
// is covered element by element by the thread at its end.
template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, kDenseFwdBlocks)
    glu_fwd_rows(const T* __restrict__ a, int64_t as, const T* __restrict__ b, int64_t bs, T* __restrict__ c,
                 int64_t cs, int cols, int tiles_per_row) {
  constexpr int VEC = 16 / sizeof(T);
  const int tile = static_cast<int>(blockIdx.x);
  const int row = tile / tiles_per_row;
  const int i = ((tile - row * tiles_per_row) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  a += static_cast<int64_t>(row) * as;
  b += static_cast<int64_t>(row) * bs;
  c += static_cast<int64_t>(row) * cs;
  if (i + VEC <= cols) {
    const Vec<T, VEC> av = load_vec<T, VEC>(a + i), bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> cv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) cv.v[j] = glu_fwd_elem<T, ACT>(av.v[j], bv.v[j]);
    store_vec<T, VEC>(c + i, cv);
  } else {
    for (int k = i; k < cols; ++k) c[k] = glu_fwd_elem<T, ACT>(a[k], b[k]);
  }
}

// 10 blocks an SM (48 registers): at 32 the five row offsets spilled (up to 24 B).
template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, 10)
    glu_bwd_rows(const T* dc, int64_t gs, const T* a, int64_t as, const T* b, int64_t bs, T* da, int64_t das,
                 T* db, int64_t dbs, int cols, int tiles_per_row) {
  constexpr int VEC = 16 / sizeof(T);
  const int tile = static_cast<int>(blockIdx.x);
  const int row = tile / tiles_per_row;
  const int i = ((tile - row * tiles_per_row) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  dc += static_cast<int64_t>(row) * gs;
  a += static_cast<int64_t>(row) * as;
  b += static_cast<int64_t>(row) * bs;
  da += static_cast<int64_t>(row) * das;
  db += static_cast<int64_t>(row) * dbs;
  if (i + VEC <= cols) {
    const Vec<T, VEC> gv = load_vec<T, VEC>(dc + i), av = load_vec<T, VEC>(a + i),
                      bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> dav, dbv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) glu_bwd_elem<T, ACT>(gv.v[j], av.v[j], bv.v[j], dav.v[j], dbv.v[j]);
    store_vec<T, VEC>(da + i, dav);
    store_vec<T, VEC>(db + i, dbv);
  } else {
    for (int k = i; k < cols; ++k) {
      const float g = to_float<T>(dc[k]);
      const float bk = to_float<T>(b[k]);
      float y, d;
      Act<ACT>::fd(to_float<T>(a[k]), y, d);
      da[k] = from_float<T>(g * bk * d);
      db[k] = from_float<T>(g * y);
    }
  }
}

}  // namespace
}  // namespace liger_cpp::kernels
