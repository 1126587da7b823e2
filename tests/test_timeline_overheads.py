"""The per-call overheads knob of the simulator (`distsgd.timeline.overheads`): closed forms with
the knob on, the knob off giving exactly the plain predictions, and the measurement's sanity."""
from __future__ import annotations

import math

import pytest

from distsgd.algorithms.buckets import group_counts
from distsgd.comm.netmodel import NetModel
from distsgd.timeline import ALGORITHMS, simulate
from distsgd.timeline.overheads import NONE, Overheads, measure_copy, out_bytes

from test_timeline import MB, NET, TOY, ar

KNOB = Overheads(issue_s=50e-6, copy_Bps=2e9)


def buckets(bucket_mb: float) -> list[int]:
    out, start = [], 0
    for k in group_counts(TOY.tensor_bytes, bucket_mb * MB):
        out.append(sum(TOY.tensor_bytes[start:start + k]))
        start += k
    return out


def test_no_overlap_one_bucket_closed_form() -> None:
    """One bucket: compute + issue + pack (1 pass) + all-reduce + div_ and copy back (2 passes)."""
    p, n = 8, TOY.grad_bytes
    pred = simulate(TOY, "no_overlap", p, NET, {"bucket_mb": 1e4}, overheads=KNOB)
    expected = TOY.compute_s + KNOB.issue_s + n / KNOB.copy_Bps + ar(n, p) + 2 * n / KNOB.copy_Bps
    assert pred.step_s == pytest.approx(expected, rel=1e-12)
    assert pred.compute_s == pytest.approx(TOY.compute_s + KNOB.issue_s + 3 * n / KNOB.copy_Bps, rel=1e-12)


@pytest.mark.parametrize("bucket_mb", [0.5, 4.0])
def test_no_overlap_buckets_closed_form(bucket_mb: float) -> None:
    """Several buckets on a slow link (every all-reduce outlasts the next issue and the previous
    copy-out): compute + first issue and pack + all-reduces back to back + the last copy-out."""
    p, net = 8, NetModel(bandwidth_Bps=1e8, latency_s=1e-3)
    b = buckets(bucket_mb)
    assert len(b) > 1
    pred = simulate(TOY, "no_overlap", p, net, {"bucket_mb": bucket_mb}, overheads=KNOB)
    expected = (TOY.compute_s + KNOB.issue_s + b[0] / KNOB.copy_Bps + sum(ar(x, p, net) for x in b)
                + 2 * b[-1] / KNOB.copy_Bps)
    assert pred.step_s == pytest.approx(expected, rel=1e-12)
    # the compute stream's own seconds: every issue and every pass over every bucket
    assert pred.compute_s == pytest.approx(
        TOY.compute_s + len(b) * KNOB.issue_s + 3 * sum(b) / KNOB.copy_Bps, rel=1e-12)


def test_free_network_charges_n_buckets_issues_and_copies() -> None:
    """On a free network the step is compute + n_buckets * issue_s + 3 passes over the bytes."""
    free = NetModel(bandwidth_Bps=math.inf, latency_s=0.0)
    for algo, params in (("wfbp", {}), ("no_overlap", {"bucket_mb": 0.5}), ("local_sgd", {"period": 1})):
        pred = simulate(TOY, algo, 4, free, params, overheads=KNOB)
        n = len(TOY.tensor_bytes) if algo == "wfbp" else len(buckets(0.5)) if algo == "no_overlap" else 1
        expected = TOY.compute_s + n * KNOB.issue_s + 3 * TOY.grad_bytes / KNOB.copy_Bps
        assert pred.step_s == pytest.approx(expected, rel=1e-12), algo


def test_out_bytes_rule() -> None:
    assert out_bytes("all_reduce", 100, 4) == 200
    assert out_bytes("reduce_scatter", 100, 4) == 25
    assert out_bytes("all_gather", 100, 4) == 100


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_knob_off_is_the_plain_prediction(algo: str) -> None:
    """None, `NONE` and free copies with zero issue cost: identical timelines, event for event."""
    params = {"local_groups": 2} if algo == "kavg" else {}
    plain = simulate(TOY, algo, 4, NET, params)
    for knob in (None, NONE, Overheads(0.0, math.inf)):
        other = simulate(TOY, algo, 4, NET, params, overheads=knob)
        assert other.step_s == plain.step_s and other.compute_s == plain.compute_s
        assert other.events == plain.events
    on = simulate(TOY, algo, 4, NET, params, overheads=KNOB)
    assert on.step_s > plain.step_s


def test_measured_copy_speed_is_a_memory_speed() -> None:
    """Between 100 MB/s and 1 TB/s: a pass over memory on one thread, not a unit error."""
    assert 1e8 < measure_copy(nbytes=2**20, reps=3) < 1e12
