// The two-pass cross-entropy row kernel: one block per row, any architecture
// and alignment; the row is read twice (statistics, then gradient). The
// fallback of the sm_90 cluster kernels (ce_smem.cuh, ce_cluster.cuh).
#pragma once

#include "kernels/cross_entropy/ce_row_math.cuh"

namespace liger_cpp::kernels {
namespace {

// VE elements per access (16 bytes when the row allows, else 1).
template <typename T, int VE>
__global__ void ce_two_pass_kernel(CeRowsArgs a) {
  __shared__ Stats scratch[32];
  const int64_t r = blockIdx.x;
  const int64_t V = a.cols;
  const int64_t y = a.target[r];
  const bool ignored = y == a.ignore_index;
  if (ignored || y < 0 || y >= V) {
    skip_row<T>(a, r, ignored, threadIdx.x, V, blockDim.x, threadIdx.x == 0);
    return;
  }
  const T* x = static_cast<const T*>(a.logits) + r * a.logits_row_stride;
  const RowOpts o{a.softcap, a.softcap > 0.f ? 1.f / a.softcap : 0.f, a.weight, a.label_smoothing != 0.f};
  // Read before any thread can write the gradient: dlogits may be logits.
  const float x_y = cap(to_float<T>(x[y]), o);
  Stats st = empty_stats();
  for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VE; j0 < V;
       j0 += static_cast<int64_t>(blockDim.x) * VE) {
    const Vec<T, VE> v = load_vec<T, VE>(x + j0);
#pragma unroll
    for (int e = 0; e < VE; ++e) {
      const float xv = cap(to_float<T>(v.v[e]), o);
      const int64_t j = j0 + e;
      if (xv != xv) st.nan = 1;
      if (xv > st.m) {  // online rescale of the running sum
        st.s = st.s * exp_or_zero(st.m, xv) + 1.f;
        st.m = xv;
        st.arg = j;
      } else {
        st.s += exp_or_zero(xv, st.m);
      }
      if (o.need_wx) st.wx += (o.weight ? __ldg(o.weight + j) : 1.f) * xv;
    }
  }
  st = block_combine(st, scratch);
  const RowGrad g = finish_row(a, r, y, st, x_y, threadIdx.x == 0);
  if (!a.dlogits) return;
  T* d = static_cast<T*>(a.dlogits) + r * a.dlogits_row_stride;
  for (int64_t j0 = static_cast<int64_t>(threadIdx.x) * VE; j0 < V;
       j0 += static_cast<int64_t>(blockDim.x) * VE) {
    const Vec<T, VE> v = load_vec<T, VE>(x + j0);
    Vec<T, VE> out;
#pragma unroll
    for (int e = 0; e < VE; ++e) {
      const float xv = cap(to_float<T>(v.v[e]), o);
      out.v[e] = from_float<T>(grad_of<false>(xv, prob<sizeof(T) == 2>(xv, g), j0 + e == y, j0 + e, g));
    }
    store_vec<T, VE>(d + j0, out);
  }
}

}  // namespace
}  // namespace liger_cpp::kernels
