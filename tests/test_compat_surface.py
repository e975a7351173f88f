"""The liger-kernel compatibility package (compat/): installed as pip installs it, found by the
frameworks' checks, Liger-Kernel 0.8.5's every public name importable at its module path, every
callable with Liger-Kernel's signature (compat/liger_kernel/_reference_signatures.json, written from
Liger-Kernel's sources), stubs that raise NotImplementedError naming what is missing, and calls in
Liger-Kernel's positional order equal to keyword calls of liger_cpp's own API."""

import ast
import importlib
import importlib.metadata
import inspect
import json
import os
import site as sitelib
import subprocess
import sys

import pytest
import torch
from compat_env import COMPAT, REPO, ensure_compat, staged_source

ensure_compat()


import liger_cpp  # noqa: E402

REF = json.load(open(os.path.join(COMPAT, "liger_kernel", "_reference_signatures.json")))
MODULES = REF["modules"]
EXPECTED_VERSION = f"{REF['liger_kernel_version']}+liger.cpp.{liger_cpp.__version__}"
# Liger-Kernel's in_place defaults to True; liger_cpp keeps it off (its documented safety choice).
IN_PLACE_EXCEPTION = "in_place"


def _resolved(module, name):
    return getattr(importlib.import_module(module), name)


def _is_stub(obj) -> bool:
    return bool(getattr(obj, "_liger_cpp_missing", False))


def _entries(kinds=None):
    for module, names in MODULES.items():
        for name, entry in names.items():
            if kinds is None or entry["kind"] in kinds:
                yield module, name, entry


# --------------------------------------------------------------------------------------------
# installed, and found by the frameworks' checks


def test_distribution_and_version():
    assert importlib.metadata.version("liger-kernel") == EXPECTED_VERSION
    assert importlib.metadata.version("liger_kernel") == EXPECTED_VERSION  # ArcticTraining's spelling
    assert "liger-kernel" in importlib.metadata.packages_distributions()["liger_kernel"]
    import liger_kernel

    assert liger_kernel.__version__ == EXPECTED_VERSION
    text = open(os.path.join(REPO, "liger_cpp", "_version.py")).read()
    assert f'"{liger_cpp.__version__}"' in text  # the one place liger_cpp's version is written


def test_framework_version_checks_pass():
    from packaging.version import Version

    transformers = pytest.importorskip("transformers")
    from transformers.utils import import_utils
    from transformers.utils.versions import require_version

    import_utils.is_liger_kernel_available.cache_clear()
    assert import_utils.is_liger_kernel_available()  # HF Trainer: find_spec + metadata, >= 0.3.0
    require_version("liger-kernel")  # LLaMA-Factory's check_version("liger-kernel", mandatory=True)
    assert Version(importlib.metadata.version("liger-kernel")) >= Version("0.7.0")  # ms-swift GRPO
    assert Version(importlib.metadata.version("liger_kernel")) >= Version("0.6.1")  # ArcticTraining
    trl = pytest.importorskip("trl")
    from trl.import_utils import LIGER_KERNEL_MIN_VERSION, is_liger_kernel_available

    assert is_liger_kernel_available()  # TRL (its minimum here)
    assert Version(importlib.metadata.version("liger-kernel")) >= Version(LIGER_KERNEL_MIN_VERSION)
    assert is_liger_kernel_available("0.8.2")  # TRL's newer pin
    del transformers, trl


def test_pip_install_and_uninstall(tmp_path):
    """`pip install ./compat` into an environment, then `pip uninstall liger-kernel` removes it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = subprocess.check_output(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    )
    site = site.strip()
    # This environment's packages (pip, setuptools, torch) behind the new one's own. Not
    # --system-site-packages: run from a venv, that gives the base interpreter's, which may lack them.
    with open(os.path.join(site, "outer_env.pth"), "w") as f:
        f.write("\n".join(sitelib.getsitepackages()) + "\n")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
    src = staged_source(str(tmp_path))  # compat/ as in the checkout, built outside it
    subprocess.run(
        pip + ["install", "--no-deps", "--no-build-isolation", src], check=True, capture_output=True
    )
    probe = (
        "import importlib.metadata as m, importlib.util as u; s = u.find_spec('liger_kernel'); "
        "print(m.version('liger-kernel'), s.origin if s else None)"
    )
    out = subprocess.check_output([py, "-c", probe], text=True, env=dict(os.environ, PYTHONPATH=REPO)).split()
    assert out[0] == EXPECTED_VERSION and out[1].startswith(site)
    subprocess.run(pip + ["uninstall", "-y", "liger-kernel"], check=True, capture_output=True)
    assert not os.path.exists(os.path.join(site, "liger_kernel"))
    assert not [d for d in os.listdir(site) if d.startswith("liger_kernel-")]


# --------------------------------------------------------------------------------------------
# every name of Liger-Kernel's surface


def test_every_reference_module_and_name_imports():
    n = 0
    for module, names in MODULES.items():
        mod = importlib.import_module(module)
        for name in names:
            getattr(mod, name)  # resolves (liger_cpp's object, a re-export or a stub)
            n += 1
        assert set(names) <= set(dir(mod))
    assert n == sum(len(v) for v in MODULES.values()) > 400


def test_submodules_are_attributes_of_their_package_before_any_import():
    # `import liger_kernel.chunked_loss as m; m.grpo_loss.LigerFusedLinearGRPOFunction` works in
    # Liger-Kernel (its package __init__ imports the submodules). Fresh interpreter: nothing else may
    # have imported the submodule first.
    subs = sorted(m for m in MODULES if m.count(".") >= 2)
    code = (
        "import importlib, sys\n"
        f"subs = {subs!r}\n"
        "bad = []\n"
        "for sub in subs:\n"
        "    parent, _, child = sub.rpartition('.')\n"
        "    for m in [k for k in sys.modules if k == sub or k.startswith(sub + '.')]:\n"
        "        del sys.modules[m]\n"
        "    pkg = importlib.import_module(parent)\n"
        "    pkg.__dict__.pop(child, None)\n"
        "    try:\n"
        "        ok = getattr(pkg, child) is sys.modules[sub]\n"
        "    except Exception as e:\n"
        "        ok = repr(e)\n"
        "    if ok is not True:\n"
        "        bad.append((sub, ok))\n"
        "print(bad)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout[-2000:]
    assert "liger_kernel.chunked_loss.grpo_loss" in subs


def test_reexports_are_the_defining_modules_objects():
    for module, name, entry in _entries({"alias"}):
        target_mod, _, attr = entry["target"].rpartition(".")
        assert _resolved(module, name) is _resolved(target_mod, attr), f"{module}.{name}"


def test_what_liger_cpp_implements_is_liger_cpp():
    """The names liger_cpp implements are not stubs, and are liger_cpp's objects (same classes)."""
    import liger_kernel.chunked_loss as kcl
    import liger_kernel.transformers as kt
    from liger_kernel.transformers import monkey_patch as kmp

    from liger_cpp import chunked_loss as cl
    from liger_cpp import transformers as lt
    from liger_cpp.transformers import monkey_patch as mp

    for name in (
        "LigerRMSNorm",
        "LigerLayerNorm",
        "LigerFusedAddRMSNorm",
        "LigerSwiGLUMLP",
        "LigerGEGLUMLP",
        "LigerPhi3SwiGLUMLP",
        "LigerQwen3MoeSwiGLUMLP",
        "LigerBlockSparseTop2MLP",
        "LigerMLP",
        "LigerFalconH1MLP",
        "LigerFusedLinearKLDivLoss",
        "LigerCrossEntropyLoss",
        "LigerFusedLinearCrossEntropyLoss",
        "liger_rotary_pos_emb",
        "AutoLigerKernelForCausalLM",
        "_apply_liger_kernel",
        "_apply_liger_kernel_to_instance",
    ):
        assert getattr(kt, name) is getattr(lt, name), name
    for name in ("DPO", "ORPO", "CPO", "SimPO", "KTO"):
        assert getattr(kcl, f"LigerFusedLinear{name}Loss") is getattr(cl, f"LigerFusedLinear{name}Loss")
    assert kmp.MODEL_TYPE_TO_APPLY_LIGER_FN is mp.MODEL_TYPE_TO_APPLY_LIGER_FN
    for model_type, fn in mp.MODEL_TYPE_TO_APPLY_LIGER_FN.items():
        if model_type in mp.BEYOND_LIGER:  # liger_cpp's own (Gemma 3n): not in Liger-Kernel's surface
            assert model_type not in REF["model_type_to_apply_fn"], model_type
            continue
        assert model_type in REF["model_type_to_apply_fn"], model_type  # a Liger-Kernel model type
        assert getattr(kt, fn.__name__) is fn
    missing = [
        fn for t, fn in REF["model_type_to_apply_fn"].items() if t not in mp.MODEL_TYPE_TO_APPLY_LIGER_FN
    ]
    for name in missing:
        if not hasattr(mp, name):
            assert _is_stub(getattr(kt, name)), name


def _params(sig: inspect.Signature, drop_self=False):
    ps = list(sig.parameters.values())
    return ps[1:] if drop_self else ps


def _check_params(where, ours, ref, exact=True, stub=False):
    """ours (inspect.Parameters) against the reference's list: same names, kinds and defaults in the
    same order (with exact=False the reference's are a prefix of ours; the rest have defaults). Only
    stubs keep Liger-Kernel's in_place=True default."""
    names = [p.name for p in ours]
    ref_names = [r[0].lstrip("*") for r in ref]
    if exact:
        assert names == ref_names, f"{where}: {names} != Liger-Kernel's {ref_names}"
    else:
        assert names[: len(ref_names)] == ref_names, f"{where}: {names} does not start with {ref_names}"
        for p in ours[len(ref_names) :]:
            assert p.default is not p.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL), f"{where}: {p}"
    for p, r in zip(ours, ref):
        if r[0].startswith("**"):
            assert p.kind is p.VAR_KEYWORD, f"{where}: {p.name}"
            continue
        if r[0].startswith("*"):
            assert p.kind is p.VAR_POSITIONAL, f"{where}: {p.name}"
            continue
        want_kind = p.KEYWORD_ONLY if "kwonly" in r else p.POSITIONAL_OR_KEYWORD
        if "posonly" in r:
            want_kind = p.POSITIONAL_ONLY
        assert p.kind is want_kind, f"{where}: {p.name} is {p.kind}"
        rest = [x for x in r[1:] if x not in ("kwonly", "posonly")]
        if not rest:
            assert p.default is p.empty, (
                f"{where}: {p.name} has a default ({p.default!r}), Liger-Kernel's not"
            )
            continue
        assert p.default is not p.empty, f"{where}: {p.name} has no default; Liger-Kernel's is {rest[0]}"
        try:
            want = ast.literal_eval(rest[0])
        except (ValueError, SyntaxError):
            continue  # an expression (a module constant): only that there is a default
        if p.name == IN_PLACE_EXCEPTION and want is True and not stub:
            assert p.default is False, f"{where}: in_place"
            continue
        assert type(p.default) is type(want) and p.default == want, (
            f"{where}: {p.name}={p.default!r}, Liger-Kernel's {want!r}"
        )


def _check_entry(where, obj, entry, exact=True, stub=False):
    kind = entry["kind"]
    if kind == "function":
        _check_params(where, _params(inspect.signature(obj)), entry["params"], exact, stub)
    elif kind == "autograd_function" and where in EXTENSION_BASES and not stub:
        # Liger-Kernel's base is not applied itself (its forward takes the subclass first, then ctx):
        # the reference's "apply" is that forward's parameters after (cls, ctx), checked there.
        params = _params(inspect.signature(obj.forward))
        assert [p.name for p in params[:2]] == ["cls", "ctx"], f"{where}.forward: {params[:2]}"
        _check_params(where + ".forward", params[2:], entry["apply"], exact, stub)
    elif kind == "autograd_function" and "apply" in entry:
        _check_params(where + ".apply", _params(inspect.signature(obj.apply)), entry["apply"], exact, stub)
    elif kind in ("module", "class"):
        for part in ("init", "forward", "from_pretrained", "from_config", "apply"):
            if part not in entry:
                continue
            method = {"init": "__init__"}.get(part, part)
            fn = getattr(obj, method)
            drop = part in ("init", "forward")
            _check_params(f"{where}.{method}", _params(inspect.signature(fn), drop), entry[part], exact, stub)
        if "fields" in entry and not stub:
            import dataclasses

            fields = {f.name: f for f in dataclasses.fields(obj)}
            for field in entry["fields"]:
                assert field[0] in fields, f"{where}: field {field[0]}"
                if len(field) > 1:
                    assert fields[field[0]].default == ast.literal_eval(field[1]), f"{where}.{field[0]}"


# Liger-Kernel's base classes for one's own losses that liger_cpp implements (subclassed, never applied).
EXTENSION_BASES = {
    "liger_kernel.chunked_loss.fused_linear_distillation.LigerFusedLinearDistillationBase",
    "liger_kernel.chunked_loss.fused_linear_preference.LigerFusedLinearPreferenceBase",
    "liger_kernel.chunked_loss.fused_linear_ppo.LigerFusedLinearPPOBase",
    "liger_kernel.chunked_loss.fused_linear_unpaired_preference.LigerFusedLinearUnpairedPreferenceBase",
}


# Implemented names whose signature differs from Liger-Kernel's until another change lands: name ->
# the reason. While it does, the difference must be exactly that one; afterwards the full check runs.
PENDING = {
    "liger_kernel.transformers.fused_linear_cross_entropy.LigerFusedLinearCrossEntropyLoss": (
        "use_token_scaling (TRL's DFT loss) is added to liger_cpp's module by the opslayer change"
    ),
}


def _pending(where, obj, entry):
    """True while a PENDING difference remains (asserted to be that difference)."""
    try:
        _check_entry(where, obj, entry, exact=False)
    except AssertionError as e:
        assert "use_token_scaling" in str(e), str(e)
        return True
    return False


def test_signatures_of_everything_implemented_match_liger():
    checked = []
    for module, name, entry in _entries({"function", "module", "class", "autograd_function"}):
        obj = _resolved(module, name)
        if _is_stub(obj) or obj is None:
            continue
        where = f"{module}.{name}"
        if where in PENDING and _pending(where, obj, entry):
            continue
        # liger_cpp's own objects may take options of liger_cpp's after Liger-Kernel's; the compat
        # package's wrappers and adapters take exactly Liger-Kernel's.
        _check_entry(where, obj, entry, exact=not getattr(obj, "__module__", "").startswith("liger_cpp"))
        checked.append(where)
    assert len(checked) >= 60, checked  # modules, functional, ops / chunked Functions, patchers, helpers


def test_every_reference_name_is_implemented():
    """Since 2026-12-07 (evening) no name of the reference resolves to a stub; one that did again
    would be a regression."""
    stubs = [
        f"{module}.{name}"
        for module, name, _ in _entries({"function", "module", "class", "autograd_function"})
        if _is_stub(_resolved(module, name))
    ]
    assert stubs == []


@pytest.mark.parametrize(
    "module,name",
    [
        ("liger_kernel.transformers.moe", "LigerExpertParallelFusedMoe"),  # module
        ("liger_kernel.ops.mhc", "mhc_pre_fwd"),  # function with keyword-only parameters
        ("liger_kernel.ops.swiglu", "LigerSiLUMulFunction"),  # autograd Function
    ],
)
def test_stubs_have_liger_signatures_and_raise_not_implemented(module, name):
    """The stand-ins the compat package makes for a name liger_cpp lacks (every one is implemented
    now; these are made from real reference entries): Liger-Kernel's signature, and a clear
    NotImplementedError naming the feature when used."""
    from liger_kernel._surface import make_stub

    entry = MODULES[module][name]
    obj = make_stub(module, name, entry)
    where = f"{module}.{name}"
    assert _is_stub(obj) or entry["kind"] == "function"
    _check_entry(where, obj, entry, stub=True)
    with pytest.raises(NotImplementedError, match=f"{where}.*not implemented by liger_cpp"):
        if entry["kind"] == "autograd_function":
            obj.apply()
        else:
            obj()


def test_liger_cpp_own_api_takes_liger_arguments_in_liger_order():
    """liger_cpp's own functional and modules with Liger-Kernel's names: Liger-Kernel's parameters
    first, in its order with its defaults (liger_cpp's own options after them)."""
    from liger_cpp.chunked_loss import functional as ccf
    from liger_cpp.transformers import functional as ctf

    ref_f = MODULES["liger_kernel.transformers.functional"]
    checked = 0
    for name, entry in ref_f.items():
        if entry["kind"] != "function" or not hasattr(ctf, name):
            continue
        if (
            name == "liger_fused_linear_cross_entropy"
            and "use_token_scaling" not in inspect.signature(getattr(ctf, name)).parameters
        ):
            continue  # added by the opslayer change (see PENDING)
        params = entry["params"]
        if name == "liger_fused_linear_cross_entropy":
            params = params[:-1]  # chunk_mem_const: Liger-Kernel's chunk sizing constant (not in liger_cpp)
        _check_params(
            f"liger_cpp.transformers.functional.{name}",
            _params(inspect.signature(getattr(ctf, name))),
            params,
            exact=False,
        )
        checked += 1
    for n in ("dpo", "orpo", "cpo", "simpo", "kto"):
        mod = {"simpo": "simpo_loss"}.get(n, f"{n}_loss")
        fn_entry = next(
            e for k, e in MODULES[f"liger_kernel.chunked_loss.{mod}"].items() if k.endswith("Function")
        )
        _check_params(
            f"liger_fused_linear_{n}",
            _params(inspect.signature(getattr(ccf, f"liger_fused_linear_{n}"))),
            fn_entry["apply"],
        )
        checked += 1
    assert checked >= 12


# --------------------------------------------------------------------------------------------
# Liger-Kernel's positional order == keyword calls of liger_cpp's own API


def _close(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif hasattr(a, "__dataclass_fields__"):
        for f in a.__dataclass_fields__:
            _close(getattr(a, f), getattr(b, f))
    else:
        assert a == b


def _positional(ref_params, values):
    """Values of Liger-Kernel's parameters (a name -> value dict), in its positional order."""
    names = [p[0] for p in ref_params]
    assert set(values) <= set(names), set(values) - set(names)
    last = max(names.index(k) for k in values)
    return [
        values[n] if n in values else ast.literal_eval(ref_params[i][1])
        for i, n in enumerate(names[: last + 1])
    ]


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return g, r


def _functional_cases():
    g, r = _data()
    x, w, b = r(7, 6), r(11, 6), r(11)
    t = torch.randint(0, 11, (7,), generator=g)
    t[2] = 3  # ignore_index below
    logits = r(7, 11)
    q, k, cos, sin = r(2, 4, 5, 8), r(2, 2, 5, 8), r(1, 5, 8), r(1, 5, 8)
    X, R, W, B = r(3, 6), r(3, 6), r(6), r(6)
    return {
        "liger_cross_entropy": dict(
            input=logits,
            target=t,
            weight=r(11).abs() + 0.5,
            ignore_index=3,
            reduction="sum",
            label_smoothing=0.1,
            lse_square_scale=0.01,
            softcap=4.0,
            return_z_loss=True,
            return_token_accuracy=True,
            return_predicted_tokens=True,
        ),
        "liger_fused_linear_cross_entropy": dict(
            input=x,
            weight=w,
            target=t,
            bias=b,
            ce_weight=r(11).abs() + 0.5,
            ignore_index=3,
            lse_square_scale=0.01,
            label_smoothing=0.1,
            reduction="sum",
            softcap=4.0,
            return_z_loss=True,
            accum_dtype=torch.float64,
            return_token_accuracy=True,
            return_predicted_tokens=True,
        ),
        "liger_rms_norm": dict(X=X, W=W, eps=1e-3, offset=1.0, casting_mode="gemma", in_place=False),
        "liger_fused_add_rms_norm": dict(
            X=X, R=R, W=W, eps=1e-3, offset=1.0, casting_mode="gemma", in_place=False
        ),
        "liger_layer_norm": dict(X=X, W=W, B=B, eps=1e-3),
        "liger_rope": dict(
            q=q,
            k=k,
            cos=cos[..., :4].repeat(1, 1, 2),
            sin=sin[..., :4].repeat(1, 1, 2),
            unsqueeze_dim=1,
            rotary_dim=8,
        ),
        "liger_qwen2vl_mrope": dict(
            q=q, k=k, cos=r(3, 2, 5, 8), sin=r(3, 2, 5, 8), mrope_section=[1, 1, 2], unsqueeze_dim=1
        ),
        "liger_swiglu": dict(a=X, b=R),
        "liger_geglu": dict(a=X, b=R),
    }


@pytest.mark.parametrize("name", list(_functional_cases()))
def test_functional_positional_in_liger_order_equals_liger_cpp_keywords(name):
    from liger_kernel.transformers import functional as kf

    from liger_cpp.transformers import functional as ctf

    values = _functional_cases()[name]
    ref = MODULES["liger_kernel.transformers.functional"][name]["params"]
    got = getattr(kf, name)(*_positional(ref, values))
    want = getattr(ctf, name)(**{("X" if k == "X" else k): v for k, v in values.items()})
    _close(got, want)


def _chunked_cases():
    g, r = _data(1)
    B, T, H, V = 2, 4, 6, 9
    x, w, b = r(2 * B, T, H), r(V, H) * 0.5, r(V) * 0.1
    t = torch.randint(0, V, (2 * B, T), generator=g)
    t[0, :2] = -7
    rx, rw, rb = r(2 * B, T, H), r(V, H) * 0.5, r(V) * 0.1
    nll_t = torch.randint(0, V, (2 * B, T), generator=g)
    kx, kt = x[:3], t[:3]
    labels = torch.tensor([True, False, True])
    common = dict(_input=x, weight=w, target=t, bias=b, ignore_index=-7, beta=0.3, chunk_size=1)
    return {
        "dpo": dict(
            common,
            ref_input=rx,
            ref_weight=rw,
            ref_bias=rb,
            compute_nll_loss=True,
            use_ref_model=True,
            average_log_prob=True,
            loss_type="robust",
            label_smoothing=0.2,
            discopop_tau=0.1,
            alpha=0.5,
        ),
        "orpo": dict(common, compute_nll_loss=True, nll_target=nll_t),
        "cpo": dict(common, alpha=0.5, label_smoothing=0.2, compute_nll_loss=True, average_log_prob=True),
        "simpo": dict(common, alpha=0.5, label_smoothing=0.2, compute_nll_loss=True, gamma=0.7),
        "kto": dict(
            _input=kx,
            weight=w,
            target=kt,
            preference_labels=labels,
            bias=b,
            ref_input=rx[:3],
            ref_weight=rw,
            ref_bias=rb,
            kl=torch.tensor(0.2, dtype=torch.float64),
            ignore_index=-7,
            beta=0.3,
            use_ref_model=True,
            average_log_prob=True,
        ),
    }


@pytest.mark.parametrize("name", list(_chunked_cases()))
def test_chunked_functional_positional_in_liger_order_equals_keywords(name):
    from liger_kernel.chunked_loss import functional as kcf

    from liger_cpp.chunked_loss import functional as ccf

    values = _chunked_cases()[name]
    mod = f"liger_kernel.chunked_loss.{name}_loss"
    ref = next(e for k, e in MODULES[mod].items() if k.endswith("Function"))["apply"]
    fn = getattr(kcf, f"liger_fused_linear_{name}")
    got = fn(*_positional(ref, values))
    want = getattr(ccf, f"liger_fused_linear_{name}")(**values)
    _close(got, want)
    cls = next(k for k in MODULES[mod] if k.endswith("Function"))
    _close(_resolved(mod, cls).apply(*_positional(ref, values)), want)


def _ops_cases():
    f = _functional_cases()
    ce, flce = f["liger_cross_entropy"], f["liger_fused_linear_cross_entropy"]
    ce_args = {k: v for k, v in ce.items() if k not in ("input",)}
    return {
        "LigerCrossEntropyFunction": (
            dict(_input=ce["input"], **ce_args),
            "liger_cross_entropy",
            dict(input=ce["input"], **ce_args),
        ),
        "LigerFusedLinearCrossEntropyFunction": (
            dict(_input=flce["input"], **{k: v for k, v in flce.items() if k != "input"}),
            "liger_fused_linear_cross_entropy",
            flce,
        ),
        "LigerRMSNormFunction": (f["liger_rms_norm"], "liger_rms_norm", f["liger_rms_norm"]),
        "LigerFusedAddRMSNormFunction": (
            f["liger_fused_add_rms_norm"],
            "liger_fused_add_rms_norm",
            f["liger_fused_add_rms_norm"],
        ),
        "LigerLayerNormFunction": (f["liger_layer_norm"], "liger_layer_norm", f["liger_layer_norm"]),
        "LigerRopeFunction": (f["liger_rope"], "liger_rope", f["liger_rope"]),
        "LigerQwen2VLMRopeFunction": (
            f["liger_qwen2vl_mrope"],
            "liger_qwen2vl_mrope",
            f["liger_qwen2vl_mrope"],
        ),
        "LigerSiLUMulFunction": (f["liger_swiglu"], "liger_swiglu", f["liger_swiglu"]),
        "LigerGELUMulFunction": (f["liger_geglu"], "liger_geglu", f["liger_geglu"]),
    }


@pytest.mark.parametrize("name", list(_ops_cases()))
def test_ops_function_apply_in_liger_order(name):
    """liger_kernel.ops.<Function>.apply(Liger-Kernel's positional order) == liger_cpp's functional
    (the cross-entropy family as Liger's 4-tuple)."""
    import liger_kernel.ops as ops

    from liger_cpp.transformers import functional as ctf

    values, functional, kw = _ops_cases()[name]
    module = next(m for m, names in MODULES.items() if m.startswith("liger_kernel.ops.") and name in names)
    ref = MODULES[module][name]["apply"]
    got = getattr(ops, name).apply(*_positional(ref, values))
    assert getattr(ops, name) is _resolved(module, name)
    want = getattr(ctf, functional)(**kw)
    if name in ("LigerCrossEntropyFunction", "LigerFusedLinearCrossEntropyFunction"):
        want = (want.loss, want.z_loss, want.token_accuracy, want.predicted_tokens)
    _close(got, want)


def test_silu_mul_multipliers_and_fused_linear_cross_entropy_tuple():
    import liger_kernel.ops as ops

    g, r = _data(3)
    a, b = r(4, 6).requires_grad_(True), r(4, 6)
    got = ops.LigerSiLUMulFunction.apply(a, b, 0.5, 3.0)
    torch.testing.assert_close(got, torch.nn.functional.silu(a * 0.5) * b * 3.0)
    x, w, t = r(5, 6), r(7, 6), torch.randint(0, 7, (5,), generator=g)
    loss, z, acc, pred = ops.LigerFusedLinearCrossEntropyFunction.apply(x, w, t)
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy((x @ w.T).float(), t).to(loss.dtype))
    assert z is None and acc is None and pred is None


def test_chunked_loss_results_have_liger_shapes():
    """(loss, metrics) with Liger-Kernel's metric tuples: DPO, CPO, SimPO 7 (logps, logits means,
    nll, rewards), ORPO 9 (+ log_odds_ratio, log_odds_chosen), KTO 6 (sums)."""
    from liger_kernel.chunked_loss import functional as kcf

    for name, n in [("dpo", 7), ("orpo", 9), ("cpo", 7), ("simpo", 7), ("kto", 6)]:
        values = _chunked_cases()[name]
        loss, metrics = getattr(kcf, f"liger_fused_linear_{name}")(**values)
        assert loss.dim() == 0 and isinstance(metrics, tuple) and len(metrics) == n, (name, len(metrics))
        assert all(isinstance(m, torch.Tensor) for m in metrics)
    B = _chunked_cases()["dpo"]["target"].shape[0] // 2
    _, m = kcf.liger_fused_linear_dpo(**_chunked_cases()["dpo"])
    assert [tuple(t.shape) for t in m] == [(B,), (B,), (), (), (), (B,), (B,)]


def test_rope_variants_of_liger():
    """liger_kernel.transformers.rope's GPT-OSS (whole head, cos / sin of width head_dim / 2) and
    Qwen3-VL vision ((seq, heads, head_dim) layout, float32 math) replacements."""
    from liger_kernel.transformers.rope import liger_rotary_pos_emb_gpt_oss, liger_rotary_pos_emb_vision

    g, r = _data(4)

    def rotate(x, cos, sin):  # HF's rotate-half formula
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    q, k, f = r(2, 4, 5, 8), r(2, 2, 5, 8), r(1, 5, 4)
    got = liger_rotary_pos_emb_gpt_oss(q, k, f.cos(), f.sin())
    cos, sin = torch.cat([f.cos()] * 2, -1)[:, None], torch.cat([f.sin()] * 2, -1)[:, None]
    _close_tol = dict(rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got[0], rotate(q, cos, sin), **_close_tol)
    torch.testing.assert_close(got[1], rotate(k, cos, sin), **_close_tol)
    qv, kv, fv = r(5, 3, 8).to(torch.bfloat16), r(5, 3, 8).to(torch.bfloat16), r(5, 4)
    cv, sv = torch.cat([fv.cos()] * 2, -1), torch.cat([fv.sin()] * 2, -1)
    got = liger_rotary_pos_emb_vision(qv, kv, cv, sv)
    assert got[0].dtype == torch.bfloat16 and got[0].shape == qv.shape
    want = rotate(qv.double(), cv[:, None], sv[:, None]).to(torch.bfloat16)
    torch.testing.assert_close(got[0], want, rtol=1.6e-2, atol=1e-2)


def test_fsdp_forward_redirection():
    """_FSDPForwardRedirection runs a method inside the wrapper's forward (FSDP1's all-gather
    around it), and the wrapped module's forward is its own again afterwards."""
    from liger_kernel.transformers.fsdp import _FSDPForwardRedirection

    events = []

    class Wrapper(torch.nn.Module):  # stands in for FullyShardedDataParallel: hooks around forward
        def __init__(self, inner):
            super().__init__()
            self._fsdp_wrapped_module = inner

        def forward(self, *args, **kwargs):
            events.append("gather")
            out = self._fsdp_wrapped_module(*args, **kwargs)
            events.append("release")
            return out

    inner = torch.nn.Linear(3, 2)
    wrapper = Wrapper(inner)

    def method(module, x, scale=1.0):
        events.append("method")
        return module(x) * scale

    x = torch.randn(4, 3)
    out = _FSDPForwardRedirection()(wrapper, method, inner, x, scale=2.0)
    assert events == ["gather", "method", "release"]
    torch.testing.assert_close(out, inner(x) * 2.0)
    assert "forward" not in vars(inner)


@pytest.mark.parametrize("num_items", [None, 5])
def test_liger_for_causal_lm_loss(num_items, monkeypatch):
    """Axolotl's generic forward calls LigerForCausalLMLoss(hidden_states, lm_head_weight, labels,
    hidden_size, ...): HF's ForCausalLMLoss, through liger_kernel.transformers.functional at call
    time (a replacement there applies; kwargs outside its signature are dropped)."""
    from liger_kernel.transformers import functional
    from liger_kernel.transformers.model.loss_utils import LigerForCausalLMLoss

    g, r = _data(6)
    h, w = r(2, 5, 6).requires_grad_(True), r(9, 6)
    labels = torch.randint(0, 9, (2, 5), generator=g)
    labels[0, :2] = -100
    n = None if num_items is None else torch.tensor(num_items)
    target = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
    logits = (h @ w.T).reshape(-1, 9)
    want = torch.nn.functional.cross_entropy(logits, target, reduction="sum" if n is not None else "mean")
    want = want / n if n is not None else want
    calls = []
    fn = functional.liger_fused_linear_cross_entropy
    monkeypatch.setattr(
        functional, "liger_fused_linear_cross_entropy", lambda *a, **k: calls.append(k) or fn(*a, **k)
    )
    got = LigerForCausalLMLoss(h, w, labels, 6, num_items_in_batch=n, not_an_option=1, accum_dtype=None)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)  # the fused loss is float32
    assert len(calls) == 1 and "not_an_option" not in calls[0]
    out = LigerForCausalLMLoss(h, w, labels, 6, num_items_in_batch=n, return_token_accuracy=True)
    torch.testing.assert_close(out.loss.double(), want, rtol=1e-6, atol=1e-6)
    valid = target != -100
    acc = ((logits.argmax(-1) == target) & valid).sum() / valid.sum()
    torch.testing.assert_close(out.token_accuracy.double(), acc.double())


def test_mlp_and_fused_linear_kl_div_functions_apply_in_liger_order():
    """liger_kernel.ops' LigerMLPFunction and LigerFusedLinearKLDivFunction in Liger-Kernel's
    positional order equal liger_cpp's calls with keywords."""
    import liger_kernel.ops as ops

    from liger_cpp.ops.fused_linear_kl_div import fused_linear_kl_div
    from liger_cpp.transformers.swiglu import liger_mlp

    torch.manual_seed(0)
    x = torch.randn(5, 8)
    g, u, d = torch.randn(12, 8), torch.randn(12, 8), torch.randn(8, 12)
    _close(
        ops.LigerMLPFunction.apply(x, g, u, d, 0.5, 2.0),
        liger_mlp(x, g, u, d, gate_multiplier=0.5, down_multiplier=2.0),
    )
    w, q = torch.randn(11, 8), torch.softmax(torch.randn(5, 11), -1)
    lab = torch.tensor([1, -100, 3, 4, 5])
    got = ops.LigerFusedLinearKLDivFunction.apply(x, w, q, lab, "sum", -100, 2.0, 1e-8, None)
    _close(got, fused_linear_kl_div(x, w, q, lab, reduction="sum", temperature=2.0, eps=1e-8))
    import liger_kernel.transformers.functional as kf

    _close(kf.liger_fused_linear_kl_div(x, w, q, lab, "sum", -100, 2.0, 1e-8, None), got)


def test_env_report_and_device_helpers(capsys):
    """`python -m liger_kernel.env_report` (Liger's bug-report template) prints Liger's fields and
    liger_cpp's build; liger_kernel.utils' device helpers give Liger's answers here."""
    from liger_kernel import utils
    from liger_kernel.env_report import print_env_report

    print_env_report()
    out = capsys.readouterr().out
    for field in ("Operating System:", "PyTorch version: " + torch.__version__, "Transformers version:"):
        assert field in out, out
    assert f"liger_cpp {liger_cpp.__version__}" in out, out
    import liger_kernel

    # the same compatibility package as this process's (ensure_compat may have put it first on sys.path)
    where = os.path.dirname(os.path.dirname(liger_kernel.__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([where, REPO, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-m", "liger_kernel.env_report"], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0 and "liger_cpp" in run.stdout, run.stderr[-2000:]
    assert utils.infer_comm_backend() in ("nccl", "mpi", "gloo")
    if torch.cuda.is_available():
        major, _ = torch.cuda.get_device_capability(0)
        assert utils.infer_device_arch() == ("hopper" if major == 9 else utils.infer_device_arch())
        assert utils.get_total_gpu_memory() > 0
    else:
        assert utils.infer_device_arch() == "cpu"
        with pytest.raises(RuntimeError, match="Unsupported device"):
            utils.get_total_gpu_memory()


def test_triton_cache_manager(tmp_path, monkeypatch):
    """apply_liger_triton_cache_manager points Triton at LigerTritonFileCacheManager, whose put
    writes the whole entry where Triton's get finds it, leaving no staging directory behind."""
    pytest.importorskip("triton")
    from liger_kernel.triton import apply_liger_triton_cache_manager
    from liger_kernel.triton.monkey_patch import LigerTritonFileCacheManager
    from triton.runtime.cache import get_cache_manager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    apply_liger_triton_cache_manager()
    assert (
        os.environ["TRITON_CACHE_MANAGER"] == "liger_kernel.triton.monkey_patch:LigerTritonFileCacheManager"
    )
    m = get_cache_manager("0123abcd")
    assert isinstance(m, LigerTritonFileCacheManager)
    p = m.put(b"\x00kernel", "k.cubin")
    q = m.put("source text", "k.json")
    assert m.get_file("k.cubin") == p and open(p, "rb").read() == b"\x00kernel"
    assert open(q).read() == "source text"
    assert sorted(os.listdir(os.path.dirname(p))) == ["k.cubin", "k.json"]
