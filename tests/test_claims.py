"""The claims table: computed rows are asserted; claims this scale cannot show are kept, not asserted."""
from __future__ import annotations

import pandas as pd
import pytest

from distsgd.claims import NOT_REPRODUCED, Claims, accuracy_resolution


def test_check_raises_on_a_claim_that_does_not_hold(tmp_path):
    claims = Claims()
    assert claims.add("A is faster than B", "2x", "2.5x", 2.5 >= 2)
    assert not claims.add("A uses less memory", "20%", "3%", 0.03 >= 0.2)
    claims.not_reproduced("A scales to 64 GPUs", "linear", "one machine")
    with pytest.raises(AssertionError, match=r"1 claim\(s\) do not hold:\n- A uses less memory: measured 3%"):
        claims.check()
    table = pd.read_csv(claims.save(tmp_path))
    assert table["claim"].tolist() == ["A is faster than B", "A uses less memory", "A scales to 64 GPUs"]
    assert table["measured"].iloc[2].startswith(NOT_REPRODUCED)


def test_check_passes_when_every_checked_claim_holds():
    claims = Claims()
    claims.add("x", "1", "1", True)
    claims.not_reproduced("y", "2", "too small")
    claims.check()
    assert claims.table()["holds"].tolist() == [True, None]


def test_accuracy_resolution_is_two_standard_errors_of_a_difference():
    # p = 0.95 on 400 images: sd of one accuracy 1.09 points, of a difference 1.54, 2 s.e. 3.08
    assert accuracy_resolution(0.95, 400) == pytest.approx(3.08, abs=0.01)
    assert accuracy_resolution(0.95, 40000) == pytest.approx(0.308, abs=0.001)
