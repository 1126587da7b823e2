"""The public real-cluster tables (`timeline.public_tables`): they parse, every row carries its source,
and the fit takes only the rows the rule (docs/simulator_error.md, "The public tables") allows."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from distsgd.errors import ConfigError
from distsgd.systems.timeline import public_tables as pt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def splits() -> dict[str, pd.DataFrame]:
    return {name: pt.split(t, pt.read(t)) for name, t in pt.TABLES.items()}


def test_tables_parse_with_their_sources() -> None:
    readme = (ROOT / pt.VALIDATION / "README.md").read_text()
    sizes = {"pytorch_ddp": 44, "horovod": 36, "grace": 224, "dlperf": 172}
    for name, table in pt.TABLES.items():
        rows = pt.read(table)
        assert len(rows) == sizes[name] and list(rows.columns) == pt.COMMON
        if name == "dlperf":                                                   # each row names its README
            repo, commit = table.source["repo"], table.source["commit"]
            assert rows.source.str.fullmatch(rf"{repo}:[\w./-]+/README\.md@{commit}").all()
        else:
            assert (rows.source == pt._source(table.source)).all(), name      # every row names its source
        assert all(v in readme for v in table.source.values()), name
        assert rows.step_s.gt(0).all() and rows.nproc.ge(1).all() and rows.nodes.ge(1).all()
        assert set(rows.model) == set(table.models), name
        assert set(rows.connection[rows.method.isin(table.methods) & (rows.nodes > 1)]) <= set(table.connections)
    ddp = pt.read(pt.DDP_TABLE).set_index(["model", "method", "nproc"])
    assert ddp.loc[("resnext101_32x8d", "DDP 25 MB buckets", 16)].step_s == 0.451           # the p75 column
    assert ddp.loc[("resnet50", "DDP 1 MB buckets", 16)].step_s == 0.108
    horovod = pd.read_csv(pt.HOROVOD_TABLE.path())
    vgg = horovod[(horovod.model == "VGG-16") & (horovod.nproc == 64) & horovod.setup.str.contains("NCCL")]
    assert vgg.throughput.tolist() == [6084.2] and vgg.speedup.tolist() == [40.7]
    grace = pd.read_csv(pt.GRACE_TABLE.path())
    none = grace[(grace.method == "none") & (grace.workers == 1)]
    assert none.throughput.tolist() == [409.4513] and none.id.tolist() == ["1ipvrhj50"]
    dlperf = pd.read_csv(pt.DLPERF_TABLE.path()).set_index(["framework", "variant", "batch_size", "nproc"])
    examples = "PyTorch 1.6.0, pytorch/examples imagenet"
    assert dlperf.loc[(examples, "DataLoader, 48 workers", 128, 1)].throughput == 348.62     # the report's column
    assert dlperf.loc[(examples, "DataLoader, 48 workers", 128, 32)].throughput == 10021.29
    assert dlperf.loc[("MXNet 1.6.0, gluon-nlp", "without clip", 32, 32)].throughput == 3671.45
    tf_bert = "NGC TensorFlow 20.03-tf1 (1.15.2), DeepLearningExamples BERT"
    assert dlperf.loc[(tf_bert, "without XLA", 32, 16)].throughput == 1404.04


def test_a_method_the_table_does_not_know_is_refused(tmp_path: Path) -> None:
    df = pd.read_csv(pt.DDP_TABLE.path())
    df.loc[0, "method"] = "apex"
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ConfigError) as err:
        pt.read(pt.DDP_TABLE, tmp_path / "bad.csv")
    assert err.value.field == "pytorch_ddp.method"


FITTED = {   # (table, connection, model, method, nproc, split): the only rows the rule fits
    ("pytorch_ddp", pt.DDP_CONNECTION, "resnet50", "DDP 25 MB buckets", 2, pt.FIT_INTRA),
    ("pytorch_ddp", pt.DDP_CONNECTION, "resnet50", "DDP 25 MB buckets", 16, pt.FIT_INTER),
    *{("horovod", c, "ResNet-101", "Horovod", 16 if "25 Gbit" in c else 64, pt.FIT_INTER)
      for c in pt.HOROVOD_TABLE.connections},
    ("grace", "10 Gb/s, MPI", "ResNet-50", "no compression", 2, pt.FIT_INTER),
    ("grace", "10 Gb/s, NCCL", "ResNet-50", "no compression", 2, pt.FIT_INTER),
    ("dlperf", pt.DLPERF_CONNECTION, "ResNet-50 v1.5", "DDP 25 MB buckets", 4, pt.FIT_INTRA),
    ("dlperf", pt.DLPERF_CONNECTION, "ResNet-50 v1.5", "DDP 25 MB buckets", 16, pt.FIT_INTER),
}


def test_the_rule_fits_only_the_anchors_smallest_configurations(splits: dict[str, pd.DataFrame]) -> None:
    both = pd.concat(splits.values())
    fitted = both[both.split.isin([pt.FIT_INTRA, pt.FIT_INTER])]
    assert {(r.table, r.connection, r.model, r.method, r.nproc, r.split) for r in fitted.itertuples()} == FITTED
    for name, s in splits.items():
        table = pt.TABLES[name]
        assert (s[s.split == pt.COMPUTE].nproc == 1).all() and (s[s.split == pt.COMPUTE].method == table.compute_method).all()
        for connection in s.connection[s.split.isin([pt.FIT_INTRA, pt.FIT_INTER])].unique():    # rows are left to check
            assert (s[(s.connection == connection) & (s.split == pt.HELD_OUT)].nodes > 1).any()
    held = both[both.split == pt.HELD_OUT]
    assert len(held) == 38 + 12 + 5 + 34
    grace = splits["grace"]
    assert grace[grace.split == pt.INCONSISTENT].connection.tolist() == ["1 Gb/s, MPI"]    # 0.861 s < 1.318 s
    assert set(grace[grace.split == pt.NOT_PREDICTED].method) == {m for m in grace.method if "compressed" in m}


def test_dlperf_predicts_only_the_runtimes_the_kit_models(splits: dict[str, pd.DataFrame]) -> None:
    """DLPerf: torch DDP in the report's input pipeline and Horovod 0.19's fp32 rows are predicted, each
    sub-table scaled to its own 1-GPU row; apex DDP, NGC MXNet's grouped Horovod, AMP / fp16 and the other
    input pipelines are not."""
    s = splits["dlperf"]
    raw = pd.read_csv(pt.DLPERF_TABLE.path())
    predicted = s.split.isin(pt.PREDICTED)
    assert {(r.method, r.split) for r in s[predicted].itertuples()} >= {("DDP 25 MB buckets", pt.HELD_OUT),
                                                                       ("Horovod", pt.HELD_OUT)}
    assert (raw.precision[predicted | (s.split == pt.COMPUTE)] == "fp32").all()
    assert set(raw.runtime[predicted]) == {"torch DDP", "Horovod 0.19.0", "Horovod 0.19.5"}
    assert set(raw.variant[predicted & (raw.runtime == "torch DDP")]) == {pt.DLPERF_REPORTED}
    assert (raw.runtime[raw.runtime.str.startswith("apex")].index.isin(s.index[s.split == pt.NOT_PREDICTED])).all()
    assert raw.runtime[s.split == pt.NOT_PREDICTED].str.contains("MXNET_HOROVOD_NUM_GROUPS").sum() == 16
    held = s[s.split == pt.HELD_OUT]
    assert len(held) == 34 and (held.method == "DDP 25 MB buckets").sum() == 2
    assert sorted(held[held.method == "DDP 25 MB buckets"].nproc) == [8, 32]
    compute = s[s.split == pt.COMPUTE]                       # one per predicted sub-table, each its own
    assert len(compute) == 8 and compute.cluster.is_unique
    assert set(s.cluster[predicted]) == set(compute.cluster)
    assert not (s.split == pt.INCONSISTENT).any()


def test_the_fit_reads_only_the_rows_the_rule_fits(splits: dict[str, pd.DataFrame], monkeypatch) -> None:
    seen = []

    def recording_fit(rows, step, start, fit_latency=True):
        seen.append(rows.copy())
        return start                                  # no simulation: the rows handed over are the point

    monkeypatch.setattr(pt, "fit_link", recording_fit)
    for name, s in splits.items():
        nets = pt.fit(pt.TABLES[name], s, profs={})
        assert set(nets) == set(pt.TABLES[name].connections)
    fitted = pd.concat(seen)
    assert set(fitted.split) <= {pt.FIT_INTRA, pt.FIT_INTER}
    assert {(r.table, r.connection, r.model, r.method, r.nproc, r.split) for r in fitted.itertuples()} == FITTED


def test_the_committed_table_follows_the_rule_and_the_docs_show_it(splits: dict[str, pd.DataFrame]) -> None:
    committed = pt.load_error()
    assert list(committed.columns) == pt.COLUMNS
    both = pd.concat(splits.values(), ignore_index=True)
    assert committed.split.tolist() == both.split.tolist() and committed.model.tolist() == both.model.tolist()
    predicted = committed.split.isin(pt.PREDICTED)
    assert committed[predicted].error.notna().all() and committed[~predicted].error.isna().all()
    assert committed[predicted].predicted_s.gt(0).all()
    doc = (ROOT / "docs" / "simulator_error.md").read_text()
    assert pt.markdown(committed) in doc
    assert pt.markdown(committed.assign(error=committed.error * 1.01)) not in doc     # one percent off is caught
    summary = pt.summary(committed).set_index(["table", "family"])
    assert summary.loc[("all", "ddp"), "count"] == 38 + 2 and summary.loc[("all", "wfbp"), "count"] == 12 + 5 + 9 + 32


@pytest.mark.validation
def test_committed_error_table_is_what_the_code_produces() -> None:
    committed = pt.load_error()
    table = pt.error_table()
    for column in pt.COLUMNS:
        if table[column].dtype.kind == "f":
            assert committed[column].to_numpy() == pytest.approx(table[column].to_numpy(), rel=1e-5, nan_ok=True), column
        else:
            assert committed[column].fillna("").astype(str).tolist() == table[column].fillna("").astype(str).tolist(), column
