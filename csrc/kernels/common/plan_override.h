// The one developer override of launch plans, for tests and benchmarks: it forces a choice that a
// plan function would otherwise make from the shape, the dtypes and the device (which kernel, how
// many stages, ...). Users never need it; the defaults are the measured best.
//
// Set as "key=value[,key=value...]" through torch.ops.liger._set_plan_override(spec) (Python:
// liger_cpp._testing.plan_override(key=value, ...)) or, for a whole process, the environment
// variable LIGER_CPP_PLAN, read once when the library loads. An unknown key or value is an error
// naming it and what is accepted: a typo must never silently measure the default. An empty spec
// clears every override.
//
// Plan functions ask forced(Key::kX): the index of the forced value in kKeys[X].values, or -1 (the
// plan's own choice). That is one relaxed atomic load, so plans may ask on every call.
//
// Host only, ATen-free. To add a key: an enumerator in Key and its row in kKeys, same order, and a
// line in docs/tuning.md.
#pragma once

#include <array>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

namespace liger_cpp::kernels::plan_override {

enum class Key : int {
  // Programmatic dependent launch and the GLU / cross-entropy plans (docs/tuning.md).
  kPdl,
  kGlu,
  kCe,
  kCeSmemBlocks,
  // The norms (csrc/kernels/rms_norm/rms_norm_plan.cu, csrc/kernels/layer_norm/layer_norm_plan.cu).
  kRmsFwd,
  kRmsBwd,
  kLnBwd,
  // The fused MoE experts' GEMMs (csrc/aten/cuda/moe_experts_cuda.cpp).
  kMoeGemm,
  // The distillation / KL row step (csrc/kernels/divergence/divergence.cu).
  kDistill,
  kDistillSmemBlocks,
  // The chunk loops' weight-gradient GEMM (csrc/aten/cuda/dw_gemm_cuda.cpp).
  kDwGemm,
  kCount
};

struct KeyInfo {
  const char* name;
  std::array<const char*, 8> values;  // unused slots nullptr
  const char* what;
};

inline constexpr KeyInfo kKeys[] = {
    {"pdl",
     {"on", "off"},
     "programmatic dependent launch of the kernels that use it (default: LIGER_CPP_PDL)"},
    {"glu", {"generic"}, "SwiGLU/GeGLU: the generic int64 kernels (16-byte vectors where aligned)"},
    {"ce", {"two_pass", "cluster", "smem"}, "cross-entropy row kernel, where it can run"},
    {"ce_smem_blocks", {"1", "2", "4", "8"}, "cross-entropy smem kernel: blocks (a cluster) per row"},
    // The norms: a forced kernel runs where it can take the call, else the plan chooses.
    {"rms_fwd", {"cached", "l2hint"}, "RMSNorm / FusedAddRMSNorm forward kernel (RmsFwdKernel)"},
    {"rms_bwd",
     {"tma", "pipe", "cached", "generic"},
     "RMSNorm / FusedAddRMSNorm backward kernel (RmsBwdKernel)"},
    {"ln_bwd",
     {"tma", "tma_unpaired", "pipe16", "pipe", "generic"},
     "LayerNorm backward kernel (LnBwdKernel)"},
    {"moe_gemm",
     {"grouped", "loop"},
     "MoE experts GEMMs: at::_grouped_mm (bf16, aligned) or one at::mm per expert (a host sync a call)"},
    {"distill",
     {"block", "smem"},
     "distillation / KL row kernel (JSD, cosine, KL of given q), where it can run"},
    {"distill_smem_blocks",
     {"1", "2", "4", "8", "16"},
     "distillation smem kernel: blocks (a cluster) per row"},
    {"dw_gemm",
     {"cublaslt", "aten"},
     "chunk loops' dW GEMM: cuBLASLt's chosen algorithm (sm_90's default) or ATen's addmm, where each can "
     "run"},
};
static_assert(sizeof(kKeys) / sizeof(kKeys[0]) == static_cast<int>(Key::kCount), "one row per Key");

struct Slots {
  std::atomic<int> v[static_cast<int>(Key::kCount)];
  Slots() {
    for (auto& x : v) x.store(-1, std::memory_order_relaxed);
  }
};

inline std::atomic<int>* slots() {
  static Slots s;
  return s.v;
}

inline std::string& current_spec() {
  static std::string s;
  return s;
}

// The index of the forced value of `k`, or -1 when the plan chooses.
inline int forced(Key k) { return slots()[static_cast<int>(k)].load(std::memory_order_relaxed); }

inline std::string accepted_keys() {
  std::string out;
  for (const auto& k : kKeys) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

// Replace every override by `spec` (validated whole before anything changes); returns the previous
// spec. Not thread-safe against concurrent set() calls (tests and benchmarks set it from one thread).
inline std::string set(const std::string& spec) {
  std::array<int, static_cast<int>(Key::kCount)> next;
  next.fill(-1);
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("liger_cpp: plan override '" + item + "': expected key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    int ki = -1;
    for (int i = 0; i < static_cast<int>(Key::kCount); ++i)
      if (key == kKeys[i].name) ki = i;
    if (ki < 0)
      throw std::invalid_argument("liger_cpp: plan override: unknown key '" + key + "'; expected one of " +
                                  accepted_keys());
    int vi = -1;
    std::string accepted;
    for (int j = 0; j < 8 && kKeys[ki].values[j] != nullptr; ++j) {
      if (value == kKeys[ki].values[j]) vi = j;
      accepted += (accepted.empty() ? "" : ", ") + std::string(kKeys[ki].values[j]);
    }
    if (vi < 0)
      throw std::invalid_argument("liger_cpp: plan override " + key + ": expected one of " + accepted +
                                  ", got '" + value + "'");
    next[ki] = vi;
  }
  for (int i = 0; i < static_cast<int>(Key::kCount); ++i)
    slots()[i].store(next[i], std::memory_order_relaxed);
  std::string prev = current_spec();
  current_spec() = spec;
  return prev;
}

}  // namespace liger_cpp::kernels::plan_override
