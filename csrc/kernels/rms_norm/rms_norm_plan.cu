// RMSNorm / FusedAddRMSNorm launch plans: which kernel a call runs, its launch
// shape and (backward) its workspace, computed once per call from the
// arguments and the device. Host code only; the kernels' occupancy on this
// device comes from the kernel families' files (rms_norm_impl.h), queried once
// per device and kernel (launch_cache.h). The table of what runs where, and the
// measurements behind each choice: docs/kernels/rms_norm.md.
#include <algorithm>
#include <cstdint>

#include "kernels/common/plan_override.h"
#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"

namespace liger_cpp::kernels {
namespace {

using namespace rms_norm_impl;  // NOLINT: the family files' constants and kernels
namespace po = plan_override;

// The values of the override keys, in plan_override.h's order.
enum FwdForce : int { kForceFwdCached = 0, kForceFwdL2Hint = 1 };
enum BwdForce : int { kForceBwdTma = 0, kForceBwdPipe = 1, kForceBwdCached = 2, kForceBwdGeneric = 3 };

// ---- forward ----

// torch.compile's skeleton (rms_norm_fwd_fixed.cu): plain RMSNorm with a weight,
// x, w and y of one 16-bit dtype, 16-byte aligned rows of 129..2048 vectors, the
// compile-time build at hidden 4096 / 8192 / 16384.
bool plan_fixed(const RmsNormFwdArgs& a, RmsNormFwdPlan& p) {
  if (a.res != nullptr || a.w == nullptr || a.rows > INT32_MAX) return false;
  if (a.x_dtype == DType::kFloat32 || a.w_dtype != a.x_dtype || a.y_dtype != a.x_dtype) return false;
  if (!is_aligned(a.x, 16) || !is_aligned(a.w, 16) || !is_aligned(a.y, 16) || (a.x_row_stride * 2) % 16 != 0)
    return false;
  constexpr int kVec = 8;  // 16-bit elements a 16-byte vector
  if (is_fixed_width(a.cols)) {
    p.kernel = RmsFwdKernel::kFixed;
    p.threads = fixed_threads(a.cols * 2);
  } else {
    const int64_t nvec = a.cols / kVec;
    if (a.cols % kVec != 0 || nvec < kFixedRtMinVec || nvec > kFixedRtMaxVec) return false;
    p.kernel = RmsFwdKernel::kFixedRt;
    p.threads = static_cast<int>(ceil_div(ceil_div(nvec, kFixedRtAccesses), 32) * 32);
  }
  p.vec = kVec;
  p.grid = a.rows;
  return true;
}

// rms_fwd_cached for rows of nvec whole vectors; false when a row needs more
// than 1024 threads (4096 vectors). Plain RMSNorm: 2 vectors a thread and
// 128-thread blocks up to 128 vectors, then 4 vectors a thread and a row a
// block, in the register-capped build for 257..512-thread rows where y has x's
// width (it spills otherwise). FusedAddRMSNorm: 4 vectors a thread, 256-thread
// blocks.
bool plan_fwd_cached(const RmsNormFwdArgs& a, int64_t nvec, RmsNormFwdPlan& p) {
  const bool add = a.res != nullptr;
  const int maxv = !add && nvec <= 128 ? 2 : kMaxV;
  CachedLayout l;
  if (!cached_layout(nvec, l, maxv)) return false;
  p.kernel = RmsFwdKernel::kCached;
  p.vectors_per_thread = maxv;
  p.threads = l.tx;
  p.rows_per_block = add ? l.ty : (nvec <= 128 ? std::max(1, 128 / l.tx) : 1);
  const int threads = l.tx * p.rows_per_block;
  p.reg_capped = !add && maxv == kMaxV && threads > 256 && threads <= 512 && a.y_dtype == a.x_dtype;
  p.grid = ceil_div(a.rows, p.rows_per_block);
  return true;
}

}  // namespace

RmsNormFwdPlan rms_norm_fwd_plan(const RmsNormFwdArgs& a) {
  RmsNormFwdPlan p;
  const DType wd = a.w ? a.w_dtype : a.x_dtype;
  if (a.rows == 0 || !valid_dtypes(a.x_dtype, wd, a.y_dtype)) return p;
  const int force = po::forced(po::Key::kRmsFwd);
  if (force < 0 && plan_fixed(a, p)) return p;
  const int xs = dtype_size(a.x_dtype);
  const int full = 16 / xs;
  const bool add = a.res != nullptr;
  const bool aligned =
      all_aligned(full, a.cols, {a.x_row_stride, add ? a.res_row_stride : 0},
                  {{a.x, xs}, {a.y, dtype_size(a.y_dtype)}, {a.w, dtype_size(wd)}, {a.res, xs}, {a.s, xs}});
  const int64_t nvec = a.cols / full;
  // rms_fwd_l2hint: plain RMSNorm above 2048 vectors (bf16 hidden > 16K); int
  // vector indices, so rows of at most 2^31 - 1 vectors.
  const bool l2hint_runs = !add && aligned && nvec <= INT32_MAX;
  auto l2hint = [&] {
    p.kernel = RmsFwdKernel::kL2Hint;
    p.vec = full;
    p.threads = 1024;
    p.l1_hints = a.cols * xs > 65536;  // L1 priorities too, for rows above 64 KiB
    p.grid = a.rows;
    return p;
  };
  if (l2hint_runs && (force == kForceFwdL2Hint || (force != kForceFwdCached && nvec > 2048))) return l2hint();
  if (aligned) {
    p.vec = full;
    if (plan_fwd_cached(a, nvec, p)) return p;
  }
  if (l2hint_runs && nvec > 2048) return l2hint();  // rms_fwd=cached where it does not run
  // rms_fwd_generic: rows that are not whole vectors, FusedAddRMSNorm above 4096 vectors, plain
  // rows above 2^31 vectors. The row kept in shared memory between its passes where it fits.
  p.kernel = RmsFwdKernel::kGeneric;
  p.vec = aligned ? full : 1;
  p.threads = 1024;
  const int64_t row_bytes = a.cols * xs;
  p.stash = row_bytes <= kMaxStashBytes;
  p.smem = p.stash ? static_cast<size_t>(row_bytes) : 0;
  p.grid = a.rows;
  return p;
}

// ---- backward ----

namespace {

struct BwdCall {
  const RmsNormBwdArgs& a;
  int sm_count;
  DType wd;  // w's dtype as the launchers dispatch it (x's without a weight)
  int xs, ys;
  bool ds, want_dw;
  int64_t nvec;  // 16-byte vectors a row (aligned calls)
};

// rms_bwd_tma (sm_90 code for this device, plain RMSNorm, rows of min_vec..1024
// vectors, a block fits): one block of the row's vectors rounded up to a warp,
// kTmaStages rows in flight; two rows a stage for 513..768-thread rows where
// they fit in shared memory (not for fp32 dy with 16-bit x at bf16 hidden
// 5120 / 6144), else one.
bool plan_tma(const BwdCall& c, int64_t min_vec, RmsNormBwdPlan& p) {
  if (c.ds || c.nvec < min_vec || c.nvec > 1024 || c.sm_count < 1) return false;
  const size_t region = tma_row_region(c.a.cols * c.xs) + tma_row_region(c.a.cols * c.ys);
  const int threads = static_cast<int>(ceil_div(c.nvec, 32) * 32);
  const int full = 16 / c.xs;
  auto fit = [&](int rows_a_stage) {
    const void* kern = bwd_tma_kernel(c.a.x_dtype, c.wd, c.a.y_dtype, rows_a_stage);
    if (kern == nullptr || binary_version(kern) < 90) return false;
    // The stages, then the thread's weights as floats.
    const size_t smem =
        region * rows_a_stage * kTmaStages + static_cast<size_t>(full) * sizeof(float) * threads;
    // Nothing but the weights goes through L1: the largest shared-memory carveout.
    const int per_sm = pipe_blocks_per_sm(kern, threads, smem, true);
    if (per_sm < 1) return false;
    p.kernel = RmsBwdKernel::kTma;
    p.threads = threads;
    p.rows_a_stage = rows_a_stage;
    p.stages = kTmaStages;
    p.smem = smem;
    p.grid = std::min<int64_t>(ceil_div(c.a.rows, rows_a_stage), static_cast<int64_t>(c.sm_count) * per_sm);
    return true;
  };
  const bool pairs = threads > 512 && threads <= 768;
  return (pairs && fit(2)) || fit(1);
}

// rms_bwd_pipe (rows of up to 1024 vectors, one vector a thread, next_pow2
// threads a row, rows a block up to 512 threads): cp.async stages with a
// residual gradient or dy wider than x, the next row in registers otherwise;
// false when its shared memory does not fit.
bool plan_pipe(const BwdCall& c, RmsNormBwdPlan& p) {
  if (c.nvec > 1024) return false;
  const bool async = c.ds || c.ys > c.xs;
  const int tx = next_pow2(c.nvec);
  const int ty = std::max(1, 512 / tx);  // <= 8 groups when they synchronise (tx >= 64)
  const size_t vec = p.vec;
  const size_t dw_bytes = (c.want_dw && ty > 1) ? static_cast<size_t>(tx) * vec * sizeof(float) : 0;
  size_t pipe_bytes = 0;
  if (async) {
    const size_t chunks = (vec * c.xs + vec * c.ys + (c.ds ? vec * c.xs : 0)) / 16;
    pipe_bytes = static_cast<size_t>(kPipeStages) * ty * tx * chunks * 16;
  }
  const size_t smem = std::max(dw_bytes, pipe_bytes);
  const void* kern = bwd_pipe_kernel(c.a.x_dtype, c.wd, c.a.y_dtype, async, c.ds);
  if (kern == nullptr) return false;
  const int per_sm = pipe_blocks_per_sm(kern, tx * ty, smem, async);
  if (per_sm < 1) return false;
  p.kernel = async ? RmsBwdKernel::kPipeAsync : RmsBwdKernel::kPipeRegs;
  p.threads = tx;
  p.rows_per_block = ty;
  p.smem = smem;
  p.grid = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(c.a.rows, ty), static_cast<int64_t>(c.sm_count) * per_sm));
  return true;
}

// A cluster launch of rms_bwd_cluster: `cl` blocks of `tx` threads a cluster, `grid` clusters.
struct ClusterShape {
  int tx = 0, cl = 0;
  int64_t grid = 0;
};

// The cluster launch of `kern` for rows of nvec vectors: CL = ceil(nvec / TX)
// blocks of (about) nvec / CL threads (rounded up to a warp), for TX = 1024
// and 512, a power-of-two CL where one is among them (odd clusters measured
// much slower); the one with more threads resident (ties: fewer blocks a
// cluster, a cheaper exchange). At most min(rows, resident) clusters
// (persistent). false when none applies: rows of at most 1024 or more than
// 8 * 1024 vectors, no sm_90 code, or no cluster fits.
bool pick_cluster_shape(const void* kern, int64_t nvec, int64_t rows, ClusterShape& c) {
  if (kern == nullptr || nvec <= 1024 || nvec > static_cast<int64_t>(kWideMaxCluster) * 1024) return false;
  bool pow2_seen = false;
  for (int tx : {1024, 512}) {
    const int64_t cl = ceil_div(nvec, tx);
    if (cl <= kWideMaxCluster && (cl & (cl - 1)) == 0) pow2_seen = true;
  }
  int64_t best = 0;
  for (int tx : {1024, 512}) {
    const int64_t cl = ceil_div(nvec, tx);
    if (cl > kWideMaxCluster || (pow2_seen && (cl & (cl - 1)) != 0)) continue;
    const int threads = static_cast<int>(ceil_div(ceil_div(nvec, cl), 32) * 32);
    const int n = active_clusters(kern, threads, static_cast<int>(cl));
    const int64_t resident = static_cast<int64_t>(n) * cl * threads;
    if (resident > best) {
      best = resident;
      c.tx = threads;
      c.cl = static_cast<int>(cl);
      c.grid = std::min<int64_t>(rows, n);
    }
  }
  return best > 0;
}

// rms_bwd_cluster (sm_90, rows of 1025..8192 vectors; one dW partial row a
// cluster): rows in pairs (one message of two row sums) in clusters of two
// blocks, one row a message in larger clusters; pairs with blocks of 513..768
// threads in the 768-thread build (80 registers: no spills).
bool plan_cluster(const BwdCall& c, RmsNormBwdPlan& p) {
  ClusterShape s;
  const DType x = c.a.x_dtype, y = c.a.y_dtype;
  if (!pick_cluster_shape(bwd_cluster_kernel(x, c.wd, y, c.ds, 1, 1024), c.nvec, c.a.rows, s)) return false;
  const int rows_a_message = s.cl <= 2 ? 2 : 1;
  // Pairs: the same shape (the builds' registers and shared memory are the same), at most one
  // cluster a pair.
  if (rows_a_message == 2 &&
      !pick_cluster_shape(bwd_cluster_kernel(x, c.wd, y, c.ds, 2, 1024), c.nvec, ceil_div(c.a.rows, 2), s))
    return false;
  p.kernel = RmsBwdKernel::kCluster;
  p.threads = s.tx;
  p.cluster = s.cl;
  p.grid = s.grid;  // clusters; one partial row each
  p.rows_a_message = rows_a_message;
  // Only the pairs build spills at 64 registers: one row a message keeps the 1024-thread build.
  p.max_threads = rows_a_message == 2 && s.tx > 512 && s.tx <= 768 ? 768 : 1024;
  return true;
}

// rms_bwd_cached (rows of up to 4096 vectors, 4 a thread; dW partials in
// shared memory for 1024-thread rows, in registers otherwise).
bool plan_cached(const BwdCall& c, RmsNormBwdPlan& p) {
  CachedLayout l;
  if (!cached_layout(c.nvec, l)) return false;
  const bool dw_in_smem = l.tx == 1024;
  const size_t region = static_cast<size_t>(l.tx) * kMaxV * p.vec * sizeof(float);
  const size_t smem = !c.want_dw ? 0 : dw_in_smem ? region * l.ty : region;
  const void* kern = bwd_cached_kernel(c.a.x_dtype, c.wd, c.a.y_dtype, dw_in_smem, c.ds);
  if (kern == nullptr) return false;
  // Above 48 KiB a kernel must opt in to dynamic shared memory (sm_blocks raises the limit
  // before its occupancy query).
  const int per_sm = sm_blocks(kern, l.tx * l.ty, smem);
  p.kernel = RmsBwdKernel::kCached;
  p.threads = l.tx;
  p.rows_per_block = l.ty;
  p.dw_in_smem = dw_in_smem;
  p.smem = smem;
  p.grid = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(c.a.rows, l.ty), static_cast<int64_t>(c.sm_count) * per_sm));
  return true;
}

// rms_bwd_dx_generic (a block a row) and rms_bwd_dw_generic (256-column tiles
// by p.grid row splits).
void plan_generic(const BwdCall& c, int64_t nvec, RmsNormBwdPlan& p) {
  p.kernel = RmsBwdKernel::kGeneric;
  p.threads = 512;
  const int64_t col_blocks = ceil_div(nvec, 256);
  p.grid = std::max<int64_t>(1, std::min<int64_t>(c.a.rows, ceil_div(4LL * c.sm_count, col_blocks)));
  p.grid = std::min<int64_t>(p.grid, 65535);
}

}  // namespace

RmsNormBwdPlan rms_norm_bwd_plan(const RmsNormBwdArgs& a, const DeviceInfo& dev) {
  RmsNormBwdPlan p;
  const DType wd = a.w ? a.w_dtype : a.x_dtype;
  if (a.rows == 0 || !valid_dtypes(a.x_dtype, wd, a.y_dtype)) return p;
  const int xs = dtype_size(a.x_dtype), ys = dtype_size(a.y_dtype);
  const int full = 16 / xs;
  const bool ds = a.ds_out != nullptr;
  const bool aligned = all_aligned(
      full, a.cols, {a.x_row_stride, a.dy_row_stride, a.dx_row_stride, ds ? a.ds_out_row_stride : 0},
      {{a.x, xs}, {a.dy, ys}, {a.dx, xs}, {a.w, dtype_size(wd)}, {a.ds_out, xs}});
  p.vec = aligned ? full : 1;
  const BwdCall c{a, dev.sm_count, wd, xs, ys, ds, a.dw != nullptr, a.cols / full};
  const int force = po::forced(po::Key::kRmsBwd);
  const bool chosen = [&] {
    if (!aligned || force == kForceBwdGeneric) return false;
    // The TMA backward from 129 vectors (below, the pipelined one: many rows a block); forced
    // from 64.
    if ((force < 0 || force == kForceBwdTma) && plan_tma(c, force < 0 ? kTmaAutoMinVec : kTmaMinVec, p))
      return true;
    if (force != kForceBwdCached && (plan_pipe(c, p) || plan_cluster(c, p))) return true;
    return plan_cached(c, p);
  }();
  if (!chosen) plan_generic(c, a.cols / p.vec, p);
  p.workspace_floats = a.dw != nullptr ? p.grid * a.cols : 0;
  return p;
}

}  // namespace liger_cpp::kernels
