"""The developer override of launch plans (liger_cpp._testing): strict about keys and values."""

import pytest

from liger_cpp._testing import plan_override, set_plan_override


def test_unknown_key_is_an_error_naming_it():
    with pytest.raises(ValueError, match="unknown key 'no_such_key'"):
        set_plan_override("no_such_key=1")
    with pytest.raises(ValueError, match="unknown key 'no_such_key'"):
        with plan_override(no_such_key="1"):
            pass


def test_malformed_spec_is_an_error():
    with pytest.raises(ValueError, match="expected key=value"):
        set_plan_override("novalue")


def test_a_failed_set_changes_nothing_and_clear_restores():
    assert set_plan_override("") == ""
    with pytest.raises(ValueError):
        set_plan_override("no_such_key=1")
    assert set_plan_override("") == ""
