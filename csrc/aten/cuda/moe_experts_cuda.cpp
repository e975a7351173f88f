// liger::moe_experts_{fwd,bwd} on CUDA: the orchestration of csrc/aten/composite/moe_experts_flow.h
// with the kernels of csrc/kernels/moe (routing, gather, activation, combine, bias sums) and the
// GEMMs through ATen. bfloat16 with H and I multiples of 8 and 16-byte aligned operands runs
// at::_grouped_mm (CUTLASS grouped GEMMs, the offsets read on the device: no host synchronisation,
// CUDA-graph capturable); otherwise (float16, float32, odd sizes; torch 2.11's grouped GEMM is
// bfloat16 only, its own fallback syncs as well) one at::mm per expert after one copy of the
// offsets to the host per forward / backward (MoeRouting::host_offsets). The plan override key moe_gemm
// forces either (docs/tuning.md).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "aten/composite/moe_experts_flow.h"
#include "aten/cuda/cuda_common.h"
#include "kernels/common/plan_override.h"
#include "kernels/moe/moe.h"

namespace liger_cpp {
namespace moe_experts_cuda_impl {

namespace k = kernels;
namespace po = kernels::plan_override;

cudaStream_t stream() { return at::cuda::getCurrentCUDAStream(); }

// at::_grouped_mm can take a [.., K] x [.., K, N] product: bfloat16 operands with one unit stride
// in their last two dimensions and the other a multiple of 16 bytes, aligned data, N a multiple
// of 8 (so that its output is dense), sm_80 or newer, and some rows.
bool grouped_ok(const at::Tensor& a, const at::Tensor& b) {
  if (po::forced(po::Key::kMoeGemm) == 1) return false;
  if (a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16) return false;
  if (a.numel() == 0 || b.numel() == 0 || b.size(-1) % 8) return false;
  if (at::cuda::getCurrentDeviceProperties()->major < 8) return false;
  for (const at::Tensor* t : {&a, &b}) {
    if (!aligned_16B(t->data_ptr())) return false;
    const int64_t d = t->dim();
    const int64_t other = t->stride(d - 1) == 1   ? t->stride(d - 2)
                          : t->stride(d - 2) == 1 ? t->stride(d - 1)
                                                  : -1;
    if (other < 0 || other % 8) return false;
    if (d == 3 && t->stride(0) % 8) return false;
  }
  return true;
}

// The routing's offsets on the host, copied (one synchronisation) on the first call of a forward
// or backward and kept in R for its other GEMMs.
const std::vector<int64_t>& host_offsets(const MoeRouting& R) {
  if (R.host_offsets.empty()) {
    const at::Tensor h = R.offsets.to(at::kCPU).to(at::kLong);
    const int64_t* p = h.data_ptr<int64_t>();
    R.host_offsets.assign(p, p + h.numel());
  }
  return R.host_offsets;
}

struct CudaBackend {
  static constexpr bool kCuda = true;
  using Guard = c10::cuda::CUDAGuard;
  static at::ScalarType weight_dtype(const at::Tensor&) { return at::kFloat; }

  static void routing(const at::Tensor& idx, int64_t E, MoeRouting& R) {
    const int64_t S = idx.numel();
    auto opt = idx.options().dtype(at::kInt);
    R.offsets = S == 0 ? at::zeros({E}, opt) : at::empty({E}, opt);
    R.sorted_slot = at::empty({S}, opt);
    R.slot_row = at::empty({S}, opt);
    R.sorted_expert = at::empty({S}, opt);
    at::Tensor ws = at::empty({k::moe_routing_workspace(S, static_cast<int>(E))}, opt);
    k::MoeRoutingArgs a{};
    a.top_k_index = idx.data_ptr();
    a.index_int64 = idx.scalar_type() == at::kLong;
    a.num_slots = S;
    a.num_experts = static_cast<int>(E);
    a.workspace = ws.data_ptr<int32_t>();
    a.offsets = R.offsets.data_ptr<int32_t>();
    a.sorted_slot = R.sorted_slot.data_ptr<int32_t>();
    a.slot_row = R.slot_row.data_ptr<int32_t>();
    a.sorted_expert = R.sorted_expert.data_ptr<int32_t>();
    LIGER_CUDA_CHECK(k::moe_routing(a, stream()));
  }

  static at::Tensor gather(const at::Tensor& src, const MoeRouting& R, int64_t topk) {
    const int64_t S = R.sorted_slot.size(0), C = src.size(1);
    at::Tensor dst = at::empty({S, C}, src.options());
    k::MoeGatherArgs a{};
    a.src = src.data_ptr();
    a.src_stride = src.stride(0);
    a.dst = dst.data_ptr();
    a.sorted_slot = R.sorted_slot.data_ptr<int32_t>();
    a.offsets = R.offsets.data_ptr<int32_t>();
    a.num_slots = S;
    a.num_experts = static_cast<int>(R.offsets.size(0));
    a.top_k = static_cast<int>(topk);
    a.cols = C;
    a.dtype = to_kernel_dtype(src.scalar_type(), "hidden");
    LIGER_CUDA_CHECK(k::moe_gather(a, stream()));
    return dst;
  }

  // Row r of a times w[expert of r]; rows past the routed ones are left unwritten (never read).
  static at::Tensor gmm(const at::Tensor& a, const at::Tensor& w, const MoeRouting& R) {
    if (grouped_ok(a, w)) return at::_grouped_mm(a, w, R.offsets);
    at::Tensor out = at::empty({a.size(0), w.size(2)}, a.options());
    const auto& offs = host_offsets(R);
    int64_t begin = 0;
    for (int64_t e = 0; e < static_cast<int64_t>(offs.size()); ++e) {
      const int64_t end = offs[e];
      if (end > begin) {
        at::Tensor o = out.slice(0, begin, end);
        at::mm_out(o, a.slice(0, begin, end), w[e]);
      }
      begin = end;
    }
    return out;
  }

  // Per expert at[:, rows_e] @ b[rows_e], zero for experts without rows.
  static at::Tensor gmm_wgrad(const at::Tensor& at_, const at::Tensor& b, const MoeRouting& R) {
    const int64_t E = R.offsets.size(0);
    at::Tensor out;
    if (grouped_ok(at_, b)) {
      out = at::_grouped_mm(at_, b, R.offsets);
    } else {
      out = at::empty({E, at_.size(0), b.size(1)}, b.options());
      const auto& offs = host_offsets(R);
      int64_t begin = 0;
      for (int64_t e = 0; e < E; ++e) {
        const int64_t end = offs[e];
        if (end > begin) {
          at::Tensor o = out[e];
          at::mm_out(o, at_.slice(1, begin, end), b.slice(0, begin, end));
        }
        begin = end;
      }
    }
    LIGER_CHECK_ARG(out.is_contiguous(), "gate_up_proj", "internal: expected a dense weight gradient");
    LIGER_CUDA_CHECK(k::moe_zero_empty(out.data_ptr(), out.size(1) * out.size(2), static_cast<int>(E),
                                       R.offsets.data_ptr<int32_t>(),
                                       to_kernel_dtype(out.scalar_type(), "hidden"), stream()));
    return out;
  }

  static k::MoeActArgs act_args(const at::Tensor& gu, const at::Tensor& bias, const MoeRouting& R,
                                const MoeOpts& o) {
    k::MoeActArgs a{};
    a.gate_up = gu.data_ptr();
    a.gu_stride = gu.stride(0);
    a.gu_bias = bias.defined() ? bias.data_ptr() : nullptr;
    a.sorted_expert = R.sorted_expert.data_ptr<int32_t>();
    a.sorted_slot = R.sorted_slot.data_ptr<int32_t>();
    a.num_slots = gu.size(0);
    a.num_experts = static_cast<int>(o.E);
    a.inter = o.I;
    a.interleaved = o.interleaved;
    a.act = static_cast<k::MoeAct>(static_cast<int>(o.act));
    a.alpha = static_cast<float>(o.alpha);
    a.limit = static_cast<float>(o.limit);
    a.dtype = to_kernel_dtype(gu.scalar_type(), "hidden");
    return a;
  }

  static at::Tensor act_fwd(const at::Tensor& gu, const at::Tensor& bias, const MoeRouting& R,
                            const MoeOpts& o) {
    LIGER_CHECK_ARG(gu.stride(1) == 1, "gate_up", "internal: expected unit column stride");
    const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
    at::Tensor out = at::empty({gu.size(0), o.I}, gu.options());
    k::MoeActArgs a = act_args(gu, b, R, o);
    a.act_out = out.data_ptr();
    LIGER_CUDA_CHECK(k::moe_act_fwd(a, stream()));
    return out;
  }

  static void act_bwd(const at::Tensor& gu_, const at::Tensor& bias, const at::Tensor& d_act,
                      const at::Tensor& w32, const at::Tensor& grows, const at::Tensor& down_bias,
                      const MoeRouting& R, const MoeOpts& o, at::Tensor& d_gu, at::Tensor& act_w,
                      at::Tensor& dw32) {
    const at::Tensor gu = gu_.stride(1) == 1 ? gu_ : gu_.contiguous();
    const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
    const at::Tensor db = down_bias.defined() ? down_bias.contiguous() : down_bias;
    const int64_t S = gu.size(0);
    d_gu = at::empty({S, 2 * o.I}, gu.options());
    act_w = at::empty({S, o.I}, gu.options());
    dw32 = at::empty({S}, w32.options());
    k::MoeActArgs a = act_args(gu, b, R, o);
    a.d_act = d_act.data_ptr();
    a.da_stride = d_act.stride(0);
    a.weights = w32.data_ptr<float>();
    a.g_rows = grows.data_ptr();
    a.down_bias = db.defined() ? db.data_ptr() : nullptr;
    a.hidden = grows.size(1);
    a.d_gate_up = d_gu.data_ptr();
    a.act_w = act_w.data_ptr();
    a.d_weights = dw32.data_ptr<float>();
    LIGER_CUDA_CHECK(k::moe_act_bwd(a, stream()));
  }

  static at::Tensor combine(const at::Tensor& y, const at::Tensor& w32, const at::Tensor& bias,
                            const MoeRouting& R, int64_t T, int64_t topk) {
    const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
    at::Tensor out = at::empty({T, y.size(1)}, y.options());
    k::MoeCombineArgs a{};
    a.y = y.data_ptr();
    a.y_stride = y.stride(0);
    a.weights = w32.defined() ? w32.data_ptr<float>() : nullptr;
    a.bias = b.defined() ? b.data_ptr() : nullptr;
    a.slot_row = R.slot_row.data_ptr<int32_t>();
    a.sorted_expert = R.sorted_expert.data_ptr<int32_t>();
    a.out = out.data_ptr();
    a.num_tokens = T;
    a.top_k = static_cast<int>(topk);
    a.num_experts = static_cast<int>(R.offsets.size(0));
    a.cols = y.size(1);
    a.dtype = to_kernel_dtype(y.scalar_type(), "hidden");
    LIGER_CUDA_CHECK(k::moe_combine(a, stream()));
    return out;
  }

  static at::Tensor segsum(const at::Tensor& m, const at::Tensor& w32, const MoeRouting& R) {
    const int64_t E = R.offsets.size(0);
    at::Tensor out = at::empty({E, m.size(1)}, m.options());
    k::MoeSegSumArgs a{};
    a.m = m.data_ptr();
    a.m_stride = m.stride(0);
    a.weights = w32.defined() ? w32.data_ptr<float>() : nullptr;
    a.sorted_slot = R.sorted_slot.data_ptr<int32_t>();
    a.offsets = R.offsets.data_ptr<int32_t>();
    a.num_experts = static_cast<int>(E);
    a.cols = m.size(1);
    a.out = out.data_ptr();
    a.dtype = to_kernel_dtype(m.scalar_type(), "hidden");
    LIGER_CUDA_CHECK(k::moe_segment_sum(a, stream()));
    return out;
  }
};

MoeFwdOut moe_experts_fwd_cuda(const at::Tensor& hidden, const at::Tensor& top_k_index,
                               const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                               const at::Tensor& down_proj, const c10::optional<at::Tensor>& gate_up_bias,
                               const c10::optional<at::Tensor>& down_bias, c10::string_view activation,
                               bool transposed, bool interleaved, double alpha, double limit) {
  return moe_experts_fwd_flow<CudaBackend>(
      hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias,
      std::string_view(activation.data(), activation.size()), transposed, interleaved, alpha, limit);
}

MoeBwdOut moe_experts_bwd_cuda(const at::Tensor& grad_out, const at::Tensor& hidden,
                               const at::Tensor& top_k_weights, const at::Tensor& gate_up_proj,
                               const at::Tensor& down_proj, const c10::optional<at::Tensor>& gate_up_bias,
                               const c10::optional<at::Tensor>& down_bias, const at::Tensor& gate_up,
                               const at::Tensor& offsets, const at::Tensor& sorted_slot,
                               const at::Tensor& slot_row, const at::Tensor& sorted_expert,
                               c10::string_view activation, bool transposed, bool interleaved, double alpha,
                               double limit, bool compute_dx, bool compute_experts) {
  return moe_experts_bwd_flow<CudaBackend>(
      grad_out, hidden, top_k_weights, gate_up_proj, down_proj, gate_up_bias, down_bias, gate_up, offsets,
      sorted_slot, slot_row, sorted_expert, std::string_view(activation.data(), activation.size()),
      transposed, interleaved, alpha, limit, compute_dx, compute_experts);
}

}  // namespace moe_experts_cuda_impl

TORCH_LIBRARY_IMPL(liger, CUDA, m) {
  using namespace moe_experts_cuda_impl;  // NOLINT(build/namespaces)
  m.impl("moe_experts_fwd", &moe_experts_fwd_cuda);
  m.impl("moe_experts_bwd", &moe_experts_bwd_cuda);
}

}  // namespace liger_cpp
