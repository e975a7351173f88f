// RoPE / mRoPE forward and backward kernel (see rope.h for the math), its launch
// plan and launch (which build runs for which layout: docs/kernels/rope.md).
//
// Memory-bound: every element of q and k is read once and written once, so the
// kernel is built to keep many independent 16-byte loads in flight.
//
// Work item = (token, group of kHeads heads of q or of k, vector slot). A slot
// is V consecutive columns j..j+V-1 of the low half together with the matching
// columns j+h..j+h+V-1 of the high half, so one thread owns both operands of
// each rotation and never exchanges data with another thread. The thread
// loads cos/sin for its slot once (4 vectors) and applies them to its kHeads
// heads (2 * kHeads vectors), all loads issued before any arithmetic. Items
// are numbered slot-fastest, then group, then token: the lanes of a warp read
// whole 128-byte half-rows of q/k (coalesced for any head/sequence strides),
// and the threads of one token read the same cos/sin lines, which therefore
// come from L1/L2 rather than DRAM (cos/sin requests are 2/kHeads of the q/k
// requests, 16-bit tables, and ~0 of the DRAM bytes). Groups never straddle q and
// k, so q and k are rotated by the same launch with one pointer select.
//
// V is the widest vector (16 bytes of T at most) that divides h, the mRoPE
// section boundaries, every stride and every base pointer's alignment; D = 92
// (h = 46) runs with V = 2, D = 2 with V = 1. Index arithmetic is 32-bit when
// the item count allows (int64 division is a long subroutine), pointer offsets
// are always int64.
#include <type_traits>

#include "kernels/common/common.cuh"
#include "kernels/rope/rope.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kThreads = 128;
// Heads per thread: 2 * 4 loads of 16 bytes (128 B) of q/k in flight per thread
// plus 4 cos/sin vectors. -Xptxas -v (sm_90a, no spills): 16-bit q/k with V = 8
// uses 90-94 registers with 16-bit cos/sin and 107-110 with float32 cos/sin,
// i.e. 5 (4) blocks of 128 threads per SM: 640 threads x 128 B = 80 KB of
// loads in flight per SM, about twice bandwidth x latency (4.8 TB/s / 132 SMs
// x ~1 us = 36 KB). 128-thread blocks waste fewer registers than 256 at this
// count (2 blocks of 256 would give only 512 threads).
constexpr int kHeads = 4;

// V elements of T held as 32-bit words (one 16-bit word when V * sizeof(T) = 2)
// and moved with one load or store of V * sizeof(T) bytes. Elements are packed
// and unpacked with integer/convert instructions on the words: going through a
// struct or union of __nv_bfloat16 members compiled into 2- and 4-byte stores.
template <typename T, int V>
struct Pack {
  static constexpr int kBytes = V * static_cast<int>(sizeof(T));
  static constexpr int kWords = kBytes >= 4 ? kBytes / 4 : 1;
  uint32_t w[kWords];
};

// Read-only (non-coherent path) load; inputs never alias outputs.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  Pack<T, V> r;
  if constexpr (Pack<T, V>::kBytes == 16) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    r.w[0] = u.x, r.w[1] = u.y, r.w[2] = u.z, r.w[3] = u.w;
  } else if constexpr (Pack<T, V>::kBytes == 8) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    r.w[0] = u.x, r.w[1] = u.y;
  } else if constexpr (Pack<T, V>::kBytes == 4) {
    r.w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  } else {
    static_assert(Pack<T, V>::kBytes == 2, "2..16-byte vectors");
    r.w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
  }
  return r;
}

// Through the st.global.wb intrinsics: a plain uint4 assignment here compiled
// into four 4-byte stores.
template <typename T, int V>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& r) {
  if constexpr (Pack<T, V>::kBytes == 16)
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]));
  else if constexpr (Pack<T, V>::kBytes == 8)
    __stwb(reinterpret_cast<uint2*>(p), make_uint2(r.w[0], r.w[1]));
  else if constexpr (Pack<T, V>::kBytes == 4)
    __stwb(reinterpret_cast<unsigned int*>(p), r.w[0]);
  else
    __stwb(reinterpret_cast<unsigned short*>(p), static_cast<unsigned short>(r.w[0]));
}

// Element e of a pack as float.
template <typename T, int V>
__device__ __forceinline__ float elem(const Pack<T, V>& r, int e) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(r.w[e]);
  } else {
    const uint32_t w = r.w[e / 2];
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      return __uint_as_float((e & 1) ? (w & 0xffff0000u) : (w << 16));  // bf16 = top half of a float
    else
      return __half2float(__ushort_as_half(static_cast<unsigned short>((e & 1) ? (w >> 16) : w)));
  }
}

// Rounds f[0..V) to T (round to nearest even) and packs them.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> pack(const float (&f)[V]) {
  Pack<T, V> r;
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int e = 0; e < V; ++e) r.w[e] = __float_as_uint(f[e]);
  } else if constexpr (V == 1) {
    r.w[0] = std::is_same_v<T, __nv_bfloat16> ? __bfloat16_as_ushort(__float2bfloat16_rn(f[0]))
                                              : __half_as_ushort(__float2half_rn(f[0]));
  } else {
#pragma unroll
    for (int e = 0; e < V; e += 2) {
      uint32_t lo, hi;
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(f[e], f[e + 1]);
        lo = __bfloat16_as_ushort(h.x), hi = __bfloat16_as_ushort(h.y);
      } else {
        const __half2 h = __floats2half2_rn(f[e], f[e + 1]);
        lo = __half_as_ushort(h.x), hi = __half_as_ushort(h.y);
      }
      r.w[e / 2] = lo | (hi << 16);
    }
  }
  return r;
}

// V elements of C (cos or sin) in packs of at most 16 bytes.
template <typename C, int V>
struct CsRow {
  static constexpr int kChunk = (16 / static_cast<int>(sizeof(C))) < V ? 16 / static_cast<int>(sizeof(C)) : V;
  Pack<C, kChunk> p[V / kChunk];
  __device__ __forceinline__ void load(const C* ptr) {
#pragma unroll
    for (int c = 0; c < V / kChunk; ++c) p[c] = load_pack<C, kChunk>(ptr + c * kChunk);
  }
  __device__ __forceinline__ float operator[](int e) const {
    return elem<C, kChunk>(p[e / kChunk], e % kChunk);
  }
};

template <typename T, typename C, int V, bool BWD, typename Idx>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const RopeArgs p, Idx total, Idx slots, Idx groups_q, Idx groups, Idx seq) {
  const int64_t half = p.head_dim / 2;
  for (Idx i = static_cast<Idx>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<Idx>(gridDim.x) * kThreads) {
    const Idx slot = i % slots;
    const Idx r = i / slots;
    const Idx g = r % groups;
    const Idx tok = r / groups;
    const int64_t b = static_cast<int64_t>(tok / seq);
    const int64_t s = static_cast<int64_t>(tok) - b * static_cast<int64_t>(seq);
    const bool is_q = g < groups_q;
    // Field by field (a reference to p.q or p.k would put the kernel parameters in local memory).
    const T* in = static_cast<const T*>(is_q ? p.q.in : p.k.in);
    const int64_t in_sh = is_q ? p.q.in_sh : p.k.in_sh;
    T* out = static_cast<T*>(is_q ? p.q.out : p.k.out);
    const int64_t out_sh = is_q ? p.q.out_sh : p.k.out_sh;
    const int64_t h0 = static_cast<int64_t>(is_q ? g : g - groups_q) * kHeads;
    const int64_t nh = (is_q ? p.q.heads : p.k.heads) - h0;  // > 0; this group has min(nh, kHeads)
    const int64_t j = static_cast<int64_t>(slot) * V;

    const T* x =
        in + b * (is_q ? p.q.in_sb : p.k.in_sb) + s * (is_q ? p.q.in_ss : p.k.in_ss) + h0 * in_sh + j;
    Pack<T, V> lo[kHeads], hi[kHeads];
#pragma unroll
    for (int u = 0; u < kHeads; ++u) {
      if (u < nh) {
        lo[u] = load_pack<T, V>(x + u * in_sh);
        hi[u] = load_pack<T, V>(x + u * in_sh + half);
      }
    }
    const int64_t plane = j < p.section0 ? 0 : (j < p.section0 + p.section1 ? 1 : 2);
    const C* cp = static_cast<const C*>(p.cos) + plane * p.cos_sp + b * p.cos_sb + s * p.cos_ss + j;
    const C* sp = static_cast<const C*>(p.sin) + plane * p.sin_sp + b * p.sin_sb + s * p.sin_ss + j;
    CsRow<C, V> cl, ch, sl, sh;
    cl.load(cp);
    ch.load(cp + half);
    sl.load(sp);
    sh.load(sp + half);

    T* y =
        out + b * (is_q ? p.q.out_sb : p.k.out_sb) + s * (is_q ? p.q.out_ss : p.k.out_ss) + h0 * out_sh + j;
#pragma unroll
    for (int u = 0; u < kHeads; ++u) {
      if (u < nh) {
        float y0[V], y1[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const float x0 = elem<T, V>(lo[u], e), x1 = elem<T, V>(hi[u], e);
          if constexpr (!BWD) {
            y0[e] = x0 * cl[e] - x1 * sl[e];
            y1[e] = x1 * ch[e] + x0 * sh[e];
          } else {
            y0[e] = x0 * cl[e] + x1 * sh[e];
            y1[e] = x1 * ch[e] - x0 * sl[e];
          }
        }
        store_pack<T, V>(y + u * out_sh, pack<T, V>(y0));
        store_pack<T, V>(y + u * out_sh + half, pack<T, V>(y1));
      }
    }
  }
}

bool operand_vec_ok(const RopeOperand& o, int64_t v, int elem) {
  if (o.heads == 0) return true;
  return is_aligned(o.in, static_cast<int>(v) * elem) && is_aligned(o.out, static_cast<int>(v) * elem) &&
         o.in_sb % v == 0 && o.in_sh % v == 0 && o.in_ss % v == 0 && o.out_sb % v == 0 && o.out_sh % v == 0 &&
         o.out_ss % v == 0;
}

// Whether vectors of v elements are legal for every access (T of `elem`
// bytes, cos/sin of `cs_elem` bytes, loaded in chunks of at most 16 bytes).
bool vec_ok(const RopeArgs& a, int64_t v, int elem, int cs_elem) {
  const int64_t half = a.head_dim / 2;
  if (half % v || a.section0 % v || (a.section0 + a.section1) % v) return false;
  if (!operand_vec_ok(a.q, v, elem) || !operand_vec_ok(a.k, v, elem)) return false;
  const int cs_align = static_cast<int>(v) * cs_elem < 16 ? static_cast<int>(v) * cs_elem : 16;
  return is_aligned(a.cos, cs_align) && is_aligned(a.sin, cs_align) && a.cos_sp % v == 0 &&
         a.cos_sb % v == 0 && a.cos_ss % v == 0 && a.sin_sp % v == 0 && a.sin_sb % v == 0 &&
         a.sin_ss % v == 0;
}

// One call's launch: the vector width, the index type and the grid.
struct RopePlan {
  int vec;  // V: elements per access, the widest legal (vec_ok)
  int64_t slots, groups_q, groups, total;
  int64_t grid;
  bool idx64;  // 64-bit index arithmetic (the loop's indices reach 2^32)
};

// The plan for q/k elements of `elem` bytes and cos/sin of `cs_elem` bytes.
RopePlan plan_rope(const RopeArgs& a, int elem, int cs_elem, int sm_count) {
  RopePlan p{};
  const int max_vec = 16 / elem;
  p.vec = max_vec >= 8 && vec_ok(a, 8, elem, cs_elem) ? 8
          : vec_ok(a, 4, elem, cs_elem)               ? 4
          : vec_ok(a, 2, elem, cs_elem)               ? 2
                                                      : 1;
  p.slots = a.head_dim / 2 / p.vec;
  p.groups_q = ceil_div(a.q.heads, kHeads);
  p.groups = p.groups_q + ceil_div(a.k.heads, kHeads);
  p.total = a.batch * a.seq * p.groups * p.slots;
  const int64_t want = ceil_div(p.total, kThreads);
  // Enough blocks for many waves of resident blocks; beyond that the grid-stride loop.
  const int64_t cap = static_cast<int64_t>(sm_count > 0 ? sm_count : 132) * (2048 / kThreads) * 16;
  p.grid = want < cap ? want : cap;
  const int64_t reach = p.total + p.grid * kThreads;  // largest index value the loop forms
  p.idx64 = reach >= (int64_t{1} << 32);
  return p;
}

template <typename T, typename C, int V, typename I>
cudaError_t launch_kernel(const RopePlan& p, const RopeArgs& a, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(p.grid);
  if (a.backward)
    rope_kernel<T, C, V, true, I>
        <<<grid, kThreads, 0, stream>>>(a, I(p.total), I(p.slots), I(p.groups_q), I(p.groups), I(a.seq));
  else
    rope_kernel<T, C, V, false, I>
        <<<grid, kThreads, 0, stream>>>(a, I(p.total), I(p.slots), I(p.groups_q), I(p.groups), I(a.seq));
  return cudaGetLastError();
}

template <typename T, typename C, int V>
cudaError_t launch_vec(const RopePlan& p, const RopeArgs& a, cudaStream_t stream) {
  return p.idx64 ? launch_kernel<T, C, V, uint64_t>(p, a, stream)
                 : launch_kernel<T, C, V, uint32_t>(p, a, stream);
}

template <typename T, typename C>
cudaError_t launch(const RopePlan& p, const RopeArgs& a, cudaStream_t stream) {
  switch (p.vec) {
    case 8:
      if constexpr (16 / sizeof(T) >= 8) return launch_vec<T, C, 8>(p, a, stream);
      break;
    case 4:
      return launch_vec<T, C, 4>(p, a, stream);
    case 2:
      return launch_vec<T, C, 2>(p, a, stream);
    case 1:
      return launch_vec<T, C, 1>(p, a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t rope(const RopeArgs& a, int sm_count, cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0) return cudaErrorInvalidValue;
  if (a.section0 < 0 || a.section1 < 0 || a.section0 + a.section1 > a.head_dim / 2)
    return cudaErrorInvalidValue;
  if (a.batch == 0 || a.seq == 0 || a.q.heads + a.k.heads == 0) return cudaSuccess;
  if (a.cs_dtype != DType::kFloat32 && a.cs_dtype != a.dtype) return cudaErrorInvalidValue;
  return dispatch_dtype(a.dtype, [&](auto tv) {
    using T = decltype(tv);
    const int elem = static_cast<int>(sizeof(T));
    if (a.cs_dtype == DType::kFloat32) return launch<T, float>(plan_rope(a, elem, 4, sm_count), a, stream);
    return launch<T, T>(plan_rope(a, elem, elem, sm_count), a, stream);
  });
}

}  // namespace liger_cpp::kernels
