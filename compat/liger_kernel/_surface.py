"""Liger-Kernel's public surface, read from _reference_signatures.json (the names and signatures of
Liger-Kernel's modules, written from its sources by scripts/liger_reference_signatures.py).

Every module of the reference exists under ``liger_kernel``: the few with code of their own are
files of this package; the others are made on import by ``_Finder`` from the reference. A name of a
module resolves, on first access, to

* what liger_cpp implements (``_implemented.implementation``: liger_cpp's object, or an adapter with
  Liger-Kernel's argument order);
* a re-export (Liger-Kernel's package ``__init__`` imports): the name in its defining module;
* otherwise a stub with Liger-Kernel's signature that raises NotImplementedError, naming the feature
  liger_cpp lacks, when called or constructed (so importing a framework's Liger integration never
  fails, and only using a missing feature does).
"""

import ast
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "_reference_signatures.json")) as _f:
    REFERENCE = json.load(_f)
MODULES: dict = REFERENCE["modules"]
LIGER_VERSION: str = REFERENCE["liger_kernel_version"]

# What the stubs name as missing, by the module's last component (default: the name itself).
_FEATURES = {
    "attn_res": "Attention Residuals",
    "cosine_similarity_loss": "the cosine-similarity distillation loss",
    "dyt": "Dynamic Tanh (DyT)",
    "embedding": "the experimental embedding kernel",
    "fused_ce_tvd": "fused cross entropy + total variation distance",
    "fused_linear_distillation": "the fused linear distillation losses",
    "fused_linear_jsd": "fused linear Jensen-Shannon divergence",
    "fused_linear_kl_div": "fused linear KL divergence",
    "fused_linear_ppo": "the fused linear PPO / GRPO losses",
    "fused_linear_scaled_cross_entropy": "fused linear scaled cross entropy",
    "fused_moe": "the fused MoE experts kernel",
    "fused_neighborhood_attention": "fused neighborhood attention",
    "group_norm": "GroupNorm",
    "grpo_loss": "the GRPO loss",
    "jsd": "the generalized Jensen-Shannon divergence (JSD)",
    "jsd_loss": "the fused linear JSD distillation loss",
    "kl_div": "KL divergence",
    "llama4_rope": "Llama 4's complex RoPE",
    "mhc": "manifold-constrained hyper-connections (mHC)",
    "mlp": "the fused SwiGLU MLP kernel",
    "mm_int8int2": "the int8 x int2 matmul",
    "modulated_rms_norm": "modulated RMSNorm",
    "moe": "the expert-parallel fused MoE",
    "multi_token_attention": "multi-token attention",
    "orpo_trainer": "LigerORPOTrainer",
    "poly_norm": "PolyNorm",
    "relu_squared": "ReLU squared",
    "softmax": "the softmax kernel",
    "sparsemax": "Sparsemax",
    "tiled_mlp": "the tiled MLP",
    "tvd": "the total variation distance (TVD)",
    "vocab_parallel_cross_entropy": "vocabulary-parallel cross entropy",
}


def _liger_cpp_version() -> str:
    import liger_cpp._version

    return liger_cpp._version.__version__


def _message(module: str, name: str, what: str = "") -> str:
    stem = module.rsplit(".", 1)[-1]
    feature = _FEATURES.get(stem, name)
    where = f"{module}.{name}"
    return (
        f"{where}{what}: {feature} is not implemented by liger_cpp {_liger_cpp_version()} (this "
        f"liger_kernel is liger_cpp's compatibility layer for Liger-Kernel {LIGER_VERSION}'s API). "
        "Use Liger-Kernel itself for it, or a liger_cpp that implements it."
    )


# --------------------------------------------------------------------------------------------
# signatures


def _default(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return _Unevaluated(text)


class _Unevaluated:
    """A default of Liger-Kernel's that is an expression (e.g. a module constant): shown as written."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def signature(params, *, leading=()) -> inspect.Signature:
    """An inspect.Signature from the reference's parameter list (`leading`: names put first, such
    as self / ctx)."""
    out = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in leading]
    for p in params:
        name = p[0]
        if name.startswith("**"):
            out.append(inspect.Parameter(name[2:], inspect.Parameter.VAR_KEYWORD))
            continue
        if name.startswith("*"):
            out.append(inspect.Parameter(name[1:], inspect.Parameter.VAR_POSITIONAL))
            continue
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        if "kwonly" in p[1:]:
            kind = inspect.Parameter.KEYWORD_ONLY
        elif "posonly" in p[1:]:
            kind = inspect.Parameter.POSITIONAL_ONLY
        rest = [x for x in p[1:] if x not in ("kwonly", "posonly")]
        default = _default(rest[0]) if rest else inspect.Parameter.empty
        out.append(inspect.Parameter(name, kind, default=default))
    return inspect.Signature(out)


# --------------------------------------------------------------------------------------------
# stubs


def _raiser(msg: str, sig: inspect.Signature, name: str, qualname: str, module: str):
    def stub(*args, **kwargs):
        raise NotImplementedError(msg)

    stub.__signature__ = sig
    stub.__name__, stub.__qualname__, stub.__module__ = name, qualname, module
    stub.__doc__ = msg
    stub._liger_cpp_missing = True
    return stub


def make_stub(module: str, name: str, entry: dict):
    """A stand-in for a Liger-Kernel name liger_cpp does not implement, with its signature."""
    kind = entry["kind"]
    if kind == "function":
        return _raiser(_message(module, name), signature(entry["params"]), name, name, module)
    if kind == "value":
        return None
    msg = _message(module, name)
    ns = {"__module__": module, "__doc__": msg, "_liger_cpp_missing": True}
    if kind == "autograd_function":
        import torch

        params = entry.get("apply", [["*args"], ["**kwargs"]])
        apply = _raiser(msg, signature(params), "apply", f"{name}.apply", module)
        ns["apply"] = staticmethod(apply)
        ns["forward"] = staticmethod(
            _raiser(msg, signature(params, leading=("ctx",)), "forward", name, module)
        )
        ns["backward"] = staticmethod(
            _raiser(msg, signature([["ctx"], ["*grad_outputs"]]), "backward", name, module)
        )
        return type(name, (torch.autograd.Function,), ns)
    init = _raiser(
        msg,
        signature(entry.get("init", [["*args"], ["**kwargs"]]), leading=("self",)),
        "__init__",
        name,
        module,
    )
    ns["__init__"] = init
    bases = (object,)
    if kind == "module":
        import torch

        bases = (torch.nn.Module,)
        if "forward" in entry:
            ns["forward"] = _raiser(
                msg, signature(entry["forward"], leading=("self",)), "forward", name, module
            )
    for method in ("from_pretrained", "from_config"):
        if method in entry:
            fn = _raiser(msg, signature(entry[method]), method, f"{name}.{method}", module)
            ns[method] = classmethod(lambda cls, *a, _fn=fn, **k: _fn(*a, **k))
    return type(name, bases, ns)


# --------------------------------------------------------------------------------------------
# name resolution


def _find_function_class(name: str):
    """(module, entry) of the autograd Function `name` in the reference (for `X = Function.apply`)."""
    for mod, names in MODULES.items():
        e = names.get(name)
        if e is not None and e["kind"] == "autograd_function":
            return mod, e
    return None, None


def resolve(module: str, name: str):
    """The object that liger_kernel `module`.`name` stands for (see the module docstring)."""
    from liger_kernel._implemented import implementation

    entry = MODULES.get(module, {}).get(name)
    found = implementation(module, name)
    if found is not None:
        return found
    if entry is None:
        sub = f"{module}.{name}"
        if sub in MODULES or _is_package(sub):
            # A submodule reached as an attribute before anything imported it (`import
            # liger_kernel.chunked_loss as m; m.grpo_loss`): Liger-Kernel's package __init__ files
            # import their submodules, which binds them; here the import happens on first access.
            return importlib.import_module(sub)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    if entry["kind"] == "alias":
        target_mod, _, attr = entry["target"].rpartition(".")
        if f"{module}.{name}" == entry["target"]:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target = importlib.import_module(target_mod)
        return getattr(target, attr)
    if entry["kind"] == "apply_of":
        fmod, fentry = _find_function_class(entry["function"])
        if fmod is not None:
            return getattr(importlib.import_module(fmod), entry["function"]).apply
        return _raiser(_message(module, name), signature([["*args"], ["**kwargs"]]), name, name, module)
    return make_stub(module, name, entry)


def complete(namespace: dict) -> None:
    """Give a module of this package the rest of its reference names, resolved on first access
    (PEP 562 module __getattr__), and an __all__ of its reference names."""
    module = namespace["__name__"]
    names = MODULES.get(module, {})

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = resolve(module, name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(names))

    namespace["__getattr__"] = __getattr__
    namespace["__dir__"] = __dir__
    namespace.setdefault("__all__", sorted(n for n in names if not n.startswith("_") or n in namespace))


# --------------------------------------------------------------------------------------------
# modules without a file


def _is_package(module: str) -> bool:
    prefix = module + "."
    return any(m.startswith(prefix) for m in MODULES)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module):
        module.__file__ = None
        complete(vars(module))


class _Finder(importlib.abc.MetaPathFinder):
    """Makes the reference's liger_kernel modules that have no file here (after the path finders)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("liger_kernel.") or not (fullname in MODULES or _is_package(fullname)):
            return None  # (a package of the reference may have no names of its own, or no __init__)
        pkg = _is_package(fullname)
        spec = importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=pkg)
        if pkg:
            spec.submodule_search_locations = []
        return spec


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


__all__ = ["LIGER_VERSION", "MODULES", "complete", "install", "make_stub", "resolve", "signature"]
