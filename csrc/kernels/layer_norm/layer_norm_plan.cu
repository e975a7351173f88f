// LayerNorm launch plans: which kernel a call runs, its launch shape and
// (backward) its workspace, computed once per call from the arguments and the
// device. Host code only; the kernels' occupancy on this device comes from the
// kernel families' files (layer_norm_impl.h), queried once per device and
// kernel (launch_cache.h). The table of what runs where, and the measurements
// behind each choice: docs/kernels/layer_norm.md.
#include <algorithm>
#include <cstdint>

#include "kernels/common/plan_override.h"
#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/norm/norm_plan.h"

namespace liger_cpp::kernels {
namespace {

using namespace layer_norm_impl;  // NOLINT: the family files' constants and kernels
namespace po = plan_override;

// The values of the override key ln_bwd, in plan_override.h's order.
enum BwdForce : int {
  kForceTma = 0,
  kForceTmaUnpaired = 1,
  kForcePipe16 = 2,
  kForcePipe = 3,
  kForceGeneric = 4,
};

struct BwdCall {
  const LayerNormBwdArgs& a;
  int sm_count;
  int xs, wsz;
  int64_t nvec;  // 16-byte vectors a row (aligned calls)
};

// ln_bwd_tma (sm_90 code for this device, rows of at most 512 vectors, a block
// fits): one block of next_pow2(vectors) threads a row, kTmaStages rows in
// flight; in clusters of two (one dW/dB partial row a pair) where every pair
// of the persistent grid can be resident at once (the grid is then even: a
// block may have no rows, it adds zeros).
bool plan_tma(const BwdCall& c, bool allow_pairs, LayerNormBwdPlan& p) {
  if (c.nvec > kTmaBlock) return false;
  const void* kern = bwd_tma_kernel(c.a.x_dtype, c.a.w_dtype);
  if (kern == nullptr || binary_version(kern) < 90) return false;
  const int tx = next_pow2(c.nvec);
  const size_t rb = static_cast<size_t>(c.a.cols) * c.xs;
  // The stages, mean and rstd, and (fp32 weights with 16-bit x) the weights.
  const size_t smem = kTmaStages * 2 * rb + static_cast<size_t>(tx) * 2 * sizeof(float) +
                      (c.wsz > c.xs ? static_cast<size_t>(tx) * 32 : 0);
  const int per_sm = pipe_blocks_per_sm(kern, tx, smem, true);
  if (per_sm < 1) return false;
  p.kernel = LnBwdKernel::kTma;
  p.threads = tx;
  p.smem = smem;
  p.grid = std::max<int64_t>(1, std::min<int64_t>(c.a.rows, static_cast<int64_t>(c.sm_count) * per_sm));
  p.partial_rows = p.grid;
  if (allow_pairs && per_sm >= 2) {
    const int64_t pairs = active_clusters(kern, tx, 2, smem);
    const int64_t want = (p.grid + 1) / 2;
    if (pairs >= want) {
      p.paired = true;
      p.grid = 2 * want;
      p.partial_rows = want;
    }
  }
  return true;
}

// ln_bwd_pipe16 (rows of at most 512 vectors, next_pow2 threads a row, rows a
// block up to 512 threads); false when its shared memory does not fit.
bool plan_pipe16(const BwdCall& c, LayerNormBwdPlan& p) {
  if (c.nvec > kPipe16Block) return false;
  const void* kern = bwd_pipe16_kernel(c.a.x_dtype, c.a.w_dtype);
  if (kern == nullptr) return false;
  const int tx = next_pow2(c.nvec);
  const int ty = std::max(1, kPipe16Block / tx);  // <= 16; 16 only for TX = 32 (no barrier)
  const size_t threads = static_cast<size_t>(tx) * ty;
  // x and dy slots, mean and rstd slots (the partial sums across row groups, [VEC][TX]
  // floats, fit in the latter), and (fp32 weights with 16-bit x) weight slots.
  const size_t smem =
      kPipe16Stages * threads * 2 * 16 + kPipe16Stages * threads * 2 * 4 + (c.wsz > c.xs ? threads * 32 : 0);
  const int per_sm = pipe_blocks_per_sm(kern, tx * ty, smem, true);
  if (per_sm < 1) return false;
  p.kernel = LnBwdKernel::kPipe16;
  p.threads = tx;
  p.rows_per_block = ty;
  p.smem = smem;
  p.grid = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(c.a.rows, ty), static_cast<int64_t>(c.sm_count) * per_sm));
  p.partial_rows = p.grid;
  return true;
}

// ln_bwd_pipe: rows of whole 4-element vectors (every operand aligned to them),
// at most 1024 of them a row (2048 for 16-bit types, two a thread).
bool plan_pipe(const BwdCall& c, LayerNormBwdPlan& p) {
  const LayerNormBwdArgs& a = c.a;
  const bool aligned4 = all_aligned(4, a.cols, {a.x_row_stride, a.dy_row_stride},
                                    {{a.x, c.xs}, {a.dy, c.xs}, {a.dx, c.xs}, {a.w, c.wsz}});
  const int64_t nvec4 = a.cols / 4;
  const int64_t max_nv = c.xs == 2 ? 2 : 1;
  if (!aligned4 || nvec4 > max_nv * kPipeBlock) return false;
  p.kernel = LnBwdKernel::kPipe;
  p.vec = 4;
  p.vectors_per_thread = nvec4 <= kPipeBlock ? 1 : 2;
  p.threads = next_pow2(ceil_div(nvec4, p.vectors_per_thread));  // <= kPipeBlock
  p.rows_per_block = kPipeBlock / p.threads;
  // Shared memory only to sum several row groups' partials: at most cols floats (8 KiB).
  p.smem = ((a.dw || a.db) && p.rows_per_block > 1) ? static_cast<size_t>(a.cols) * sizeof(float) : 0;
  p.grid = std::max<int64_t>(1, std::min<int64_t>(ceil_div(a.rows, p.rows_per_block), c.sm_count));
  p.partial_rows = p.grid;
  return true;
}

// ln_bwd_dx_generic (a block a row) and ln_bwd_dwdb_generic (256-column tiles
// by p.grid row splits).
void plan_generic(const BwdCall& c, LayerNormBwdPlan& p) {
  p.kernel = LnBwdKernel::kGeneric;
  p.threads = 512;
  const int64_t col_blocks = ceil_div(c.a.cols / p.vec, 256);
  p.grid = std::max<int64_t>(1, std::min<int64_t>(c.a.rows, ceil_div(4LL * c.sm_count, col_blocks)));
  p.grid = std::min<int64_t>(p.grid, 65535);
  p.partial_rows = p.grid;
}

}  // namespace

LayerNormFwdPlan layer_norm_fwd_plan(const LayerNormFwdArgs& a) {
  LayerNormFwdPlan p;
  const DType wd = a.w != nullptr || a.b != nullptr ? a.w_dtype : a.x_dtype;
  if (a.rows == 0 || !valid_dtypes(a.x_dtype, wd)) return p;
  const int xs = dtype_size(a.x_dtype), wsz = dtype_size(wd);
  const int full = 16 / xs;
  const bool aligned =
      all_aligned(full, a.cols, {a.x_row_stride}, {{a.x, xs}, {a.y, xs}, {a.w, wsz}, {a.b, wsz}});
  CachedLayout l;
  if (aligned && cached_layout(a.cols / full, l)) {
    // ln_fwd_cached: 128-thread blocks (one row a block from 512 vectors: 4096 bf16 columns).
    p.kernel = LnFwdKernel::kCached;
    p.vec = full;
    p.threads = l.tx;
    p.rows_per_block = std::max(1, 128 / l.tx);
    p.grid = ceil_div(a.rows, p.rows_per_block);
    return p;
  }
  // ln_fwd_generic: the row kept in shared memory between its passes where it fits.
  p.kernel = LnFwdKernel::kGeneric;
  p.vec = aligned ? full : 1;
  p.threads = 1024;
  const int64_t row_bytes = a.cols * xs;
  p.stash = row_bytes <= kMaxStashBytes;
  p.smem = p.stash ? static_cast<size_t>(row_bytes) : 0;
  p.grid = a.rows;
  return p;
}

LayerNormBwdPlan layer_norm_bwd_plan(const LayerNormBwdArgs& a, const DeviceInfo& dev) {
  LayerNormBwdPlan p;
  if (a.rows == 0 || !valid_dtypes(a.x_dtype, a.w_dtype)) return p;
  const int xs = dtype_size(a.x_dtype), wsz = dtype_size(a.w_dtype);
  const int full = 16 / xs;
  const bool aligned = all_aligned(full, a.cols, {a.x_row_stride, a.dy_row_stride},
                                   {{a.x, xs}, {a.dy, xs}, {a.dx, xs}, {a.w, wsz}});
  p.vec = aligned ? full : 1;
  const BwdCall c{a, dev.sm_count, xs, wsz, a.cols / full};
  const int force = po::forced(po::Key::kLnBwd);
  const bool chosen = [&] {
    if (force == kForceGeneric) return false;
    if (aligned && (force < 0 || force == kForceTma || force == kForceTmaUnpaired) &&
        plan_tma(c, force != kForceTmaUnpaired, p))
      return true;
    if (aligned && force != kForcePipe && plan_pipe16(c, p)) return true;
    return plan_pipe(c, p);
  }();
  if (!chosen) plan_generic(c, p);
  const int64_t parts = (a.dw ? 1 : 0) + (a.db ? 1 : 0);
  p.workspace_floats = parts * p.partial_rows * a.cols;
  return p;
}

}  // namespace liger_cpp::kernels
