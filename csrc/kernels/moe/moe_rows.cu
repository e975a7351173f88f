// MoE row kernels around the grouped GEMMs (moe.h): the gather of routed rows, the combine of a
// token's k slots, the gated activation forward and backward, the per-expert bias-gradient sums and
// the zeroing of empty experts' weight gradients. float32 math, one rounding per output; every sum
// runs in a fixed order (no float atomics). Row loops are grid-strided with int64 indices.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/common/common.cuh"
#include "kernels/glu/glu_act.cuh"
#include "kernels/moe/moe.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kRowThreads = 256;
constexpr int64_t kMaxGrid = 1 << 20;

__device__ __forceinline__ int64_t routed_rows(const int32_t* offsets, int num_experts) {
  return num_experts > 0 ? offsets[num_experts - 1] : 0;
}

template <typename T, int VEC>
__global__ void gather_kernel(const T* __restrict__ src, int64_t src_stride, T* __restrict__ dst,
                              const int32_t* __restrict__ sorted_slot, const int32_t* __restrict__ offsets,
                              int64_t num_slots, int num_experts, int top_k, int64_t cols) {
  const int64_t valid = routed_rows(offsets, num_experts);
  const int64_t nv = cols / VEC;
  for (int64_t r = blockIdx.x; r < num_slots; r += gridDim.x) {
    Vec<T, VEC>* d = reinterpret_cast<Vec<T, VEC>*>(dst + r * cols);
    if (r < valid) {
      const int64_t t = sorted_slot[r] / top_k;
      const Vec<T, VEC>* s = reinterpret_cast<const Vec<T, VEC>*>(src + t * src_stride);
      for (int64_t c = threadIdx.x; c < nv; c += blockDim.x) d[c] = s[c];
    } else {
      Vec<T, VEC> z;
#pragma unroll
      for (int i = 0; i < VEC; ++i) z.v[i] = from_float<T>(0.f);
      for (int64_t c = threadIdx.x; c < nv; c += blockDim.x) d[c] = z;
    }
  }
}

template <typename T, int VEC>
__global__ void combine_kernel(const T* __restrict__ y, int64_t y_stride, const float* __restrict__ weights,
                               const T* __restrict__ bias, const int32_t* __restrict__ slot_row,
                               const int32_t* __restrict__ sorted_expert, T* __restrict__ out,
                               int64_t num_tokens, int top_k, int num_experts, int64_t cols) {
  const int64_t nv = cols / VEC;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    for (int64_t c = threadIdx.x; c < nv; c += blockDim.x) {
      float acc[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] = 0.f;
      for (int j = 0; j < top_k; ++j) {
        const int64_t s = t * top_k + j;
        const int64_t r = slot_row[s];
        const int e = sorted_expert[r];
        if (e >= num_experts) continue;
        const float w = weights ? weights[s] : 1.f;
        const Vec<T, VEC> v = reinterpret_cast<const Vec<T, VEC>*>(y + r * y_stride)[c];
        if (bias) {
          const Vec<T, VEC> b = reinterpret_cast<const Vec<T, VEC>*>(bias + e * cols)[c];
#pragma unroll
          for (int i = 0; i < VEC; ++i) acc[i] += w * (to_float(v.v[i]) + to_float(b.v[i]));
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) acc[i] += w * to_float(v.v[i]);
        }
      }
      Vec<T, VEC> o;
#pragma unroll
      for (int i = 0; i < VEC; ++i) o.v[i] = from_float<T>(acc[i]);
      reinterpret_cast<Vec<T, VEC>*>(out + t * cols)[c] = o;
    }
  }
}

// The activation and its partial derivatives at (g, u): a, da/dg, da/du.
template <int ACT>
__device__ __forceinline__ void act_eval(float g, float u, float alpha, float limit, float& a, float& dg,
                                         float& du) {
  if constexpr (ACT == static_cast<int>(MoeAct::kSilu) || ACT == static_cast<int>(MoeAct::kGeluTanh)) {
    constexpr GluAct G = ACT == static_cast<int>(MoeAct::kSilu) ? GluAct::kSilu : GluAct::kGeluTanh;
    float f, fd;
    Act<G>::fd(g, f, fd);
    a = f * u;
    dg = fd * u;
    du = f;
  } else {
    // Comparisons, not fminf / fmaxf: a NaN input stays NaN, as torch.clamp keeps it.
    const bool g_in = !(g > limit);
    const float gc = g_in ? g : limit;
    const bool u_in = !(u > limit) && !(u < -limit);
    const float uc = u > limit ? limit : (u < -limit ? -limit : u);
    const float s = 1.f / (1.f + expf(-alpha * gc));
    const float glu = gc * s;
    a = (uc + 1.f) * glu;
    dg = g_in ? (uc + 1.f) * (s + alpha * gc * s * (1.f - s)) : 0.f;
    du = u_in ? glu : 0.f;
  }
}

template <typename T>
__device__ __forceinline__ void load_gu(const T* row, const T* bias, int64_t i, int64_t inter,
                                        bool interleaved, float& g, float& u) {
  const int64_t gi = interleaved ? 2 * i : i, ui = interleaved ? 2 * i + 1 : inter + i;
  g = to_float(row[gi]);
  u = to_float(row[ui]);
  if (bias) {
    g += to_float(bias[gi]);
    u += to_float(bias[ui]);
  }
}

// VEC consecutive elements of a row (one 16-byte access when VEC > 1) as floats.
template <typename T, int VEC>
__device__ __forceinline__ void load_f(const T* p, float (&f)[VEC]) {
  if constexpr (VEC == 1) {
    f[0] = to_float(p[0]);
  } else {
    const Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
    for (int j = 0; j < VEC; ++j) f[j] = to_float(v.v[j]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_f(T* p, const float (&f)[VEC]) {
  if constexpr (VEC == 1) {
    p[0] = from_float<T>(f[0]);
  } else {
    Vec<T, VEC> v;
#pragma unroll
    for (int j = 0; j < VEC; ++j) v.v[j] = from_float<T>(f[j]);
    *reinterpret_cast<Vec<T, VEC>*>(p) = v;
  }
}

// Gate and up of elements i .. i + VEC - 1, bias added. VEC == 1: either layout (runtime flag);
// VEC > 1: IL (interleaved pairs: one 16-byte access of 2 VEC elements) or concatenated halves
// (one 16-byte access of VEC elements in each half).
template <typename T, int VEC, bool IL>
__device__ __forceinline__ void load_gu_vec(const T* row, const T* bias, int64_t i, int64_t inter,
                                            bool interleaved, float (&g)[VEC], float (&u)[VEC]) {
  if constexpr (VEC == 1) {
    load_gu(row, bias, i, inter, interleaved, g[0], u[0]);
  } else if constexpr (IL) {
    float p[2 * VEC];
    load_f<T, 2 * VEC>(row + 2 * i, p);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      g[j] = p[2 * j];
      u[j] = p[2 * j + 1];
    }
    if (bias) {
      load_f<T, 2 * VEC>(bias + 2 * i, p);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        g[j] += p[2 * j];
        u[j] += p[2 * j + 1];
      }
    }
  } else {
    load_f<T, VEC>(row + i, g);
    load_f<T, VEC>(row + inter + i, u);
    if (bias) {
      float bg[VEC], bu[VEC];
      load_f<T, VEC>(bias + i, bg);
      load_f<T, VEC>(bias + inter + i, bu);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        g[j] += bg[j];
        u[j] += bu[j];
      }
    }
  }
}

template <typename T, int ACT, int VEC, bool IL>
__global__ void act_fwd_kernel(MoeActArgs a) {
  const T* gu = static_cast<const T*>(a.gate_up);
  const T* gb = static_cast<const T*>(a.gu_bias);
  T* out = static_cast<T*>(a.act_out);
  for (int64_t r = blockIdx.x; r < a.num_slots; r += gridDim.x) {
    const int e = a.sorted_expert[r];
    T* o = out + r * a.inter;
    if (e >= a.num_experts) {
      for (int64_t i = threadIdx.x; i < a.inter; i += blockDim.x) o[i] = from_float<T>(0.f);
      continue;
    }
    const T* row = gu + r * a.gu_stride;
    const T* b = gb ? gb + static_cast<int64_t>(e) * 2 * a.inter : nullptr;
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < a.inter;
         i += static_cast<int64_t>(blockDim.x) * VEC) {
      float g[VEC], u[VEC], v[VEC];
      load_gu_vec<T, VEC, IL>(row, b, i, a.inter, a.interleaved, g, u);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float dg, du;
        act_eval<ACT>(g[j], u[j], a.alpha, a.limit, v[j], dg, du);
      }
      store_f<T, VEC>(o + i, v);
    }
  }
}

template <typename T, int ACT, int VEC, bool IL>
__global__ void act_bwd_kernel(MoeActArgs a) {
  __shared__ float scratch[32];
  const T* gu = static_cast<const T*>(a.gate_up);
  const T* gb = static_cast<const T*>(a.gu_bias);
  const T* da = static_cast<const T*>(a.d_act);
  const T* grows = static_cast<const T*>(a.g_rows);
  const T* db = static_cast<const T*>(a.down_bias);
  T* dgu = static_cast<T*>(a.d_gate_up);
  T* aw = static_cast<T*>(a.act_w);
  for (int64_t r = blockIdx.x; r < a.num_slots; r += gridDim.x) {
    const int e = a.sorted_expert[r];
    const int64_t slot = a.sorted_slot[r];
    T* dg_row = dgu + r * 2 * a.inter;
    T* aw_row = aw + r * a.inter;
    if (e >= a.num_experts) {
      for (int64_t i = threadIdx.x; i < 2 * a.inter; i += blockDim.x) dg_row[i] = from_float<T>(0.f);
      for (int64_t i = threadIdx.x; i < a.inter; i += blockDim.x) aw_row[i] = from_float<T>(0.f);
      if (threadIdx.x == 0) a.d_weights[slot] = 0.f;
      continue;  // uniform over the block: no barrier is skipped by part of it
    }
    const float w = a.weights[slot];
    const T* row = gu + r * a.gu_stride;
    const T* b = gb ? gb + static_cast<int64_t>(e) * 2 * a.inter : nullptr;
    const T* darow = da + r * a.da_stride;
    float dot = 0.f;
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < a.inter;
         i += static_cast<int64_t>(blockDim.x) * VEC) {
      float g[VEC], u[VEC], d[VEC], dgo[VEC], duo[VEC], awo[VEC];
      load_gu_vec<T, VEC, IL>(row, b, i, a.inter, a.interleaved, g, u);
      load_f<T, VEC>(darow + i, d);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float v, dg, du;
        act_eval<ACT>(g[j], u[j], a.alpha, a.limit, v, dg, du);
        dot += d[j] * v;
        const float dw = w * d[j];
        dgo[j] = dw * dg;
        duo[j] = dw * du;
        awo[j] = w * v;
      }
      if constexpr (VEC == 1) {
        const int64_t gi = a.interleaved ? 2 * i : i, ui = a.interleaved ? 2 * i + 1 : a.inter + i;
        dg_row[gi] = from_float<T>(dgo[0]);
        dg_row[ui] = from_float<T>(duo[0]);
      } else if constexpr (IL) {
        float p[2 * VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          p[2 * j] = dgo[j];
          p[2 * j + 1] = duo[j];
        }
        store_f<T, 2 * VEC>(dg_row + 2 * i, p);
      } else {
        store_f<T, VEC>(dg_row + i, dgo);
        store_f<T, VEC>(dg_row + a.inter + i, duo);
      }
      store_f<T, VEC>(aw_row + i, awo);
    }
    if (db) {
      const T* gr = grows + r * a.hidden;
      const T* br = db + static_cast<int64_t>(e) * a.hidden;
      for (int64_t h = threadIdx.x; h < a.hidden; h += blockDim.x) dot += to_float(gr[h]) * to_float(br[h]);
    }
    dot = group_sum(dot, scratch);
    if (threadIdx.x == 0) a.d_weights[slot] = dot;
  }
}

constexpr int kSegCols = 32, kSegRows = 8;

template <typename T>
__global__ void segment_sum_kernel(MoeSegSumArgs a) {
  __shared__ float part[kSegRows][kSegCols];
  const T* m = static_cast<const T*>(a.m);
  const int e = blockIdx.x;
  const int64_t n = static_cast<int64_t>(blockIdx.y) * kSegCols + threadIdx.x;
  const int64_t begin = e > 0 ? a.offsets[e - 1] : 0, end = a.offsets[e];
  float acc = 0.f;
  if (n < a.cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kSegRows) {
      const float s = a.weights ? a.weights[a.sorted_slot[r]] : 1.f;
      acc += s * to_float(m[r * a.m_stride + n]);
    }
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && n < a.cols) {
    float s = 0.f;
#pragma unroll
    for (int y = 0; y < kSegRows; ++y) s += part[y][threadIdx.x];
    static_cast<T*>(a.out)[static_cast<int64_t>(e) * a.cols + n] = from_float<T>(s);
  }
}

template <typename T>
__global__ void zero_empty_kernel(T* __restrict__ w, int64_t per_expert,
                                  const int32_t* __restrict__ offsets) {
  const int e = blockIdx.x;
  const int64_t begin = e > 0 ? offsets[e - 1] : 0;
  if (offsets[e] != begin) return;
  T* p = w + static_cast<int64_t>(e) * per_expert;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < per_expert;
       i += static_cast<int64_t>(gridDim.y) * blockDim.x)
    p[i] = from_float<T>(0.f);
}

int row_grid(int64_t rows) { return static_cast<int>(std::max<int64_t>(1, std::min(rows, kMaxGrid))); }

// 16-byte vectors when every row start is 16-byte aligned, else one element an access.
template <typename T>
bool vec_ok(int64_t cols, std::initializer_list<const void*> ptrs, std::initializer_list<int64_t> strides) {
  constexpr int V = 16 / sizeof(T);
  if (cols % V) return false;
  for (const void* p : ptrs)
    if (p && !is_aligned(p, 16)) return false;
  for (int64_t s : strides)
    if (s % V) return false;
  return true;
}

// The activation kernels' 16-byte paths: a row's layout (IL: interleaved), I a multiple of the
// elements a thread takes (V concatenated, V / 2 interleaved pairs), the row stride a multiple of
// the vector, every base pointer 16-byte aligned.
template <typename T>
bool act_vec_ok(const MoeActArgs& a, bool il) {
  constexpr int V = 16 / sizeof(T);
  if (a.interleaved != il || a.inter % (il ? V / 2 : V) || a.gu_stride % V) return false;
  for (const void* p :
       std::initializer_list<const void*>{a.gate_up, a.gu_bias, a.act_out, a.d_gate_up, a.act_w})
    if (p && !is_aligned(p, 16)) return false;
  return !a.d_act || (is_aligned(a.d_act, 16) && a.da_stride % (il ? V / 2 : V) == 0);
}

// A row's threads: enough 32-thread warps for one vector each, at most kRowThreads.
int act_threads(int64_t inter, int vec) {
  const int64_t need = ceil_div(ceil_div(inter, vec), 32) * 32;
  return static_cast<int>(std::max<int64_t>(32, std::min<int64_t>(need, kRowThreads)));
}

template <typename F>
cudaError_t dispatch_act(MoeAct act, F&& f) {
  switch (act) {
    case MoeAct::kSilu:
      return f(std::integral_constant<int, 0>{});
    case MoeAct::kGeluTanh:
      return f(std::integral_constant<int, 1>{});
    case MoeAct::kGptOss:
      return f(std::integral_constant<int, 2>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t moe_gather(const MoeGatherArgs& a, cudaStream_t stream) {
  if (a.num_slots == 0 || a.cols == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    const T* src = static_cast<const T*>(a.src);
    T* dst = static_cast<T*>(a.dst);
    if (vec_ok<T>(a.cols, {a.src, a.dst}, {a.src_stride}))
      gather_kernel<T, V><<<row_grid(a.num_slots), kRowThreads, 0, stream>>>(
          src, a.src_stride, dst, a.sorted_slot, a.offsets, a.num_slots, a.num_experts, a.top_k, a.cols);
    else
      gather_kernel<T, 1><<<row_grid(a.num_slots), kRowThreads, 0, stream>>>(
          src, a.src_stride, dst, a.sorted_slot, a.offsets, a.num_slots, a.num_experts, a.top_k, a.cols);
    return cudaGetLastError();
  });
}

cudaError_t moe_combine(const MoeCombineArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0 || a.cols == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    const T* y = static_cast<const T*>(a.y);
    const T* b = static_cast<const T*>(a.bias);
    T* out = static_cast<T*>(a.out);
    if (vec_ok<T>(a.cols, {a.y, a.bias, a.out}, {a.y_stride}))
      combine_kernel<T, V><<<row_grid(a.num_tokens), kRowThreads, 0, stream>>>(
          y, a.y_stride, a.weights, b, a.slot_row, a.sorted_expert, out, a.num_tokens, a.top_k, a.num_experts,
          a.cols);
    else
      combine_kernel<T, 1><<<row_grid(a.num_tokens), kRowThreads, 0, stream>>>(
          y, a.y_stride, a.weights, b, a.slot_row, a.sorted_expert, out, a.num_tokens, a.top_k, a.num_experts,
          a.cols);
    return cudaGetLastError();
  });
}

namespace {

// The activation kernels for this call's layout: NO elements a thread, IL interleaved pairs.
template <typename T, int A, int NO, bool IL>
void launch_act(bool bwd, const MoeActArgs& a, int threads, cudaStream_t stream) {
  if (bwd)
    act_bwd_kernel<T, A, NO, IL><<<row_grid(a.num_slots), threads, 0, stream>>>(a);
  else
    act_fwd_kernel<T, A, NO, IL><<<row_grid(a.num_slots), threads, 0, stream>>>(a);
}

cudaError_t act_launch(bool bwd, const MoeActArgs& a, cudaStream_t stream) {
  if (a.num_slots == 0 || a.inter == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    return dispatch_act(a.act, [&](auto act) {
      constexpr int A = decltype(act)::value;
      if (act_vec_ok<T>(a, false))
        launch_act<T, A, V, false>(bwd, a, act_threads(a.inter, V), stream);
      else if (act_vec_ok<T>(a, true))
        launch_act<T, A, V / 2, true>(bwd, a, act_threads(a.inter, V / 2), stream);
      else
        launch_act<T, A, 1, false>(bwd, a, kRowThreads, stream);
      return cudaGetLastError();
    });
  });
}

}  // namespace

cudaError_t moe_act_fwd(const MoeActArgs& a, cudaStream_t stream) { return act_launch(false, a, stream); }

cudaError_t moe_act_bwd(const MoeActArgs& a, cudaStream_t stream) { return act_launch(true, a, stream); }

cudaError_t moe_segment_sum(const MoeSegSumArgs& a, cudaStream_t stream) {
  if (a.num_experts == 0 || a.cols == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(a.num_experts, static_cast<unsigned>(ceil_div(a.cols, kSegCols)));
    segment_sum_kernel<T><<<grid, dim3(kSegCols, kSegRows), 0, stream>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t moe_zero_empty(void* w, int64_t per_expert, int num_experts, const int32_t* offsets, DType dtype,
                           cudaStream_t stream) {
  if (num_experts == 0 || per_expert == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const unsigned ys = static_cast<unsigned>(std::min<int64_t>(64, ceil_div(per_expert, kRowThreads)));
    zero_empty_kernel<T>
        <<<dim3(num_experts, ys), kRowThreads, 0, stream>>>(static_cast<T*>(w), per_expert, offsets);
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
