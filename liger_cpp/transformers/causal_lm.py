"""The loss path of Hugging Face causal LMs with liger_cpp's fused linear cross entropy (FLCE) or
cross entropy: ``liger_for_causal_lm_loss`` and the patched ``*ForCausalLM.forward``.

The patched forward runs Hugging Face's own forward, so everything model-specific (the base-model
call, MoE auxiliary losses, the output class, caches, the transformers version's argument names)
stays Hugging Face's. For the duration of the call it replaces two attributes of the model:

* ``lm_head`` (FLCE, training with labels): a capture module records the hidden states, already
  sliced by ``logits_to_keep``, and returns a small probe tensor instead of the [B, T, V] logits;
* ``loss_function``: computes the loss with HF's label shifting, ``ignore_index`` and
  ``num_items_in_batch`` normalisation (ForCausalLMLoss). For FLCE it projects the captured hidden
  states with lm_head's weight inside the fused op; the logit transform HF applied to the probe
  (Gemma's final softcapping, Granite's ``/ logits_scaling``) must equal the one given to the fused
  op, else the call fails with a clear error instead of training on a different loss.

Models whose loss function is not HF's ForCausalLMLoss (a custom ``model.loss_function``), or
whose lm_head is not a plain ``nn.Linear`` (or PEFT's ModulesToSaveWrapper of one), keep HF's path,
with a one-time warning.

Under DeepSpeed ZeRO-3 (and FSDP2 with lm_head as its own ``fully_shard`` unit, a DTensor weight
sharded over the ranks) lm_head's weight is partitioned (an empty tensor outside lm_head's own
forward) and only the module's hooks gather it. The fused op then runs *as* lm_head's forward
(the module is called with the fused loss in place of ``nn.Linear.forward``), so DeepSpeed (FSDP2)
gathers the full weight for the forward, gathers it again before the fused op's backward (its hook
on the module's outputs) and reduce-scatters the weight's gradient as for any other module: the
same collectives and the same full-weight memory as HF's own lm_head call, exact.
"""

import contextlib
import dataclasses
import functools
import inspect
import warnings
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from liger_cpp.transformers.functional import liger_cross_entropy, liger_fused_linear_cross_entropy

_WARNED: set = set()


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, UserWarning, stacklevel=4)


def _shifted_targets(labels, shift_labels, ignore_index: int) -> Tensor:
    """HF ForCausalLMLoss's targets: labels padded with one ignore_index and shifted left by one
    (position t predicts token t+1), unless shift_labels is given; flattened."""
    if shift_labels is None:
        if labels is None:
            raise ValueError("liger_cpp: the causal-LM loss needs `labels` or `shift_labels`")
        labels = F.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    return shift_labels.reshape(-1)


def _normalise(loss: Tensor, num_items_in_batch) -> Tensor:
    if num_items_in_batch is None:
        return loss
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def _autocast(*tensors):
    """What nn.Linear sees under autocast: the autocast dtype (the fused op gets lm_head's inputs)."""
    dev = tensors[0].device.type
    if dev in ("cuda", "cpu") and torch.is_autocast_enabled(dev):
        dt = torch.get_autocast_dtype(dev)
        return tuple(t.to(dt) if t is not None and t.is_floating_point() else t for t in tensors)
    return tensors


def _flce_loss(
    hidden_states,
    lm_head_weight,
    labels,
    lm_head_bias,
    *,
    shift_labels,
    num_items_in_batch,
    ignore_index,
    softcap,
    logit_scale,
    accum_dtype,
    use_token_scaling,
    return_token_accuracy,
    return_predicted_tokens,
):
    """(loss, token_accuracy or None, predicted_tokens or None) of HF's ForCausalLMLoss through the
    fused linear cross entropy."""
    target = _shifted_targets(labels, shift_labels, ignore_index).to(hidden_states.device)
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    if hidden.shape[0] != target.shape[0]:
        raise ValueError(
            f"liger_cpp: {hidden.shape[0]} hidden-state positions but {target.shape[0]} labels "
            "(with logits_to_keep, pass labels / shift_labels for the kept positions only)"
        )
    hidden, weight, bias = _autocast(hidden, lm_head_weight, lm_head_bias)
    # Liger's later options by keyword, only when asked for: the call stays valid for a functional
    # without them (use_token_scaling: DFT, TRL's loss_type="dft").
    extra = {"use_token_scaling": True} if use_token_scaling else {}
    out = liger_fused_linear_cross_entropy(
        hidden,
        weight,
        target,
        bias=bias,
        ignore_index=ignore_index,
        reduction="mean" if num_items_in_batch is None else "sum",
        softcap=softcap,
        accum_dtype=accum_dtype,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
        logit_scale=logit_scale,
        **extra,
    )
    if not (return_token_accuracy or return_predicted_tokens):
        return _normalise(out, num_items_in_batch), None, None
    return _normalise(out.loss, num_items_in_batch), out.token_accuracy, out.predicted_tokens


def liger_for_causal_lm_loss(
    hidden_states: Tensor,
    lm_head_weight: Tensor,
    labels: Optional[Tensor] = None,
    lm_head_bias: Optional[Tensor] = None,
    *,
    shift_labels: Optional[Tensor] = None,
    num_items_in_batch=None,
    ignore_index: int = -100,
    softcap: Optional[float] = None,
    logit_scale: float = 1.0,
    accum_dtype: Optional[torch.dtype] = None,
    return_token_accuracy: bool = False,
    use_token_scaling: bool = False,
    return_predicted_tokens: bool = False,
):
    """HF's ForCausalLMLoss on ``softcap(logit_scale * lm_head(hidden_states))`` without building the
    logits: fused linear cross entropy, mean over the non-ignored targets, or their sum divided by
    ``num_items_in_batch`` when given (gradient accumulation); with ``use_token_scaling`` each
    token's loss is scaled by the detached probability of its target (DFT).

    Returns the fp32 loss; ``(loss, token_accuracy)`` with ``return_token_accuracy``;
    ``(loss, token_accuracy, predicted_tokens)`` with ``return_predicted_tokens`` (accuracy None
    unless asked for; predicted tokens -1 where the target is ignored)."""
    loss, acc, pred = _flce_loss(
        hidden_states,
        lm_head_weight,
        labels,
        lm_head_bias,
        shift_labels=shift_labels,
        num_items_in_batch=num_items_in_batch,
        ignore_index=ignore_index,
        softcap=softcap,
        logit_scale=logit_scale,
        accum_dtype=accum_dtype,
        use_token_scaling=use_token_scaling,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
    )
    if return_predicted_tokens:
        return loss, acc, pred
    return (loss, acc) if return_token_accuracy else loss


def _cross_entropy_loss(
    logits,
    labels,
    vocab_size,
    *,
    shift_labels,
    num_items_in_batch,
    ignore_index,
    return_token_accuracy,
    return_predicted_tokens,
):
    """(loss, token_accuracy or None, predicted_tokens or None) of HF's ForCausalLMLoss on
    materialised logits, with liger_cpp's cross entropy (fp32 loss)."""
    target = _shifted_targets(labels, shift_labels, ignore_index).to(logits.device)
    out = liger_cross_entropy(
        logits.reshape(-1, vocab_size),
        target,
        ignore_index=ignore_index,
        reduction="mean" if num_items_in_batch is None else "sum",
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
    )
    if not (return_token_accuracy or return_predicted_tokens):
        return _normalise(out.float(), num_items_in_batch), None, None
    return _normalise(out.loss.float(), num_items_in_batch), out.token_accuracy, out.predicted_tokens


def _accuracy_and_predictions(logits: Tensor, labels, shift_labels, ignore_index: int, want_acc, want_pred):
    """Token accuracy and predicted tokens (-1 where the target is ignored) of HF's logits."""
    target = _shifted_targets(labels, shift_labels, ignore_index).to(logits.device)
    pred = logits.detach().reshape(-1, logits.shape[-1]).argmax(dim=-1)
    valid = target != ignore_index
    acc = ((pred == target) & valid).sum().float() / valid.sum() if want_acc else None
    return acc, torch.where(valid, pred, -1) if want_pred else None


# --------------------------------------------------------------------------------------------
# the patched forward


@dataclasses.dataclass(frozen=True)
class LossSpec:
    """How a model class turns lm_head's output into the logits its loss sees, from its config:
    final softcapping and a logit scale. With ``softcap_optional`` the probe decides whether this
    transformers version applies the softcap (Gemma 3's multimodal forward does not in 5.24)."""

    softcap: Callable = lambda config: None
    logit_scale: Callable = lambda config: 1.0
    softcap_optional: bool = False
    # Dotted path of the module computing the logits, from the model (Llama 4's multimodal class has
    # none of its own: its language_model's lm_head computes them).
    head: str = "lm_head"


# Values HF's logit transform is checked on (exact in bf16 / fp16; 50 tells a softcap of 30 apart).
_PROBE_VALUES = (-50.0, -7.0, -1.0, 0.0, 0.5, 3.0, 20.0, 50.0)
_PROBES: dict = {}  # (device, dtype) -> probe tensor: made once, no host-to-device copy per step
# (model class, logit scale, softcap candidates, dtype) -> the softcap HF's forward was seen to apply:
# checked once, so the training loop has no extra device synchronisation.
_CHECKED: dict = {}


class _HeadCapture(nn.Module):
    """Stands in for lm_head: keeps the hidden states, returns the probe instead of logits."""

    def __init__(self):
        super().__init__()
        self.hidden = None
        self.probe = None

    def forward(self, hidden_states):
        self.hidden = hidden_states
        key = (hidden_states.device, hidden_states.dtype)
        if key not in _PROBES:
            _PROBES[key] = torch.tensor(_PROBE_VALUES, dtype=key[1], device=key[0]).view(1, 1, -1)
        self.probe = _PROBES[key]
        return self.probe


def _matching_softcap(received: Tensor, probe: Tensor, softcaps, scale, cls):
    """The softcap (of the candidates) that, with logit_scale, reproduces what HF's forward did to
    the probe standing in for its logits; a clear error if none does."""
    key = (cls, scale, softcaps, probe.dtype)
    if key in _CHECKED:
        return _CHECKED[key]
    got = received.detach().float().reshape(-1)
    for softcap in softcaps:
        expected = probe.float().reshape(-1) * scale
        if softcap is not None:
            expected = softcap * torch.tanh(expected / softcap)
        if got.shape == expected.shape and torch.allclose(got, expected, rtol=2e-2, atol=5e-2):
            _CHECKED[key] = softcap
            return softcap
    raise RuntimeError(
        f"liger_cpp: {cls.__name__}.forward transforms its logits differently from what liger_cpp "
        f"passes to the fused linear cross entropy (logit_scale={scale}, softcap in {list(softcaps)}); "
        "this transformers version is not supported by the FLCE patch. Use "
        "fused_linear_cross_entropy=False (or skip_logits=False)."
    )


def _unwrap_peft_head(head):
    """The module that computes lm_head: through PEFT's ModulesToSaveWrapper, its active copy (or
    the original when adapters are disabled); any other module as it is."""
    if hasattr(head, "modules_to_save") and hasattr(head, "original_module"):
        active = getattr(head, "active_adapter", None)
        active = active[0] if isinstance(active, (list, tuple)) and active else active
        if getattr(head, "disable_adapters", False) or active not in head.modules_to_save:
            return head.original_module
        return head.modules_to_save[active]
    return head


def _head_params(head):
    """(weight, bias) of a plain nn.Linear lm_head (through PEFT's ModulesToSaveWrapper), or None."""
    head = _unwrap_peft_head(head)
    if (
        isinstance(head, nn.Linear)
        and type(head).forward is nn.Linear.forward
        and not head._forward_hooks
        and not head._forward_pre_hooks
        and type(head.weight.data) is torch.Tensor  # not a DTensor (FSDP2 / tensor parallel)
    ):
        return head.weight, head.bias
    return None


def _is_deepspeed_hook(hook) -> bool:
    fn = getattr(hook, "func", hook)  # functools.partial
    return (getattr(fn, "__module__", None) or "").startswith("deepspeed.")


def _zero3_head(head):
    """The nn.Linear of lm_head (through PEFT's ModulesToSaveWrapper) when its weight is a DeepSpeed
    ZeRO-3 parameter and the only hooks on it are DeepSpeed's, else None."""
    head = _unwrap_peft_head(head)
    if (
        isinstance(head, nn.Linear)
        and type(head).forward is nn.Linear.forward
        and "forward" not in head.__dict__
        and hasattr(head.weight, "ds_id")  # a ZeRO-3 (partitioned) parameter
        and type(head.weight.data) is torch.Tensor
        and all(_is_deepspeed_hook(h) for h in head._forward_hooks.values())
        and all(_is_deepspeed_hook(h) for h in head._forward_pre_hooks.values())
    ):
        return head
    return None


def _is_fsdp2_hook(hook) -> bool:
    fn = getattr(hook, "__func__", hook)  # a bound method of FSDP2's FSDPState
    return (getattr(fn, "__module__", None) or "").startswith("torch.distributed.fsdp._fully_shard")


def _fsdp2_head(head):
    """The nn.Linear of lm_head (through PEFT's ModulesToSaveWrapper) when it is its own FSDP2 unit
    (``fully_shard(model.lm_head)``: a sharded DTensor weight that only FSDP2's hooks on lm_head's
    own forward all-gather) and the only hooks on it are FSDP2's, else None."""
    head = _unwrap_peft_head(head)
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without FSDP2
        return None
    if (
        isinstance(head, nn.Linear)
        and isinstance(head, FSDPModule)
        and type(head).forward is nn.Linear.forward
        and "forward" not in head.__dict__
        and all(_is_fsdp2_hook(h) for h in head._forward_hooks.values())
        and all(_is_fsdp2_hook(h) for h in head._forward_pre_hooks.values())
    ):
        return head
    return None


def _call_as_forward(module: nn.Module, fn: Callable, *args):
    """``module(*args)`` with ``fn`` in place of its forward: the module's hooks (DeepSpeed ZeRO-3's
    parameter gathering, before the forward and before the backward of the outputs) run around fn."""
    module.forward = fn
    try:
        return module(*args)
    finally:
        del module.forward


def _uses_hf_causal_loss(model) -> bool:
    if "_loss_function" in model.__dict__:  # set by the user
        return False
    from transformers.loss import loss_utils

    try:
        return model.loss_function is loss_utils.ForCausalLMLoss
    except Exception:  # noqa: BLE001 - any failure means: not the plain HF loss
        return False


def _head_owner(model, path: str):
    """(the module owning the logits head at `path`, the head's attribute name), or (None, name)."""
    *parents, name = path.split(".")
    owner = model
    for p in parents:
        owner = owner._modules.get(p) if isinstance(owner, nn.Module) else None
    return (owner if isinstance(owner, nn.Module) else None), name


def _head(model, path: str):
    owner, name = _head_owner(model, path)
    return owner._modules.get(name) if owner is not None else None


@contextlib.contextmanager
def _replaced(model, loss_function, capture=None, head_path="lm_head"):
    owner, name = _head_owner(model, head_path)
    head = owner._modules.get(name) if owner is not None else None
    object.__setattr__(model, "_loss_function", loss_function)
    if capture is not None:
        owner._modules[name] = capture
    try:
        yield
    finally:
        if capture is not None:
            owner._modules[name] = head
        model.__dict__.pop("_loss_function", None)


_ACC_CLASSES: dict = {}


def _with_accuracy(cls):
    """A subclass of HF's output class with Liger's extra fields ``token_accuracy`` and
    ``predicted_tokens`` (as Liger-Kernel's LigerCausalLMOutputWithPast)."""
    if cls not in _ACC_CLASSES:
        _ACC_CLASSES[cls] = dataclasses.make_dataclass(
            f"Liger{cls.__name__}",
            [
                ("token_accuracy", Optional[Tensor], dataclasses.field(default=None)),
                ("predicted_tokens", Optional[Tensor], dataclasses.field(default=None)),
            ],
            bases=(cls,),
        )
    return _ACC_CLASSES[cls]


def _rebuild(out, token_accuracy=None, predicted_tokens=None, drop_logits=False):
    fields = {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}
    if drop_logits:
        fields["logits"] = None
    if token_accuracy is None and predicted_tokens is None:
        return type(out)(**fields)
    return _with_accuracy(type(out))(
        **fields, token_accuracy=token_accuracy, predicted_tokens=predicted_tokens
    )


def make_forward(orig: Callable, mode: str, spec: LossSpec) -> Callable:
    """The patched forward of one model class: mode "flce" (fused linear cross entropy when
    training with labels) or "ce" (liger_cpp's cross entropy on HF's logits)."""
    if mode not in ("flce", "ce"):
        raise ValueError(f"liger_cpp: unknown loss mode {mode!r}")
    orig = getattr(orig, "_liger_original", orig)
    sig = inspect.signature(orig)
    names = list(sig.parameters)
    # A forward of (self, *args, **kwargs) (a subclass's wrapper) receives labels in its **kwargs.
    var_kw = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)

    @functools.wraps(orig)
    def forward(
        self,
        *args,
        skip_logits=None,
        return_token_accuracy=False,
        return_predicted_tokens=False,
        use_token_scaling=False,
        accum_dtype=None,
        **kwargs,
    ):
        try:
            bound = sig.bind(self, *args, **kwargs).arguments
        except TypeError:
            return orig(self, *args, **kwargs)  # HF raises its own error
        labels = bound.get("labels")
        if "labels" not in names and var_kw is not None:
            labels = bound.get(var_kw, {}).get("labels")
        shift_labels = kwargs.get("shift_labels")
        has_labels = labels is not None or shift_labels is not None
        if skip_logits and not has_labels:
            raise ValueError("liger_cpp: skip_logits=True needs labels or shift_labels")
        if mode == "flce":
            ours = self.training and has_labels if skip_logits is None else bool(skip_logits)
        else:
            ours = has_labels
        if ours and not _uses_hf_causal_loss(self):
            _warn_once(
                f"liger_cpp: {type(self).__name__} uses a loss function other than transformers' "
                "ForCausalLMLoss; Hugging Face's loss path is kept."
            )
            ours = False
        head_params = zero3_head = None
        if ours and mode == "flce":
            head = _head(self, spec.head)
            head_params = _head_params(head)
            if head_params is None:  # gathered by its own hooks: DeepSpeed ZeRO-3's or FSDP2's
                zero3_head = _zero3_head(head) or _fsdp2_head(head)
            if head_params is None and zero3_head is None:
                _warn_once(
                    f"liger_cpp: {type(self).__name__}.{spec.head} is not a plain nn.Linear (LoRA, hooks, "
                    "FSDP / tensor-parallel weights?); the logits are materialised and Hugging Face's "
                    "loss path is kept."
                )
                ours = False
        if use_token_scaling and has_labels and not (ours and mode == "flce"):
            # As Liger-Kernel's forward: token scaling is an option of the fused path only.
            _warn_once(
                "liger_cpp: use_token_scaling=True applies to the fused linear cross entropy only "
                "(training with labels, or skip_logits=True); this loss is the unscaled cross entropy."
            )
        if not ours:
            out = orig(self, *args, **kwargs)
            want = (return_token_accuracy, return_predicted_tokens)
            if any(want) and has_labels and getattr(out, "logits", None) is not None:
                ignore_index = kwargs.get("ignore_index", -100)
                acc, pred = _accuracy_and_predictions(out.logits, labels, shift_labels, ignore_index, *want)
                out = _rebuild(out, token_accuracy=acc, predicted_tokens=pred)
            return out

        if labels is None and "labels" not in names[1 : 1 + len(args)]:
            kwargs["labels"] = shift_labels  # HF computes a loss only with labels; ours uses shift_labels
        return_dict = kwargs.pop("return_dict", None)
        if return_dict is None:
            return_dict = getattr(self.config, "return_dict", True)
        result = {}
        config = self.config
        capture = _HeadCapture() if mode == "flce" else None
        extras = return_token_accuracy or return_predicted_tokens

        def loss_function(logits=None, labels=None, vocab_size=None, **kw):
            opts = dict(
                shift_labels=kw.get("shift_labels"),
                num_items_in_batch=kw.get("num_items_in_batch"),
                ignore_index=kw.get("ignore_index", -100),
                return_token_accuracy=return_token_accuracy,
                return_predicted_tokens=return_predicted_tokens,
            )
            if mode == "flce":
                scale = spec.logit_scale(config)
                softcaps = (spec.softcap(config),)
                if spec.softcap_optional and softcaps[0] is not None:
                    softcaps = (None, softcaps[0])
                softcap = _matching_softcap(logits, capture.probe, softcaps, scale, type(self))
                flce_opts = dict(
                    softcap=softcap,
                    logit_scale=scale,
                    accum_dtype=accum_dtype,
                    use_token_scaling=use_token_scaling,
                    **opts,
                )

                def fused(hidden, weight, bias):
                    loss, acc, pred = _flce_loss(hidden, weight, labels, bias, **flce_opts)
                    # Tensors only (DeepSpeed's hooks see this as lm_head's output under ZeRO-3).
                    return tuple(t for t in (loss, acc, pred) if t is not None) if extras else loss

                if zero3_head is None:
                    out = fused(capture.hidden, *head_params)
                else:  # lm_head's forward: DeepSpeed gathers its weight around this call
                    head = zero3_head
                    out = _call_as_forward(head, lambda h: fused(h, head.weight, head.bias), capture.hidden)
                if not extras:
                    return out
                out = iter(out)
                loss = next(out)
                result["token_accuracy"] = next(out) if return_token_accuracy else None
                result["predicted_tokens"] = next(out) if return_predicted_tokens else None
                return loss
            loss, result["token_accuracy"], result["predicted_tokens"] = _cross_entropy_loss(
                logits, labels, vocab_size, **opts
            )
            return loss

        with _replaced(self, loss_function, capture, spec.head):
            out = orig(self, *args, return_dict=True, **kwargs)
        out = _rebuild(
            out,
            token_accuracy=result.get("token_accuracy"),
            predicted_tokens=result.get("predicted_tokens"),
            drop_logits=mode == "flce",
        )
        return out if return_dict else out.to_tuple()

    forward._liger_original = orig
    forward._liger_mode = mode
    return forward
