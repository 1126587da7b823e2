"""MkDocs hook (mkdocs.yml `hooks:`): tables generated from committed CSVs at build time.

A page asks for a table with a line `<!-- table: NAME -->`; `make docs` (and tests/test_docs.py)
replaces it with the Markdown table TABLES[NAME] makes from the repository's committed files, so
the numbers on the site are the CSVs', never retyped. An unknown NAME or a missing CSV fails the
build.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Callable

MARKER = re.compile(r"^<!-- table: ([a-z_]+) -->$", re.M)


def _rows(root: Path, path: str) -> list[dict[str, str]]:
    with open(root / path, newline="") as f:
        return list(csv.DictReader(f))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows])


def _ms(seconds: str) -> str:
    return f"{float(seconds) * 1e3:.1f}"


def _pct(fraction: str) -> str:
    return f"{float(fraction) * 100:+.1f}%"


def verdicts(root: Path) -> str:
    """Per notebook, the verdict counts of figures/*/claims.csv (the README's table)."""
    from distsgd.verdicts import report
    block = report.readme_block(*report.collect(root / "figures"))
    return block.removeprefix(report.README_BEGIN + "\n").removesuffix("\n" + report.README_END)


def timeline_validation(root: Path) -> str:
    """figures/10_systems_benchmark/timeline_validation.csv: predicted vs measured step times."""
    rows = _rows(root, "figures/10_systems_benchmark/timeline_validation.csv")
    rows.sort(key=lambda r: (int(r["nproc"]), r["label"]))
    return _table(
        ["p", "schedule", "measured ms", "predicted ms", "residual", "validated", "compute ms", "machine", "date"],
        [[r["nproc"], r["label"], _ms(r["measured_s"]), _ms(r["predicted_s"]), _pct(r["residual"]),
          r["validated"], _ms(r["compute_s"]), r["machine"], r["date"]] for r in rows])


def gpu_validation(root: Path) -> str:
    """figures/10_systems_benchmark/gpu_validation.csv: the one-GPU check (p = 1, NCCL)."""
    rows = _rows(root, "figures/10_systems_benchmark/gpu_validation.csv")
    rows.sort(key=lambda r: (r["model"], r["label"] != "compute", r["label"]))
    table = _table(
        ["model", "schedule", "measured ms", "predicted ms", "residual", "profile alone ms", "device"],
        [[r["model"], r["label"], _ms(r["measured_s"]), _ms(r["predicted_s"]), _pct(r["residual"]),
          _ms(r["predicted_plain_s"]), r["device"]] for r in rows])
    runs = dict.fromkeys((r["model"], " ".join(r["run"].split()), " ".join(r["machine"].split())) for r in rows)
    return table + "\n\n" + "\n".join(f"- {model}: {run}; {machine}" for model, run, machine in runs)


def survey_validation(root: Path) -> str:
    """figures/07_survey_systems/validation.csv: notebook 07's measured steps vs the simulator."""
    rows = _rows(root, "figures/07_survey_systems/validation.csv")
    rows.sort(key=lambda r: (r["model"], r["net_name"], r["label"]))
    return _table(
        ["model", "network", "p", "schedule", "measured ms", "predicted ms", "residual", "emulable"],
        [[r["model"], r["net_name"], r["nproc"], r["label"], _ms(r["measured_s"]), _ms(r["predicted_s"]),
          _pct(r["residual"]), r["emulable"]] for r in rows])


TABLES: dict[str, Callable[[Path], str]] = {
    "verdicts": verdicts,
    "timeline_validation": timeline_validation,
    "survey_validation": survey_validation,
    "gpu_validation": gpu_validation,
}


def render(markdown: str, root: Path) -> str:
    """`markdown` with every table marker replaced by its table."""
    def table(match: re.Match) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r}; known: {', '.join(sorted(TABLES))}")
        return TABLES[name](root)
    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (MkDocs' event)
    return render(markdown, Path(config["config_file_path"]).resolve().parent)
