// Probe (not part of the extension), beside dw_gemm_algos.cu / dw_gemm_sweep.cu: can a
// warp-specialized Hopper GEMM whose epilogue loads C (dW's old values) by TMA while another
// warpgroup runs the next tile's K loop (CUTLASS 3's ping-pong and cooperative kernels, from the
// `nvidia-cutlass` wheel's headers) beat cuBLASLt's best for the chunk loops' accumulating dW GEMM,
// dW[V, H] += G[R, V]^T X[R, H] (bf16, float32 accumulation, beta 1), at Gemma's 512-row chunks?
// Prints each kernel's median time beside the extension's cuBLASLt rule (tile 128 x 160) and the
// largest difference of its result from cuBLASLt's from the same starting dW.
//   pip install --target /tmp/cutlass --no-deps nvidia-cutlass
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -I/tmp/cutlass/cutlass_library/source/include \
//     -I/tmp/cutlass/cutlass_library/source/tools/util/include -o /tmp/dw_gemm_cutlass \
//     scripts/probes/dw_gemm_cutlass.cu -lcublasLt
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include "dw_gemm_probe.cuh"

// M = V, N = H, K = R. A (M x K) = G^T: G row-major [R, V] is A column-major (M contiguous);
// B (K x N) = X row-major [R, H] (N contiguous); C = D = dW row-major [V, H].
template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule>
struct DwCutlass {
  using E = cutlass::bfloat16_t;
  using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, E, cutlass::layout::RowMajor, 8, E,
      cutlass::layout::RowMajor, 8, EpilogueSchedule>::CollectiveOp;
  using Main = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, cutlass::layout::ColumnMajor, 8, E,
      cutlass::layout::RowMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epi::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Main, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  Gemm gemm;
  void* ws = nullptr;

  bool init(const DwProblem& p) {
    const int M = p.sh.V, N = p.sh.H, K = p.sh.R;
    auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(M, K, 1));
    auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(N, K, 1));
    auto sc = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, cute::make_shape(M, N, 1));
    auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(M, N, 1));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {M, N, K, 1},
                                  {static_cast<E*>(p.G), sa, static_cast<E*>(p.X), sb},
                                  {{1.f, 1.f}, static_cast<E*>(p.W), sc, static_cast<E*>(p.W), sd},
                                  hw};
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return false;
    const size_t n = Gemm::get_workspace_size(args);
    if (n) CK(cudaMalloc(&ws, n));
    return gemm.initialize(args, ws) == cutlass::Status::kSuccess;
  }
  bool run() { return gemm.run() == cutlass::Status::kSuccess; }
};

using PingPong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpiPP = cutlass::epilogue::TmaWarpSpecialized;
using EpiCoop = cutlass::epilogue::TmaWarpSpecializedCooperative;

template <class G>
void probe(const char* name, const RuleCase& rc, LtEnv& env) {
  G g;
  rc.reset();
  if (!g.init(rc.p) || !g.run()) {
    std::printf("  %-34s cannot run this shape\n", name);
    return;
  }
  const float d = env.diff(rc.p.W, rc.ref, rc.nW);
  const float ms = median_ms_of([&] { return g.run(); }, 3, 15);
  std::printf("  %-34s %.3f ms (%.0f TFLOP/s), max |diff| from cuBLASLt %.3g\n", name, ms, rc.p.gflop() / ms,
              d);
  std::fflush(stdout);
  if (g.ws) cudaFree(g.ws);
}

int main() {
  const Shape shapes[] = {{"gemma2 FLCE R512", 512, 256000, 2304},
                          {"gemma3 FLCE R512", 512, 262144, 2304},
                          {"llama3 FLCE R1024", 1024, 128256, 4096},
                          {"jsd student R1024", 1024, 151936, 2048}};
  LtEnv env;
  for (const Shape& sh : shapes) {
    const RuleCase rc(sh, env);
    std::printf("%s (R %d, V %d, H %d):\n", sh.name, sh.R, sh.V, sh.H);
    std::printf("  %-34s %.3f ms\n", "cuBLASLt rule (128x160, 64xAUTO)", rc.rule_ms(env, 1.f));
    std::printf("  %-34s %.3f ms\n", "cuBLASLt heuristic first", rc.rule_ms(env, 1.f, true));
    std::fflush(stdout);
    probe<DwCutlass<cute::Shape<cute::_128, cute::_128, cute::_64>, cute::Shape<cute::_1, cute::_1, cute::_1>,
                    PingPong, EpiPP>>("pingpong 128x128x64 c1x1", rc, env);
    probe<DwCutlass<cute::Shape<cute::_128, cute::_128, cute::_64>, cute::Shape<cute::_2, cute::_1, cute::_1>,
                    PingPong, EpiPP>>("pingpong 128x128x64 c2x1", rc, env);
    probe<DwCutlass<cute::Shape<cute::_128, cute::_256, cute::_64>, cute::Shape<cute::_1, cute::_1, cute::_1>,
                    Coop, EpiCoop>>("cooperative 128x256x64 c1x1", rc, env);
    probe<DwCutlass<cute::Shape<cute::_256, cute::_128, cute::_64>, cute::Shape<cute::_2, cute::_1, cute::_1>,
                    Coop, EpiCoop>>("cooperative 256x128x64 c2x1", rc, env);
  }
  std::printf("done\n");
  return 0;
}
