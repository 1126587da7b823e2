"""distsgd.experiments.liec_sgd (notebook 02): methods, registration, runs, the ledger's bytes per
worker, loss claims and the byte-formula invariant; on synthetic runs and ledgers (no training)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from distsgd.verdicts.claims import Claims
from distsgd.experiments import liec_sgd as ls

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"


def fake_run(per_step: list[tuple[int, int]], state: dict | None = None, metrics: pd.DataFrame | None = None):
    """A run whose ledger has, at each step, one gather of `up` bytes and one broadcast of `down`
    bytes on every rank (rank 1 a worker), and a reduce on rank 0 only."""
    rows = [{"rank": rank, "step": t, "kind": kind, "nbytes": n} for t, (up, down) in enumerate(per_step)
            for rank in (0, 1) for kind, n in (("gather", up), ("broadcast", down))]
    rows += [{"rank": 0, "step": 0, "kind": "reduce", "nbytes": 999}]
    comm = pd.DataFrame(rows)
    return SimpleNamespace(comm=lambda: comm, state_dict=lambda: state or {},
                           metrics=pd.DataFrame({"step": [1], "train_loss": [1.0]}) if metrics is None else metrics,
                           summary={"final_test_acc": 0.9, "train_s": 1.0})


def test_methods_and_setups() -> None:
    m = ls.methods("sign", 50.0, [32, 100])
    assert list(m) == ["P-SGD", "MEM-SGD", "DoubleSqueeze", "LIEC-SGD(32)", "LIEC-SGD(100)"]
    assert m["P-SGD"] == ("compressed_sgd", {"compressor": "none", "bucket_mb": 50.0})
    assert m["LIEC-SGD(100)"] == ("liec_sgd", {"compressor": "sign", "bucket_mb": 50.0, "period": 100})
    assert ls.setups("mlp", "digits", [["resnet34", "cifar100"]]) == {("mlp", "digits"): "",
                                                                    ("resnet34", "cifar100"): "_resnet34_cifar100"}


def test_registration_at_the_quick_profile_is_the_committed_one() -> None:
    claims = Claims("02_liec_sgd")
    ls.register_claims(claims, ls.setups("mlp", "digits", []), [32, 100], 10)
    committed = json.loads((REGISTERED / "02_liec_sgd.json").read_text())["tests"]
    assert claims.registered_tests() == committed
    more = Claims("02_liec_sgd")
    ls.register_claims(more, ls.setups("mlp", "digits", [["resnet34", "cifar100"]]), [32], 5)
    assert more.claims["liec_beats_ds_h32_resnet34_cifar100"].claim.startswith("resnet34/cifar100: LIEC-SGD(32)")


def test_run_setups_names_every_run(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(ls, "run", lambda **kw: calls.append(kw) or kw["name"])
    runs = ls.run_setups(ls.setups("mlp", "digits", [["cnn", "mnist"]]), ls.methods("sign", 50.0, [32]), [0, 1],
                         {"model": "mlp", "data": "digits", "seed": 0})
    assert list(runs) == ["", "_cnn_mnist"] and len(runs[""]) == 8
    assert runs[""]["LIEC-SGD(32)", 1] == "liec_sgd32_seed1"
    assert runs["_cnn_mnist"]["P-SGD", 0] == "p_sgd_cnn_mnist_seed0"
    assert calls[-1]["model"] == "cnn" and calls[-1]["data"] == "mnist" and calls[-1]["seed"] == 1


def test_worker_bytes_and_final_loss() -> None:
    r = fake_run([(3, 5), (0, 7)], metrics=pd.DataFrame({"train_loss": [4.0, None, 3.0, 2.0, 1.0, 0.5, 0.4, 0.3, 0.2]}))
    up, down = ls.worker_bytes(r, 3)                 # rank 1 only: rank 0's reduce is not counted
    assert up.tolist() == [3, 0, 0] and down.tolist() == [5, 7, 0]
    assert ls.final_loss(r) == pytest.approx(0.25)    # the last quarter of 8 logged losses
    table = ls.summary_table({"a": r}, 3)
    assert table.loc[0, "up KB/step/worker"] == pytest.approx(1e-3) and table.loc[0, "down KB/step/worker"] == pytest.approx(4e-3)
    df = ls.loss_vs_worker_bytes({"a": fake_run([(1, 1), (2, 2)], metrics=pd.DataFrame(
        {"step": [1, 2, 2], "train_loss": [1.0, 0.5, None]}))}, 2)
    assert df["worker bytes"].tolist() == [2, 6]                  # cumulative up + down by the end of the step


@pytest.mark.filterwarnings("ignore::RuntimeWarning")      # the one-seed case: scipy on one value
def test_loss_claims_paired_by_seed() -> None:
    losses = {"MEM-SGD": [1.0, 1.0, 1.0], "DoubleSqueeze": [1.5, 1.6, 1.4], "LIEC-SGD(32)": [1.04, 1.05, 1.06]}
    per_seed = pd.DataFrame([{"method": m, "seed": s, "final train loss": v[s]} for m, v in losses.items() for s in (2, 0, 1)])
    assert ls.values(per_seed, "DoubleSqueeze", "final train loss", [0, 1, 2]).tolist() == [1.5, 1.6, 1.4]
    c = ls.loss_claims(per_seed, 32, [0, 1, 2])
    low, high, estimate, measured = c["liec_close_to_mem"]
    assert estimate == pytest.approx(0.05) and low < 0.05 < high
    assert measured == "loss 1.0500 vs MEM-SGD 1.0000; per seed +4.0%, +5.0%, +6.0%"
    low, high, estimate, measured = c["liec_beats_ds"]
    assert estimate == pytest.approx(0.45) and low < estimate < high
    assert measured.endswith("per seed +0.4600, +0.5500, +0.3400")
    one = ls.loss_claims(per_seed, 32, [0])
    assert math.isnan(one["liec_beats_ds"][0])       # one seed: no interval


def test_expected_bytes_by_the_formula() -> None:
    e = ls.expected_bytes([10, 17], [2, 3], 4)       # sign: (2 + 4) + (3 + 4) = 13 bytes, dense: 4 * 27 = 108
    assert e["P-SGD"](0) == (108, 108) and e["MEM-SGD"](3) == (13, 108) and e["DoubleSqueeze"](1) == (13, 13)
    assert [e["LIEC-SGD(2)"](t) for t in range(4)] == [(13, 13), (216, 216), (13, 13), (324, 324)]
    assert [e["LIEC-SGD(3)"](t) for t in range(4)] == [(13, 13), (13, 13), (216, 216), (121, 121)]


def test_ledger_invariant_holds_on_the_formula_and_fails_off_it() -> None:
    steps, state = 40, {"w": torch.zeros(10), "b": torch.zeros(17)}
    e = ls.expected_bytes([27], [20], steps)         # one bucket of 50 MiB holds both tensors
    runs = {label: fake_run([f(t) for t in range(steps)], state) for label, f in e.items()}
    expected, measured, holds = ls.ledger_invariant(runs, [20], steps, 50.0)
    assert holds and "(1 buckets)" in expected and measured.startswith("P-SGD 0.2 KB")
    runs["MEM-SGD"] = fake_run([(9, 108)] * steps, state)            # one byte per step off the formula
    assert not ls.ledger_invariant(runs, [20], steps, 50.0)[2]
    bn = {**state, "bn.running_mean": torch.zeros(2)}                # BatchNorm: only the ratio is checked
    runs = {label: fake_run([f(t) for t in range(steps)], bn) for label, f in e.items()}
    expected, _, holds = ls.ledger_invariant(runs, [20], steps, 50.0)
    assert holds and expected.startswith("(BatchNorm buffers")
    assert np.isfinite(ls.final_loss(runs["P-SGD"]))
