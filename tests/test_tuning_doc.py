"""docs/tuning.md's table of plan-override keys and csrc/kernels/common/plan_override.h's agree:
every key and value the code accepts is documented, and every documented one is accepted."""

import pathlib
import re

import pytest

from liger_cpp._testing import plan_override, set_plan_override

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "tuning.md"


def _documented():
    """{key: [values]} from the table rows "| `key` | `v1`, `v2` | ..."."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `([a-z0-9_]+)` \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = re.findall(r"`([^`]+)`", m.group(2))
    return rows


def _accepted_keys():
    with pytest.raises(ValueError) as e:
        set_plan_override("no_such_key=1")
    return re.search(r"expected one of (.*)$", str(e.value)).group(1).split(", ")


def _accepted_values(key):
    with pytest.raises(ValueError) as e:
        set_plan_override(f"{key}=no-such-value")
    return re.search(r"expected one of (.*), got", str(e.value)).group(1).split(", ")


def test_documented_keys_are_the_accepted_ones():
    doc = _documented()
    assert doc, f"no key rows found in {DOC}"
    assert sorted(doc) == sorted(_accepted_keys())
    for key, values in doc.items():
        assert values == _accepted_values(key), key
        for v in values:
            with plan_override(**{key: v}):
                pass
