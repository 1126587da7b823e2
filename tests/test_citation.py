"""LICENSE and CITATION.cff: the licence pyproject.toml declares, and the nine papers cited.

`citation_problems` checks the parts of the Citation File Format 1.2.0 that the project relies on
(the required keys, each reference's title, authors and year); the full schema was checked with
`cffconvert --validate` when the file was written (cffconvert is not a dependency).
"""
from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

# notebook -> a phrase of its paper's title (the README's paper table, notebooks 01-09)
PAPERS = {
    "01_cocod_sgd": "Computation and Communication Decoupled Stochastic Gradient Descent",
    "02_liec_sgd": "Local Immediate Error Compensation",
    "03_dropit": "DropIT",
    "04_stl_sgd": "STL-SGD",
    "05_vrl_sgd": "Variance Reduced Local SGD",
    "06_dear": "DeAR",
    "07_survey_systems": "Survey, Evaluation, and Challenges",
    "08_ssd_sgd": "SSD-SGD",
    "09_global_reductions": "Reducing Global Reductions",
}


def citation() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def author_problems(authors: Any, where: str) -> list[str]:
    if not isinstance(authors, list) or not authors:
        return [f"{where}: no authors"]
    return [f"{where}: author {a!r} has neither family-names nor name" for a in authors
            if not isinstance(a, dict) or not (a.get("family-names") or a.get("name"))]


def citation_problems(cff: dict[str, Any]) -> list[str]:
    """What CITATION.cff lacks (empty: nothing)."""
    problems = [f"missing {key}" for key in ("cff-version", "message", "title", "authors") if not cff.get(key)]
    if str(cff.get("cff-version")) != "1.2.0":
        problems.append(f"cff-version {cff.get('cff-version')!r}, expected 1.2.0")
    problems += author_problems(cff.get("authors"), "the software")
    refs = cff.get("references") or []
    if len(refs) != len(PAPERS):
        problems.append(f"{len(refs)} references, expected the {len(PAPERS)} papers")
    for i, ref in enumerate(refs):
        where = f"reference {i + 1} ({ref.get('title', 'no title')!r})"
        if not ref.get("type") or not ref.get("title"):
            problems.append(f"{where}: needs a type and a title")
        problems += author_problems(ref.get("authors"), where)
        if not isinstance(ref.get("year"), int) or not 1990 <= ref["year"] <= 2030:
            problems.append(f"{where}: year {ref.get('year')!r} is not a year")
    titles = [str(ref.get("title", "")) for ref in refs]
    for notebook, phrase in PAPERS.items():
        if not any(phrase.lower() in t.lower() for t in titles):
            problems.append(f"no reference for {notebook} (a title with {phrase!r})")
    return problems


def test_citation_cites_the_nine_papers() -> None:
    problems = citation_problems(citation())
    assert not problems, "CITATION.cff:\n" + "\n".join(problems)


@pytest.mark.parametrize("plant, expected", [
    (lambda c: c["references"].pop(5), "8 references, expected the 9 papers"),
    (lambda c: c["references"][2].pop("year"), "reference 3 ('DropIT"),
    (lambda c: c["references"][0].update(authors=[]), "reference 1 ('Faster Distributed"),
    (lambda c: c["references"][6]["authors"].append({"given-names": "X"}), "has neither family-names nor name"),
    (lambda c: c.update({"cff-version": "1.1.0"}), "cff-version '1.1.0', expected 1.2.0"),
])
def test_citation_check_catches_a_planted_fault(plant, expected: str) -> None:
    cff = copy.deepcopy(citation())
    plant(cff)
    assert any(expected in p for p in citation_problems(cff)), citation_problems(cff)


def test_license_file_matches_pyproject_and_citation() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    text = (ROOT / "LICENSE").read_text()
    assert declared == "MIT"
    assert text.splitlines()[0] == "MIT License"
    assert "Copyright (c) 2026 the distsgd authors" in text
    assert "Permission is hereby granted, free of charge" in text
    assert citation()["license"] == declared
