// SwiGLU / GeGLU: the launch plan and the launch (kernels: glu_kernels.cuh; which
// kernel runs for which shape, and the measurements behind it: docs/kernels/glu.md).
//
// Dense operands are collapsed to a single row. 16-byte aligned operands of
// fewer than 2^31 - 2^16 elements a row (and at most 2^31 - 1 tiles) run the
// dense kernels (one row) or their row variant (strided rows); everything else
// (misaligned operands, more elements than 32-bit indices reach) the generic
// ones.
#include <initializer_list>
#include <type_traits>

#include "kernels/common/common.cuh"
#include "kernels/common/launch_cache.h"
#include "kernels/common/plan_override.h"
#include "kernels/glu/glu.h"
#include "kernels/glu/glu_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

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

// Blocks per SM of a kernel at kGenericFwdThreads threads (8 when the query fails).
template <typename K>
int64_t resident_blocks(K* kern, int sm_count) {
  const int per_sm = cached_blocks_per_sm(reinterpret_cast<const void*>(kern), kGenericFwdThreads, 0);
  return static_cast<int64_t>(sm_count > 0 ? sm_count : 132) *
         (per_sm > 0 ? per_sm : 2048 / kGenericFwdThreads);
}

enum class GluKernel : int { kDense, kRows, kGeneric };

// One call's launch: the kernel, its problem after collapsing and its grid.
struct GluPlan {
  GluKernel kernel;
  bool vec;               // generic: 16-byte vectors (else one element an access)
  int64_t rows, cols;     // after collapse
  int64_t tiles_per_row;  // rows and generic
  int64_t tiles;          // generic: rows * tiles_per_row
  int64_t grid;           // blocks
};

// The plan of a forward (BWD false) or backward of T with activation A on `s`,
// vec: whether every operand allows 16-byte vectors. plan_override glu=generic
// forces the generic kernels (how tests reach the > 2^31 path on small tensors).
template <typename T, GluAct A, bool BWD>
GluPlan plan_glu(Shape s, bool vec, int sm_count) {
  constexpr int kVec = 16 / sizeof(T);
  GluPlan p{GluKernel::kGeneric, vec, s.rows, s.cols, 0, 0, 0};
  const bool force_generic = plan_override::forced(plan_override::Key::kGlu) == 0;
  const int64_t dense_tpr = ceil_div(s.cols, int64_t{kDenseThreads} * kVec);
  if (!force_generic && vec && s.cols < kDenseMaxElems && s.rows * dense_tpr <= INT32_MAX) {
    p.kernel = s.rows == 1 ? GluKernel::kDense : GluKernel::kRows;
    p.tiles_per_row = dense_tpr;
    p.grid = s.rows * dense_tpr;
    return p;
  }
  const int64_t ve = vec ? kVec : 1;
  if constexpr (BWD) {
    // One tile a block; above 2^31 - 1 tiles the blocks walk the rest grid-stride.
    p.tiles_per_row = ceil_div(s.cols, int64_t{kGenericBwdThreads} * kGenericBwdUnroll * ve);
    p.tiles = p.tiles_per_row * s.rows;
    p.grid = p.tiles < INT32_MAX ? p.tiles : INT32_MAX;
  } else {
    // As many blocks as run at once, walking the tiles grid-stride.
    p.tiles_per_row = ceil_div(s.cols, int64_t{kGenericFwdThreads} * kGenericFwdUnroll * ve);
    p.tiles = p.tiles_per_row * s.rows;
    const int64_t resident = vec ? resident_blocks(&glu_fwd_generic<T, kVec, A>, sm_count)
                                 : resident_blocks(&glu_fwd_generic<T, 1, A>, sm_count);
    p.grid = p.tiles < resident ? p.tiles : resident;
  }
  return p;
}

template <typename T, GluAct A>
cudaError_t launch_fwd(const GluPlan& pl, const GluFwdArgs& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* c = static_cast<T*>(p.c);
  const unsigned grid = static_cast<unsigned>(pl.grid);
  switch (pl.kernel) {
    case GluKernel::kDense:
      glu_fwd_dense<T, A><<<grid, kDenseThreads, 0, stream>>>(a, b, c, static_cast<int>(pl.cols));
      break;
    case GluKernel::kRows:
      glu_fwd_rows<T, A><<<grid, kDenseThreads, 0, stream>>>(a, p.a_row_stride, b, p.b_row_stride, c,
                                                             p.c_row_stride, static_cast<int>(pl.cols),
                                                             static_cast<int>(pl.tiles_per_row));
      break;
    case GluKernel::kGeneric:
      if (pl.vec)
        glu_fwd_generic<T, kVec, A><<<grid, kGenericFwdThreads, 0, stream>>>(
            a, p.a_row_stride, b, p.b_row_stride, c, p.c_row_stride, pl.cols, pl.tiles_per_row, pl.tiles);
      else
        glu_fwd_generic<T, 1, A><<<grid, kGenericFwdThreads, 0, stream>>>(
            a, p.a_row_stride, b, p.b_row_stride, c, p.c_row_stride, pl.cols, pl.tiles_per_row, pl.tiles);
      break;
  }
  return cudaGetLastError();
}

template <typename T, GluAct A>
cudaError_t launch_bwd(const GluPlan& pl, const GluBwdArgs& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const T* dc = static_cast<const T*>(p.dc);
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* da = static_cast<T*>(p.da);
  T* db = static_cast<T*>(p.db);
  const unsigned grid = static_cast<unsigned>(pl.grid);
  switch (pl.kernel) {
    case GluKernel::kDense:
      glu_bwd_dense<T, A><<<grid, kDenseThreads, 0, stream>>>(dc, a, b, da, db, static_cast<int>(pl.cols));
      break;
    case GluKernel::kRows:
      glu_bwd_rows<T, A><<<grid, kDenseThreads, 0, stream>>>(
          dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride, da, p.da_row_stride, db, p.db_row_stride,
          static_cast<int>(pl.cols), static_cast<int>(pl.tiles_per_row));
      break;
    case GluKernel::kGeneric:
      if (pl.vec)
        glu_bwd_generic<T, kVec, A><<<grid, kGenericBwdThreads, 0, stream>>>(
            dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride, da, p.da_row_stride, db,
            p.db_row_stride, pl.cols, pl.tiles_per_row, pl.tiles);
      else
        glu_bwd_generic<T, 1, A><<<grid, kGenericBwdThreads, 0, stream>>>(
            dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride, da, p.da_row_stride, db,
            p.db_row_stride, pl.cols, pl.tiles_per_row, pl.tiles);
      break;
  }
  return cudaGetLastError();
}

template <typename F>
cudaError_t dispatch_act(GluAct act, F&& f) {
  switch (act) {
    case GluAct::kSilu:
      return f(std::integral_constant<GluAct, GluAct::kSilu>{});
    case GluAct::kGeluTanh:
      return f(std::integral_constant<GluAct, GluAct::kGeluTanh>{});
    case GluAct::kGeluErf:
      return f(std::integral_constant<GluAct, GluAct::kGeluErf>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t glu_fwd(const GluFwdArgs& p, int sm_count, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  const Shape s = collapse(p.rows, p.cols, {p.a_row_stride, p.b_row_stride, p.c_row_stride});
  return dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    const bool vec =
        vec_ok(16 / sizeof(T), s.rows, {p.a, p.b, p.c}, {p.a_row_stride, p.b_row_stride, p.c_row_stride});
    return dispatch_act(p.act, [&](auto act) {
      constexpr GluAct A = decltype(act)::value;
      return launch_fwd<T, A>(plan_glu<T, A, false>(s, vec, sm_count), p, stream);
    });
  });
}

cudaError_t glu_bwd(const GluBwdArgs& p, int sm_count, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  const Shape s = collapse(
      p.rows, p.cols, {p.dc_row_stride, p.a_row_stride, p.b_row_stride, p.da_row_stride, p.db_row_stride});
  return dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    const bool vec =
        vec_ok(16 / sizeof(T), s.rows, {p.dc, p.a, p.b, p.da, p.db},
               {p.dc_row_stride, p.a_row_stride, p.b_row_stride, p.da_row_stride, p.db_row_stride});
    return dispatch_act(p.act, [&](auto act) {
      constexpr GluAct A = decltype(act)::value;
      return launch_bwd<T, A>(plan_glu<T, A, true>(s, vec, sm_count), p, stream);
    });
  });
}

}  // namespace liger_cpp::kernels
