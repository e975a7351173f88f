// The per-token math of the GRPO family (csrc/aten/composite/fused_linear_grpo.cpp states the
// formulas): from one group's policy log-probs to each token's gradient scale and the group's
// loss, KL and clipping sums, in one pass per sequence. Plain C++ (raw pointers, sizes): the CUDA
// kernel (grpo_token_math.cu) and the CPU twin (csrc/aten/cpu/grpo_token_math_cpu.cpp) both call
// the inline functions below, so the formulas exist once.
//
// It replaced about forty ATen element-wise ops per chunk: each was a launch, and the first call
// of a process loaded each of those kernels (CUDA's lazy loading: 168-259 ms against a 45 ms
// steady call on an H100, docs/perf-log.md 2026-12-06 night).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define LIGER_HD __host__ __device__ __forceinline__
#else
#define LIGER_HD inline
#endif
#if defined(__CUDACC__) || defined(LIGER_CPP_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace liger_cpp::kernels {

enum class GrpoType : int { kGrpo, kBnpo, kDrGrpo, kDapo, kCispo, kSapo, kLuspo, kVespo };

struct GrpoOptions {
  GrpoType type = GrpoType::kDapo;
  bool seq = false;  // importance_sampling_level "sequence" (standard types only)
  float beta = 0.04f, eps_low = 0.2f, eps_high = 0.2f;
  bool has_delta = false;
  float delta = 0.f;
  bool bias_kl = false;
  float sapo_pos = 1.f, sapo_neg = 1.05f;
  float vk_pos = 2.f, vl_pos = 3.f, vk_neg = 3.f, vl_neg = 2.f;
  float batch = 1.f, T = 1.f, max_len = 0.f;  // B and T of the whole batch; dr_grpo's length
  float inv_temperature = 1.f;
  // Tokens whose mask is 0 count for nothing: loss, KL, clipping, gradient and sequence sums (Liger's
  // GRPO on given logits skips them; the fused loss gives luspo's masked positions their weight).
  bool skip_masked = false;
};

// One group: S sequences x L positions. Element (s, l) of a per-token input p with row stride st
// is p[s * st + l]; a null pointer is an absent input.
struct GrpoTokenArgs {
  // Policy -log p in; the token math overwrites each position with the log-prob -nll once it has
  // read it (a thread reads and writes only its own positions, after the sequence pass's reads).
  float* nll;
  int64_t nll_stride;
  const float* old;  // old_per_token_logps
  int64_t old_stride;
  const float* ref;  // reference log-probs (ref_is_nll: -log p of the reference model)
  int64_t ref_stride;
  bool ref_is_nll;
  const float* mask;  // attention mask as float
  int64_t mask_stride;
  const float* vllm;  // vllm_is_ratio: [S, L] (vllm_cols L) or [S, 1] (vllm_cols 1)
  int64_t vllm_stride, vllm_cols;
  const float* adv;         // [S]
  const float* nseq;        // [S] whole-sequence mask sums
  const float* n_all;       // device scalar: sum of the whole mask
  const float* normalizer;  // device scalar: dapo / cispo / vespo divisor
  float* ce_scale;          // out [S * L]: -dLoss/dlp / temperature (the row step's gradient scale)
  float* partial;           // out [S, 3]: the sequence's sums of w l, m kl, m clipped
  int64_t S, L;
  GrpoOptions o;
  // Optional (null: absent). w_given: each position's reduction weight [S, L] (row stride
  // w_stride), in place of the loss type's (the per-token losses of Liger's reduce=False, and their
  // backward with the upstream gradient as the weight). phi_given: VESPO's sequence weights [S],
  // in place of computing them. tok_loss / tok_kl / tok_clip: each position's w l, m kl and
  // m clipped [S, L] (row stride tok_stride).
  const float* w_given;
  int64_t w_stride;
  const float* phi_given;
  float *tok_loss, *tok_kl, *tok_clip;
  int64_t tok_stride;
};

#if defined(__CUDACC__) || defined(LIGER_CPP_WITH_CUDA)
// The batch's mask sums from mask [B, T] (float32, contiguous), in a fixed order: stats[b] = sum_t
// mask[b, t] (b < B), stats[B] = their sum, stats[B + 1] = *given (the caller's loss normaliser)
// or max(stats[B], 1). One block.
cudaError_t grpo_prologue(const float* mask, int64_t B, int64_t T, const float* given, float* stats,
                          cudaStream_t stream);
// One block per sequence: the sequence sums first where needed, then the tokens.
cudaError_t grpo_token_math(const GrpoTokenArgs& a, cudaStream_t stream);
// The sums of partial's rows [rows, 3] in row order (float64), as three scalars: loss = sum w l,
// kl = sum m kl / max(n_all, 1), clip = sum m clipped / max(n_all, 1).
cudaError_t grpo_finish(const float* partial, int64_t rows, const float* n_all, float* loss, float* kl,
                        float* clip, cudaStream_t stream);
#endif

namespace grpo {

LIGER_HD bool is_std(GrpoType t) {
  return t != GrpoType::kCispo && t != GrpoType::kSapo && t != GrpoType::kVespo;
}
// Whether the group needs per-sequence sums before its tokens: the sequence-level importance
// weight, and VESPO's sequence weight.
LIGER_HD bool needs_seq_pass(const GrpoOptions& o) { return o.seq || o.type == GrpoType::kVespo; }
// NaN-propagating min / clamps, as torch.minimum and clamp.
LIGER_HD float tmin(float a, float b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
LIGER_HD float clamp_max(float x, float hi) { return x > hi ? hi : x; }
LIGER_HD float clamp(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

LIGER_HD float at(const float* p, int64_t stride, int64_t s, int64_t l) { return p[s * stride + l]; }
LIGER_HD float log_prob(const GrpoTokenArgs& a, int64_t s, int64_t l) {
  return -at(a.nll, a.nll_stride, s, l);
}
LIGER_HD float log_ratio(const GrpoTokenArgs& a, int64_t s, int64_t l) {
  return a.old ? log_prob(a, s, l) - at(a.old, a.old_stride, s, l) : 0.f;
}
LIGER_HD float vllm_at(const GrpoTokenArgs& a, int64_t s, int64_t l) {
  return a.vllm_cols == 1 ? a.vllm[s * a.vllm_stride] : at(a.vllm, a.vllm_stride, s, l);
}

// Position l's contribution to the sequence sums the group needs first: the masked log-ratio
// (sequence level) or VESPO's sum_t m clamp(r, -20, 20) + sum_t clamp(log vllm, log 1e-8, 20).
LIGER_HD float seq_term(const GrpoTokenArgs& a, int64_t s, int64_t l) {
  const float m = at(a.mask, a.mask_stride, s, l);
  // A skipped token's log-ratio counts for nothing; VESPO's vllm term still sums over every
  // position (TRL's get_gamma_weights does not mask it).
  const bool skip = a.o.skip_masked && m == 0.f;
  const float r = skip ? 0.f : log_ratio(a, s, l);
  if (a.o.type != GrpoType::kVespo) return r * m;
  float v = clamp(r, -20.f, 20.f) * m;
  if (a.vllm && (a.vllm_cols != 1 || l == 0)) v += clamp(logf(vllm_at(a, s, l)), logf(1e-8f), 20.f);
  return v;
}

// Per-sequence constants, from the sequence sum of seq_term (0 when not needed).
struct Seq {
  float A, nprime, c1, phi, w_luspo;
};
LIGER_HD Seq sequence(const GrpoTokenArgs& a, int64_t s, float seq_sum) {
  const GrpoOptions& o = a.o;
  Seq q;
  q.A = a.adv[s];
  const float n = a.nseq[s];
  q.nprime = n < 1.f ? 1.f : n;
  q.c1 = o.seq ? expf(seq_sum / q.nprime) : 1.f;
  q.phi = 0.f;
  if (o.type == GrpoType::kVespo && a.phi_given) {
    q.phi = a.phi_given[s];
  } else if (o.type == GrpoType::kVespo) {  // TRL's get_gamma_weights, NaN / inf -> 0
    const float logw = clamp(seq_sum, logf(1e-8f), 20.f);
    const bool nonneg = q.A >= 0.f;
    const float k = nonneg ? o.vk_pos : o.vk_neg;
    float lam = nonneg ? o.vl_pos : o.vl_neg;
    lam = lam < 1e-4f ? 1e-4f : lam;
    const float phi = expf(lam + k * logw - lam * expf(logw));
    q.phi = phi - phi == 0.f ? phi : 0.f;  // 0 for NaN and +-inf
  }
  q.w_luspo = n / (o.batch * o.T);
  return q;
}

// The reduction weight of position (s, l).
LIGER_HD float weight(const GrpoTokenArgs& a, const Seq& q, float m, int64_t s, int64_t l) {
  if (a.w_given) return at(a.w_given, a.w_stride, s, l);
  switch (a.o.type) {
    case GrpoType::kGrpo:
    case GrpoType::kSapo:
      return m / (q.nprime * a.o.batch);
    case GrpoType::kBnpo: {
      const float n = *a.n_all;
      return m / (n < 1.f ? 1.f : n);
    }
    case GrpoType::kDrGrpo:
      return m / (a.o.batch * a.o.max_len);
    case GrpoType::kLuspo:
      return q.w_luspo;  // every position, masked or not (Liger's branch)
    default:
      return m / *a.normalizer;
  }
}

// One token's terms. k: the token's dLoss/dlp (sequence level: its local KL part only); wdl and
// wkl0: w dl/dc1 and w kl0, summed over the sequence at sequence level.
struct Token {
  float loss, kl, clipped, k, wdl, wkl0;
};
LIGER_HD Token token(const GrpoTokenArgs& a, const Seq& q, int64_t s, int64_t l) {
  const GrpoOptions& o = a.o;
  const float lp = log_prob(a, s, l), m = at(a.mask, a.mask_stride, s, l), A = q.A;
  if (o.skip_masked && m == 0.f) return Token{0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  const float c1 = o.seq ? q.c1 : expf(log_ratio(a, s, l));
  const float w = weight(a, q, m, s, l);
  float pl, dl;  // the policy term and its derivative (by c1, or by lp for cispo / vespo)
  bool dl_wrt_c1 = true, clipped = false;
  switch (o.type) {
    case GrpoType::kCispo: {
      const float c2 = clamp_max(c1, o.eps_high);  // detached
      pl = -c2 * A * lp;
      dl = -c2 * A;
      dl_wrt_c1 = false;
      clipped = c1 > o.eps_high && A > 0.f;
      break;
    }
    case GrpoType::kSapo: {
      const float tau = A > 0.f ? o.sapo_pos : o.sapo_neg;
      const float sg = 1.f / (1.f + expf(-(tau * (c1 - 1.f))));
      pl = -A * sg * 4.f / tau;
      dl = -A * 4.f * sg * (1.f - sg);
      break;
    }
    case GrpoType::kVespo:
      pl = -q.phi * A * lp;
      dl = -q.phi * A;
      dl_wrt_c1 = false;
      break;
    default: {
      const float lo = 1.f - o.eps_low, hi = 1.f + o.eps_high;
      const float c1d = o.has_delta ? clamp_max(c1, o.delta) : c1;
      const float l1 = c1d * A, l2 = clamp(c1, lo, hi) * A;
      pl = -tmin(l1, l2);
      // torch.minimum's gradient (half to each side at a tie) through clamp's (1 inside the
      // bounds, inclusive): the derivative PyTorch's autograd gives the published formula.
      float g1 = l1 < l2 ? 1.f : (l1 == l2 ? 0.5f : 0.f);
      float g2 = l1 > l2 ? 1.f : (l1 == l2 ? 0.5f : 0.f);
      if (o.has_delta && !(c1 <= o.delta)) g1 = 0.f;
      if (!(c1 >= lo && c1 <= hi)) g2 = 0.f;
      dl = -A * (g1 + g2);
      clipped = (c1 > hi && A > 0.f) || (c1 < lo && A < 0.f);
    }
  }
  if (a.vllm && o.type != GrpoType::kVespo) {
    const float v = vllm_at(a, s, l);
    pl *= v;
    dl *= v;
  }
  Token t;
  float per_token = pl, kl0 = 0.f, dkl0 = 0.f, kl = 0.f;
  if (o.beta != 0.f) {
    const float d =
        a.ref ? (a.ref_is_nll ? -at(a.ref, a.ref_stride, s, l) : at(a.ref, a.ref_stride, s, l)) - lp : 0.f;
    const float e = expf(d);
    kl0 = e - d - 1.f;
    dkl0 = 1.f - e;  // d kl0 / d lp
    kl = o.bias_kl ? kl0 * c1 : kl0;
    per_token = per_token + o.beta * kl;
  }
  t.loss = w * per_token;
  t.kl = kl * m;
  t.clipped = clipped ? m : 0.f;
  t.wdl = w * dl;
  t.wkl0 = w * kl0;
  if (!o.seq) {
    t.k = dl_wrt_c1 ? t.wdl * c1 : t.wdl;  // dc1/dlp = c1
    if (o.beta != 0.f) t.k = t.k + w * (o.beta * (o.bias_kl ? (dkl0 + kl0) * c1 : dkl0));
  } else {
    t.k = o.beta != 0.f ? w * (o.beta * (o.bias_kl ? dkl0 * c1 : dkl0)) : 0.f;
  }
  return t;
}

// Sequence level: the token's full dLoss/dlp from the sequence sums of wdl and wkl0 (every token
// of a sequence moves c1: d c1 / d lp_l = c1 m_l / max(n, 1)).
LIGER_HD float seq_k(const GrpoTokenArgs& a, const Seq& q, float k_local, float sum_wdl, float sum_wkl0,
                     int64_t s, int64_t l) {
  const float m = at(a.mask, a.mask_stride, s, l);
  if (a.o.skip_masked && m == 0.f) return 0.f;
  const float dc1 = q.c1 * m / q.nprime;
  float k = sum_wdl * dc1 + k_local;
  if (a.o.beta != 0.f && a.o.bias_kl) k = k + a.o.beta * sum_wkl0 * dc1;
  return k;
}

// The per-token outputs of position (s, l), where asked for.
LIGER_HD void store_token(const GrpoTokenArgs& a, const Token& t, int64_t s, int64_t l) {
  if (!a.tok_loss) return;
  const int64_t i = s * a.tok_stride + l;
  a.tok_loss[i] = t.loss;
  a.tok_kl[i] = t.kl;
  a.tok_clip[i] = t.clipped;
}

}  // namespace grpo
}  // namespace liger_cpp::kernels
