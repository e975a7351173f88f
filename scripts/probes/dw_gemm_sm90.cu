// Probe (not part of the extension; beside dw_gemm_ours.cu, which checks and times it): the chunk
// loops' weight-gradient GEMM as a kernel of ours on sm_90a, dW[V, H] (+)= G[R, V]^T X[R, H], 16-bit
// operands and dW, float32 accumulation, one rounding to dW's dtype.
//
// Why try: a chunk holds 512-1024 rows (the logits' memory budget), so every chunk after the first
// re-reads and re-writes all of dW (V x H) for 2 R V H FLOP. At Gemma's heads (H 2304, V 256000, 512
// rows) that traffic, 2.4 GB a chunk, takes about as long as the math, and cuBLAS's kernels pay for
// it on top of the math: 1.23 ms a chunk on an H100 against 0.86 for the math alone
// (docs/kernels/rl_losses.md). Here each thread loads its old dW values into registers before the
// tile's K loop (they arrive under it) and stores the result directly, so the traffic can overlap
// the math.
//
// Layout: a persistent block per SM of two consumer warpgroups and a producer warpgroup (384
// threads). Registers are split by setmaxnreg: 232 a consumer thread (128 accumulators and 64 of old
// values), 40 a producer thread. Why not a lone producer warp (288 threads at 224): warps are spread
// over the SM's four register partitions of 16K each, and three warps at 224 overflow one (the
// launch fails with "too many resources requested"). The producer's one
// thread issues the TMA loads: per 64-deep K step a 128 x 64 slice of G (A, M-major) and a 64 x 256
// slice of X (B, N-major) into one of kStages stages, in the 128-byte swizzle. Each consumer
// warpgroup owns 64 rows of the 128 x 256 tile: wgmma m64n256k16 from shared memory. Out-of-range
// rows and columns of the last tiles are zeros on load (TMA's fill) and skipped on store.
//
// DwGemmArgs::cluster 2 runs clusters of two blocks that share X's slice by TMA multicast: the K loop
// reads about 6.9 GB from L2 at Gemma 2's chunk (0.6 TFLOP), near the H100's L2 bandwidth at
// cuBLAS's speed, and cuBLAS's kernel for this GEMM runs 2 x 1 clusters.
//
// Status (docs/perf-log.md, 2026-12-06 late): a first version (the old tile by TMA into shared
// memory, the epilogue through shared memory and a TMA store, 3 stages, a producer warpgroup) was
// exact but 1.22-1.59 x slower than cuBLASLt's rule, its K loop alone too (beta 0: 1.036 against
// 0.810 ms at Gemma 2; benchmarks/results/2026-12-06-h100-dw_gemm_ours-v1.txt). This version's first
// run failed to launch at 288 threads (2026-12-06-h100-dw_gemm_ours-v2-launchfail.txt); at 384
// threads it compiles (168 registers at launch, no spill) but has not run on a GPU yet. Beside it, a
// ping-pong kernel (dw_gemm_sm90_pingpong_kernel, 2026-12-06 late night) hides each tile's
// epilogue under the other warpgroup's MMAs; also not yet run.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "dw_gemm_sm90.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4;
constexpr int kThreads = 384;           // two consumer warpgroups + the producer warpgroup
constexpr uint32_t kBox = 64 * 64 * 2;  // one TMA box, 64 x 64 16-bit elements (8 KiB)
constexpr uint32_t kABytes = 2 * kBox;  // a stage's slice of G, 128 x 64
constexpr uint32_t kBBytes = 4 * kBox;  // a stage's slice of X, 64 x 256
constexpr uint32_t kBarBytes = 8 * 2 * kStages;
constexpr uint32_t kSmemBytes = kStages * (kABytes + kBBytes) + kBarBytes + 1024;  // + alignment

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LIGER_DW_SM90A 1
#endif

#if defined(LIGER_DW_SM90A)  // the device helpers: sm_90a instructions
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The same box into the same offset of every CTA of the cluster in `mask`, completing on each one's
// barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                                   int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, "
      "{%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}
// Arrive on the barrier at `bar`'s offset in CTA `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// A shared-memory matrix descriptor for an MN-major operand in the 128-byte swizzle: rows of 64
// elements (128 bytes) along M or N, one row per K index; 8 K rows (1024 bytes) apart is SBO, the next
// 64 elements along M or N (the next TMA box, 8 KiB on) is LBO.
__device__ __forceinline__ uint64_t desc_mn_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(kBox >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}

// D (+)= A B for one m64n256k16 step, A and B MN-major in shared memory (the trans bits 1, 1), TY
// the 16-bit type's PTX name; 128 float32 accumulators a thread.
#define LIGER_WGMMA_M64N256K16(TY)                                                                        \
  asm volatile(                                                                                           \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                       \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY                                            \
      " "                                                                                                 \
      "{"                                                                                                 \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                            \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                  \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                  \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                  \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                  \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                  \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "      \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"    \
      "}, %128, %129, p, 1, 1, 1, 1;\n}\n"                                                                \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),   \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),          \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),        \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),        \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),        \
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),        \
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),        \
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),        \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),        \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),        \
        "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),        \
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),        \
        "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),        \
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),        \
        "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),  \
        "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
        "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
        "+f"(d[127])                                                                                      \
      : "l"(da), "l"(db), "r"(scale_d))

template <bool kF16>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db,
                                                 uint32_t scale_d) {
  if constexpr (kF16)
    LIGER_WGMMA_M64N256K16("f16");
  else
    LIGER_WGMMA_M64N256K16("bf16");
}
// D (+)= A B for one m64n128k16 step (the ping-pong kernel's: two per K step, rows 0-63 and 64-127 of
// its 128 x 128 tile), 64 float32 accumulators at d[kOff ...].
#define LIGER_WGMMA_M64N128K16(TY)                                                                           \
  asm volatile(                                                                                              \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                           \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY                                               \
      " "                                                                                                    \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "     \
      "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, " \
      "%41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " \
      "%61, %62, %63}, %64, %65, p, 1, 1, 1, 1;\n}\n"                                                        \
      : "+f"(d[kOff + 0]), "+f"(d[kOff + 1]), "+f"(d[kOff + 2]), "+f"(d[kOff + 3]), "+f"(d[kOff + 4]),       \
        "+f"(d[kOff + 5]), "+f"(d[kOff + 6]), "+f"(d[kOff + 7]), "+f"(d[kOff + 8]), "+f"(d[kOff + 9]),       \
        "+f"(d[kOff + 10]), "+f"(d[kOff + 11]), "+f"(d[kOff + 12]), "+f"(d[kOff + 13]), "+f"(d[kOff + 14]),  \
        "+f"(d[kOff + 15]), "+f"(d[kOff + 16]), "+f"(d[kOff + 17]), "+f"(d[kOff + 18]), "+f"(d[kOff + 19]),  \
        "+f"(d[kOff + 20]), "+f"(d[kOff + 21]), "+f"(d[kOff + 22]), "+f"(d[kOff + 23]), "+f"(d[kOff + 24]),  \
        "+f"(d[kOff + 25]), "+f"(d[kOff + 26]), "+f"(d[kOff + 27]), "+f"(d[kOff + 28]), "+f"(d[kOff + 29]),  \
        "+f"(d[kOff + 30]), "+f"(d[kOff + 31]), "+f"(d[kOff + 32]), "+f"(d[kOff + 33]), "+f"(d[kOff + 34]),  \
        "+f"(d[kOff + 35]), "+f"(d[kOff + 36]), "+f"(d[kOff + 37]), "+f"(d[kOff + 38]), "+f"(d[kOff + 39]),  \
        "+f"(d[kOff + 40]), "+f"(d[kOff + 41]), "+f"(d[kOff + 42]), "+f"(d[kOff + 43]), "+f"(d[kOff + 44]),  \
        "+f"(d[kOff + 45]), "+f"(d[kOff + 46]), "+f"(d[kOff + 47]), "+f"(d[kOff + 48]), "+f"(d[kOff + 49]),  \
        "+f"(d[kOff + 50]), "+f"(d[kOff + 51]), "+f"(d[kOff + 52]), "+f"(d[kOff + 53]), "+f"(d[kOff + 54]),  \
        "+f"(d[kOff + 55]), "+f"(d[kOff + 56]), "+f"(d[kOff + 57]), "+f"(d[kOff + 58]), "+f"(d[kOff + 59]),  \
        "+f"(d[kOff + 60]), "+f"(d[kOff + 61]), "+f"(d[kOff + 62]), "+f"(d[kOff + 63])                       \
      : "l"(da), "l"(db), "r"(scale_d))

template <bool kF16, int kOff>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[128], uint64_t da, uint64_t db,
                                                 uint32_t scale_d) {
  if constexpr (kF16)
    LIGER_WGMMA_M64N128K16("f16");
  else
    LIGER_WGMMA_M64N128K16("bf16");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMAs.
__device__ __forceinline__ void fence_operands(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (kF16) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}
template <bool kF16>
__device__ __forceinline__ float2 unpack2(uint32_t u) {
  if constexpr (kF16) {
    return __half22float2(*reinterpret_cast<const __half2*>(&u));
  } else {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
  }
}

// The ring's barriers, both kernels: kS full barriers at `bars`, then kS empty ones.
__device__ __forceinline__ uint32_t full_bar(uint32_t bars, int s) { return bars + 8 * s; }
template <int kS>
__device__ __forceinline__ uint32_t empty_bar(uint32_t bars, int s) {
  return bars + 8 * (kS + s);
}

// Frees a stage in every block of the cluster (their producers may multicast into it).
template <int kCluster>
__device__ __forceinline__ void release_stage(uint32_t empty) {
  if constexpr (kCluster == 1) {
    mbar_arrive(empty);
  } else {
#pragma unroll
    for (int q = 0; q < kCluster; ++q) mbar_arrive_cluster(empty, q);
  }
}

// The producer of both kernels (one thread): per tile of the block's sequence (groups of kCluster
// tiles of the same columns, rows (group's m kCluster + rank) x 128) and per 64-deep K step, G's 128 x
// 64 slice (two boxes) and X's 64 x kN slice (kN / 64 boxes; in a cluster each block loads its share
// for all of them, by multicast) into the next stage of a ring of kS, whose full barriers sit at
// `bars` and empty ones after them.
template <int kN, int kS, int kCluster>
__device__ __forceinline__ void produce(const CUtensorMap* map_g, const CUtensorMap* map_x, uint32_t sA,
                                        uint32_t sB, uint32_t bars, uint32_t rank, int cluster_id,
                                        int clusters, int tiles_n, int groups, int kblocks) {
  constexpr int kBoxesB = kN / 64, kOwnB = kBoxesB / kCluster;
  constexpr uint32_t kA = 2 * kBox, kB = kBoxesB * kBox;
  int stage = 0;
  uint32_t phase = 0;
  for (int grp = cluster_id; grp < groups; grp += clusters) {
    const int m0 = ((grp / tiles_n) * kCluster + static_cast<int>(rank)) * kBM, n0 = (grp % tiles_n) * kN;
    for (int kb = 0; kb < kblocks; ++kb) {
      const uint32_t full = full_bar(bars, stage), empty = empty_bar<kS>(bars, stage);
      mbar_wait(empty, phase ^ 1);
      mbar_expect_tx(full, kA + kB);
      const int k0 = kb * kBK;
      const uint32_t a = sA + stage * kA, b = sB + stage * kB;
      tma_load(a, map_g, full, m0, k0);
      tma_load(a + kBox, map_g, full, m0 + 64, k0);
#pragma unroll
      for (int j = 0; j < kOwnB; ++j) {
        const int box = static_cast<int>(rank) * kOwnB + j;
        if constexpr (kCluster == 1)
          tma_load(b + box * kBox, map_x, full, n0 + 64 * box, k0);
        else
          tma_load_multicast(b + box * kBox, map_x, full, n0 + 64 * box, k0,
                             static_cast<uint16_t>((1u << kCluster) - 1));
      }
      if (++stage == kS) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

// The old dW values at one m64 block's accumulator positions (rows row0 and row0 + 8, columns col0 +
// 8 j for j < kJ), two 16-bit values a register, into old[kO ...]; zeros where not accumulating or
// outside dW. Issued before the tile's K loop (volatile: the compiler keeps them there) so they
// arrive under it; each thread reads, and later writes, only its own positions.
template <int kJ, int kO>
__device__ __forceinline__ void load_old(uint32_t (&old)[64], const uint16_t* dw, int64_t row0, int64_t col0,
                                         int64_t V, int64_t H, int accumulate) {
  const int64_t row1 = row0 + 8;
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    old[kO + 2 * j] = old[kO + 2 * j + 1] = 0u;
    const int64_t col = col0 + 8 * j;
    if (accumulate && col < H) {
      if (row0 < V)
        asm volatile("ld.global.b32 %0, [%1];" : "=r"(old[kO + 2 * j]) : "l"(dw + row0 * H + col));
      if (row1 < V)
        asm volatile("ld.global.b32 %0, [%1];" : "=r"(old[kO + 2 * j + 1]) : "l"(dw + row1 * H + col));
    }
  }
}

// The epilogue of one m64 block: accumulators d[kD ...] plus the old values old[kO ...], rounded
// once, stored at the positions load_old read.
template <bool kF16, int kJ, int kD, int kO>
__device__ __forceinline__ void store_block(uint16_t* dw, const float (&d)[128], const uint32_t (&old)[64],
                                            int64_t row0, int64_t col0, int64_t V, int64_t H) {
  const int64_t row1 = row0 + 8;
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int64_t col = col0 + 8 * j;
    if (col >= H) continue;
    const float2 o0 = unpack2<kF16>(old[kO + 2 * j]), o1 = unpack2<kF16>(old[kO + 2 * j + 1]);
    const int i = kD + 4 * j;
    if (row0 < V)
      *reinterpret_cast<uint32_t*>(dw + row0 * H + col) = pack2<kF16>(d[i] + o0.x, d[i + 1] + o0.y);
    if (row1 < V)
      *reinterpret_cast<uint32_t*>(dw + row1 * H + col) = pack2<kF16>(d[i + 2] + o1.x, d[i + 3] + o1.y);
  }
}
#endif  // LIGER_DW_SM90A

// kCluster 1: one block per tile. kCluster 2: a cluster of two blocks takes two tiles of the same
// columns (rows m and m + 128) at once and each block loads half of X's slice (two of the four boxes)
// for both (TMA multicast), so X's slice leaves L2 once for two tiles; every stage's release then
// waits for the consumers of both blocks.
template <bool kF16, int kCluster>
__global__ void __launch_bounds__(384, 1)
    dw_gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_g, const __grid_constant__ CUtensorMap map_x,
                        uint16_t* __restrict__ dw, int64_t V, int64_t H, int tiles_n, int groups, int kblocks,
                        int accumulate) {
#if defined(LIGER_DW_SM90A)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sA = (raw + 1023) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  const uint32_t sB = sA + kStages * kABytes, bars = sB + kStages * kBBytes;
  auto full = [&](int s) { return full_bar(bars, s); };
  auto empty = [&](int s) { return empty_bar<kStages>(bars, s); };
  const uint32_t rank = kCluster > 1 ? cluster_rank() : 0;
  const int cluster_id = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), 2 * kCluster);  // one arrival per consumer warpgroup of the cluster
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if constexpr (kCluster > 1) cluster_sync();  // the peers' barriers exist before any multicast

  if (threadIdx.x >= 256) {  // the producer warpgroup (warps 0-7 are the two consumer warpgroups)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x == 256)
      produce<kBN, kStages, kCluster>(&map_g, &map_x, sA, sB, bars, rank, cluster_id, clusters, tiles_n,
                                      groups, kblocks);
    // No early exit: with a cluster, every thread takes part in the closing cluster barrier.
    __syncwarp();
    if constexpr (kCluster > 1) cluster_sync();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int c = threadIdx.x / 128, t = threadIdx.x % 128;  // warpgroup c owns rows 64 c .. 64 c + 63
  const int warp = t / 32, lane = t % 32;
  const int r = 16 * warp + lane / 4;  // the accumulators' rows r and r + 8 (of the warpgroup's 64)
  int stage = 0;
  uint32_t phase = 0;
  float d[128];
  uint32_t old[64];  // the old dW values at the accumulators' positions, two 16-bit values each
  auto release = [&](int s) { release_stage<kCluster>(empty(s)); };
  for (int grp = cluster_id; grp < groups; grp += clusters) {
    const int64_t m0 = ((grp / tiles_n) * kCluster + static_cast<int>(rank)) * int64_t{kBM};
    const int64_t n0 = (grp % tiles_n) * int64_t{kBN};
    const int64_t row0 = m0 + 64 * c + r, col0 = n0 + 2 * (lane % 4);
    load_old<32, 0>(old, dw, row0, col0, V, H, accumulate);
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    int prev = 0;
    for (int kb = 0; kb < kblocks; ++kb) {
      mbar_wait(full(stage), phase);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      fence_operands(d);
      const uint32_t a = sA + stage * kABytes + c * kBox, b = sB + stage * kBBytes;
#pragma unroll
      for (int s = 0; s < kBK / 16; ++s) {  // 16 K rows of 128 bytes per MMA
        wgmma_m64n256k16<kF16>(d, desc_mn_sw128(a + s * 2048), desc_mn_sw128(b + s * 2048), 1);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      fence_operands(d);
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // the previous step's MMAs
      if (kb > 0 && t == 0) release(prev);
      prev = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(d);
    if (t == 0) release(prev);

    store_block<kF16, 32, 0, 0>(dw, d, old, row0, col0, V, H);
  }
  // A peer may still arrive on this block's barriers: leave together.
  if constexpr (kCluster > 1) cluster_sync();
#endif
}

// Ping-pong (DwGemmArgs::pingpong): each consumer warpgroup owns a whole 128 x 128 tile (two
// m64n128k16 per K step, 128 accumulators, 64 registers of old values) and the two take the block's
// tiles in turn, so one warpgroup's epilogue (old values added, rounding, stores) runs under the
// other's MMAs instead of between a tile's K loops. The producer fills one ring of stages with the
// tiles' K slices in order. A warpgroup waits for its tile's stages only once the other has waited
// for all of the previous tile's (the turn barriers): then every stage it waits on was last filled
// for a tile already consumed, so a parity wait cannot see a stale phase, and the MMAs of the two
// warpgroups alternate. kCluster 2: two blocks take the tiles of rows m and m + 128 and the same
// columns, each loads one of X's two boxes for both (TMA multicast).
// Its tiles: kBM (128) rows as the cooperative kernel's, kPBN columns; a stage holds G's slice as
// there (kABytes) and X's 64 x 128.
constexpr int kPBN = 128, kPStages = 6;
constexpr uint32_t kPBBytes = 2 * kBox;
constexpr uint32_t kPSmemBytes = kPStages * (kABytes + kPBBytes) + 8 * (2 * kPStages + 2) + 1024;

template <bool kF16, int kCluster>
__global__ void __launch_bounds__(384, 1)
    dw_gemm_sm90_pingpong_kernel(const __grid_constant__ CUtensorMap map_g,
                                 const __grid_constant__ CUtensorMap map_x, uint16_t* __restrict__ dw,
                                 int64_t V, int64_t H, int tiles_n, int groups, int kblocks, int accumulate) {
#if defined(LIGER_DW_SM90A)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sA = (raw + 1023) & ~1023u;
  const uint32_t sB = sA + kPStages * kABytes, bars = sB + kPStages * kPBBytes;
  auto full = [&](int s) { return full_bar(bars, s); };
  auto empty = [&](int s) { return empty_bar<kPStages>(bars, s); };
  auto turn = [&](int c) { return bars + 8 * (2 * kPStages + c); };  // warpgroup c may start its next tile
  const uint32_t rank = kCluster > 1 ? cluster_rank() : 0;
  const int cluster_id = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kPStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), kCluster);  // the consuming warpgroup of each block of the cluster
    }
    mbar_init(turn(0), 1);
    mbar_init(turn(1), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if constexpr (kCluster > 1) cluster_sync();

  if (threadIdx.x >= 256) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x == 256)
      produce<kPBN, kPStages, kCluster>(&map_g, &map_x, sA, sB, bars, rank, cluster_id, clusters, tiles_n,
                                        groups, kblocks);
    __syncwarp();
    if constexpr (kCluster > 1) cluster_sync();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int c = threadIdx.x / 128,
            t = threadIdx.x % 128;  // warpgroup c takes the block's tiles c, c + 2, ...
  const int warp = t / 32, lane = t % 32;
  const int r = 16 * warp + lane / 4;  // the accumulators' rows r and r + 8 of each 64-row half
  float d[128];
  uint32_t old[64];
  auto release = [&](int s) { release_stage<kCluster>(empty(s)); };
  int n_own = 0;  // this warpgroup's tiles so far
  for (int li = c, grp = cluster_id + c * clusters; grp < groups; li += 2, grp += 2 * clusters, ++n_own) {
    const int64_t m0 = ((grp / tiles_n) * kCluster + static_cast<int>(rank)) * int64_t{kBM};
    const int64_t n0 = (grp % tiles_n) * int64_t{kPBN};
    const int64_t col0 = n0 + 2 * (lane % 4);
    load_old<16, 0>(old, dw, m0 + r, col0, V, H, accumulate);
    load_old<16, 32>(old, dw, m0 + 64 + r, col0, V, H, accumulate);
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    // The block's tile li - 1 (the other warpgroup's) has had all its stages waited for.
    if (li > 0) mbar_wait(turn(c), static_cast<uint32_t>((c == 0 ? n_own - 1 : n_own) & 1));
    const int64_t g0 = static_cast<int64_t>(li) * kblocks;
    int prev = 0;
    for (int kb = 0; kb < kblocks; ++kb) {
      const int64_t gk = g0 + kb;
      const int stage = static_cast<int>(gk % kPStages);
      mbar_wait(full(stage), static_cast<uint32_t>((gk / kPStages) & 1));
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      fence_operands(d);
      const uint32_t a = sA + stage * kABytes, b = sB + stage * kPBBytes;
#pragma unroll
      for (int s = 0; s < kBK / 16; ++s) {
        wgmma_m64n128k16<kF16, 0>(d, desc_mn_sw128(a + s * 2048), desc_mn_sw128(b + s * 2048), 1);
        wgmma_m64n128k16<kF16, 64>(d, desc_mn_sw128(a + kBox + s * 2048), desc_mn_sw128(b + s * 2048), 1);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      fence_operands(d);
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      if (kb > 0 && t == 0) release(prev);
      prev = stage;
    }
    if (t == 0) mbar_arrive(turn(1 - c));  // every stage of tile li waited for: the other may go on
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(d);
    if (t == 0) release(prev);
    store_block<kF16, 16, 0, 0>(dw, d, old, m0 + r, col0, V, H);
    store_block<kF16, 16, 64, 32>(dw, d, old, m0 + 64 + r, col0, V, H);
  }
  if constexpr (kCluster > 1) cluster_sync();
#endif
}

// Whether this build holds the kernel's body for the device: the body needs sm_90a (wgmma,
// setmaxnreg), so a module compiled for sm_90 without the suffix, or for another architecture, has
// an empty kernel. The body's 128 float32 accumulators a thread take well over 100 registers, the
// empty one a handful: a host-side query, no launch or synchronisation (safe under graph capture).
template <bool kF16>
bool body_built() {
  static const bool built = [] {
    cudaFuncAttributes attr{};
    return cudaFuncGetAttributes(&attr, dw_gemm_sm90_kernel<kF16, 1>) == cudaSuccess && attr.numRegs >= 128;
  }();
  return built;
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 2-D map of a row-major [outer, inner] matrix (row stride ld elements) in 64 x 64 boxes, 128-byte
// swizzle, zeros outside.
bool make_map(CUtensorMap* map, bool fp16, const void* ptr, int64_t inner, int64_t outer, int64_t ld) {
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encoder();
  if (fn == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {64, 64}, elem[2] = {1, 1};
  return fn(map, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
            const_cast<void*>(ptr), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <bool kF16, int kCluster, bool kPing>
cudaError_t launch(const DwGemmArgs& a, int sms, cudaStream_t stream) {
  if (!body_built<kF16>()) return cudaErrorInvalidDeviceFunction;
  auto kernel = kPing ? dw_gemm_sm90_pingpong_kernel<kF16, kCluster> : dw_gemm_sm90_kernel<kF16, kCluster>;
  const int bn = kPing ? kPBN : kBN;
  const uint32_t smem = kPing ? kPSmemBytes : kSmemBytes;
  // Per call: the attribute belongs to the current device's context (a microsecond next to the GEMM).
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  CUtensorMap mg, mx;
  if (!make_map(&mg, kF16, a.g, a.V, a.R, a.ldg) || !make_map(&mx, kF16, a.x, a.H, a.R, a.ldx))
    return cudaErrorInvalidValue;
  const int64_t tiles_n = (a.H + bn - 1) / bn, tiles_m = (a.V + kBM - 1) / kBM;
  const int64_t groups = (tiles_m + kCluster - 1) / kCluster * tiles_n;  // a group: kCluster tiles
  const int kblocks = static_cast<int>((a.R + kBK - 1) / kBK);
  const int64_t clusters = groups < sms / kCluster ? groups : sms / kCluster;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * kCluster));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = kCluster;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, mg, mx, static_cast<uint16_t*>(a.dw), a.V, a.H,
                            static_cast<int>(tiles_n), static_cast<int>(groups), kblocks,
                            a.accumulate ? 1 : 0);
}

}  // namespace

bool dw_gemm_sm90_supported(const DwGemmArgs& a) {
  constexpr int64_t kMax = INT32_MAX - 256;  // a tile's coordinates (+ 64, + 256) stay within int32
  if (!(a.fp16 ? body_built<true>() : body_built<false>())) return false;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.R <= 0 || a.V <= 0 || a.H <= 0 || a.R > kMax || a.V > kMax || a.H > kMax) return false;
  if (a.ldg < a.V || a.ldx < a.H || a.H % 8 || a.ldg % 8 || a.ldx % 8) return false;
  // The tile count fits an int: (V / 128 + 1) * (H / 128 + 1) with V, H < 2^31 can pass it (128 x 128:
  // the ping-pong kernel's tiles, the smaller).
  if (((a.V + kBM - 1) / kBM) * ((a.H + kPBN - 1) / kPBN) > kMax) return false;
  return aligned(a.g) && aligned(a.x) && aligned(a.dw);
}

cudaError_t dw_gemm_sm90(const DwGemmArgs& a, int sms, cudaStream_t stream) {
  if (!dw_gemm_sm90_supported(a) || sms <= 0) return cudaErrorInvalidValue;
  if (a.pingpong) {
    if (a.cluster == 2)
      return a.fp16 ? launch<true, 2, true>(a, sms, stream) : launch<false, 2, true>(a, sms, stream);
    return a.fp16 ? launch<true, 1, true>(a, sms, stream) : launch<false, 1, true>(a, sms, stream);
  }
  if (a.cluster == 2)
    return a.fp16 ? launch<true, 2, false>(a, sms, stream) : launch<false, 2, false>(a, sms, stream);
  return a.fp16 ? launch<true, 1, false>(a, sms, stream) : launch<false, 1, false>(a, sms, stream);
}

}  // namespace liger_cpp::kernels
