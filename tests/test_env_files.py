"""pyproject.toml and environment.yml must pin the same packages and the same Python.

pip users install from pyproject.toml (`pip install -e ".[test]"`), conda users from
environment.yml; both must end up with the same packages. Requirements are compared by
normalised name (PEP 503), extras, version specifiers and markers.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Iterable

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYTHON = "3.11"

Key = tuple[str, tuple[str, ...], str, str]  # name, extras, specifier, marker


def normalise(requirements: Iterable[str]) -> dict[str, Key]:
    """Requirement strings keyed by canonical name; a package listed twice is an error."""
    out: dict[str, Key] = {}
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name not in out, f"{name} is listed twice"
        out[name] = (name, tuple(sorted(req.extras)), str(req.specifier), str(req.marker or ""))
    return out


def differences(a: dict[str, Key], b: dict[str, Key], a_name: str, b_name: str) -> list[str]:
    """Human-readable differences between two normalised requirement sets (empty: same)."""
    problems = [f"{n} in {a_name} but not in {b_name}" for n in sorted(a.keys() - b.keys())]
    problems += [f"{n} in {b_name} but not in {a_name}" for n in sorted(b.keys() - a.keys())]
    problems += [
        f"{n}: {a_name} has {a[n]}, {b_name} has {b[n]}"
        for n in sorted(a.keys() & b.keys())
        if a[n] != b[n]
    ]
    return problems


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pyproject_requirements() -> list[str]:
    project = pyproject()["project"]
    return [*project["dependencies"], *project.get("optional-dependencies", {}).get("test", [])]


def conda_env() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def split_conda(env: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(conda package specs, pip lines) of an environment.yml."""
    conda: list[str] = []
    pip: list[str] = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            assert set(dep) == {"pip"}, f"unexpected dependency mapping {dep}"
            pip.extend(str(line) for line in dep["pip"])
        else:
            conda.append(str(dep))
    return conda, pip


def pip_requirements(pip_lines: list[str]) -> list[str]:
    """The package requirements of a pip section (options such as `-e .` are not packages)."""
    return [line for line in pip_lines if not line.startswith("-")]


def test_same_requirements_in_both_files() -> None:
    _, pip = split_conda(conda_env())
    problems = differences(
        normalise(pyproject_requirements()), normalise(pip_requirements(pip)),
        "pyproject.toml", "environment.yml",
    )
    assert not problems, "pyproject.toml and environment.yml disagree:\n" + "\n".join(problems)


def test_conda_side_is_only_python_and_pip() -> None:
    """Packages installed by conda would escape the comparison: everything else goes via pip."""
    conda, pip = split_conda(conda_env())
    names = sorted(spec.split("=")[0].split()[0] for spec in conda)
    assert names == ["pip", "python"], f"conda installs {names}; add packages to the pip section"
    assert "-e ." in pip, "environment.yml must install the project itself (-e .)"


def test_python_version_in_both_files() -> None:
    conda, _ = split_conda(conda_env())
    assert f"python={PYTHON}" in conda or f"python={PYTHON}.*" in conda, conda
    requires = SpecifierSet(pyproject()["project"]["requires-python"])
    assert requires.contains(PYTHON), f"requires-python {requires} excludes {PYTHON}"


def test_environment_metadata() -> None:
    env = conda_env()
    assert env["name"] == "distsgd"
    assert env["channels"] == ["conda-forge"]


@pytest.mark.parametrize("side", ["pyproject", "environment"])
def test_comparison_catches_an_extra_package(side: str) -> None:
    base = pyproject_requirements()
    extra = [*base, "Some_Package.Name>=1.0"]
    a, b = (extra, base) if side == "pyproject" else (base, extra)
    assert differences(normalise(a), normalise(b), "a", "b") == [
        f"some-package-name in {'a' if side == 'pyproject' else 'b'} but not in "
        f"{'b' if side == 'pyproject' else 'a'}"
    ]


def test_comparison_normalises_names_and_catches_changed_pins() -> None:
    assert differences(normalise(["PyYAML >= 6.0"]), normalise(["pyyaml>=6.0"]), "a", "b") == []
    assert differences(normalise(["scikit_learn>=1.4,<2"]), normalise(["scikit-learn<2,>=1.4"]),
                       "a", "b") == []
    assert differences(normalise(["torch==2.14.1"]), normalise(["torch==2.14.0"]), "a", "b")
