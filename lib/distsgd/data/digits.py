"""scikit-learn's 8x8 handwritten digits: the embedded default dataset (no download).

1797 grey-scale images of 10 classes, read from the `digits.csv.gz` file that ships inside
scikit-learn (the file `sklearn.datasets.load_digits` reads). It is read directly, without
importing scikit-learn, because every worker process loads the data at start-up and importing
scikit-learn costs each of them most of a second of CPU.

The train/test split is fixed (stratified 80/20, drawn with numpy seed 0) and independent of the
run seed, so every run evaluates on the same images. Pixels (0..16) are scaled to [0, 1], then
standardized with the scalar mean and standard deviation of the training pixels.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .base import TensorSource

TEST_FRACTION = 0.2
SPLIT_SEED = 0
MAX_PIXEL = 16.0


def digits_file() -> Path:
    """Path of scikit-learn's shipped digits.csv.gz (found without importing scikit-learn)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("scikit-learn is not installed; it ships the digits dataset")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices (sorted) holding `test_fraction` of every class in the test part."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        test.append(members[:round(test_fraction * len(members))])
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(len(labels)), test_idx)
    return train_idx, test_idx


def load() -> TensorSource:
    """The digits dataset as images of shape (1, 8, 8)."""
    table = pd.read_csv(digits_file(), header=None, dtype=np.float32).to_numpy()   # numpy's loadtxt: 2x the CPU
    pixels, labels = table[:, :-1], table[:, -1].astype(np.int64)
    train_idx, test_idx = stratified_split(labels, TEST_FRACTION, SPLIT_SEED)
    x = torch.from_numpy(pixels).view(-1, 1, 8, 8) / MAX_PIXEL
    y = torch.from_numpy(labels)
    x_train, x_test = x[train_idx], x[test_idx]
    mean, std = x_train.mean(), x_train.std()
    return TensorSource(
        "digits", "classification", 10,
        train=((x_train - mean) / std, y[train_idx]),
        test=((x_test - mean) / std, y[test_idx]))
