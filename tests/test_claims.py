"""The claims table: computed rows are asserted; claims this scale cannot show are kept, not asserted."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from distsgd.claims import NOT_REPRODUCED, Claims, accuracy_resolution, median_interval


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


def test_median_interval_takes_the_order_statistics_of_its_level() -> None:
    values = [160, 51, 97, 98, 99, 99, 102, 114, 125]       # n = 9: x_(2), x_(8) (coverage 0.961)
    assert median_interval(values) == (97, 125)
    assert median_interval(list(range(20))) == (5, 14)      # n = 20: x_(6), x_(15) (0.959)
    assert median_interval([1.0, 2.0, 3.0]) == (1.0, 3.0)   # too few for 95%: the whole range
    with pytest.raises(ValueError):
        median_interval([])


def test_median_interval_covers_the_median_at_its_level() -> None:
    """Exponential samples (skewed, median ln 2): the interval holds it in >= 95% of draws."""
    rng = np.random.default_rng(0)
    hits = [lo <= np.log(2) <= hi
            for lo, hi in (median_interval(rng.exponential(size=9)) for _ in range(4000))]
    assert 0.95 <= np.mean(hits) <= 0.975                   # exact coverage 0.961
