"""Tests of distsgd.layer_profile: the CSV round trip, totals, scaling, measurement, FLOP scaling."""
from __future__ import annotations

import pandas as pd
import pytest

from distsgd.errors import ConfigError
from distsgd.layer_profile import COLUMNS, Layer, Profile


def toy_profile() -> Profile:
    return Profile(model="mlp", batch_size=16, input_shape=(3, 32, 32), device="cpu",
                   source="measured", machine="test machine, 1 thread",
                   layers=[Layer("2", 0.001, 0.002, 0.0005, ["2.weight", "2.bias"], [40, 4], [10, 1], 20.0, 40.0),
                           Layer("0", 0.003, 0.006, 0.001, ["0.weight", "0.bias"], [400, 40], [100, 10], 200.0, 400.0)])


def test_csv_round_trip_and_layer_columns_sum_to_the_model(tmp_path):
    profile = toy_profile()
    path = profile.to_csv(tmp_path / "p" / "mlp_b16.csv")
    df = pd.read_csv(path)
    assert list(df.columns) == COLUMNS
    assert list(df["order"]) == [0, 1, 2, 3]
    assert list(df["forward_s"]) == [0.001, 0, 0.003, 0]     # on the layer's first row only
    assert df["input_shape"].iloc[0] == "3x32x32"
    again = Profile.from_csv(path)
    assert again == profile
    assert again.forward_s == pytest.approx(0.004) and again.backward_s == pytest.approx(0.008)
    assert again.compute_s == pytest.approx(0.0135)
    assert again.tensor_bytes == [40, 4, 400, 40] and again.grad_bytes == 484
    assert df["forward_s"].sum() == pytest.approx(again.forward_s)


def test_scaled_keeps_proportions():
    profile = toy_profile()
    half = profile.scaled(profile.compute_s / 2)
    assert half.compute_s == pytest.approx(profile.compute_s / 2)
    assert [l.backward_s for l in half.layers] == pytest.approx([0.001, 0.003])
    assert half.tensor_bytes == profile.tensor_bytes


def test_bad_tables_name_the_problem(tmp_path):
    df = toy_profile().to_frame()
    with pytest.raises(ConfigError, match="missing columns: grad_bytes"):
        Profile.from_frame(df.drop(columns="grad_bytes"))
    with pytest.raises(ConfigError, match="profile.model"):
        Profile.from_frame(df.assign(model=["mlp", "cnn", "mlp", "mlp"]))
    with pytest.raises(ConfigError, match="source"):
        Profile.from_frame(df.assign(source="guessed"))
