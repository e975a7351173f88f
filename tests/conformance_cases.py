"""Cases of tests/test_liger_conformance.py: Liger-Kernel 0.8.5's chunked-loss modules (the contract
of liger_cpp.chunked_loss) called with the same deterministic CPU inputs as liger_cpp's modules of the
same names. Imports torch only, so both the upstream runner (tests/liger_upstream_runner.py, where
`liger_kernel` is Liger-Kernel itself) and the test (liger_cpp) build identical inputs from it.

A case: (id, module class name, constructor kwargs, input recipe name, forward kwargs to add)."""

import math

import torch

GRPO_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
DPO_TYPES = [
    "sigmoid",
    "hinge",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "apo_zero",
    "apo_down",
    "discopop",
]


def _cases():
    cases = []
    for lt in GRPO_TYPES:
        levels = ["token"] + ([] if lt in ("cispo", "sapo", "vespo") else ["sequence"])
        for level in levels:
            kw = dict(
                loss_type=lt,
                importance_sampling_level=level,
                beta=0.05,
                max_completion_length=7,
                compiled=False,
            )
            if lt == "cispo":
                kw["epsilon_high"] = 3.0
            cases.append((f"grpo-{lt}-{level}", "LigerFusedLinearGRPOLoss", kw, "grpo", {}))
    for name, kw, extra in [
        ("beta0", dict(beta=0.0, loss_type="dapo"), {}),
        ("temperature", dict(temperature=0.8, loss_type="grpo"), {}),
        ("vllm", dict(loss_type="dapo"), {"vllm": True}),
        ("vllm-vespo", dict(loss_type="vespo"), {"vllm": True}),
        ("delta", dict(loss_type="grpo", delta=1.05), {}),
        ("bias-kl", dict(loss_type="bnpo", use_bias_correction_kl=True), {}),
        ("num-items", dict(loss_type="dapo"), {"num_items_in_batch": 11}),
        ("ref-model", dict(loss_type="grpo", beta=0.1), {"ref_head": True}),
        ("no-ref", dict(loss_type="dapo", beta=0.0, use_ref_model=False), {"no_ref": True}),
        ("sapo-temps", dict(loss_type="sapo", sapo_temperature_pos=0.6, sapo_temperature_neg=1.4), {}),
    ]:
        cases.append((f"grpo-{name}", "LigerFusedLinearGRPOLoss", dict(kw, compiled=False), "grpo", extra))
    for lt in DPO_TYPES:
        ls = {"exo_pair": 0.1, "robust": 0.2}.get(lt, 0.0)
        kw = dict(beta=0.3, loss_type=lt, label_smoothing=ls, compute_nll_loss=True, compiled=False)
        cases.append((f"dpo-{lt}", "LigerFusedLinearDPOLoss", kw, "pairs", {"ref": True}))
    cases += [
        (
            "dpo-no-ref-avg",
            "LigerFusedLinearDPOLoss",
            dict(use_ref_model=False, average_log_prob=True, compiled=False),
            "pairs",
            {},
        ),
        ("orpo", "LigerFusedLinearORPOLoss", dict(beta=0.2, compiled=False), "pairs", {}),
        (
            "cpo",
            "LigerFusedLinearCPOLoss",
            dict(beta=0.2, alpha=0.7, label_smoothing=0.1, compiled=False),
            "pairs",
            {},
        ),
        ("simpo", "LigerFusedLinearSimPOLoss", dict(beta=0.2, gamma=0.3, compiled=False), "pairs", {}),
        (
            "kto",
            "LigerFusedLinearKTOLoss",
            dict(beta=0.3, use_ref_model=True, compiled=False),
            "unpaired",
            {},
        ),
        (
            "kto-kl",
            "LigerFusedLinearKTOLoss",
            dict(beta=0.3, use_ref_model=True, compiled=False),
            "unpaired",
            {"kl": 0.15},
        ),
    ]
    for name, kw, extra in [
        ("jsd-beta0", dict(beta=0.0), {}),
        ("jsd-beta1-T", dict(beta=1.0, temperature=1.7), {}),
        ("jsd-mid", dict(beta=0.4, weight_hard_loss=0.3, weight_soft_loss=0.9), {}),
        ("jsd-gkd", dict(beta=0.5, weight_hard_loss=0.0, weight_soft_loss=1.0), {}),
        ("jsd-padded-vocab", dict(beta=0.5), {"Vt": 27}),
        ("jsd-soft-hard", dict(beta=0.5, return_soft_hard_loss=True), {}),
    ]:
        cases.append((name, "LigerFusedLinearJSDLoss", dict(kw, compiled=False), "distill", extra))
    for name, kw in [
        ("cosine", dict(beta=0.7, temperature=1.3)),
        ("cosine-soft-hard", dict(return_soft_hard_loss=True)),
    ]:
        cases.append((name, "LigerFusedLinearCosineSimilarityLoss", dict(kw, compiled=False), "distill", {}))
    # bfloat16 lm_heads (inputs, weights, biases): the same losses' dtype handling
    cases += [
        (
            "bf16-grpo-dapo",
            "LigerFusedLinearGRPOLoss",
            dict(loss_type="dapo", compiled=False),
            "grpo",
            {"bf16": True},
        ),
        (
            "bf16-dpo",
            "LigerFusedLinearDPOLoss",
            dict(beta=0.3, compute_nll_loss=True, compiled=False),
            "pairs",
            {"ref": True, "bf16": True},
        ),
        (
            "bf16-kto",
            "LigerFusedLinearKTOLoss",
            dict(beta=0.3, use_ref_model=True, compiled=False),
            "unpaired",
            {"bf16": True},
        ),
        (
            "bf16-jsd",
            "LigerFusedLinearJSDLoss",
            dict(beta=0.4, temperature=1.2, compiled=False),
            "distill",
            {"bf16": True},
        ),
    ]
    return cases


CASES = _cases()


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def build(recipe, extra, seed=0):
    """(positional forward args, keyword forward args, the tensors whose gradients are compared)."""
    g = _gen(seed)

    def rn(*s, scale=1.0):
        return torch.randn(*s, generator=g) * scale

    V, H = 23, 8
    w = (rn(V, H) * (2.0 / math.sqrt(H))).requires_grad_(True)
    b = (rn(V) * 0.3).requires_grad_(True)
    if recipe == "grpo":
        B, T = 3, 7
        x = rn(B, T, H).requires_grad_(True)
        ids = torch.randint(0, V, (B, T), generator=g)
        mask = (torch.rand(B, T, generator=g) > 0.25).long()
        adv = rn(B)
        old = rn(B, T, scale=0.15) - 3.0
        ref = rn(B, T, scale=0.15) - 3.0
        kw = dict(bias=b, old_per_token_logps=old)
        if extra.get("ref_head"):
            kw.update(ref_input=rn(B, T, 5), ref_weight=rn(V, 5) * 0.6, ref_bias=rn(V) * 0.3)
        elif not extra.get("no_ref"):
            kw["ref_per_token_logps"] = ref
        if extra.get("vllm"):
            kw["vllm_is_ratio"] = torch.rand(B, T, generator=g) + 0.5
        if "num_items_in_batch" in extra:
            kw["num_items_in_batch"] = extra["num_items_in_batch"]
        return (x, w, ids, mask, adv), kw, (x, w, b)
    if recipe in ("pairs", "unpaired"):
        N, T = 6, 9
        x = rn(N, T, H).requires_grad_(True)
        t = torch.randint(0, V, (N, T), generator=g)
        t[:, :2] = -100
        t[1, -3:] = -100
        if recipe == "pairs":
            kw = dict(bias=b)
            if extra.get("ref"):
                kw.update(ref_input=rn(N, T, 5), ref_weight=rn(V, 5) * 0.6, ref_bias=rn(V) * 0.3)
            return (w, x, t), kw, (x, w, b)
        labels = torch.tensor([True, False, True, True, False, False])
        kw = dict(
            bias=b,
            preference_labels=labels,
            ref_input=rn(N, T, 5),
            ref_weight=rn(V, 5) * 0.6,
            ref_bias=rn(V) * 0.3,
        )
        if "kl" in extra:
            kw["kl"] = torch.tensor(extra["kl"])
        return (x, w, t), kw, (x, w, b)
    M, Hs, Ht = 20, 8, 6
    Vt = extra.get("Vt", V)
    xs = rn(M, Hs).requires_grad_(True)
    xt, wt, bt = rn(M, Ht), rn(Vt, Ht) * 0.7, rn(Vt) * 0.3
    y = torch.randint(0, V, (M,), generator=g)
    y[::6] = -100
    return (xs, w, xt, wt, y, b, bt), {}, (xs, w, b)


def run(module_cls, kwargs, recipe, extra, seed=0):
    """Calls the module on the recipe's inputs, differentiates the loss, and returns a dict of the
    loss, every other output (flattened to tensors) and the gradients."""
    args, kw, wrt = build(recipe, extra, seed)
    if extra.get("bf16"):  # the lm_heads' inputs, weights and biases in bfloat16; log-probs stay float32
        conv = {id(t): t.detach().to(torch.bfloat16).requires_grad_(t.requires_grad) for t in wrt}
        if recipe == "distill":
            conv.update({id(args[i]): args[i].to(torch.bfloat16) for i in (2, 3, 6)})
        for k in ("ref_input", "ref_weight", "ref_bias"):
            if k in kw:
                conv[id(kw[k])] = kw[k].to(torch.bfloat16)
        args = tuple(conv.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in args)
        kw = {k: conv.get(id(v), v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        wrt = tuple(conv[id(t)] for t in wrt)
    out = module_cls(**kwargs)(*args, **kw)
    loss, rest = (out[0], out[1:]) if isinstance(out, tuple) else (out, ())
    flat = []

    def walk(o):
        if isinstance(o, (tuple, list)):
            for e in o:
                walk(e)
        elif isinstance(o, torch.Tensor):
            flat.append(o.detach().float())
        elif o is not None:
            flat.append(torch.tensor(float(o)))

    walk(rest)
    grads = torch.autograd.grad(loss, list(wrt), allow_unused=True)
    return {
        "loss": loss.detach().float(),
        "outputs": flat,
        "grads": [gr if gr is None else gr.detach().float() for gr in grads],
    }


# ---- the chunked-loss base classes: one user's subclass of each, built on either library's base ----
# (bases: a dict with Liger's names, "distillation", "preference", "unpaired", "ppo" -> the class)

BASE_CASES = ["base-distillation", "base-preference", "base-unpaired", "base-ppo"]
# subclasses of Liger's own Functions that override only the loss function, applied with the
# Function's own argument order (bases: "dpo_fn", "kto_fn", "grpo_fn", "jsd_fn" -> the Function)
FUNCTION_CASES = ["fn-dpo", "fn-kto", "fn-grpo", "fn-jsd"]


def _user_kl(student_logits, teacher_logits, target=None, ignore_index=-100, beta=0.5):
    """A user's forward KL, masked, summed (the base divides by the valid count)."""
    s = torch.log_softmax(student_logits.float(), -1)
    t = torch.log_softmax(teacher_logits.float(), -1)
    rows = (t.exp() * (t - s)).sum(-1) * (1 + beta)
    return (rows * (target != ignore_index)).sum()


def _user_dpo(
    chosen_logps,
    rejected_logps,
    full_target,
    ref_chosen_logps=None,
    ref_rejected_logps=None,
    beta=0.1,
    **kwargs,
):  # Liger's DPO Function passes loss_type, label_smoothing and discopop_tau too
    c = chosen_logps - (ref_chosen_logps if ref_chosen_logps is not None else 0.0)
    r = rejected_logps - (ref_rejected_logps if ref_rejected_logps is not None else 0.0)
    loss = -torch.nn.functional.logsigmoid(beta * (c - r)).sum() / (full_target.shape[0] // 2)
    return loss, beta * c, (beta * r).sum()


def _user_kto(log_probs, labels, full_target, ref_log_prob_chunk=None, beta=0.1, **kwargs):
    ratio = log_probs - ref_log_prob_chunk
    sign = torch.where(labels, 1.0, -1.0)
    return (1 - torch.sigmoid(beta * ratio * sign)).sum() / full_target.shape[0], (beta * ratio).sum()


def _user_ppo(
    per_token_logps,
    attention_mask,
    advantages,
    full_attention_mask,
    ref_per_token_logps=None,
    old_per_token_logps=None,
    epsilon_low=0.2,
    epsilon_high=0.2,
    beta=0.04,
    **kwargs,
):
    ratio = torch.exp(per_token_logps - old_per_token_logps)
    A = advantages.unsqueeze(1)
    ptl = -torch.min(ratio * A, ratio.clamp(1 - epsilon_low, 1 + epsilon_high) * A)
    d = ref_per_token_logps - per_token_logps
    ptl = ptl + beta * (torch.exp(d) - d - 1)
    n = full_attention_mask.sum().clamp(min=1)
    return (ptl * attention_mask).sum() / n, [
        (ratio * attention_mask).sum() / n,
        per_token_logps.detach().sum(-1),
    ]


def run_base(case, bases, seed=0):
    """The case's subclass of bases[...] applied to the recipe's inputs, as `run` returns."""
    g = _gen(seed)

    def rn(*s, scale=1.0):
        return torch.randn(*s, generator=g) * scale

    V, H = 23, 8
    w = (rn(V, H) * (2.0 / math.sqrt(H))).requires_grad_(True)
    b = (rn(V) * 0.3).requires_grad_(True)
    if case == "base-distillation":
        Base = bases["distillation"]

        class F_(Base):
            distillation_loss_fn = staticmethod(_user_kl)

            @classmethod
            def forward(cls, ctx, xs, ws, xt, wt, y, bs, bt):
                return Base.forward(
                    cls,
                    ctx,
                    xs,
                    ws,
                    xt,
                    wt,
                    y,
                    bs,
                    bt,
                    chunk_size=6,
                    beta=0.3,
                    temperature=1.4,
                    weight_hard_loss=0.4,
                    weight_soft_loss=0.8,
                    compiled=False,
                    return_soft_hard_loss=True,
                )

            @staticmethod
            def backward(ctx, *grads):
                return (*Base.backward(ctx, grads[0])[:6], None)

        xs = rn(20, H).requires_grad_(True)
        xt, wt, bt = rn(20, 6), rn(V, 6) * 0.7, rn(V) * 0.3
        y = torch.randint(0, V, (20,), generator=g)
        y[::5] = -100
        out, wrt = F_.apply(xs, w, xt, wt, y, b, bt), (xs, w, b)
    elif case == "base-preference":
        Base = bases["preference"]

        class F_(Base):
            preference_loss_fn = staticmethod(_user_dpo)

            @classmethod
            def forward(cls, ctx, x, w_, t, b_, rx, rw, rb):
                return Base.forward(
                    cls=cls,
                    ctx=ctx,
                    _input=x,
                    weight=w_,
                    target=t,
                    bias=b_,
                    chunk_size=2,
                    alpha=0.6,
                    beta=0.3,
                    compute_nll_loss=True,
                    compiled=False,
                    use_ref_model=True,
                    ref_input=rx,
                    ref_weight=rw,
                    ref_bias=rb,
                    average_log_prob=False,
                )

            @staticmethod
            def backward(ctx, *grad_output):
                return (*Base.backward(ctx, grad_output)[:4], None, None, None)

        x = rn(6, 9, H).requires_grad_(True)
        t = torch.randint(0, V, (6, 9), generator=g)
        t[:, :2] = -100
        out = F_.apply(x, w, t, b, rn(6, 9, 5), rn(V, 5) * 0.6, rn(V) * 0.3)
        wrt = (x, w, b)
    elif case == "base-unpaired":
        Base = bases["unpaired"]

        class F_(Base):
            preference_loss_fn = staticmethod(_user_kto)

            @classmethod
            def forward(cls, ctx, x, w_, t, labels, b_, rx, rw, rb):
                return Base.forward(
                    cls,
                    ctx,
                    x,
                    w_,
                    t,
                    labels,
                    b_,
                    chunk_size=2,
                    compiled=False,
                    use_ref_model=True,
                    ref_input=rx,
                    ref_weight=rw,
                    ref_bias=rb,
                    average_log_prob=True,
                    beta=0.4,
                )

            @staticmethod
            def backward(ctx, *grad_output):
                g_ = Base.backward(ctx, grad_output)
                return (g_[0], g_[1], None, None, g_[4], None, None, None)

        x = rn(6, 9, H).requires_grad_(True)
        t = torch.randint(0, V, (6, 9), generator=g)
        t[:, :2] = -100
        labels = torch.tensor([True, False, True, True, False, False])
        out = F_.apply(x, w, t, labels, b, rn(6, 9, 5), rn(V, 5) * 0.6, rn(V) * 0.3)
        wrt = (x, w, b)
    else:
        Base = bases["ppo"]

        class F_(Base):
            ppo_loss_fn = staticmethod(_user_ppo)

            @classmethod
            def forward(cls, ctx, x, w_, ids, mask, adv, b_, ref, old):
                return Base.forward(
                    cls,
                    ctx,
                    x,
                    w_,
                    ids,
                    mask,
                    adv,
                    b_,
                    ref,
                    old,
                    beta=0.1,
                    temperature=0.9,
                    compiled=False,
                    use_ref_model=True,
                    chunk_size=2,
                )

            @staticmethod
            def backward(ctx, grad_output, *grad_metrics):
                return (*Base.backward(ctx, grad_output)[:6], None, None)

        x = rn(3, 7, H).requires_grad_(True)
        ids = torch.randint(0, V, (3, 7), generator=g)
        mask = (torch.rand(3, 7, generator=g) > 0.25).float()
        out = F_.apply(x, w, ids, mask, rn(3), b, rn(3, 7, scale=0.15) - 3.0, rn(3, 7, scale=0.15) - 3.0)
        wrt = (x, w, b)
    return _collect(out, wrt)


def _collect(out, wrt):
    loss, rest = out[0], out[1:]
    flat = []

    def walk(o):
        if isinstance(o, (tuple, list)):
            for e in o:
                walk(e)
        elif isinstance(o, torch.Tensor):
            flat.append(o.detach().float())

    walk(rest)
    grads = torch.autograd.grad(loss * 0.7, list(wrt))
    return {"loss": loss.detach().float(), "outputs": flat, "grads": [gr.detach().float() for gr in grads]}


def run_function_subclass(case, fns, seed=0):
    """A subclass of Liger's Function (fns[...]) that overrides only its loss function, applied."""
    g = _gen(seed)

    def rn(*s, scale=1.0):
        return torch.randn(*s, generator=g) * scale

    V, H = 23, 8
    w = (rn(V, H) * (2.0 / math.sqrt(H))).requires_grad_(True)
    b = (rn(V) * 0.3).requires_grad_(True)
    if case in ("fn-dpo", "fn-kto"):
        x = rn(6, 9, H).requires_grad_(True)
        t = torch.randint(0, V, (6, 9), generator=g)
        t[:, :2] = -100
        rx, rw, rb = rn(6, 9, 5), rn(V, 5) * 0.6, rn(V) * 0.3
        if case == "fn-dpo":
            F_ = type("MyDPO", (fns["dpo_fn"],), {"preference_loss_fn": staticmethod(_user_dpo)})
            # Liger's DPO order: _input, weight, target, bias, ref_input, ref_weight, ref_bias, ignore_index,
            # beta, compute_nll_loss, compiled, use_ref_model, average_log_prob, chunk_size
            out = F_.apply(x, w, t, b, rx, rw, rb, -100, 0.3, True, False, True, False, 2)
        else:
            F_ = type("MyKTO", (fns["kto_fn"],), {"preference_loss_fn": staticmethod(_user_kto)})
            labels = torch.tensor([True, False, True, True, False, False])
            out = F_.apply(x, w, t, labels, b, rx, rw, rb, None, -100, 0.4, False, True, True, 2)
        return _collect(out, (x, w, b))
    if case == "fn-grpo":
        F_ = type("MyGRPO", (fns["grpo_fn"],), {"ppo_loss_fn": staticmethod(_user_ppo)})
        x = rn(3, 7, H).requires_grad_(True)
        ids = torch.randint(0, V, (3, 7), generator=g)
        mask = (torch.rand(3, 7, generator=g) > 0.25).float()
        adv = rn(3)
        ref, old = rn(3, 7, scale=0.15) - 3.0, rn(3, 7, scale=0.15) - 3.0
        out = F_.apply(x, w, ids, mask, adv, b, ref, old, None, None, None, 0.1)
        return _collect(out, (x, w, b))
    F_ = type("MyJSD", (fns["jsd_fn"],), {"distillation_loss_fn": staticmethod(_user_kl)})
    xs = rn(20, H).requires_grad_(True)
    xt, wt, bt = rn(20, 6), rn(V, 6) * 0.7, rn(V) * 0.3
    y = torch.randint(0, V, (20,), generator=g)
    y[::5] = -100
    out = F_.apply(xs, w, xt, wt, y, b, bt, 0.4, 0.8, 0.3, -100, 1.4, False, 6, True)
    return _collect(out, (xs, w, b))


def run_helpers(grpo_loss_module, seed=0):
    """Liger's per-token GRPO helpers (k3_loss_fn, get_gamma_weights, sapo_loss_fn, clip_coef_fn) of
    the given chunked_loss.grpo_loss module on fixed inputs: a dict of name -> tensor."""
    g = _gen(seed)
    lp, lq = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    adv = torch.randn(4, generator=g)
    adv[0] = 0.0
    lr = torch.randn(4, 6, generator=g) * 0.3
    lr[1, 2] = 25.0
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    isr = torch.rand(4, 6, generator=g) + 0.5
    coef = torch.tensor([0.5, 0.85, 1.0, 1.25, 3.0, 6.0])
    m = grpo_loss_module
    out = {
        "k3": m.k3_loss_fn(lp, lq),
        "gamma": m.get_gamma_weights(adv, lr, mask),
        "gamma-isr": m.get_gamma_weights(adv, lr, mask, isr, 1.5, 2.5, 0.5, 1.0),
        "sapo": m.sapo_loss_fn(coef, 1.05),
    }
    for lt, hi in (("dapo", 0.28), ("cispo", 4.0), ("sapo", 0.2)):
        c, lo_, up = m.clip_coef_fn(coef, 0.2, hi, lt)
        out[f"clip-{lt}"] = torch.stack(
            [
                c if c is not None else torch.full_like(coef, -1.0),
                torch.as_tensor(lo_).expand_as(coef).float(),
                up.float(),
            ]
        )
    return out


# LigerFusedLinearScaledCrossEntropyFunction (its 512-token PyTorch fallback on the CPU): id ->
# (dtype, temperature, return_entropy, selected ids or None).
SCALED_CE_CASES = {
    "scaled-nll": (torch.float32, 1.0, False, None),
    "scaled-entropy": (torch.float32, 0.7, True, None),
    "scaled-selected": (torch.float32, 0.7, False, [3, 0, 10, 3]),
    "scaled-entropy-selected": (torch.float32, 1.3, True, [10, 1]),
    "scaled-bf16": (torch.bfloat16, 0.9, True, [2, 7]),
}


def run_scaled_ce(case, fn, seed=0):
    """fn.apply (Liger's scaled cross entropy dispatcher) on a fixed head with ignored rows: the
    structure of what it returns (a tensor, or a tuple of how many), each output, and dX / dW under
    fixed upstream gradients on every output."""
    dtype, temperature, entropy, ids = SCALED_CE_CASES[case]
    g = _gen(seed)
    x = torch.randn(600, 8, generator=g).to(dtype).requires_grad_(True)  # more rows than one 512 chunk
    w = (torch.randn(11, 8, generator=g) * 0.6).to(dtype).requires_grad_(True)
    t = torch.randint(0, 11, (600,), generator=g)
    t[::7] = -100
    args = (x, w, t, temperature, -100, 1, entropy) + ((torch.tensor(ids),) if ids is not None else ())
    out = fn.apply(*args)
    kind = "tensor" if isinstance(out, torch.Tensor) else f"tuple of {len(out)}"
    outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    total = sum((o.float() * torch.randn(o.shape, generator=g)).sum() for o in outs)
    grads = torch.autograd.grad(total, [x, w])
    return {
        "kind": kind,
        "dtypes": [str(o.dtype) for o in outs],
        "outputs": [o.detach().float() for o in outs],
        "grads": [gr.detach().float() for gr in grads],
    }
