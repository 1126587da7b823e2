"""REPORT.md / REPORT.html and the README's generated verdict table (distsgd.verdicts.report)."""
from __future__ import annotations

from pathlib import Path

import pytest

from distsgd.verdicts import report
from distsgd.verdicts.claims import Claims, Test

README = Path(__file__).resolve().parent.parent / "README.md"


def write_notebook(figures: Path, name: str, verdicts: dict[str, tuple[float, float]]) -> None:
    claims = Claims(name)
    for cid in verdicts:
        claims.register(cid, f"claim {cid}", "paper value", Test("q", ">=", 1.0, "median", form="up-to", source="paper: Table 1, 1x"))
    claims.preregister(dry_run=True)
    for cid, (lo, hi) in verdicts.items():
        claims.decide(cid, lo, hi, (lo + hi) / 2, f"measured {cid}")
    claims.invariant("bytes", "4x", "4.00x", True)
    claims.save(figures / name)
    (figures / name / "curve.png").write_bytes(b"png")


def test_report_lists_every_claim_with_verdict_interval_and_figures(tmp_path) -> None:
    figures, out = tmp_path / "figures", tmp_path / "out"
    write_notebook(figures, "00_a", {"up": (1.5, 2.0), "down": (0.1, 0.5)})
    write_notebook(figures, "01_b", {"mid": (0.5, 1.5), "proj_far": (1.5, 2.0)})
    md = report.write(figures, out, "quick").read_text()
    assert ("3 measured claims: 1 reproduced, 1 contradicted, 1 inconclusive; 1 projected claims: 1 reproduced, "
            "0 contradicted, 0 inconclusive; 2 invariants") in md
    assert "| 00_a | 1 / 1 / 0 | - | 1/1 |" in md and "| 01_b | 0 / 0 / 1 | 1 / 0 / 0 | 1/1 |" in md
    assert ("| claim up | paper value | up-to: q >= 1 (median); threshold from paper: Table 1, 1x | 1.75 [1.5, 2] "
            "| reproduced |") in md
    assert "[curve.png](../figures/00_a/curve.png)" in md
    page = (out / "REPORT.html").read_text()
    assert "<img src='../figures/01_b/curve.png'" in page and "contradicted" in page


def test_update_readme_replaces_only_the_generated_block(tmp_path) -> None:
    figures = tmp_path / "figures"
    write_notebook(figures, "00_a", {"up": (1.5, 2.0)})
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.README_BEGIN}\nold table\n{report.README_END}\noutro\n")
    block = report.readme_block(*report.collect(figures))
    assert report.update_readme(readme, block)
    assert readme.read_text() == f"intro\n{block}\noutro\n"
    assert not report.update_readme(readme, block)
    readme.write_text("no markers")
    with pytest.raises(ValueError, match="verdicts"):
        report.update_readme(readme, block)


def test_the_readme_table_is_generated_from_the_committed_claims(repo_figures) -> None:
    """The README's verdict table is what `reproduce/run.py --report-only --update-readme` makes
    from figures/*/claims.csv: edit the figures by running the notebooks, not the README."""
    block = report.readme_block(*report.collect(repo_figures))
    assert block in README.read_text(), "run: .venv/bin/python reproduce/run.py --report-only --update-readme"


def test_update_ledger_why_rewrites_the_reasons_from_the_run_and_keeps_the_verdicts(tmp_path) -> None:
    figures = tmp_path / "figures"
    write_notebook(figures, "00_a", {"up": (1.5, 2.0), "flat": (0.5, 1.5)})
    ledger = tmp_path / "quick.csv"
    ledger.write_text("notebook,id,verdict,why\n00_a,up,reproduced,typed by hand: 2.8x\n"
                      "00_a,flat,reproduced|inconclusive,typed\n01_b,other,contradicted,not in this run\n")
    assert report.update_ledger_why(ledger, report.collect(figures)[0]) == 2
    rows = ledger.read_text().splitlines()
    assert rows[1].startswith("00_a,up,reproduced,\"q = 1.75, interval [1.5, 2] on the claim's side of 1; measured up")
    assert rows[2] == "00_a,flat,reproduced|inconclusive,\"q = 1, interval [0.5, 1.5] contains 1; measured flat\""
    assert rows[3] == "01_b,other,contradicted,not in this run"
    assert report.update_ledger_why(ledger, report.collect(figures)[0]) == 0


def test_the_ledger_why_is_generated_from_the_committed_claims(repo_figures) -> None:
    """Each `why` of the quick ledger is what `reproduce/run.py --report-only --update-ledger` makes
    from the committed figures/*/claims.csv (read from git: notebooks running beside this test rewrite
    the working tree's)."""
    import io
    import subprocess

    import pandas as pd

    from distsgd.verdicts.claims import ledger_path

    repo = repo_figures.parent
    def committed(path: str) -> str:
        return subprocess.run(["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True, text=True,
                              check=True).stdout
    ledger = pd.read_csv(io.StringIO(committed("reproduce/expected/quick.csv")), dtype=str, keep_default_na=False)
    for notebook, rows in ledger.groupby("notebook"):
        claims = pd.read_csv(io.StringIO(committed(f"figures/{notebook}/claims.csv"))).set_index("id")
        for row in rows.itertuples():
            c = claims.loc[row.id]
            assert row.why == report.ledger_why(c.measured, c.reason), (
                f"{notebook} {row.id}: run .venv/bin/python reproduce/run.py --report-only --update-ledger")
