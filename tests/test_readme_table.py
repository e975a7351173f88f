"""The README's results table is what its result files give (scripts/readme_table.py --check)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_readme_table_matches_the_result_files():
    r = subprocess.run(
        [sys.executable, "scripts/readme_table.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_cited_result_file_exists():
    import json

    record = json.loads((ROOT / "benchmarks/results/record.json").read_text())
    for row in record["rows"]:
        for spec in row["cells"].values():
            for sel in spec if isinstance(spec, list) else [spec] if spec else []:
                assert (ROOT / "benchmarks/results" / sel["file"]).exists(), sel["file"]
