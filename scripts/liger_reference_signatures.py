"""Regenerate compat/liger_kernel/_reference_signatures.json: the public names and call signatures of
Liger-Kernel that the compatibility package mirrors, read from a Liger-Kernel wheel's sources with
`ast` (nothing of Liger is imported or copied; only names, parameter lists and defaults).

    pip download --no-deps liger-kernel==0.8.5 -d /tmp/liger && \
        python3 scripts/liger_reference_signatures.py /tmp/liger/liger_kernel-0.8.5-py3-none-any.whl

What is recorded, per module of `liger_kernel`: functions (parameters), nn.Module classes
(constructor and forward), autograd Functions (forward without ctx: the order of `.apply`), other
classes (constructor; dataclass fields), re-exports (the defining module), and a few constants.
Backends (cuTile, CuTe DSL, Ascend), Megatron, testing helpers, Triton kernels (`*_kernel`) and
private names are left out, except the private names other projects import (listed below).
"""

import ast
import json
import os
import sys
import zipfile

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat", "liger_kernel")
SKIP_PARTS = ("backends", "cutile", "cutedsl", "cute", "megatron", "testing", "_nvidia_shared")
SKIP_MODULES = {"liger_kernel.ops.fused_moe_kernels"}
# Private names that Hugging Face, TRL, Axolotl or LLaMA-Factory import.
PRIVATE_KEPT = {"_apply_liger_kernel", "_apply_liger_kernel_to_instance", "_FSDPForwardRedirection"}
CONSTANTS = {"MODEL_TYPE_TO_APPLY_LIGER_FN", "PEFT_AVAILABLE", "torch_to_triton_dtype"}


def params(fn, drop):
    a = fn.args
    out = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for i, (p, d) in enumerate(zip(pos, defaults)):
        entry = [p.arg] if d is None else [p.arg, ast.unparse(d)]
        if i < len(a.posonlyargs):
            entry.append("posonly")
        out.append(entry)
    if a.vararg:
        out.append(["*" + a.vararg.arg])
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append([p.arg] + ([] if d is None else [ast.unparse(d)]) + ["kwonly"])
    if a.kwarg:
        out.append(["**" + a.kwarg.arg])
    return out[drop:]


def _method(cls, name):
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == name:
            return item
    return None


def _is_function_class(cls, known_functions):
    for b in cls.bases:
        s = ast.unparse(b)
        if s.endswith("autograd.Function") or s.split(".")[-1] in known_functions:
            return True
    return False


def _is_module_class(cls, known_modules):
    for b in cls.bases:
        s = ast.unparse(b)
        if s in ("nn.Module", "torch.nn.Module", "Module") or s.split(".")[-1] in known_modules:
            return True
    return False


def scan(mod, source, known_functions, known_modules, is_package):
    tree = ast.parse(source)
    names = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if node.name.startswith("_") and node.name not in PRIVATE_KEPT:
                continue
            triton_kernel = node.name.endswith("_kernel") and mod.startswith("liger_kernel.ops")
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if triton_kernel or any(d.startswith(("triton.", "tl.")) for d in decorators):
                continue
            names[node.name] = {"kind": "function", "params": params(node, 0)}
        elif isinstance(node, ast.ClassDef):
            if node.name.startswith("_") and node.name not in PRIVATE_KEPT:
                continue
            init = _method(node, "__init__")
            if _is_function_class(node, known_functions):
                known_functions.add(node.name)
                fwd = _method(node, "forward")
                entry = {"kind": "autograd_function"}
                if fwd is not None:
                    # forward(ctx, ...), classmethod forward(cls, ctx, ...), or the bases' static
                    # forward(cls, ctx, ...): .apply takes what follows ctx.
                    first = [a.arg for a in fwd.args.args[:2]]
                    entry["apply"] = params(fwd, first.index("ctx") + 1 if "ctx" in first else 1)
                names[node.name] = entry
            elif _is_module_class(node, known_modules):
                known_modules.add(node.name)
                entry = {"kind": "module", "bases": [ast.unparse(b) for b in node.bases]}
                if init is not None:
                    entry["init"] = params(init, 1)
                fwd = _method(node, "forward")
                if fwd is not None:
                    entry["forward"] = params(fwd, 1)
                names[node.name] = entry
            else:
                entry = {"kind": "class", "bases": [ast.unparse(b) for b in node.bases]}
                if any(ast.unparse(getattr(d, "func", d)).endswith("dataclass") for d in node.decorator_list):
                    entry["fields"] = [
                        [s.target.id] + ([] if s.value is None else [ast.unparse(s.value)])
                        for s in node.body
                        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    ]
                elif init is not None:
                    entry["init"] = params(init, 1)
                apply = _method(node, "apply")  # a dispatcher with an autograd Function's .apply
                if apply is not None and "staticmethod" in [ast.unparse(d) for d in apply.decorator_list]:
                    entry["apply"] = params(apply, 0)
                for m in ("from_pretrained", "from_config"):
                    f = _method(node, m)
                    if f is not None:
                        entry[m] = params(f, 1)
                names[node.name] = entry
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if not isinstance(t, ast.Name):
                    continue
                if t.id in CONSTANTS:
                    names[t.id] = {"kind": "value"}
                elif (
                    not t.id.startswith("_")
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "apply"
                ):  # liger_fused_linear_dpo = LigerFusedLinearDPOFunction.apply
                    names[t.id] = {"kind": "apply_of", "function": ast.unparse(node.value.value)}
    # A package's re-exports; a module's imports are its own, except the private names other
    # projects import through it (Axolotl: _FSDPForwardRedirection from ...trainer.orpo_trainer).
    top = [n for node in tree.body for n in ([node] + (node.body if isinstance(node, ast.Try) else []))]
    for node in top:  # (imports guarded by try: count too, e.g. transformers.trainer's)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("liger_kernel"):
            for a in node.names:
                local = a.asname or a.name
                if (local.startswith("_") or not is_package) and local not in PRIVATE_KEPT:
                    continue
                names.setdefault(local, {"kind": "alias", "target": f"{node.module}.{a.name}"})
    return names


def main(wheel):
    z = zipfile.ZipFile(wheel)
    sources = {}
    for n in z.namelist():
        if not (n.startswith("liger_kernel/") and n.endswith(".py")):
            continue
        mod = n[:-3].replace("/", ".")
        mod = mod[: -len(".__init__")] if mod.endswith(".__init__") else mod
        if mod in SKIP_MODULES or any(p in mod.split(".") for p in SKIP_PARTS):
            continue
        sources[mod] = (z.read(n).decode(), n.endswith("__init__.py"))
    version = next(
        line.split(":", 1)[1].strip()
        for n in z.namelist()
        if n.endswith("METADATA")
        for line in z.read(n).decode().splitlines()
        if line.startswith("Version:")
    )
    known_functions = {"LigerFusedLinearPreferenceBase", "LigerFusedLinearUnpairedPreferenceBase"}
    known_functions |= {"LigerFusedLinearDistillationBase", "LigerFusedLinearPPOBase"}
    known_modules = set()
    modules = {}
    for _ in range(2):  # twice: base classes defined in other modules are known the second time
        for mod in sorted(sources):
            modules[mod] = scan(mod, *sources[mod][:1], known_functions, known_modules, sources[mod][1])
    # liger_kernel.transformers resolves the lazy names in its __getattr__ from monkey_patch / auto_model.
    tr = modules["liger_kernel.transformers"]
    for name, entry in modules["liger_kernel.transformers.monkey_patch"].items():
        if name.startswith(("apply_liger_kernel_to_", "_apply_liger_kernel")) and entry["kind"] == "function":
            tr.setdefault(name, {"kind": "alias", "target": f"liger_kernel.transformers.monkey_patch.{name}"})
    tr.setdefault(
        "AutoLigerKernelForCausalLM",
        {"kind": "alias", "target": "liger_kernel.transformers.auto_model.AutoLigerKernelForCausalLM"},
    )
    mp_src = ast.parse(sources["liger_kernel.transformers.monkey_patch"][0])
    model_types = {}
    for node in mp_src.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "MODEL_TYPE_TO_APPLY_LIGER_FN" for t in node.targets
        ):
            for k, v in zip(node.value.keys, node.value.values):
                model_types[k.value] = v.id
    for names in modules.values():  # re-exports of modules that are left out (backends)
        for name in [k for k, e in names.items() if e["kind"] == "alias"]:
            target = names[name]["target"].rsplit(".", 1)[0]
            if names[name]["target"] in SKIP_MODULES or (target not in modules and target not in sources):
                del names[name]
    modules = {m: dict(sorted(n.items())) for m, n in sorted(modules.items())}
    data = {
        "liger_kernel_version": version,
        "how": "scripts/liger_reference_signatures.py (ast of the Liger-Kernel wheel's sources)",
        "model_type_to_apply_fn": model_types,
        "modules": modules,
    }
    # One line per name, so that a diff after regenerating shows what changed.
    lines = ["{"]
    for key in ("liger_kernel_version", "how", "model_type_to_apply_fn"):
        lines.append(f" {json.dumps(key)}: {json.dumps(data[key])},")
    lines.append(' "modules": {')
    mods = list(data["modules"].items())
    for i, (m, names) in enumerate(mods):
        lines.append(f"  {json.dumps(m)}: {{")
        items = list(names.items())
        for j, (n, e) in enumerate(items):
            lines.append(f"   {json.dumps(n)}: {json.dumps(e)}" + ("," if j < len(items) - 1 else ""))
        lines.append("  }" + ("," if i < len(mods) - 1 else ""))
    lines.append(" }")
    lines.append("}")
    with open(os.path.join(OUT, "_reference_signatures.json"), "w") as f:
        f.write("\n".join(lines) + "\n")
    json.loads("\n".join(lines))
    print(f"{len(modules)} modules, {sum(len(v) for v in modules.values())} names, Liger-Kernel {version}")


if __name__ == "__main__":
    main(sys.argv[1])
