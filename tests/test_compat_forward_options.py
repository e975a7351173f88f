"""liger_cpp's own API where Liger-Kernel users and frameworks rely on it (issue 26): the patched
causal-LM forward's return_predicted_tokens / return_token_accuracy / use_token_scaling, RoPE's
rotary_dim (partial rotary, GPT-OSS's half-width cos / sin), ORPO's nll_target, DPO's
label_smoothing range and Liger-Kernel's positional order of liger_fused_linear_dpo. Float64
references; tiny random models on CPU."""

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

from hf_models import (  # noqa: E402
    batch,
    build,
    single_thread,  # noqa: F401  (autouse fixture)
)

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.chunked_loss import LigerFusedLinearDPOLoss, liger_fused_linear_dpo, liger_fused_linear_orpo  # noqa: E402
from liger_cpp.transformers import causal_lm  # noqa: E402
from liger_cpp.transformers import functional as ctf  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-6}
HAS_TOKEN_SCALING = "use_token_scaling" in inspect.signature(ctf.liger_fused_linear_cross_entropy).parameters


@pytest.fixture(autouse=True)
def _revert():
    yield
    mp.revert_liger_kernel()


def _pair(mode):
    ref, model = build("llama"), build("llama")
    kw = {"fused_linear_cross_entropy": mode == "flce", "cross_entropy": mode == "ce"}
    lt.apply_liger_kernel_to_llama(model=model, rope=False, **kw)
    return ref, model


def _expected(logits, labels):
    target = F.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
    pred = logits.reshape(-1, logits.shape[-1]).argmax(-1)
    valid = target != -100
    return ((pred == target) & valid).sum() / valid.sum(), torch.where(valid, pred, -1)


@pytest.mark.parametrize("mode", ["flce", "ce"])
@pytest.mark.parametrize("train", [True, False])
def test_token_accuracy_and_predicted_tokens(mode, train):
    """As Liger-Kernel's LigerCausalLMOutputWithPast: token_accuracy and predicted_tokens (-1 where
    the target is ignored), with the fused loss (training), liger_cpp's cross entropy, or HF's loss
    on materialised logits (evaluation with the fused mode)."""
    ref, model = _pair(mode)
    ref.train(train)
    model.train(train)
    ids, labels = batch()
    o0 = ref(input_ids=ids, labels=labels)
    o1 = model(input_ids=ids, labels=labels, return_token_accuracy=True, return_predicted_tokens=True)
    acc, pred = _expected(o0.logits, labels)
    torch.testing.assert_close(o1.loss, o0.loss, **TOL)
    torch.testing.assert_close(o1.token_accuracy, acc.float())
    assert torch.equal(o1.predicted_tokens, pred)
    assert (o1.logits is None) == (mode == "flce" and train)
    only = model(input_ids=ids, labels=labels, return_predicted_tokens=True)
    assert only.token_accuracy is None and torch.equal(only.predicted_tokens, pred)
    assert not hasattr(model(input_ids=ids, labels=labels), "predicted_tokens")  # HF's class when not asked


def test_predicted_tokens_with_shift_labels_and_num_items():
    ref, model = _pair("flce")
    ids, labels = batch()
    shift = F.pad(labels, (0, 1), value=-100)[:, 1:]
    n = torch.tensor(9)
    o0 = ref(input_ids=ids, labels=labels, num_items_in_batch=n)
    o1 = model(
        input_ids=ids,
        shift_labels=shift,
        num_items_in_batch=n,
        skip_logits=True,
        return_predicted_tokens=True,
    )
    torch.testing.assert_close(o1.loss, o0.loss, **TOL)
    assert torch.equal(o1.predicted_tokens, _expected(o0.logits, labels)[1])


def test_use_token_scaling_off_the_fused_path_warns_and_is_hf_loss():
    ref, model = _pair("flce")
    model.eval()
    ref.eval()
    ids, labels = batch()
    causal_lm._WARNED.clear()
    with pytest.warns(
        UserWarning, match="use_token_scaling=True applies to the fused linear cross entropy only"
    ):
        out = model(input_ids=ids, labels=labels, use_token_scaling=True)
    torch.testing.assert_close(out.loss, ref(input_ids=ids, labels=labels).loss, **TOL)


@pytest.mark.skipif(
    not HAS_TOKEN_SCALING,
    reason="liger_cpp's fused linear cross entropy has no use_token_scaling yet (added by the opslayer "
    "change): runs once it is merged",
)
@pytest.mark.parametrize("num_items", [None, 7])
def test_use_token_scaling_is_dft(num_items):
    """TRL's DFT loss: each token's loss times the detached probability of its target."""
    ref, model = _pair("flce")
    ids, labels = batch()
    n = None if num_items is None else torch.tensor(num_items)
    out = model(input_ids=ids, labels=labels, use_token_scaling=True, num_items_in_batch=n)
    logits = ref(input_ids=ids).logits.double()
    target = F.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
    lp = torch.log_softmax(logits.reshape(-1, logits.shape[-1]), -1)
    valid = target != -100
    lpt = lp.gather(-1, target.clamp(min=0)[:, None])[:, 0]
    want = (-lpt * lpt.detach().exp() * valid).sum() / (valid.sum() if n is None else n)
    torch.testing.assert_close(out.loss.double(), want, **TOL)


# --------------------------------------------------------------------------------------------
# RoPE: rotary_dim


def _hf_rope(q, k, cos, sin, d):
    def rot(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2 : d]
        rotated = torch.cat([-x2, x1], dim=-1)
        return torch.cat([x[..., :d] * cos + rotated * sin, x[..., d:]], dim=-1)

    return rot(q), rot(k)


@pytest.mark.parametrize("head,d", [(8, 8), (8, 4), (12, 8)])
def test_rotary_dim_partial_and_half_width(head, d):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 5, head, generator=g), torch.randn(2, 2, 5, head, generator=g)
    half = torch.randn(1, 5, d // 2, generator=g)
    cos, sin = torch.cat([half.cos()] * 2, -1)[:, None], torch.cat([half.sin()] * 2, -1)[:, None]
    want = _hf_rope(q, k, cos, sin, d)
    for got in (
        lt.liger_rotary_pos_emb(q, k, cos[:, 0], sin[:, 0]),  # width of cos: d
        lt.liger_rotary_pos_emb(q, k, cos[:, 0], sin[:, 0], rotary_dim=d),
        lt.liger_rotary_pos_emb(q, k, half.cos(), half.sin(), rotary_dim=d),  # GPT-OSS: cos of width d / 2
        ctf.liger_rope(q, k, cos[:, 0], sin[:, 0], None, 1, d),
    ):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **TOL)
    with pytest.raises(ValueError, match="rotary_dim"):
        lt.liger_rotary_pos_emb(q, k, cos[:, 0], sin[:, 0], rotary_dim=d + 2)
    with pytest.raises(ValueError, match="rotary_dim"):
        lt.liger_rotary_pos_emb(q, k, torch.cat([cos[:, 0]] * 3, -1), torch.cat([sin[:, 0]] * 3, -1))


# --------------------------------------------------------------------------------------------
# chunked losses


def _pref_data(seed=0, B=2, T=5, H=8, V=16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2 * B, T, H, generator=g, dtype=torch.float64).requires_grad_(True)
    w = (torch.randn(V, H, generator=g, dtype=torch.float64) / math.sqrt(H)).requires_grad_(True)
    t = torch.randint(0, V, (2 * B, T), generator=g)
    t[0, :2] = -100
    nt = torch.randint(0, V, (2 * B, T), generator=g)
    nt[1, :3] = -100
    return x, w, t, nt


def test_orpo_nll_target():
    """The chosen NLL against nll_target (normalised by its non-ignored chosen tokens), the
    preference term against target, as Liger-Kernel's nll_target."""
    x, w, t, nt = _pref_data()
    loss, metrics = liger_fused_linear_orpo(x, w, t, None, -100, 0.1, True, nt)  # Liger's positional order
    pref, pref_metrics = liger_fused_linear_orpo(x, w, t, compute_nll_loss=False)
    B = t.shape[0] // 2
    lp = torch.log_softmax(x @ w.T, -1)
    nll = (
        F.nll_loss(lp[:B].reshape(-1, w.shape[0]), nt[:B].reshape(-1), reduction="sum")
        / (nt[:B] != -100).sum()
    )
    torch.testing.assert_close(loss.double(), (pref + nll).double(), **TOL)
    torch.testing.assert_close(metrics[4].double(), nll.detach(), **TOL)
    for a, b in zip(metrics[:4] + metrics[5:], pref_metrics[:4] + pref_metrics[5:]):
        torch.testing.assert_close(a, b)
    g = torch.autograd.grad(loss, (x, w))
    g_ref = torch.autograd.grad(pref + nll, (x, w))
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, **TOL)
    from liger_cpp.chunked_loss import LigerFusedLinearORPOLoss

    torch.testing.assert_close(LigerFusedLinearORPOLoss()(w, x, t, None, nt)[0], loss)
    with pytest.raises(ValueError, match="nll_target"):
        liger_fused_linear_orpo(x, w, t, nll_target=nt[:2])


def test_dpo_liger_positional_order_and_label_smoothing():
    x, w, t, _ = _pref_data(1)
    g = torch.Generator().manual_seed(5)
    rx, rw = (
        torch.randn(x.shape, generator=g, dtype=torch.float64),
        torch.randn(w.shape, generator=g, dtype=torch.float64),
    )
    # Liger-Kernel's LigerFusedLinearDPOFunction.apply order: ..., chunk_size, loss_type, label_smoothing,
    # discopop_tau, alpha
    pos = liger_fused_linear_dpo(
        x, w, t, None, rx, rw, None, -100, 0.2, True, True, True, False, 1, "robust", 0.1, 0.05, 0.5
    )
    kw = liger_fused_linear_dpo(
        x, w, t, ref_input=rx, ref_weight=rw, beta=0.2, compute_nll_loss=True, loss_type="robust",
        label_smoothing=0.1, alpha=0.5,
    )  # fmt: skip
    torch.testing.assert_close(pos[0], kw[0], rtol=0, atol=0)
    no_nll = liger_fused_linear_dpo(
        x, w, t, ref_input=rx, ref_weight=rw, beta=0.2, loss_type="robust", label_smoothing=0.1
    )
    torch.testing.assert_close(pos[0] - no_nll[0], 0.5 * pos[1][4], **TOL)  # alpha weighs the NLL
    for loss_type, ls in [("robust", 0.5), ("exo_pair", 0.0), ("sigmoid", -0.1), ("sigmoid", 1.5)]:
        with pytest.raises(ValueError, match="argument 'label_smoothing'"):
            LigerFusedLinearDPOLoss(loss_type=loss_type, label_smoothing=ls)
        with pytest.raises(ValueError, match="argument 'label_smoothing'"):
            liger_fused_linear_dpo(
                x, w, t, ref_input=rx, ref_weight=rw, loss_type=loss_type, label_smoothing=ls
            )
