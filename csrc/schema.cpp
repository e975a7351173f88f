// The one schema file: every op of the `liger` library is declared here, with
// its math, shapes and dtypes. Implementations register per device in
// csrc/aten/cpu/*.cpp and csrc/aten/cuda/*.cpp (composites:
// csrc/aten/composite, C++ autograd: csrc/aten/autograd). Importing liger_cpp._C runs these
// static registrations; there is no pybind11 module (abi3-compatible).
#include <Python.h>
#include <torch/library.h>

#include <string>

#include "aten/checks/cross_entropy_core.h"
#include "build_info.h"
#include "plan_override.h"

TORCH_LIBRARY(liger, m) {
  // Which backends and CUDA architectures this build contains.
  m.def("build_info() -> str", &liger_cpp::build_info);
  // Developer override of the launch plans (tests, benchmarks): "key=value,..." forces a plan
  // choice, "" restores the defaults; returns the previous spec. Keys: kernels/common/plan_override.h.
  m.def("_set_plan_override(str spec) -> str", &liger_cpp::set_plan_override);
  // The opt-in check of class-index targets on CUDA (liger_cpp.set_check_targets): when on, the
  // cross-entropy family's target check synchronises with the host and raises a ValueError naming
  // the first bad position and value (the CPU path always does); off (default), a bad target is
  // an asynchronous device-side assertion. Returns the previous setting.
  m.def("_set_check_targets(bool enabled) -> bool", &liger_cpp::set_check_targets);

  // RMSNorm forward. X: (..., N) float32/float16/bfloat16 (float64 on CPU),
  // unit last stride; W: (N,) of X's dtype or float32, or None.
  //   rstd = 1 / sqrt(mean(x^2) + eps), saved in float32 (RSTD: X.shape[:-1])
  //   llama: Y = (x * rstd).to(X.dtype) * (W + offset), Y dtype promote(X, W)
  //   gemma: Y = (x * rstd) * (W + offset) in float32, Y dtype X's
  //   none : as gemma (no intermediate casts; float32 math)
  // in_place only tells the registered autograd formula that it may write dX
  // into dY's storage (through rms_norm_bwd_, visibly to autograd).
  m.def(
      "rms_norm_fwd(Tensor X, Tensor? W, float eps, float offset=0., str casting_mode=\"llama\", "
      "bool in_place=False) -> (Tensor Y, Tensor RSTD)");
  // RMSNorm backward: dX (X's shape and dtype) and dW ((N,) in W's dtype,
  // summed over rows in float32, deterministically; empty when W is None or
  // compute_dw is False).
  m.def(
      "rms_norm_bwd(Tensor dY, Tensor X, Tensor? W, Tensor RSTD, float offset=0., "
      "str casting_mode=\"llama\", bool compute_dw=True) -> (Tensor dX, Tensor dW)");
  // As rms_norm_bwd, but dX is written into dY (which must be dense and of X's
  // dtype); returns dW only.
  m.def(
      "rms_norm_bwd_(Tensor(a!) dY, Tensor X, Tensor? W, Tensor RSTD, float offset=0., "
      "str casting_mode=\"llama\", bool compute_dw=True) -> Tensor dW");

  // ---- Gated linear units (Liger's LigerSiLUMulFunction / LigerGELUMulFunction) ----
  // a, b: same shape (..., F), same dtype float32/float16/bfloat16 (float64 on
  // CPU), unit last stride (rows may be strided, e.g. gate_up.chunk(2, -1)).
  // Math in float32 (float64 for float64), one rounding to the output dtype.
  // in_place only tells the registered autograd formula that its backward may
  // write da, db into a, b (through *_bwd_, visibly to autograd) when safe.
  // SwiGLU: c = silu(a) * b (HF LlamaMLP's act_fn(gate) * up). c: a's shape, contiguous.
  m.def("swiglu_fwd(Tensor a, Tensor b, bool in_place=False) -> Tensor c");
  // SwiGLU backward, the activation recomputed from a:
  //   da = dc * b * silu'(a), db = dc * silu(a). dc: a's shape and dtype, any strides.
  m.def("swiglu_bwd(Tensor dc, Tensor a, Tensor b) -> (Tensor da, Tensor db)");
  // As swiglu_bwd, but da is written into a and db into b (both contiguous, not overlapping).
  m.def("swiglu_bwd_(Tensor dc, Tensor(a!) a, Tensor(b!) b) -> ()");
  // GeGLU: c = gelu(a, approximate) * b; approximate "tanh" (Liger's, HF
  // gelu_pytorch_tanh) or "none" (exact erf GELU).
  m.def("geglu_fwd(Tensor a, Tensor b, str approximate=\"tanh\", bool in_place=False) -> Tensor c");
  m.def("geglu_bwd(Tensor dc, Tensor a, Tensor b, str approximate=\"tanh\") -> (Tensor da, Tensor db)");
  m.def("geglu_bwd_(Tensor dc, Tensor(a!) a, Tensor(b!) b, str approximate=\"tanh\") -> ()");

  // GLU MLP (HF LlamaMLP / Gemma's GeGLU MLP with bias-free projections), one op for the three
  // GEMMs and the gated activation, so that an eager step pays one call and one autograd node for
  // the whole MLP instead of about sixty dispatcher calls and fifteen nodes:
  //   a = x W_gate^T, b = x W_up^T (the rows of x: (M, H); a, b: (M, I)),
  //   c = act(a) * b (as swiglu_fwd / geglu_fwd: float32 math, one rounding),
  //   y = c W_down^T, y: x.shape[:-1] + (W_down.size(0),).
  // x: (..., H); w_gate, w_up: (I, H); w_down: (O, I); one float dtype (float64 on CPU). The GEMMs
  // are ATen's (cuBLAS), the same calls nn.Linear makes. activation: "silu" (SwiGLU), "gelu_tanh"
  // or "gelu" (GeGLU with the tanh approximation or erf). The differentiable op (autograd in C++):
  // in_place lets its backward write da, db into its own a, b (through glu_mlp_bwd_, visibly to
  // autograd); no tensor the caller holds is ever written.
  m.def(
      "glu_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation=\"silu\", "
      "bool in_place=False) -> Tensor y");
  // The same forward, also returning a, b and c for the backward (what glu_mlp's autograd saves).
  m.def(
      "glu_mlp_fwd(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation=\"silu\") -> "
      "(Tensor y, Tensor a, Tensor b, Tensor c)");
  // Its backward from dy (y's shape, x's dtype):
  //   dc = dy W_down, dW_down = dy^T c, (da, db) = the GLU backward of (dc, a, b),
  //   dx = da W_gate + db W_up (one GEMM accumulating into the other's result), dW_gate = da^T x,
  //   dW_up = db^T x.
  // output_mask = which of (dx, dW_gate, dW_up, dW_down) to compute; the others are (0,) tensors.
  m.def(
      "glu_mlp_bwd(Tensor dy, Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, Tensor a, Tensor b, "
      "Tensor c, str activation=\"silu\", bool[4] output_mask=[True, True, True, True]) -> "
      "(Tensor dx, Tensor dw_gate, Tensor dw_up, Tensor dw_down)");
  // As glu_mlp_bwd, but dc is written into c (after dW_down has read it), da into a and db into b
  // (contiguous, not overlapping): no (M, I) buffer at all, as the GLU ops' in-place backward.
  m.def(
      "glu_mlp_bwd_(Tensor dy, Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, Tensor(a!) a, "
      "Tensor(b!) b, Tensor(c!) c, str activation=\"silu\", bool[4] output_mask=[True, True, True, True]) -> "
      "(Tensor dx, Tensor dw_gate, Tensor dw_up, Tensor dw_down)");
  // The GLU MLP over `shards` shards of x's rows (ceil(M / shards) rows each, as torch.chunk),
  // keeping nothing of a shard: the tiled MLP (LigerTiledSwiGLUMLP / LigerTiledGEGLUMLP with plain
  // projections), for long sequences. y is glu_mlp's (the same GEMMs on each shard's rows); the
  // differentiable op saves x and the weights only. shards >= 1.
  m.def(
      "glu_mlp_tiled(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation=\"silu\", "
      "int shards=1) -> Tensor y");
  // Its backward: each shard's a, b and c computed again, then glu_mlp's backward of that shard
  // (in place in its own a, b, c); dx row by row; each weight gradient summed over the shards in
  // float32 (16-bit weights: cuBLAS accumulating into a float32 C, one rounding at the end), in the
  // weights' dtype otherwise. output_mask as glu_mlp_bwd's.
  m.def(
      "glu_mlp_tiled_bwd(Tensor dy, Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, "
      "str activation=\"silu\", int shards=1, bool[4] output_mask=[True, True, True, True]) -> "
      "(Tensor dx, Tensor dw_gate, Tensor dw_up, Tensor dw_down)");

  // FusedAddRMSNorm forward: S = X + R (rounded to X's dtype), then RMSNorm of
  // S exactly as rms_norm_fwd (same W, casting modes, offset, Y dtype).
  // R: X's shape and dtype. Returns Y, S (X's shape and dtype, contiguous) and
  // RSTD (float32, X.shape[:-1]). in_place is accepted for Liger's signature;
  // the backward always allocates dS.
  m.def(
      "fused_add_rms_norm_fwd(Tensor X, Tensor R, Tensor? W, float eps, float offset=0., "
      "str casting_mode=\"llama\", bool in_place=False) -> (Tensor Y, Tensor S, Tensor RSTD)");
  // FusedAddRMSNorm backward: dS = dS_out + rms_norm_bwd(dY, S, W, RSTD).dX,
  // summed in float32 and rounded once; dS_out (gradient reaching S directly)
  // may be None. dS is both dX and dR. dW as rms_norm_bwd's.
  m.def(
      "fused_add_rms_norm_bwd(Tensor dY, Tensor? dS_out, Tensor S, Tensor? W, Tensor RSTD, float offset=0., "
      "str casting_mode=\"llama\", bool compute_dw=True) -> (Tensor dS, Tensor dW)");

  // LayerNorm forward over the last dimension. X: (..., N) float32/float16/
  // bfloat16 (float64 on CPU), unit last stride; W, B: (N,) or None, of X's
  // dtype or float32 (B of W's dtype when both are given).
  //   mean = mean(x), rstd = 1 / sqrt(mean((x - mean)^2) + eps) (two passes),
  //   both float32 (float64 for float64 X), shape X.shape[:-1]
  //   Y = (x - mean) * rstd * W + B in float32, Y of X's dtype
  m.def("layer_norm_fwd(Tensor X, Tensor? W, Tensor? B, float eps) -> (Tensor Y, Tensor MEAN, Tensor RSTD)");
  // LayerNorm backward, with xhat = (x - mean) * rstd and g = dY * W:
  //   dX = rstd * (g - mean(g) - xhat * mean(g * xhat))
  //   dW = sum_rows dY * xhat (W's dtype), dB = sum_rows dY (W's dtype; without
  //   W, float32 for 16-bit X (the bias may be wider than X), else X's), both
  //   summed in float32, deterministically; each empty when not wanted (or W
  //   absent for dW).
  m.def(
      "layer_norm_bwd(Tensor dY, Tensor X, Tensor? W, Tensor MEAN, Tensor RSTD, bool compute_dw=True, "
      "bool compute_db=True) -> (Tensor dX, Tensor dW, Tensor dB)");

  // ---- Cross entropy on given logits (Liger's LigerCrossEntropyFunction) ----
  // logits: (..., V) float32/float16/bfloat16 (float64 on CPU), unit last
  // stride; target: logits.shape[:-1], int64 (int32 accepted, converted);
  // weight: (V,) class weights (any float dtype, used as float32) or None.
  // Per row r with y = target[r] (math: csrc/aten/checks/cross_entropy_core.h), x the
  // row after softcap (x <- softcap * tanh(x / softcap) when softcap > 0):
  //   ce[r] = (1 - ls) * w_y * (lse - x_y) + (ls / V) * sum_j w_j * (lse - x_j),
  //   z[r]  = lse_square_scale * lse^2; both 0 for y == ignore_index.
  // reduction "none": loss = ce + z and z_loss = z, shaped like target;
  //   "sum": sums; "mean": sum(ce) / sum_{valid} w_y (N without weights) +
  //   sum(z) / N, with N the count of targets != ignore_index; 0 when N = 0.
  // loss and z_loss are float32. dlogits (compute_grad; else shape (0,)) is the
  // gradient of loss (z included) for grad_output 1, in logits' shape and
  // dtype, contiguous, computed in the same pass. argmax (return_argmax; else
  // (0,)): int64, target's shape, the first index of each row's max after
  // softcap, -1 for ignored rows. Targets outside [0, V) that are not
  // ignore_index raise (on CUDA through an asynchronous device assertion).
  m.def(
      "cross_entropy_fwd(Tensor logits, Tensor target, Tensor? weight=None, int ignore_index=-100, "
      "float label_smoothing=0., float lse_square_scale=0., float softcap=0., str reduction=\"mean\", "
      "bool compute_grad=True, bool return_argmax=False) -> (Tensor loss, Tensor z_loss, Tensor dlogits, "
      "Tensor argmax)");
  // As cross_entropy_fwd with compute_grad=True, but the gradient is written
  // into logits (whose leading dimensions must flatten into rows without a
  // copy); returns (loss, z_loss, argmax).
  m.def(
      "cross_entropy_fwd_(Tensor(a!) logits, Tensor target, Tensor? weight=None, int ignore_index=-100, "
      "float label_smoothing=0., float lse_square_scale=0., float softcap=0., str reduction=\"mean\", "
      "bool return_argmax=False) -> (Tensor loss, Tensor z_loss, Tensor argmax)");
  // The backward of the two above: grad[r, :] *= grad_output[r] in float32,
  // one rounding. grad: (..., V) with rows = numel / V; grad_output: any float
  // dtype, 1 element (reduced loss) or `rows` elements (reduction "none").
  m.def("cross_entropy_scale_grad_(Tensor(a!) grad, Tensor grad_output) -> ()");

  // ---- Internal ----
  // The cross-entropy row step itself (csrc/aten/checks/cross_entropy_core.h), for
  // tests and benchmarks of the kernels: per-row CE loss, z-loss and argmax
  // (float32, float32, int64) and, with compute_grad, the gradient (logits'
  // dtype; empty otherwise), scaled per row by ce_scale / z_scale (float32, 1
  // or rows elements). Not part of the public API.
  m.def(
      "_ce_rows(Tensor logits, Tensor target, Tensor? weight, Tensor ce_scale, Tensor z_scale, "
      "int ignore_index, float label_smoothing, float lse_square_scale, float softcap, bool compute_grad) "
      "-> (Tensor loss, Tensor z_loss, Tensor argmax, Tensor dlogits)");

  // ---- Rotary position embedding (HF rotate-half; Liger's LigerRopeFunction) ----
  // q: (B, Hq, S, D), k: (B, Hk, S, D) for unsqueeze_dim=1 (HF's layout after
  // .transpose(1, 2)), or (B, S, H, D) for unsqueeze_dim=2; same dtype
  // float32/float16/bfloat16 (float64 on CPU); D even; any strides with a unit
  // last stride (HF's strided views are read in place, never copied).
  // cos, sin: (S, D), (1, S, D) (broadcast over the batch) or (B, S, D),
  // float32 or q's dtype (the same for both). With h = D/2, for each row x:
  //   out[j]   = x[j]   cos[j]   - x[j+h] sin[j]
  //   out[j+h] = x[j+h] cos[j+h] + x[j]   sin[j+h]        (0 <= j < h)
  // i.e. HF's x * cos + rotate_half(x) * sin for any cos/sin (not only
  // cat(f, f)); float32 math (float64 for float64), one rounding. Outputs: q's
  // and k's dtype, allocated like the inputs (empty_like: a dense input's
  // strides are kept). Out of place.
  m.def(
      "rope_fwd(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim=1) -> "
      "(Tensor q_out, Tensor k_out)");
  // RoPE backward, the transposed rotation (gradients of the outputs in, of
  // q and k out; cos/sin get no gradient here: rope_fwd's and mrope_fwd's
  // autograd, with the tables' gradients, is csrc/aten/autograd/rope_autograd.cpp):
  //   dx[j]   = g[j]   cos[j]   + g[j+h] sin[j+h]
  //   dx[j+h] = g[j+h] cos[j+h] - g[j]   sin[j]
  // dq, dk allocated like dq_out, dk_out.
  m.def(
      "rope_bwd(Tensor dq_out, Tensor dk_out, Tensor cos, Tensor sin, int unsqueeze_dim=1) -> "
      "(Tensor dq, Tensor dk)");
  // Attention input projections with RoPE (HF LlamaAttention's q/k/v_proj, view, transpose and
  // apply_rotary_pos_emb), one op and one autograd node for the host-bound step:
  //   q = rope((x W_q^T + b_q) viewed (B, S, Hq, D) and transposed to (B, Hq, S, D)), k likewise
  //   with W_k, b_k (Hk heads), v = x W_v^T + b_v viewed and transposed, not rotated.
  // x: (B, S, H); w_q: (Hq D, H); w_k, w_v: (Hk D, H); biases (rows,) or None (Qwen2's are
  // given); one float dtype (float64 on CPU); D = head_dim, even. cos, sin: as rope_fwd's (full
  // rotary: width D), no gradient. The GEMMs are nn.Linear's mm / addmm calls and the rotation
  // rope_fwd's kernel, so q, k, v are bitwise HF's with liger_cpp's RoPE; outputs
  // (B, Heads, S, D) with the (B, S, Heads, D) memory of HF's views.
  // q / k norms (Qwen3, Gemma 3, OLMo 2 / 3; both or neither, x's dtype): before RoPE,
  // rms_norm_fwd(rows, n_q, norm_eps, norm_offset, norm_casting) of the projection, whose rows are
  // the heads (n_q of D elements: Qwen3, Gemma 3) or the whole projection (Hq D elements: OLMo).
  m.def(
      "qkv_rope(Tensor x, Tensor w_q, Tensor w_k, Tensor w_v, Tensor cos, Tensor sin, int head_dim, "
      "Tensor? b_q=None, Tensor? b_k=None, Tensor? b_v=None, Tensor? n_q=None, Tensor? n_k=None, "
      "float norm_eps=1e-6, float norm_offset=0., str norm_casting=\"llama\") -> (Tensor q, Tensor k, Tensor "
      "v)");
  // Internal (the autograd node's forward with q / k norms): also the projections before the norms
  // (q_pre (B S, Hq D), k_pre) and the norms' RSTD, which the backward reads.
  m.def(
      "qkv_rope_fwd(Tensor x, Tensor w_q, Tensor w_k, Tensor w_v, Tensor cos, Tensor sin, int head_dim, "
      "Tensor? b_q, Tensor? b_k, Tensor? b_v, Tensor n_q, Tensor n_k, float norm_eps, float norm_offset, "
      "str norm_casting) -> (Tensor q, Tensor k, Tensor v, Tensor q_pre, Tensor k_pre, Tensor rstd_q, "
      "Tensor rstd_k)");
  // Its backward: (dq', dk') = rope_bwd(dq, dk) (then, with norms, through rms_norm_bwd on the
  // saved q_pre / k_pre and RSTD, which gives dn_q, dn_k), rows of (dq', dk', dv) as (B S, Heads D)
  // matrices G_q, G_k, G_v; dW_q = G_q^T x, dW_k = G_k^T x, dW_v = G_v^T x, db_* = the column
  // sums of G_*, and dx = G_q W_q + G_k W_k + G_v W_v (one GEMM accumulating into another's).
  // output_mask = which of (dx, dW_q, dW_k, dW_v, db_q, db_k, db_v, dn_q, dn_k) to compute; the
  // others are (0,) tensors.
  m.def(
      "qkv_rope_bwd(Tensor dq, Tensor dk, Tensor dv, Tensor x, Tensor w_q, Tensor w_k, Tensor w_v, "
      "Tensor cos, Tensor sin, int head_dim, bool[9] output_mask=[True, True, True, True, False, False, "
      "False, False, False], Tensor? q_pre=None, Tensor? k_pre=None, Tensor? n_q=None, Tensor? n_k=None, "
      "Tensor? rstd_q=None, Tensor? rstd_k=None, float norm_offset=0., str norm_casting=\"llama\") -> "
      "(Tensor dx, Tensor dw_q, Tensor dw_k, Tensor dw_v, Tensor db_q, Tensor db_k, Tensor db_v, "
      "Tensor dn_q, Tensor dn_k)");
  // Qwen2-VL multimodal RoPE: cos, sin (3, B, S, D) (or (3, 1, S, D)), planes
  // temporal/height/width; mrope_section = [t, h, w], t + h + w = D/2. Column
  // j < D/2 and column j + D/2 both use plane 0 for j < t, 1 for t <= j < t+h,
  // 2 otherwise (HF's apply_multimodal_rotary_pos_emb: cos split by
  // mrope_section * 2, chunk i from plane i % 3), then the RoPE formula above.
  m.def(
      "mrope_fwd(Tensor q, Tensor k, Tensor cos, Tensor sin, int[] mrope_section, int unsqueeze_dim=1) -> "
      "(Tensor q_out, Tensor k_out)");
  m.def(
      "mrope_bwd(Tensor dq_out, Tensor dk_out, Tensor cos, Tensor sin, int[] mrope_section, "
      "int unsqueeze_dim=1) -> (Tensor dq, Tensor dk)");

  // ---- Fused linear cross entropy (Liger's LigerFusedLinearCrossEntropyFunction) ----
  // CE of logits = logit_scale * (input @ weight^T + bias) without holding the
  // (rows x V) logits: chunks of `chunk_rows` token rows (0: automatic: as many
  // rows as a chunk budget of logits allows, chunk_budget_mib MiB when given,
  // else the environment's LIGER_CPP_FLCE_CHUNK_MB (read once), else the larger
  // of Liger's chunk rows and H / 4 within 64..251 MiB) through one reused
  // logits buffer (csrc/aten/composite/fused_linear_cross_entropy.cpp).
  // input: (..., H) float32/float16/bfloat16 (float64 on CPU), unit last
  // stride, M = numel / H rows; weight: (V, H) and bias: (V,) or None, input's
  // dtype; target: M class indices int64 (or int32), any shape; ce_weight: (V,)
  // class weights (any float dtype, used in float32) or None. Per-row math
  // (softcap > 0: x <- softcap * tanh(x / softcap); label smoothing, z-loss
  // lse_square_scale * lse^2, ignore_index) as the CE row step
  // (csrc/aten/checks/cross_entropy_core.h); reductions as Liger's: mean divides the CE
  // part by the sum of ce_weight[y] over non-ignored rows (their count without
  // ce_weight) and the z part by the count; 0, not NaN, when all are ignored.
  // use_token_scaling (Liger's; TRL's DFT loss): each row's CE and z-loss times
  // p_y = softmax(logits)[y] (the scaled, softcapped logits; no smoothing or
  // class weights in p_y), detached: the gradient is p_y times the unscaled one.
  // Returns, all float32 unless stated:
  //   loss: () for mean/sum, target's shape for none (CE + z-loss per row, 0 for ignored rows)
  //   z_loss: loss's shape if return_z_loss, else (0,)
  //   token_accuracy: argmax == target over non-ignored rows, () mean for mean/sum
  //     (0 when none count), per row (target's shape) for none; (0,) unless requested
  //   predicted_tokens: int64 argmax of the (scaled, softcapped) logits, -1 for
  //     ignored rows, target's shape; (0,) unless requested
  //   dX (input's shape and dtype), dW (weight's), dB (bias's): the gradient of
  //     loss.sum() (the reduced loss for mean/sum) w.r.t. each, when its compute_*
  //     flag is set (dB only with a bias), else (0,). dW accumulates over chunks
  //     in weight's dtype inside the GEMM (one rounding per chunk), or in float32
  //     with accum_dtype=float32; dB in float32.
  m.def(
      "fused_linear_cross_entropy_fwd(Tensor input, Tensor weight, Tensor target, Tensor? bias=None, "
      "Tensor? ce_weight=None, int ignore_index=-100, float lse_square_scale=0., float label_smoothing=0., "
      "str reduction=\"mean\", float softcap=0., float logit_scale=1., bool return_z_loss=False, "
      "bool return_token_accuracy=False, bool return_predicted_tokens=False, bool compute_dx=False, "
      "bool compute_dw=False, bool compute_db=False, ScalarType? accum_dtype=None, int chunk_rows=0, "
      "bool use_token_scaling=False, float? chunk_budget_mib=None) -> "
      "(Tensor loss, Tensor z_loss, Tensor token_accuracy, Tensor predicted_tokens, Tensor dX, Tensor dW, "
      "Tensor dB)");
  // Gradients of sum(grad_loss * loss) (reduction none: grad_loss has one
  // element per row) or grad_loss * loss (mean / sum: one element), by rerunning
  // the chunk loop with grad_loss folded into each row's dlogits before the
  // GEMMs sum over rows. Arguments and dtypes as fused_linear_cross_entropy_fwd.
  m.def(
      "fused_linear_cross_entropy_bwd(Tensor grad_loss, Tensor input, Tensor weight, Tensor target, "
      "Tensor? bias=None, Tensor? ce_weight=None, int ignore_index=-100, float lse_square_scale=0., "
      "float label_smoothing=0., str reduction=\"mean\", float softcap=0., float logit_scale=1., "
      "bool compute_dx=True, bool compute_dw=True, bool compute_db=True, ScalarType? accum_dtype=None, "
      "int chunk_rows=0, bool use_token_scaling=False, float? chunk_budget_mib=None) -> "
      "(Tensor dX, Tensor dW, Tensor dB)");
  // dX, dW, dB *= grad_output (one element, read as float32; math in float32,
  // one rounding): the backward of a reduced loss whose gradients the forward
  // computed. Contiguous tensors; empty ones are skipped.
  m.def(
      "fused_linear_cross_entropy_scale_(Tensor(a!) dX, Tensor(b!) dW, Tensor(c!) dB, Tensor grad_output) "
      "-> ()");
  // Paired preference losses fused with the lm_head, chunked over pairs
  // (csrc/aten/composite/fused_linear_preference.cpp; Liger's chunked_loss DPO / ORPO /
  // CPO / SimPO). input: (2B, T, H), chosen sequences stacked over rejected;
  // weight (V, H), bias (V,) or None, input's dtype (float32/float16/bfloat16,
  // float64 on CPU); target (2B, T) int64/int32. ref_*: the reference model's
  // hidden states and head (DPO types only), or None (reference logps 0).
  // Per sequence s: logps = sum_t w_t log p(y_t), w_t = [y_t != ignore_index]
  // (divided by the sequence's count with average_log_prob; 0 for none).
  // loss_type: DPO's sigmoid, ipo, hinge, exo_pair, nca_pair, robust, bco_pair,
  // sppo_hard, apo_zero, apo_down, discopop; orpo; cpo; simpo (gamma).
  // loss = sum over pairs of the per-pair loss / B + alpha * nll, nll = mean
  // -log p over the non-ignored chosen tokens (0 unless compute_nll_loss).
  // Returns float32: loss (), chosen_logps (B,), rejected_logps (B,),
  // chosen_logits_mean / rejected_logits_mean () (sum of the half's logits /
  // (B*T*V)), nll_loss (), chosen_rewards (B,), rejected_rewards (B,), extra:
  // (2,) ORPO's (log_odds_ratio, log_odds_chosen), else (0,); and dX, dW, dB
  // (input's shape / weight's / bias's dtype): gradients of loss for the
  // compute_* flags set, else (0,). dW accumulates in weight's dtype (one
  // rounding per chunk half). chunk_size: pairs per chunk.
  m.def(
      "fused_linear_preference_fwd(Tensor input, Tensor weight, Tensor target, Tensor? bias=None, "
      "Tensor? ref_input=None, Tensor? ref_weight=None, Tensor? ref_bias=None, str loss_type=\"sigmoid\", "
      "int ignore_index=-100, float beta=0.1, float alpha=1., bool compute_nll_loss=False, "
      "bool average_log_prob=False, float label_smoothing=0., float gamma=0.5, float discopop_tau=0.05, "
      "int chunk_size=1, bool compute_dx=False, bool compute_dw=False, bool compute_db=False) -> "
      "(Tensor loss, Tensor chosen_logps, Tensor rejected_logps, Tensor chosen_logits_mean, "
      "Tensor rejected_logits_mean, Tensor nll_loss, Tensor chosen_rewards, Tensor rejected_rewards, "
      "Tensor extra, Tensor dX, Tensor dW, Tensor dB)");
  // KTO (unpaired, Liger's LigerFusedLinearKTOLoss) fused with the lm_head,
  // chunked over sequences. input (B, T, H), target (B, T), preference_labels
  // (B,) bool (True: desirable), ref_*: reference model or None, kl: 1 or B
  // floats or None (0). Sequence logps s as fused_linear_preference_fwd;
  // loss = sum_i (1 - sigmoid(beta (s_i - ref_i - kl_i) (+1 / -1))) / B.
  // Returns float32 loss () and the sums over desirable / undesirable sequences
  // of the logps, of all their logits, and of the rewards beta (s - ref); dX,
  // dW, dB as fused_linear_preference_fwd.
  m.def(
      "fused_linear_kto_fwd(Tensor input, Tensor weight, Tensor target, Tensor preference_labels, "
      "Tensor? bias=None, Tensor? ref_input=None, Tensor? ref_weight=None, Tensor? ref_bias=None, "
      "Tensor? kl=None, int ignore_index=-100, float beta=0.1, bool average_log_prob=False, "
      "int chunk_size=1, bool compute_dx=False, bool compute_dw=False, bool compute_db=False) -> "
      "(Tensor loss, Tensor chosen_logps_sum, Tensor rejected_logps_sum, Tensor chosen_logits_sum, "
      "Tensor rejected_logits_sum, Tensor chosen_rewards_sum, Tensor rejected_rewards_sum, Tensor dX, "
      "Tensor dW, Tensor dB)");

  // ---- RL and distillation losses fused with the lm_head (csrc/aten/composite/fused_linear_grpo.cpp,
  // fused_linear_distillation.cpp, fused_linear_logprobs.cpp; C++ autograd in csrc/aten/autograd) ----
  // GRPO and its variants (Liger's LigerFusedLinearGRPOLoss): input (B, T, H), weight (V, H), bias
  // (V,) or None, input's dtype (float32/float16/bfloat16, float64 on CPU); selected_token_ids (B, T)
  // int64/int32 in [0, V); attention_mask (B, T) any dtype (used as float32); advantages (B,).
  // Per-token log-probs at `temperature` of the selected tokens; ref_per_token_logps /
  // old_per_token_logps (B, T) or None; ref_input (B, T, H') with ref_weight (V, H') and ref_bias:
  // the reference model, run chunk by chunk without gradient (not together with
  // ref_per_token_logps); without either the reference is the policy itself (KL 0). vllm_is_ratio
  // (B,), (B, 1) or (B, T); loss_normalizer: the dapo / cispo / vespo divisor (one element; None:
  // max(sum(mask), 1)). loss_type grpo, bnpo, dr_grpo (max_completion_length), dapo, cispo, sapo,
  // luspo, vespo; importance_sampling_level token or sequence (not for cispo, sapo, vespo). The
  // formulas are the composite's file comment (Liger's, which follow TRL's). Returns float32 loss (),
  // kl () (0 when beta == 0), clip_ratio (), per_token_logps (B, T); dX, dW, dB as
  // fused_linear_preference_fwd. chunk_rows: logits rows per chunk (0: automatic).
  m.def(
      "fused_linear_grpo_fwd(Tensor input, Tensor weight, Tensor selected_token_ids, Tensor attention_mask, "
      "Tensor advantages, Tensor? bias=None, Tensor? ref_per_token_logps=None, Tensor? "
      "old_per_token_logps=None, "
      "Tensor? ref_input=None, Tensor? ref_weight=None, Tensor? ref_bias=None, Tensor? vllm_is_ratio=None, "
      "Tensor? loss_normalizer=None, str loss_type=\"dapo\", str importance_sampling_level=\"token\", "
      "float beta=0.04, float epsilon_low=0.2, float epsilon_high=0.2, float? delta=None, float "
      "temperature=1., "
      "int? max_completion_length=None, bool use_bias_correction_kl=False, float sapo_temperature_pos=1., "
      "float sapo_temperature_neg=1.05, float vespo_k_pos=2., float vespo_lambda_pos=3., float "
      "vespo_k_neg=3., "
      "float vespo_lambda_neg=2., int chunk_rows=0, bool compute_dx=False, bool compute_dw=False, "
      "bool compute_db=False) -> (Tensor loss, Tensor kl, Tensor clip_ratio, Tensor per_token_logps, Tensor "
      "dX, "
      "Tensor dW, Tensor dB)");
  // Distillation of a teacher head into a student head (Liger's LigerFusedLinearJSDLoss,
  // LigerFusedLinearCosineSimilarityLoss, LigerFusedLinearJSD): student_input (..., Hs) with
  // student_weight (Vs, Hs), teacher_input (..., Ht) with teacher_weight (Vt, Ht), Vt >= Vs (the
  // student's logits are zero-padded to Vt, as Liger), the same rows; target: one class index per
  // row (in [0, Vs) or ignore_index) or None (every row counts, no hard loss). Per row,
  // s = student logits, t = teacher logits (the teacher without gradient):
  //   hard = lse(s) - s_y (cross entropy at temperature 1, over the student's Vs classes)
  //   loss "jsd": with S = softmax(s / temperature), P = softmax(t / temperature):
  //     beta 0: KL(P || S); beta 1: KL(S || P); else beta KL(P || M) + (1 - beta) KL(S || M),
  //     M = beta P + (1 - beta) S
  //   loss "cosine": beta (1 - cos(s / temperature, t / temperature))
  // n = number of rows whose target is not ignore_index (all rows without target), at least 1;
  // soft_loss = sum over those rows (over every row when mask_soft is False: Liger's cosine) / n,
  // hard_loss = sum over those rows / n, loss = weight_hard_loss * hard + weight_soft_loss * soft.
  // compute_hard=False with weight_hard_loss 0: the hard loss is not computed (hard_loss 0): one
  // exp an element fewer, for callers that do not read it (TRL's GKD).
  // float32 (), (), (); dX, dW, dB (student's) as fused_linear_preference_fwd.
  m.def(
      "fused_linear_distillation_fwd(Tensor student_input, Tensor student_weight, Tensor teacher_input, "
      "Tensor teacher_weight, Tensor? target, Tensor? student_bias=None, Tensor? teacher_bias=None, "
      "str loss=\"jsd\", float weight_hard_loss=0.5, float weight_soft_loss=0.5, float beta=0.5, "
      "int ignore_index=-100, float temperature=1., bool mask_soft=True, int chunk_rows=0, "
      "bool compute_dx=False, bool compute_dw=False, bool compute_db=False, bool compute_hard=True) -> "
      "(Tensor loss, Tensor soft_loss, Tensor hard_loss, Tensor dX, Tensor dW, Tensor dB)");
  // Per-token log-probabilities of the given tokens at a temperature (Liger's
  // LigerFusedLinearScaledCrossEntropy, TRL's selective_log_softmax), without the logits:
  // z = (input @ weight^T + bias) / temperature; logprobs = z_y - lse(z) (float32, target's shape,
  // 0 for ignore_index); entropy = lse(z) - sum_j softmax(z)_j z_j (float32, with
  // return_entropy, else (0,)); stats: float32 (M, 2) per row (max z, log sum exp(z - max)) with
  // return_entropy, for the backward (else (0,)).
  m.def(
      "fused_linear_logprobs_fwd(Tensor input, Tensor weight, Tensor target, Tensor? bias=None, "
      "float temperature=1., int ignore_index=-100, bool return_entropy=False, int chunk_rows=0) -> "
      "(Tensor logprobs, Tensor entropy, Tensor stats)");
  // Its backward: the gradients of sum(grad_logprobs * logprobs + grad_entropy * entropy) (either
  // may be None) w.r.t. input, weight and bias, rerunning the chunk loop:
  //   dz_j = g_lp (onehot_j - p_j) - g_ent p_j (z_j - (lse(z) - entropy)), then / temperature.
  // stats and entropy: the forward's (needed with grad_entropy).
  m.def(
      "fused_linear_logprobs_bwd(Tensor? grad_logprobs, Tensor? grad_entropy, Tensor input, Tensor weight, "
      "Tensor target, Tensor? bias, Tensor? stats, Tensor? entropy, float temperature=1., int "
      "ignore_index=-100, "
      "int chunk_rows=0, bool compute_dx=True, bool compute_dw=True, bool compute_db=True) -> (Tensor dX, "
      "Tensor dW, Tensor dB)");

  // Log-probabilities of given tokens from given logits (Liger's fused_selective_log_softmax, TRL's
  // selective_log_softmax): logits (..., V), target one id per row; out[r] =
  // log_softmax(logits[r] / temperature)[target[r]] in float32 (z / temperature formed in float32,
  // float64 for float64 logits; statistics in float32 on CUDA, float64 on the CPU), target's shape,
  // 0 for ignore_index. No gradient (Liger's is computed under no_grad: old and reference
  // log-probs).
  m.def(
      "selective_logprobs(Tensor logits, Tensor target, float temperature=1., int ignore_index=-100) -> "
      "Tensor");
  // GRPO and its variants on given logits (Liger's GrpoLossFunction, triton_grpo_loss): logits
  // (B, L + 1, V) float32/float16/bfloat16 (float64 on CPU), position l predicting completion_ids[:, l]
  // (B, L) int64/int32; advantages (B,); completion_mask (B, L) or None (all ones); old_logp /
  // ref_logp (B, L) or None (ref_logp needed when beta != 0); vllm_is_ratio (B,), (B, 1) or (B, L);
  // phi_seq (B,) or (B, 1): VESPO's sequence weights (None: computed from the vespo_* options);
  // loss_normalizer: the dapo / cispo / vespo divisor (None: max(sum(mask), 1)). Per token
  // lp = log_softmax(logits[:, l] / temperature)[completion_ids[:, l]]; the loss, its reduction and
  // the metrics are fused_linear_grpo_fwd's (max_completion_length None: L) except that tokens whose
  // mask is 0 count for nothing (no loss, KL, clipping or gradient, for every loss type). delta only
  // for grpo, bnpo, dr_grpo, dapo, luspo. Returns float32 loss, kl, clip: with reduce the loss and
  // the metrics (kl mean and clip ratio over the mask; kl 0 when beta == 0), else each token's loss,
  // KL and clipping times the mask (B, L); logp (B, L): the log-probs (0 at masked tokens);
  // grad_scale (B, L): -dLoss/dlp with reduce, else (0,); stats (B (L + 1), 2): the rows' softmax
  // statistics. inplace: whether the autograd's backward writes dlogits over logits (Liger's
  // inplace=True; eager only, the version counter bumped), ignored by the forward itself.
  m.def(
      "grpo_logits_fwd(Tensor logits, Tensor completion_ids, Tensor advantages, Tensor? "
      "completion_mask=None, "
      "Tensor? old_logp=None, Tensor? ref_logp=None, Tensor? vllm_is_ratio=None, Tensor? phi_seq=None, "
      "Tensor? loss_normalizer=None, str loss_type=\"dapo\", str importance_sampling_level=\"token\", "
      "float beta=0.04, float eps_low=0.2, float eps_high=0.4, float? delta=None, float temperature=0.9, "
      "int? max_completion_length=None, bool use_bias_correction_kl=False, float sapo_temperature_pos=1., "
      "float sapo_temperature_neg=1.05, float vespo_k_pos=2., float vespo_lambda_pos=3., "
      "float vespo_k_neg=3., float vespo_lambda_neg=2., bool reduce=False, bool inplace=False) -> "
      "(Tensor loss, Tensor kl, Tensor clip, Tensor logp, Tensor grad_scale, Tensor stats)");
  // Its backward: dlogits of sum(grad * loss) (grad: () with reduce, else (B, L), each token's weight,
  // the token math run again), (B, L + 1, V) in logits' dtype; rows of masked tokens and of the last
  // position 0. logp, grad_scale and stats: the forward's; the other arguments the forward's.
  // grpo_logits_bwd_ writes dlogits over logits (contiguous).
  m.def(
      "grpo_logits_bwd(Tensor grad, Tensor logits, Tensor completion_ids, Tensor advantages, Tensor logp, "
      "Tensor grad_scale, Tensor stats, Tensor? completion_mask, Tensor? old_logp, Tensor? ref_logp, "
      "Tensor? vllm_is_ratio, Tensor? phi_seq, Tensor? loss_normalizer, str loss_type, "
      "str importance_sampling_level, float beta, float eps_low, float eps_high, float? delta, "
      "float temperature, int? max_completion_length, bool use_bias_correction_kl, "
      "float sapo_temperature_pos, float sapo_temperature_neg, float vespo_k_pos, float vespo_lambda_pos, "
      "float vespo_k_neg, float vespo_lambda_neg, bool reduce) -> Tensor");
  m.def(
      "grpo_logits_bwd_(Tensor grad, Tensor(a!) logits, Tensor completion_ids, Tensor advantages, Tensor "
      "logp, "
      "Tensor grad_scale, Tensor stats, Tensor? completion_mask, Tensor? old_logp, Tensor? ref_logp, "
      "Tensor? vllm_is_ratio, Tensor? phi_seq, Tensor? loss_normalizer, str loss_type, "
      "str importance_sampling_level, float beta, float eps_low, float eps_high, float? delta, "
      "float temperature, int? max_completion_length, bool use_bias_correction_kl, "
      "float sapo_temperature_pos, float sapo_temperature_neg, float vespo_k_pos, float vespo_lambda_pos, "
      "float vespo_k_neg, float vespo_lambda_neg, bool reduce) -> ()");
  // The same on one tensor-parallel rank's vocabulary shard (Liger's
  // LigerFusedLinearScaledCrossEntropyTPFunction): weight (V_shard, H) holds global ids
  // vocab_start .. vocab_start + V_shard - 1, target holds global ids, no bias. The forward gives
  // the shard's values for the caller to combine across ranks, float32 in target's shape: z_y for
  // rows whose target this shard holds (else 0), lse(z over the shard), and the shard softmax's
  // mean sum_j p_j z_j; 0 for ignore_index rows. The combination: lse = logsumexp over the ranks,
  // nll = lse - sum of the ranks' z_y, entropy = lse - sum_r exp(lse_r - lse) mean_r. The backward
  // takes the combined lse and entropy and gives this shard's dX (to be summed across ranks) and dW;
  // rows whose target another shard holds get no one-hot term.
  m.def(
      "fused_linear_logprobs_shard_fwd(Tensor input, Tensor weight, Tensor target, int vocab_start, "
      "float temperature=1., int ignore_index=-100, int chunk_rows=0) -> "
      "(Tensor target_logit, Tensor lse, Tensor mean_logit)");
  m.def(
      "fused_linear_logprobs_shard_bwd(Tensor? grad_logprobs, Tensor? grad_entropy, Tensor input, Tensor "
      "weight, Tensor target, Tensor lse, Tensor? entropy, int vocab_start, float temperature=1., "
      "int ignore_index=-100, int chunk_rows=0, bool compute_dx=True, bool compute_dw=True) -> "
      "(Tensor dX, Tensor dW)");

  // Cross entropy and total variation distance of student logits against teacher logits, per row
  // (Liger's LigerFusedCETVDFunction): student_logits, teacher_logits (BT, V), one dtype
  // (float32/float16/bfloat16, float64 on CPU); target (BT,) int64/int32 in [0, V) or ignore_index.
  // p = softmax(student), q = softmax(teacher): ce = lse(student) - student[target], tvd =
  // 0.5 sum |p - q|, both (BT,) unreduced, 0 for ignored rows; stats (BT, 3): lse(student),
  // lse(teacher), sigma = sum p sign(p - q). float32 (float64 for float64 logits).
  m.def(
      "ce_tvd_fwd(Tensor student_logits, Tensor teacher_logits, Tensor target, int ignore_index=-100) -> "
      "(Tensor ce, Tensor tvd, Tensor stats)");
  // Its backward w.r.t. the student (the teacher gets none): grad_ce (p - onehot) + 0.5 grad_tvd
  // p (sign(p - q) - sigma), sign(0) = 0; either gradient may be None; student's dtype.
  m.def(
      "ce_tvd_bwd(Tensor? grad_ce, Tensor? grad_tvd, Tensor student_logits, Tensor teacher_logits, "
      "Tensor target, Tensor stats, int ignore_index=-100) -> Tensor");

  // ---- Divergences of given distributions (Liger's LigerJSD, LigerKLDIVLoss, LigerTVDLoss) ----
  // input, target: (..., V) float32/float16/bfloat16 (float64 on CPU), the same shape and dtype,
  // unit last stride; rows = numel / V. shift_labels: one index per row or None; rows whose label is
  // ignore_index contribute nothing. Loss float32; dinput (compute_grad; else (0,)) in input's dtype:
  // the gradient of the loss for grad_output 1 (reduction "none": of loss.sum()).
  // JSD of log-probabilities: X = input = log Q (student), Y = target = log P (teacher):
  //   beta 0: sum P (Y - X); beta 1: sum Q (X - Y); else sum beta P Y + (1 - beta) Q X - M log M,
  //   M = beta P + (1 - beta) Q; divided by the rows counted (all rows without labels).
  m.def(
      "jsd_fwd(Tensor input, Tensor target, Tensor? shift_labels=None, float beta=0.5, int "
      "ignore_index=-100, "
      "bool compute_grad=True) -> (Tensor loss, Tensor dinput)");
  // KL divergence (nn.KLDivLoss's): input log-probs, target probs (log-probs with log_target);
  //   element loss = target (log max(target, eps) - input), or exp(target) (target - input);
  //   reduction none (input's shape), sum, mean (/ numel), batchmean (/ rows). No target gradient.
  m.def(
      "kl_div_fwd(Tensor input, Tensor target, str reduction=\"batchmean\", bool log_target=False, "
      "float eps=1e-10, bool compute_grad=True) -> (Tensor loss, Tensor dinput)");
  // KL divergence of a given target distribution from the student head's softmax, fused with the
  // head (Liger's LigerFusedLinearKLDivLoss: offline distillation from cached teacher probabilities):
  //   z = (student_input @ student_weight^T + student_bias) / temperature, per row
  //   KL(q || softmax(z)) = sum_v q_v (log max(q_v, eps) - log_softmax(z)_v);
  // rows whose shift_label is ignore_index count nothing; reduction batchmean: / n (the rows
  // counted), mean: / (n V), sum (n = 0: a zero loss). student_input (..., H), target (..., V)
  // probabilities of any float dtype (float64 on CPU; no gradient), shift_labels one per row or
  // None. Loss float32 (float64 for float64); dX, dW, dB (of the student head) as
  // fused_linear_preference_fwd, from
  //   dz = scale (softmax(z) sum_v q_v - q) / temperature
  // (dW accumulated in float32 with accum_dtype=torch.float32 for low-precision weights).
  m.def(
      "fused_linear_kl_div_fwd(Tensor student_input, Tensor student_weight, Tensor target, Tensor? "
      "shift_labels=None, Tensor? student_bias=None, str reduction=\"batchmean\", int ignore_index=-100, "
      "float temperature=1., float eps=1e-10, ScalarType? accum_dtype=None, int chunk_rows=0, bool "
      "compute_dx=False, bool compute_dw=False, bool compute_db=False) -> (Tensor loss, Tensor dX, Tensor "
      "dW, Tensor dB)");
  // Total variation distance: element loss 0.5 |p - q|, gradient w.r.t. p 0.5 sign(p - q);
  // reduction none (p's shape, 0 for ignored rows), sum, mean (/ (rows counted * V)), batchmean
  // (/ rows counted).
  m.def(
      "tvd_fwd(Tensor p, Tensor q, Tensor? shift_labels=None, str reduction=\"batchmean\", "
      "int ignore_index=-100, bool compute_grad=True) -> (Tensor loss, Tensor dp)");
  // ---- Model-family kernels (Nemotron's ReLU^2, Llama 4's complex RoPE) ----
  // ReLU squared (Nemotron's relu2 MLP activation; Liger's LigerReLUSquaredFunction):
  //   y = relu(x)^2, dx = dy * 2 relu(x)
  // x: any shape, float32/float16/bfloat16 (float64 on CPU), any strides (read through a dense
  // copy); float32 math (float64 for float64), one rounding; y, dx dense in x's dtype. Autograd in
  // C++ (csrc/aten/autograd/relu_squared_autograd.cpp); dy: x's shape and dtype.
  m.def("relu_squared_fwd(Tensor x) -> Tensor y");
  m.def("relu_squared_bwd(Tensor dy, Tensor x) -> Tensor dx");
  // DyT ("Transformers without Normalization"; Liger's LigerDyTFunction):
  //   y = gamma * tanh(alpha * x) + beta (beta None: no shift)
  //   with t = tanh(alpha x), d = 1 - t^2: dx = dy gamma alpha d, dalpha = sum dy gamma x d,
  //   dgamma = sum over rows of dy t, dbeta = sum over rows of dy
  // x: (..., C), float32/float16/bfloat16 (float64 on CPU), any strides (read through a dense copy);
  // alpha one element, gamma / beta (C,), floating; float32 math (float64 for float64), one rounding;
  // y, dx dense in x's dtype; each parameter's gradient in its dtype and shape (dbeta in gamma's
  // without beta). Deterministic sums. Autograd in C++ (csrc/aten/autograd/dyt_autograd.cpp).
  m.def("dyt_fwd(Tensor x, Tensor alpha, Tensor gamma, Tensor? beta=None) -> Tensor y");
  m.def(
      "dyt_bwd(Tensor dy, Tensor x, Tensor alpha, Tensor gamma, Tensor? beta=None) -> "
      "(Tensor dx, Tensor dalpha, Tensor dgamma, Tensor dbeta)");
  // PolyNorm (PolyCom; Liger's LigerPolyNormFunction), over x's last dimension (C > 0):
  //   r_p = 1 / sqrt(mean(x^(2p)) + eps),  y = w[0] r_3 x^3 + w[1] r_2 x^2 + w[2] r_1 x + b
  //   rstd = (r_3, r_2, r_1) a row: float32 (float64 for float64 x), shape x.shape[:-1] + (3,)
  //   backward, A_p = sum dy x^p over the row: dx = sum_p a_p (r_p dy - r_p^3 x^p A_p / C) p x^(p-1)
  //   (a = w[0], w[1], w[2] for p = 3, 2, 1); dw = sum over rows of (r_3 A_3, r_2 A_2, r_1 A_1),
  //   db = sum dy
  // x float32/float16/bfloat16 (float64 on CPU), any strides; weight (3,), bias one element,
  // floating; float32 math with float32 row sums on CUDA (float64 on CPU), one rounding; y, dx dense
  // in x's dtype, dweight / dbias in their parameter's dtype and shape. Deterministic sums. Autograd
  // in C++ (csrc/aten/autograd/poly_norm_autograd.cpp).
  m.def("poly_norm_fwd(Tensor x, Tensor weight, Tensor bias, float eps=1e-6) -> (Tensor y, Tensor rstd)");
  m.def(
      "poly_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor bias, Tensor rstd) -> "
      "(Tensor dx, Tensor dweight, Tensor dbias)");
  // Llama 4's complex-frequency RoPE (HF's apply_rotary_emb / vision_apply_rotary_emb, DeepSeek-V2's
  // apply_rotary_emb; Liger's LigerLlama4RopeFunction), out of place. Interleaved pairs: with P =
  // D/2 and (c_j, s_j) = freqs[.., s, j, :] (torch.view_as_real of the complex freqs_cis),
  //   out[2j] = x[2j] c_j - x[2j+1] s_j,  out[2j+1] = x[2j] s_j + x[2j+1] c_j
  // (x times the complex frequency); the backward multiplies by the conjugate (s -> -s).
  // q: (B, S, Hq, D) (heads_first=False: HF's layout before the transpose) or (B, Hq, S, D)
  // (heads_first=True), k likewise; same dtype float32/float16/bfloat16 (float64 on CPU), D even,
  // any strides with a unit last stride. freqs: (S, P, 2), (1, S, P, 2) or (B, S, P, 2), float32
  // (float64 for float64 q on the CPU). float32 math, one rounding; outputs in q's dtype with the
  // inputs' memory layout. Autograd (with freqs' gradient when it requires grad) in C++
  // (csrc/aten/autograd/llama4_rope_autograd.cpp).
  m.def(
      "llama4_rope_fwd(Tensor q, Tensor k, Tensor freqs, bool heads_first=False) -> "
      "(Tensor q_out, Tensor k_out)");
  m.def(
      "llama4_rope_bwd(Tensor dq_out, Tensor dk_out, Tensor freqs, bool heads_first=False) -> "
      "(Tensor dq, Tensor dk)");

  // ---- Fused MoE experts (transformers 5.x's stacked experts; Liger's LigerExperts) ----
  // hidden [T, H]; top_k_index [T, k] int64/int32 (expert of token t's j-th slot s = t k + j);
  // top_k_weights [T, k] any float dtype; gate_up_proj [E, 2I, H], down_proj [E, H, I] (HF
  // Qwen3MoeExperts / MixtralExperts), or [E, H, 2I] and [E, I, H] when transposed (GPT-OSS);
  // gate_up_bias [E, 2I], down_bias [E, H] or None; hidden, weights and biases of one dtype
  // float32/float16/bfloat16 (float64 on CPU). With e = top_k_index[t, j], W_gu[e] as x @ W (the
  // layout's [H, 2I] view), and gu = x_t W_gu[e] + b_gu[e], g/u its gate and up halves (or
  // g = gu[0::2], u = gu[1::2] when interleaved):
  //   act "silu":      a = silu(g) * u            "gelu_tanh": a = gelu_tanh(g) * u
  //   act "gpt_oss":   a = (clamp(u, -limit, limit) + 1) * g' * sigmoid(alpha g'), g' = min(g, limit)
  //   y_s = a W_down[e] + b_down[e]      out[t] = sum_j top_k_weights[t, j] * y_s
  // float32 accumulation; out in hidden's dtype. The GEMM outputs (gate_up, the down projection)
  // are rounded to the dtype as nn.functional.linear's are; the activation and the k-slot sum in
  // float32, one rounding each. An index outside [0, E) is an error on the CPU; on CUDA its slot
  // is dropped (contributes 0, zero gradients), the kernels cannot raise (docs/kernels/moe.md).
  // Also returns, for the backward: gate_up [S, 2I] (the first GEMM's output, without its bias) and
  // the routing (int32): offsets [E] (inclusive routed-row ends per expert), sorted_slot [S] (the
  // slots stably sorted by expert), slot_row [S] (its inverse), sorted_expert [S] (E: dropped).
  // Autograd in C++ (csrc/aten/autograd/moe_experts_autograd.cpp): gradients for hidden,
  // top_k_weights, both projections and both biases; the others are not differentiable.
  m.def(
      "moe_experts_fwd(Tensor hidden, Tensor top_k_index, Tensor top_k_weights, Tensor gate_up_proj, "
      "Tensor down_proj, Tensor? gate_up_bias=None, Tensor? down_bias=None, str activation=\"silu\", "
      "bool transposed=False, bool interleaved=False, float alpha=1.702, float limit=7.0) -> "
      "(Tensor out, Tensor gate_up, Tensor offsets, Tensor sorted_slot, Tensor slot_row, "
      "Tensor sorted_expert)");
  // The backward, from the forward's saved outputs: with G_s = grad_out[t] and a_s recomputed,
  //   d top_k_weights[t, j] = <G_s, y_s>,   dy_s = w G_s,   d a_s = dy_s W_down[e]^T,
  //   d gu = d a * da/d(g, u),   d hidden[t] = sum_j d gu_s W_gu[e]^T,
  //   d W_down[e] = sum_s (a_s)^T dy_s, d W_gu[e] = sum_s x_t^T d gu_s (in the weights' layout;
  //   zero for experts with no slot), d b_down[e] = sum_s dy_s, d b_gu[e] = sum_s d gu_s.
  // Every sum in a fixed order (deterministic, no float atomics). Bias gradients are empty
  // tensors when the biases are None; compute_d_hidden=False leaves d_hidden empty (no dX GEMM),
  // compute_d_experts=False the four expert-weight gradients (frozen experts: no weight GEMMs).
  m.def(
      "moe_experts_bwd(Tensor grad_out, Tensor hidden, Tensor top_k_weights, Tensor gate_up_proj, "
      "Tensor down_proj, Tensor? gate_up_bias, Tensor? down_bias, Tensor gate_up, Tensor offsets, "
      "Tensor sorted_slot, Tensor slot_row, Tensor sorted_expert, str activation=\"silu\", "
      "bool transposed=False, bool interleaved=False, float alpha=1.702, float limit=7.0, "
      "bool compute_d_hidden=True, bool compute_d_experts=True) -> "
      "(Tensor d_hidden, Tensor d_top_k_weights, Tensor d_gate_up_proj, Tensor d_down_proj, "
      "Tensor d_gate_up_bias, Tensor d_down_bias)");
}

// An empty Python module: importing it loads the shared library, whose static
// initialisers register the ops above.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
