"""SASS digest of every kernel in a CUDA binary, for "moved code, same machine code" checks.

    python scripts/sass_digest.py liger_cpp/_C.abi3.so --arch sm_90a > before.json
    ... change the code, rebuild ...
    python scripts/sass_digest.py liger_cpp/_C.abi3.so --arch sm_90a --compare before.json
    python scripts/sass_digest.py liger_cpp/_C.abi3.so --compare old/_C.abi3.so   # a binary works too
    python scripts/sass_digest.py liger_cpp/_C.abi3.so --modules   # each .cu's module: bytes, kernels

Runs `cuobjdump --dump-sass` (the CUDA toolkit; no GPU needed), splits the listing per function and
hashes each function's instructions (encodings included; runs of blanks collapsed, since the
listing pads every instruction to its module's widest one: splitting a .cu file would change the
padding, not the code). --compare prints the kernels that are new, gone, renamed (gone under one
name, new under another with the same body: a removed template parameter) or changed, and exits 1
when any kernel present in both differs. A digest written before the blanks were collapsed (no
"__format__" entry) is compared with raw hashes.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

# Names in an anonymous namespace carry a hash of the file's path, which moving a file changes.
# The source file in an anonymous namespace's name (its length, then the name with '.' as '_').
_SRC = re.compile(r"_GLOBAL__N__[0-9a-f]+_\d+_([A-Za-z0-9_]+?)_cu_[0-9a-f]{8}")
_ANON = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_[A-Za-z0-9_]+?_cu_[0-9a-f]{8}")


def _cuobjdump() -> str:
    found = shutil.which("cuobjdump") or os.path.join(
        os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump"
    )
    if os.path.exists(found):
        return found
    # The toolkit on the CI-like machine lacks it; Triton's wheel ships one.
    extra = glob.glob(
        os.path.join(os.path.dirname(os.__file__), "site-packages/triton/backends/nvidia/bin/cuobjdump")
    )
    if not extra:
        raise SystemExit("cuobjdump not found (CUDA toolkit or the triton wheel)")
    return extra[0]


FORMAT = "sass-digest-2: blanks collapsed"


def digest(path: str, arch: str, raw: bool = False) -> dict[str, str]:
    text = subprocess.run(
        [_cuobjdump(), "--dump-sass", path], check=True, capture_output=True, text=True
    ).stdout
    out: dict[str, str] = {}
    cur_arch, name, body = None, None, []

    def flush():
        if name is not None and cur_arch == arch:
            h = hashlib.sha256("\n".join(body).encode()).hexdigest()
            if name in out and out[name] != h:
                raise SystemExit(f"{name}: two different bodies for {arch}")
            out[name] = h

    for line in text.splitlines():
        m = re.match(r"\s*arch = (\S+)", line)
        if m:
            flush()
            name, body, cur_arch = None, [], m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            flush()
            name, body = _ANON.sub("_GLOBAL__N_", m.group(1)), []
            continue
        if name is not None and "/*" in line:
            body.append(line.strip() if raw else " ".join(line.split()))
    flush()
    return out


def modules(path: str, arch: str) -> list[tuple[str, int, int]]:
    """(source file, cubin bytes, kernels) of each `arch` module in the binary: what CUDA loads
    whole on the first use of one of its kernels. The source is read from the anonymous
    namespace's name in the module's kernels."""
    import tempfile

    out = []
    tag = arch.rstrip("a")  # cuobjdump names sm_90a cubins "...sm_90.cubin"
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            [_cuobjdump(), "-xelf", "all", os.path.abspath(path)], cwd=d, check=True, capture_output=True
        )
        for f in sorted(os.listdir(d)):
            if not f.endswith(f".{tag}.cubin"):
                continue
            text = subprocess.run(
                [_cuobjdump(), "--dump-sass", os.path.join(d, f)], check=True, capture_output=True, text=True
            ).stdout
            names = re.findall(r"Function : (\S+)", text)
            srcs = {m.group(1) for m in (_SRC.search(n) for n in names) if m}
            src = ",".join(sorted(s + ".cu" for s in srcs)) or "(no kernels)"
            out.append((src, os.path.getsize(os.path.join(d, f)), len(names)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binary")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--compare", help="a digest JSON written earlier by this script, or a binary")
    p.add_argument("--modules", action="store_true", help="list each module's source, size and kernels")
    a = p.parse_args()
    if a.modules:
        rows = modules(a.binary, a.arch)
        for src, size, n in sorted(rows):
            print(f"{size:>10} bytes {n:>5} kernels  {src}")
        total, kernels = sum(r[1] for r in rows), sum(r[2] for r in rows)
        print(f"{total:>10} bytes {kernels:>5} kernels  ({len(rows)} {a.arch} modules)")
        return 0
    if not a.compare:
        now = digest(a.binary, a.arch)
        json.dump({"__format__": FORMAT, **now}, sys.stdout, indent=0, sort_keys=True)
        print(f"{len(now)} {a.arch} kernels", file=sys.stderr)
        return 0
    if a.compare.endswith(".json"):
        before = json.load(open(a.compare))
        raw = before.pop("__format__", None) is None
        if raw:
            print("(a digest of the old format: comparing whitespace-sensitive hashes)", file=sys.stderr)
    else:
        raw = False
        before = digest(a.compare, a.arch)
    now = digest(a.binary, a.arch, raw=raw)
    gone = sorted(set(before) - set(now))
    new = sorted(set(now) - set(before))
    changed = sorted(k for k in set(now) & set(before) if now[k] != before[k])
    # Renamed: a body that went under one name and came back under another.
    new_by_hash: dict[str, list[str]] = {}
    for k in new:
        new_by_hash.setdefault(now[k], []).append(k)
    renamed = []
    for k in gone:
        if new_by_hash.get(before[k]):
            renamed.append((k, new_by_hash[before[k]].pop(0)))
    renamed_old = {o for o, _ in renamed}
    renamed_new = {n for _, n in renamed}
    for k in gone:
        if k not in renamed_old:
            print("gone   ", k)
    for k in new:
        if k not in renamed_new:
            print("new    ", k)
    for o, n in renamed:
        print("renamed", o, "->", n)
    for k in changed:
        print("CHANGED", k)
    same = len(set(now) & set(before)) - len(changed)
    print(
        f"{a.arch}: {same} identical, {len(changed)} changed, {len(renamed)} renamed (same body), "
        f"{len(gone) - len(renamed)} gone, {len(new) - len(renamed)} new"
    )
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
