"""pyproject.toml, constraints.txt and environment.yml must agree on packages and Python.

pyproject.toml lists compatible ranges (installing distsgd into an existing environment keeps
its torch); constraints.txt pins the exact versions the kit is tested with, which `make venv`
installs (`pip install -c constraints.txt -e ".[test]"`); conda users get environment.yml, which
lists pyproject.toml's requirements with constraints.txt's pins in place of their ranges. So:
every pin is an exact `==`, lies inside pyproject.toml's range, and is what environment.yml
lists; every other requirement is the same in pyproject.toml and environment.yml. Requirements
are compared by normalised name (PEP 503), extras, version specifiers and markers.
"""
from __future__ import annotations

import re
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


def constraint_lines(text: str) -> list[str]:
    """The requirement lines of a pip constraints file (comments and blank lines dropped)."""
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def constraints() -> list[str]:
    return constraint_lines((ROOT / "constraints.txt").read_text())


def pinned_version(key: Key) -> str | None:
    """The version of an exact pin (`==X`, no wildcard), else None."""
    spec = list(SpecifierSet(key[2]))
    if len(spec) == 1 and spec[0].operator in ("==", "===") and "*" not in spec[0].version:
        return spec[0].version
    return None


def pin_problems(pyproject_reqs: list[str], env_reqs: list[str], pins: list[str]) -> list[str]:
    """What is wrong with the three files' requirements (empty: they agree): a pin that is not
    exact, that pyproject.toml does not list or whose range excludes it, that environment.yml
    does not list as that exact pin; any other requirement that differs between pyproject.toml
    and environment.yml."""
    py, env, pin = normalise(pyproject_reqs), normalise(env_reqs), normalise(pins)
    problems = []
    for name, key in sorted(pin.items()):
        version = pinned_version(key)
        if version is None:
            problems.append(f"{name}: constraints.txt has {key[2]!r}, not an exact ==version pin")
            continue
        if name not in py:
            problems.append(f"{name} pinned in constraints.txt but not required by pyproject.toml")
        elif not SpecifierSet(py[name][2]).contains(version, prereleases=True):
            problems.append(f"{name}: pyproject.toml's range {py[name][2]!r} excludes the pin {version}")
        elif pinned_version(py[name]) is not None:
            problems.append(f"{name}: pyproject.toml pins {py[name][2]!r}; give a compatible range there")
        if env.get(name) != key:
            problems.append(f"{name}: environment.yml has {env[name][2] if name in env else 'nothing'!r}, "
                            f"constraints.txt pins {key[2]!r}")
    unpinned = lambda reqs: {n: k for n, k in reqs.items() if n not in pin}  # noqa: E731
    problems += differences(unpinned(py), unpinned(env), "pyproject.toml", "environment.yml")
    return problems


def test_pins_and_ranges_agree_in_the_three_files() -> None:
    _, pip = split_conda(conda_env())
    problems = pin_problems(pyproject_requirements(), pip_requirements(pip), constraints())
    assert not problems, "pyproject.toml, constraints.txt and environment.yml disagree:\n" + "\n".join(problems)


def test_torch_is_a_range_in_pyproject_and_pinned_in_constraints() -> None:
    """Installing into an existing environment must not replace its torch: ranges in pyproject."""
    py, pin = normalise(pyproject_requirements()), normalise(constraints())
    for name in ("torch", "torchvision"):
        assert pinned_version(py[name]) is None, f"pyproject.toml pins {name} {py[name][2]}"
        assert pinned_version(pin[name]) is not None, f"constraints.txt must pin {name} exactly"
    assert pinned_version(pin["torch"]) == "2.14.1" and pinned_version(pin["torchvision"]) == "0.29.1"


def test_makefile_installs_under_the_constraints() -> None:
    """`make venv` installs with `-c constraints.txt` and is rebuilt when that file changes."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^CONSTRAINTS\s*:?=\s*constraints\.txt\s*$", makefile, re.M), "CONSTRAINTS variable"
    rule = re.search(r"^\$\(VENV\)/\.installed:(.*)$", makefile, re.M)
    assert rule and "pyproject.toml" in rule.group(1) and "$(CONSTRAINTS)" in rule.group(1), rule
    assert re.search(r"pip install .*-c \$\(CONSTRAINTS\) -e \"\.\[test\]\"", makefile)


@pytest.mark.parametrize("plant, expected", [
    ({"pins": ["torch==2.14.0", "torchvision==0.29.1", "seaborn==0.13.2"]},
     "torch: environment.yml has '==2.14.1', constraints.txt pins '==2.14.0'"),
    ({"pins": ["torch>=2.13", "torchvision==0.29.1", "seaborn==0.13.2"]},
     "torch: constraints.txt has '>=2.13', not an exact ==version pin"),
    ({"pyproject": {"torch": "torch>=2.15,<3"}}, "torch: pyproject.toml's range '<3,>=2.15' excludes the pin 2.14.1"),
    ({"pyproject": {"torch": "torch==2.14.1"}}, "torch: pyproject.toml pins '==2.14.1'; give a compatible range there"),
    ({"env": {"torchvision": "torchvision>=0.28,<1"}},
     "torchvision: environment.yml has '<1,>=0.28', constraints.txt pins '==0.29.1'"),
    ({"env": {"pandas": "pandas>=2.2"}}, "pandas: pyproject.toml has"),
    ({"pins": ["torch==2.14.1", "torchvision==0.29.1", "seaborn==0.13.2", "rich==13.0"]},
     "rich pinned in constraints.txt but not required by pyproject.toml"),
])
def test_pin_check_catches_a_planted_mismatch(plant: dict, expected: str) -> None:
    """Each kind of drift between the three files is reported (planted on copies of the real ones)."""
    def replaced(reqs: list[str], new: dict[str, str]) -> list[str]:
        return [new.get(canonicalize_name(Requirement(r).name), r) for r in reqs]

    _, pip = split_conda(conda_env())
    problems = pin_problems(replaced(pyproject_requirements(), plant.get("pyproject", {})),
                            replaced(pip_requirements(pip), plant.get("env", {})),
                            plant.get("pins", constraints()))
    assert any(p.startswith(expected) for p in problems), problems


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
