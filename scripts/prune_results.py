"""Keep in benchmarks/results/ only the runs something cites; git history keeps the rest.

    python scripts/prune_results.py            # list the files nothing cites
    python scripts/prune_results.py --remove   # git rm them

A run is cited when its name (with or without the .json / .log / .txt / .png extension, or with the
"<date>-<gpu>-" prefix left out, as docs/kernels/*.md write them) appears in README.md,
CHANGELOG.md, docs/**/*.md, benchmarks/results/record.json, or a source comment.
"""

import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _citing_text() -> str:
    paths = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "setup.py", RESULTS / "record.json"]
    paths += list((ROOT / "docs").rglob("*.md"))
    for sub in ("csrc", "liger_cpp", "benchmarks", "tests", "scripts", "compat"):
        paths += [
            p for p in (ROOT / sub).rglob("*") if p.suffix in {".py", ".cu", ".cuh", ".h", ".cpp", ".md"}
        ]
    return "\n".join(p.read_text(errors="replace") for p in paths if p.is_file() and RESULTS not in p.parents)


def uncited() -> list[pathlib.Path]:
    text = _citing_text()
    out = []
    for f in sorted(RESULTS.iterdir()):
        if f.name == "record.json":
            continue
        stem = re.sub(r"\.(json|log|txt|png|tgz)$", "", f.name)
        short = re.sub(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+-", "", stem)
        if stem not in text and short not in text:
            out.append(f)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--remove", action="store_true")
    a = p.parse_args()
    files = uncited()
    for f in files:
        print(f.relative_to(ROOT))
    print(f"{len(files)} of {sum(1 for _ in RESULTS.iterdir())} files cited nowhere", file=sys.stderr)
    if a.remove and files:
        subprocess.run(["git", "rm", "-q", "--", *[str(f) for f in files]], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
