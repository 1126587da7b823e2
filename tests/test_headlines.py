"""The headline table: one row per paper, decided from the claims it names (all reproduced, any
contradicted, else inconclusive), its rows fixed in reproduce/headlines.yaml against the claims
each notebook registers."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from distsgd.verdicts.claims import Claims, Test
from distsgd.verdicts.headlines import NOT_TESTED, Headline, headline_table, load_headlines

REPO = Path(__file__).resolve().parent.parent
PAPER_NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("0[1-9]_*.ipynb"))


def table(**verdicts: str) -> pd.DataFrame:
    return pd.DataFrame({"id": list(verdicts), "verdict": list(verdicts.values()),
                         "reason": [f"why {c}" for c in verdicts]})


@pytest.mark.parametrize("verdicts, expected, reason", [
    ({"a": "reproduced", "b": "reproduced"}, "reproduced", "deciding: a reproduced, b reproduced. a: why a"),
    ({"a": "reproduced", "b": "inconclusive"}, "inconclusive", "deciding: a reproduced, b inconclusive. b: why b"),
    ({"a": "inconclusive", "b": "contradicted"}, "contradicted", "deciding: a inconclusive, b contradicted. b: why b"),
])
def test_all_reproduced_any_contradicted_else_inconclusive(verdicts, expected, reason) -> None:
    h = Headline("01_x", "Paper", "it is faster", "measured", ("a", "b"))
    assert h.decide(table(**verdicts)) == (expected, reason)


def test_a_reported_part_is_shown_and_does_not_decide() -> None:
    h = Headline("03_x", "Paper", "saves 20% on ViT", "measured", ("vit",), reported=("resnet",),
                 finding="ResNet-18 saves nothing here (authors: -8.0%)")
    verdict, reason = h.decide(table(vit="reproduced", resnet="contradicted"))
    assert verdict == "reproduced"
    assert reason == ("deciding: vit reproduced; reported, not deciding: resnet contradicted. vit: why vit. "
                      "Finding: ResNet-18 saves nothing here (authors: -8.0%)")
    with pytest.raises(ValueError, match="reported"):
        Headline("03_x", "Paper", "saves 20%", "measured", ("vit",), reported=("vit",))


def test_a_claim_not_decided_leaves_the_headline_inconclusive_and_untested_says_why() -> None:
    h = Headline("01_x", "Paper", "it is faster", "projected", ("a", "b"))
    assert h.decide(table(a="reproduced")) == ("inconclusive", "b was not decided in this run")
    untested = Headline("01_x", "Paper", "it scales to 400 GPUs", "untested", why="no 400 GPUs")
    assert untested.decide(table(a="reproduced")) == (NOT_TESTED, "no 400 GPUs")


@pytest.mark.parametrize("fields, message", [
    ({"how": "guessed", "claims": ("a",)}, "how: 'guessed'; allowed: measured, projected, untested"),
    ({"how": "measured", "claims": ()}, "claims"),
    ({"how": "untested", "claims": ()}, "why"),
])
def test_bad_rows_name_the_field(fields, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Headline("01_x", "Paper", "headline", **fields)


def test_every_paper_has_one_row_naming_claims_its_notebook_registers() -> None:
    headlines = load_headlines()
    assert sorted(headlines) == PAPER_NOTEBOOKS
    for notebook, h in headlines.items():
        registered = json.loads((REPO / "reproduce/registered/quick" / f"{notebook}.json").read_text())["tests"]
        parts = set(h.claims) | set(h.reported)
        assert parts <= set(registered), (notebook, parts - set(registered))
        assert h.headline and h.paper


def test_a_notebook_shows_its_own_row(tmp_path, monkeypatch) -> None:
    claims = Claims("02_liec_sgd")
    for cid in load_headlines()["02_liec_sgd"].claims:
        claims.register(cid, cid, "paper", Test("q", ">=", 0.0, "s", form="superiority", source="null: no difference"))
    claims.preregister(dry_run=True)
    for cid in load_headlines()["02_liec_sgd"].claims:
        claims.decide(cid, 0.1, 0.2, 0.15)
    row = claims.headline().data
    assert list(row.columns) == ["paper", "headline", "how", "verdict", "reason"]
    assert row.verdict.tolist() == ["reproduced"] and row.paper[0].startswith("LIEC-SGD")
    html = claims.headline().to_html()
    assert "white-space: pre-wrap" in html and "overflow-wrap: anywhere" in html   # read in full, not cut at 50
    assert headline_table(claims.table().assign(notebook="00_baselines")).empty   # no paper, no row


def test_a_project_without_a_headlines_file_has_no_headline_rows(tmp_path) -> None:
    assert load_headlines(tmp_path / "headlines.yaml") == {}
    claims = table(a="reproduced").assign(notebook="01_cocod_sgd")
    assert headline_table(claims, load_headlines(tmp_path / "headlines.yaml")).empty
