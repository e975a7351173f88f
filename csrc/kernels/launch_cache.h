// Host-side caches of the driver calls made while planning a cluster launch
// (occupancy, the non-portable cluster opt-in), shared by the RMSNorm and
// cross-entropy launchers. In an unnamed namespace, as norm_common.cuh: each
// .cu gets its own tables.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cluster.cuh"

namespace liger_cpp::kernels {
namespace {

// The launchers plan on every call (the RMSNorm backward twice: workspace
// size, then launch), and each occupancy query or cudaFuncSetAttribute is a
// driver call, so their results are kept per thread in small fixed tables: no
// allocation and no locks (each thread fills its own; a miss only repeats the
// query). Keys include the device: function attributes and occupancy belong to
// the device's context. Only successes are stored: a failed call is cleared
// (cudaGetLastError, so no error is left for the launcher's cudaGetLastError to
// report) and tried again on the next call.
struct QueryKey {
  int dev;
  const void* kern;
  int64_t a, b;  // the query's shape (e.g. threads and cluster size)
  bool operator==(const QueryKey& o) const { return dev == o.dev && kern == o.kern && a == o.a && b == o.b; }
};

// N entries searched linearly (a few distinct kernels and shapes per process
// in practice), the oldest replaced when full. Zero-initialised as a
// thread_local aggregate (no constructor, so no TLS init guard).
template <typename V, int N>
struct QueryCache {
  QueryKey keys[N];
  V vals[N];
  int used, next;  // filled entries; the one replaced next when full

  V* find(const QueryKey& k) {
    for (int i = 0; i < used; ++i)
      if (keys[i] == k) return &vals[i];
    return nullptr;
  }
  void put(const QueryKey& k, const V& v) {
    if (V* hit = find(k)) {
      *hit = v;
      return;
    }
    int i;
    if (used < N) {
      i = used++;
    } else {
      i = next;
      next = (next + 1) % N;
    }
    keys[i] = k;
    vals[i] = v;
  }
};

// The current device, or -1 (error cleared) when there is none.
int current_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

// Lets `kern` launch with clusters above the portable 8 blocks on the current
// device (cudaFuncAttributeNonPortableClusterSizeAllowed; once per device and
// kernel while cached); false, with no sticky error, when that fails.
bool allow_nonportable_clusters(const void* kern) {
  const int dev = current_device();
  if (dev < 0) return false;
  const QueryKey key{dev, kern, 0, 0};
  thread_local QueryCache<bool, 16> cache;
  if (cache.find(key)) return true;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cache.put(key, true);
  return true;
}

// How many clusters of `cl` blocks of `threads` threads (no dynamic shared
// memory) can be resident at once (0 where the kernel has no sm_90 code for
// this device, or none fit). Cached per (device, kernel, shape); a failed query
// returns 0 and is not cached.
template <typename K>
int active_clusters(K* kern, int threads, int cl) {
  const int dev = current_device();
  if (dev < 0) return 0;
  const QueryKey key{dev, reinterpret_cast<const void*>(kern), threads, cl};
  thread_local QueryCache<int, 16> cache;
  if (const int* hit = cache.find(key)) return *hit;
  int n = 0;
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  // binaryVersion is the architecture of the code that runs on this device:
  // below 90 the kernel body is empty (built without sm_90, or an older GPU).
  if (fa.binaryVersion >= 90) {
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = cluster_launch_config(threads, cl, 0, nullptr, attr);
    if (cudaOccupancyMaxActiveClusters(&n, kern, &cfg) != cudaSuccess) {
      cudaGetLastError();  // no sticky error behind
      return 0;
    }
  }
  cache.put(key, n);
  return n;
}

}  // namespace
}  // namespace liger_cpp::kernels
