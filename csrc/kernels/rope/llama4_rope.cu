// Llama 4 complex RoPE: the plan and the kernel. A block rotates every head of q and k of one
// token (b, s), so the token's frequencies are read from global memory once per block (L1 serves
// the other heads); a thread takes VP interleaved pairs (2 VP elements: 16 bytes of bf16 / fp16 at
// VP = 4, of fp32 at VP = 2) of one head per step.
#include "kernels/common/common.cuh"
#include "kernels/rope/llama4_rope.h"

namespace liger_cpp::kernels {
namespace {

template <typename T, int VP, bool CONJ>
__device__ __forceinline__ void rotate(const T* __restrict__ in, T* __restrict__ out,
                                       const float* __restrict__ f) {
  constexpr int E = 2 * VP;
  const Vec<T, E> xv = load_vec<T, E>(in);
  const Vec<float, E> fv = load_vec<float, E>(f);
  Vec<T, E> o;
#pragma unroll
  for (int p = 0; p < VP; ++p) {
    const float a = to_float<T>(xv.v[2 * p]), b = to_float<T>(xv.v[2 * p + 1]);
    const float c = fv.v[2 * p], s = CONJ ? -fv.v[2 * p + 1] : fv.v[2 * p + 1];
    o.v[2 * p] = from_float<T>(a * c - b * s);
    o.v[2 * p + 1] = from_float<T>(a * s + b * c);
  }
  store_vec<T, E>(out, o);
}

template <typename T, int VP, bool CONJ>
__global__ void __launch_bounds__(kLlama4RopeMaxThreads) llama4_rope_kernel(Llama4RopeArgs a) {
  const T* qi = static_cast<const T*>(a.q.in);
  const T* ki = static_cast<const T*>(a.k.in);
  T* qo = static_cast<T*>(a.q.out);
  T* ko = static_cast<T*>(a.k.out);
  const int64_t rows = a.batch * a.seq;
  const int64_t chunks = a.pairs / VP;  // per head
  const int64_t work = (a.q.heads + a.k.heads) * chunks;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t b = row / a.seq, s = row - b * a.seq;
    const float* f = a.freqs + b * a.f_sb + s * a.f_ss;
    for (int64_t w = threadIdx.x; w < work; w += blockDim.x) {
      const int64_t head = w / chunks, c = w - head * chunks;
      const int64_t d = c * 2 * VP;
      if (head < a.q.heads) {
        rotate<T, VP, CONJ>(qi + b * a.q.in_sb + s * a.q.in_ss + head * a.q.in_sh + d,
                            qo + b * a.q.out_sb + s * a.q.out_ss + head * a.q.out_sh + d, f + d);
      } else {
        const int64_t h = head - a.q.heads;
        rotate<T, VP, CONJ>(ki + b * a.k.in_sb + s * a.k.in_ss + h * a.k.in_sh + d,
                            ko + b * a.k.out_sb + s * a.k.out_ss + h * a.k.out_sh + d, f + d);
      }
    }
  }
}

template <typename T, bool CONJ>
cudaError_t launch(const Llama4RopePlan& pl, const Llama4RopeArgs& a, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(pl.grid);
  switch (pl.vec_pairs) {
    case 4:
      if constexpr (sizeof(T) == 2) {
        llama4_rope_kernel<T, 4, CONJ><<<grid, pl.threads, 0, stream>>>(a);
        break;
      }
      return cudaErrorInvalidValue;
    case 2:
      llama4_rope_kernel<T, 2, CONJ><<<grid, pl.threads, 0, stream>>>(a);
      break;
    default:
      llama4_rope_kernel<T, 1, CONJ><<<grid, pl.threads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

bool strides_multiple(const Llama4RopeOperand& o, int64_t m) {
  return o.in_sb % m == 0 && o.in_ss % m == 0 && o.in_sh % m == 0 && o.out_sb % m == 0 && o.out_ss % m == 0 &&
         o.out_sh % m == 0;
}

}  // namespace

Llama4RopePlan plan_llama4_rope(int64_t rows, int64_t heads, int64_t pairs, int elem_size, bool vec_ok,
                                int sm_count) {
  Llama4RopePlan p{1, 32, 1};
  // 16 bytes of q / k a thread: 4 pairs of a 2-byte type, 2 of float32.
  const int vp = 8 / elem_size;
  if (vec_ok && pairs % vp == 0) p.vec_pairs = vp;
  const int64_t work = heads * (pairs / p.vec_pairs);
  const int64_t threads = ceil_div(work, 32) * 32;
  p.threads = static_cast<int>(threads < kLlama4RopeMaxThreads ? threads : kLlama4RopeMaxThreads);
  // Enough blocks to fill the device several times over; the rest walk the rows grid-stride.
  const int64_t cap = static_cast<int64_t>(sm_count > 0 ? sm_count : 132) * 32;
  p.grid = rows < cap ? (rows > 0 ? rows : 1) : cap;
  return p;
}

cudaError_t llama4_rope(const Llama4RopeArgs& a, int sm_count, cudaStream_t stream) {
  const int64_t rows = a.batch * a.seq;
  if (rows == 0 || a.pairs == 0 || a.q.heads + a.k.heads == 0) return cudaSuccess;
  return dispatch_dtype(a.dtype, [&](auto tv) -> cudaError_t {
    using T = decltype(tv);
    const int64_t elems = 16 / sizeof(T);  // elements in 16 bytes
    // A thread reads `elems` floats of frequencies (2 per pair) next to its 16 bytes of q / k.
    bool vec = is_aligned(a.freqs, static_cast<int>(elems) * 4) && a.f_sb % elems == 0 && a.f_ss % elems == 0;
    for (const Llama4RopeOperand* o : {&a.q, &a.k})
      vec = vec && (o->heads == 0 ||
                    (is_aligned(o->in, 16) && is_aligned(o->out, 16) && strides_multiple(*o, elems)));
    const Llama4RopePlan pl =
        plan_llama4_rope(rows, a.q.heads + a.k.heads, a.pairs, sizeof(T), vec, sm_count);
    return a.conj ? launch<T, true>(pl, a, stream) : launch<T, false>(pl, a, stream);
  });
}

}  // namespace liger_cpp::kernels
