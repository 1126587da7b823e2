"""Resource caps (distsgd.training.caps): a config is validated as asked, then capped; per-rank lists follow
the capped world; the environment is read only by `Caps.from_env`, and `run` takes caps as an
argument."""
from __future__ import annotations

import pytest
import torch

import distsgd
from distsgd.systems.benchmark import INPUT_SHAPES, NUM_CLASSES, bench_model, grad_tensor_bytes, input_shape
from distsgd.training.caps import CAP_ENV, Caps
from distsgd.training.config import Config
from distsgd.errors import ConfigError


def test_caps_validate_first_then_cap() -> None:
    caps = Caps(nproc=2, batch_size=16, eval_samples=64)
    c = caps.apply(Config(nproc=8, batch_size=128))
    assert (c.nproc, c.batch_size, c.eval_samples) == (2, 16, 64)
    # groups of 4 with local averaging need nproc >= 8: the smallest valid world is used
    c = caps.apply(Config(algo="kavg", nproc=32, params={"local_groups": 4, "local_period": 8}))
    assert c.nproc == 8
    with pytest.raises(ConfigError):                    # a bad config fails before capping
        caps.apply(Config(nproc=8, lr=-1))
    # per-rank lists are subsampled to the capped world, first and last entry kept
    speeds = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
    c = caps.apply(Config(algo="cocod_sgd", nproc=8, params={"speeds": speeds, "period": 2}))
    assert (c.nproc, c.params) == (2, {"speeds": [1.0, 0.3], "period": 2})
    with pytest.raises(ConfigError, match="params.speeds"):   # a list of the wrong length fails
        caps.apply(Config(algo="cocod_sgd", nproc=8, params={"speeds": speeds[:3]}))
    # what is sized outside a Config (the schedule benchmark's worker counts and batch)
    assert (caps.bound("nproc", 8), caps.bound("batch_size", 128), caps.bound("batch_size", 4)) == (2, 16, 4)
    uncapped = Caps(batch_size=16, eval_samples=64)      # 0: no cap
    assert uncapped.apply(Config(nproc=8, batch_size=8, eval_samples=8)).nproc == 8
    assert uncapped.bound("nproc", 8) == 8
    unchanged = Config(nproc=2, batch_size=8, eval_samples=64, lr=-1)
    assert caps.apply(unchanged) is unchanged            # asks for no more: returned as is (run validates it next)


def test_caps_from_env_and_back(monkeypatch) -> None:
    assert Caps.from_env({"DISTSGD_MAX_NPROC": "2", "DISTSGD_MAX_BATCH_SIZE": ""}) == Caps(nproc=2)
    caps = Caps(nproc=2, batch_size=4, eval_samples=8, seq_len=16, image_side=32, depth=1)
    assert caps.env() == {"DISTSGD_MAX_NPROC": "2", "DISTSGD_MAX_BATCH_SIZE": "4",
                          "DISTSGD_MAX_EVAL_SAMPLES": "8", "DISTSGD_MAX_SEQ_LEN": "16",
                          "DISTSGD_MAX_IMAGE_SIDE": "32", "DISTSGD_MAX_DEPTH": "1"}
    for var, value in caps.env().items():
        monkeypatch.setenv(var, value)
    assert Caps.from_env() == caps                        # os.environ by default
    assert set(CAP_ENV) == {"nproc", "batch_size", "eval_samples", "seq_len", "image_side", "depth"}
    with pytest.raises(ConfigError, match="DISTSGD_MAX_BATCH_SIZE='four'"):
        Caps.from_env({"DISTSGD_MAX_BATCH_SIZE": "four"})
    with pytest.raises(ConfigError, match="caps.nproc=-1"):
        Caps(nproc=-1)
    with pytest.raises(ConfigError, match="caps.depth=-1"):
        Caps(depth=-1)


def _shapes(model: torch.nn.Module) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in model.parameters()]


def test_depth_cap_keeps_one_block_per_run_and_every_tensor_shape() -> None:
    """`Caps.depth` (the dry run's 1): BERT-Base keeps one encoder layer, ResNet-50 one block per
    stage; every kept tensor has a shape of the whole model's (the largest, BERT's embedding, too)
    and the cut model still runs on the capped inputs."""
    with torch.device("meta"):
        whole = {m: bench_model(m, INPUT_SHAPES[m]) for m in ("bert_base", "resnet50")}
        cut = {m: bench_model(m, INPUT_SHAPES[m], depth=1) for m in ("bert_base", "resnet50")}
    assert len(whole["bert_base"].blocks) == 12 and len(cut["bert_base"].blocks) == 1
    stages = ("layer1", "layer2", "layer3", "layer4")
    assert [len(getattr(cut["resnet50"], s)) for s in stages] == [1, 1, 1, 1]
    assert [len(getattr(whole["resnet50"], s)) for s in stages] == [3, 4, 6, 3]
    for m in whole:
        assert set(_shapes(cut[m])) <= set(_shapes(whole[m])), m
        assert max(p.numel() for p in cut[m].parameters()) == max(p.numel() for p in whole[m].parameters())
    n = {m: sum(p.numel() for p in cut[m].parameters()) for m in cut}
    assert 30e6 < n["bert_base"] < 33e6 and 7e6 < n["resnet50"] < 10e6     # of 110 M and 23.5 M
    assert sum(grad_tensor_bytes("bert_base", depth=1)) == 4 * n["bert_base"]
    caps = Caps(seq_len=8, image_side=32, depth=1)
    for m, x in (("bert_base", torch.randint(0, 100, (2, 8))), ("resnet50", torch.randn(2, 3, 32, 32))):
        assert input_shape(m, caps) == tuple(x.shape[1:])
        assert bench_model(m, input_shape(m, caps), caps.depth)(x).shape == (2, NUM_CLASSES)
    mlp = bench_model("mlp", INPUT_SHAPES["mlp"], depth=1)              # no repeated blocks: whole
    assert _shapes(mlp) == _shapes(bench_model("mlp", INPUT_SHAPES["mlp"]))


@pytest.mark.multiproc
def test_run_takes_caps_as_an_argument(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("DISTSGD_MAX_NPROC", "3")          # the argument, not the environment, counts
    r = distsgd.run(algo="ssgd", model="logistic", data="digits", nproc=4, steps=2, batch_size=8,
                    eval_every=2, log_every=1, progress=False, out=str(tmp_path),
                    caps=Caps(nproc=1, eval_samples=32))
    assert (r.config.nproc, r.config.eval_samples, r.summary["nproc"]) == (1, 32, 1)
