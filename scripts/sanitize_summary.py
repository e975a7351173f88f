"""Summarise compute-sanitizer logs: errors inside liger_cpp's kernels and elsewhere, per tool.

    python3 scripts/sanitize_summary.py sanitize-memcheck.log sanitize-racecheck.log ...

A report block names the kernel it happened in ("in <kernel>" / "kernel <name>"); liger_cpp's
kernels live in the liger_cpp::kernels namespace (mangled _ZN9liger_cpp7kernels...).
"""

import re
import sys


def summarise(path: str) -> str:
    text = open(path, errors="replace").read()
    tool = re.search(r"sanitize-(\w+)", path)
    summary = re.findall(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: .*)", text)
    ours, other = 0, {}
    for block in re.split(r"\n=========\s*\n", text):
        if "SUMMARY:" in block or not re.search(
            r"========= (Invalid|Uninitialized|Race|Error|Barrier|Program hit|.*hazard)", block
        ):
            continue
        m = re.search(r"(?:in|kernel) (\S+)", block)
        name = m.group(1) if m else "?"
        if "liger_cpp" in name or "9liger_cpp7kernels" in name:
            ours += 1
        else:
            other[name] = other.get(name, 0) + 1
    ran = len(re.findall(r"^ran ", text, re.M))
    line = f"{tool.group(1) if tool else path}: {ran} cases ran; {'; '.join(summary) or 'no summary line'}; "
    line += f"reports in liger_cpp kernels: {ours}"
    if other:
        line += "; elsewhere: " + ", ".join(f"{k[:80]} x{v}" for k, v in sorted(other.items()))
    return line


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(summarise(p))
