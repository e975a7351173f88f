// Host-side caches of the driver queries made while planning a launch
// (occupancy, function attributes), shared by the launch plans, and the
// programmatic-dependent-launch helpers. In an unnamed namespace, as
// norm_common.cuh: each .cu gets its own tables.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/common/cluster.cuh"
#include "kernels/common/plan_override.h"

namespace liger_cpp::kernels {

// Programmatic dependent launch (default on): `kern` is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization where its code for this
// device is sm_90+, so its blocks may become resident while the previous kernel
// in the stream finishes (from that kernel's pdl_trigger, or its end) and wait
// in pdl_wait: the launch gap and block start-up of a short kernel after a long
// one (the norms' dW reduction) overlap the previous kernel's tail. Every
// kernel launched this way calls pdl_wait before its first global read, so it
// is correct whatever precedes it.
//
// LIGER_CPP_PDL=off is the user's kill switch, read once per process (outside
// the unnamed namespace: one flag for every translation unit; a value other
// than on / off is an error, on every call); the plan override pdl=on|off
// takes precedence (tests and benchmarks toggle it per call).
inline bool pdl_env_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("LIGER_CPP_PDL");
    if (e == nullptr || *e == '\0' || std::strcmp(e, "on") == 0) return true;
    if (std::strcmp(e, "off") == 0) return false;
    throw std::invalid_argument(
        std::string("liger_cpp: environment variable LIGER_CPP_PDL: expected one of on, "
                    "off (or unset), got '") +
        e + "'");
  }();
  return on;
}

namespace {

// Host-side caches of the driver calls made while planning a launch. Plans
// run on every call, and each occupancy query or cudaFuncSetAttribute is a
// driver call, so their results are kept per thread in small fixed tables: no
// allocation and no locks (each thread fills its own; a miss only repeats the
// query). Keys include the device: function attributes
// and occupancy belong to the device's context. Only successes are stored: a
// failed call is cleared (cudaGetLastError, so no error is left for the
// launcher's cudaGetLastError to report) and tried again on the next call.
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

// Per (device, kernel): the largest cudaFuncAttributeMaxDynamicSharedMemorySize
// known to be set, and whether the max-shared carveout preference is set.
struct FuncAttrs {
  int max_dyn_smem;
  bool carveout_max_shared;
};
QueryCache<FuncAttrs, 32>& func_attr_cache() {
  thread_local QueryCache<FuncAttrs, 32> cache;
  return cache;
}

// Opts `kern` in to `smem` bytes of dynamic shared memory on the current
// device when above its default maximum (48 KiB less the kernel's static
// shared memory: 48 KiB of stages plus a few static barriers need the opt-in
// too, which an early return at 48 KiB missed: ln_fwd_tma then never ran);
// false when that fails. Never lowers
// the attribute (another thread's cached occupancy or plan for a larger size
// stays valid): when the cached value is too small or unknown, the current
// value is read (cudaFuncGetAttributes) and only raised. Called before every
// occupancy query and launch with dynamic shared memory; a hit is a table
// lookup.
bool raise_max_dynamic_smem(const void* kern, size_t smem) {
  if (smem == 0) return true;
  const int dev = current_device();
  if (dev < 0) return false;
  const QueryKey key{dev, kern, 0, 0};
  auto& cache = func_attr_cache();
  const FuncAttrs* e = cache.find(key);
  if (e && static_cast<size_t>(e->max_dyn_smem) >= smem) return true;
  FuncAttrs now{0, e && e->carveout_max_shared};
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  now.max_dyn_smem = fa.maxDynamicSharedSizeBytes;
  if (static_cast<size_t>(now.max_dyn_smem) < smem) {
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
        cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    now.max_dyn_smem = static_cast<int>(smem);
  }
  cache.put(key, now);
  return true;
}

// Asks for the largest shared-memory carveout for `kern` on the current device
// (once per device and kernel while cached); a failure is ignored (a hint).
void prefer_max_shared_carveout(const void* kern) {
  const int dev = current_device();
  if (dev < 0) return;
  const QueryKey key{dev, kern, 0, 0};
  auto& cache = func_attr_cache();
  FuncAttrs* e = cache.find(key);
  if (e && e->carveout_max_shared) return;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  // A new entry's maximum is unknown (0): the next raise_max_dynamic_smem reads it.
  cache.put(key, FuncAttrs{e ? e->max_dyn_smem : 0, true});
}

// cudaOccupancyMaxActiveBlocksPerMultiprocessor for (current device, kernel,
// threads, dynamic shared memory bytes), cached; 0 when the query fails (not
// cached) or no block fits. Callers raise the shared-memory limit first
// (raise_max_dynamic_smem); since it is never lowered, a cached count stays
// valid.
int cached_blocks_per_sm(const void* kern, int threads, size_t smem) {
  const int dev = current_device();
  if (dev < 0) return 0;
  const QueryKey key{dev, kern, threads, static_cast<int64_t>(smem)};
  thread_local QueryCache<int, 64> cache;
  if (const int* n = cache.find(key)) return *n;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, threads, smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cache.put(key, n);
  return n;
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

// The architecture of `kern`'s code that runs on the current device
// (cudaFuncAttributes::binaryVersion, e.g. 90; 0 when the query fails), cached
// per (device, kernel). At least 90 means an sm_90+ device running the sm_90
// body of the TMA / cluster kernels: a build without sm_90 code (e.g.
// TORCH_CUDA_ARCH_LIST=8.0) would run their sm_80 stub even on an H100, so the
// launchers ask this rather than the device's compute capability.
int binary_version(const void* kern) {
  const int dev = current_device();
  if (dev < 0) return 0;
  const QueryKey key{dev, kern, 0, 0};
  thread_local QueryCache<int, 32> cache;
  if (const int* hit = cache.find(key)) return *hit;
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cache.put(key, fa.binaryVersion);
  return fa.binaryVersion;
}

// pdl_env_enabled(), unless the plan override says otherwise.
inline bool pdl_enabled() {
  const int forced = plan_override::forced(plan_override::Key::kPdl);
  return forced < 0 ? pdl_env_enabled() : forced == 0;
}

// Sets *attr to programmatic stream serialization where PDL applies to `kern`
// (enabled, sm_90+ code here); false, *attr untouched, elsewhere.
inline bool pdl_attribute(const void* kern, cudaLaunchAttribute* attr) {
  if (!pdl_enabled() || binary_version(kern) < 90) return false;
  attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr->val.programmaticStreamSerializationAllowed = 1;
  return true;
}

template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (pdl_attribute(reinterpret_cast<const void*>(kern), &attr[0])) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, kern, std::forward<Args>(args)...);
}

// `blocks` blocks of `threads` threads in clusters of `cl` along x (blocks a
// multiple of cl), with PDL as launch_pdl: the kernel calls pdl_wait before
// its first global read.
template <typename... KArgs, typename... Args>
cudaError_t launch_cluster_pdl(void (*kern)(KArgs...), int64_t blocks, int threads, int cl, size_t smem,
                               cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = cluster_launch_config(threads, cl, smem, stream, attr);
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  if (pdl_attribute(reinterpret_cast<const void*>(kern), &attr[1])) cfg.numAttrs = 2;
  return cudaLaunchKernelEx(&cfg, kern, std::forward<Args>(args)...);
}

// How many clusters of `cl` blocks of `threads` threads with `smem` bytes of
// dynamic shared memory each can be resident at once (0 where the kernel has
// no sm_90 code for this device, or none fit). Cached per (device, kernel,
// shape): a caller's smem must be a function of (kernel, threads). A failed
// query returns 0 and is not cached.
template <typename K>
int active_clusters(K* kern, int threads, int cl, size_t smem = 0) {
  const int dev = current_device();
  if (dev < 0) return 0;
  const QueryKey key{dev, reinterpret_cast<const void*>(kern), threads, cl};
  thread_local QueryCache<int, 16> cache;
  if (const int* hit = cache.find(key)) return *hit;
  int n = 0;
  const int version = binary_version(reinterpret_cast<const void*>(kern));
  if (version == 0) return 0;  // the query failed: not cached
  // Below 90 the kernel's sm_90 body does not run here (built without sm_90, or an older GPU).
  if (version >= 90) {
    if (!raise_max_dynamic_smem(reinterpret_cast<const void*>(kern), smem)) return 0;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = cluster_launch_config(threads, cl, smem, nullptr, attr);
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
