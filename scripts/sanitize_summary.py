"""Summarise compute-sanitizer logs: errors inside liger_cpp's kernels and elsewhere, per tool.

    python3 scripts/sanitize_summary.py sanitize-memcheck-0.log sanitize-memcheck-1.log ...

A report block names the kernel it happened in ("in <kernel>" / "kernel <name>"); liger_cpp's
kernels live in the liger_cpp::kernels namespace (mangled _ZN9liger_cpp7kernels...).
"""

import re
import sys


def kernel_of(block: str) -> str:
    """The kernel a report block names: "at <kernel>+0x..." (memcheck, initcheck, synccheck),
    "Read / Write access at <kernel>+0x..." (racecheck), or an older tool's "in <kernel>" /
    "kernel <name>" (never the "in block (x,y,z)" of the thread's position)."""
    m = re.search(r"(?:Read|Write) access at (?:void )?(.+?)\+0x[0-9a-f]+", block) or re.search(
        r"^=========\s+at (?:void )?(.+?)(?:\+0x[0-9a-f]+)?\s*$", block, re.M
    )
    if not m:
        m = re.search(r"(?:\bin|\bkernel) (?!block\b)(\S+)", block)
    return re.split(r"[(<]", m.group(1))[0] if m else "?"


def scan(path: str):
    """(tool, cases ran, summary lines, reports in liger_cpp's kernels, {other kernel: reports})."""
    text = open(path, errors="replace").read()
    tool = re.search(r"sanitize-([a-z]+)", path)
    summary = re.findall(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: .*)", text)
    ours, other = 0, {}
    for block in re.split(r"\n=========\s*\n", text):
        if "SUMMARY:" in block or not re.search(
            r"========= (Invalid|Uninitialized|Race|Error|Barrier|Program hit|.*hazard)", block
        ):
            continue
        name = kernel_of(block)
        if "liger_cpp" in name or "9liger_cpp7kernels" in name:
            ours += 1
        else:
            other[name] = other.get(name, 0) + 1
    ran = len(re.findall(r"^ran ", text, re.M))
    return (tool.group(1) if tool else path), ran, summary, ours, other


def summarise(paths) -> list[str]:
    """One line per tool, its shards' logs (sanitize-<tool>[-<shard>].log) added up."""
    tools: dict[str, list] = {}
    for p in paths:
        tool, ran, summary, ours, other = scan(p)
        t = tools.setdefault(tool, [0, [], 0, {}, 0])
        t[0] += ran
        t[1] += summary or [f"no summary line in {p}"]
        t[2] += ours
        for k, v in other.items():
            t[3][k] = t[3].get(k, 0) + v
        t[4] += 1
    lines = []
    for tool, (ran, summary, ours, other, n) in tools.items():
        line = f"{tool}: {ran} cases ran in {n} process(es); {'; '.join(summary)}; "
        line += f"reports in liger_cpp kernels: {ours}"
        if other:
            line += "; elsewhere: " + ", ".join(f"{k[:80]} x{v}" for k, v in sorted(other.items()))
        lines.append(line)
    return lines


if __name__ == "__main__":
    print("\n".join(summarise(sys.argv[1:])))
