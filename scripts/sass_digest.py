"""SASS digest of every kernel in a CUDA binary, for "moved code, same machine code" checks.

    python scripts/sass_digest.py liger_cpp/_C.abi3.so --arch sm_90a > before.json
    ... change the code, rebuild ...
    python scripts/sass_digest.py liger_cpp/_C.abi3.so --arch sm_90a --compare before.json

Runs `cuobjdump --dump-sass` (the CUDA toolkit; no GPU needed), splits the listing per function and
hashes each function's instructions (encodings included). --compare prints the kernels that are new,
gone or changed and exits 1 when any kernel present in both differs. --compare with --by-body matches
kernels by their instructions instead of their names: a kernel renamed (e.g. a template parameter
removed) with the same machine code counts as identical and is printed as "renamed old -> new"; it
exits 1 when any kernel's body is not in the earlier digest.
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


def digest(path: str, arch: str) -> dict[str, str]:
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
            body.append(line.strip())
    flush()
    return out


def compare_bodies(before: dict[str, str], now: dict[str, str], arch: str) -> int:
    names_of: dict[str, list[str]] = {}
    for k, h in before.items():
        names_of.setdefault(h, []).append(k)
    same = sum(1 for k, h in now.items() if before.get(k) == h)
    renamed = sorted((names_of[h], k) for k, h in now.items() if before.get(k) != h and h in names_of)
    new_bodies = sorted(k for k, h in now.items() if h not in names_of)
    kept = set(now.values())
    gone = sorted(k for k, h in before.items() if h not in kept)
    for k in gone:
        print("gone   ", k)
    for old, k in renamed:
        print("renamed", " | ".join(sorted(old)), "->", k)
    for k in new_bodies:
        print("NEW BODY", k)
    print(
        f"{arch}: {same} identical, {len(renamed)} renamed with the same body, {len(new_bodies)} new bodies, "
        f"{len(gone)} bodies gone"
    )
    return 1 if new_bodies else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binary")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--compare", help="a digest JSON written earlier by this script")
    p.add_argument("--by-body", action="store_true", help="with --compare: match kernels by SASS body")
    a = p.parse_args()
    now = digest(a.binary, a.arch)
    if not a.compare:
        json.dump(now, sys.stdout, indent=0, sort_keys=True)
        print(f"{len(now)} {a.arch} kernels", file=sys.stderr)
        return 0
    before = json.load(open(a.compare))
    if a.by_body:
        return compare_bodies(before, now, a.arch)
    gone = sorted(set(before) - set(now))
    new = sorted(set(now) - set(before))
    changed = sorted(k for k in set(now) & set(before) if now[k] != before[k])
    for k in gone:
        print("gone   ", k)
    for k in new:
        print("new    ", k)
    for k in changed:
        print("CHANGED", k)
    same = len(set(now) & set(before)) - len(changed)
    print(f"{a.arch}: {same} identical, {len(changed)} changed, {len(gone)} gone, {len(new)} new")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
