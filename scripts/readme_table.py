"""Rebuild the README's "Results of record" table from the result files it cites.

    python scripts/readme_table.py          # rewrite the table in README.md
    python scripts/readme_table.py --check  # exit 1 if README.md's table is not what the files give

benchmarks/results/record.json lists the rows: each names an op and shape, a target, and per
column one or more selectors {"file", "match": {field: value, ...}, "field", "fmt"}; a selector
picks the one row of that JSON file's "rows" whose fields equal "match" (or the "nth" of several:
a bench that times a shape twice) and formats its "field".
Several selectors in a cell are joined by " / ".
"""

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
COLUMNS = ("liger_cpp", "Liger", "torch.compile")


def _value(sel: dict) -> str:
    rows = json.loads((RESULTS / sel["file"]).read_text())["rows"]
    hits = [r for r in rows if all(r.get(k) == v for k, v in sel["match"].items())]
    if len(hits) != 1 and "nth" not in sel:
        raise SystemExit(f"{sel['file']}: {len(hits)} rows match {sel['match']} (give 'nth')")
    v = hits[sel.get("nth", 0)][sel["field"]]
    if isinstance(v, str):
        v = float(v.replace(",", ""))
    return sel.get("fmt", "{}").format(v)


def _cell(spec) -> str:
    if spec is None:
        return "–"
    sels = spec if isinstance(spec, list) else [spec]
    return " / ".join(_value(s) for s in sels)


def table() -> str:
    record = json.loads((RESULTS / "record.json").read_text())
    lines = [
        "| op, shape | liger_cpp | Liger | torch.compile | target | result file |",
        "|---|---|---|---|---|---|",
    ]
    for row in record["rows"]:
        cells = [_cell(row["cells"].get(c)) for c in COLUMNS]
        files = sorted(
            {
                s["file"]
                for spec in row["cells"].values()
                if spec
                for s in (spec if isinstance(spec, list) else [spec])
            }
        )
        links = ", ".join(f"[{f.rsplit('.', 1)[0]}](benchmarks/results/{f})" for f in files)
        lines.append(
            f"| {row['op']} | **{cells[0]}** | {cells[1]} | {cells[2]} | {row['target']} | {links} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    readme = (ROOT / "README.md").read_text()
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if a.check:
        if new != readme:
            print(
                "README.md's results table is not what benchmarks/results/record.json gives; run "
                "python scripts/readme_table.py"
            )
            return 1
        return 0
    (ROOT / "README.md").write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
