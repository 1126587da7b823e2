"""Nothing outside `algorithms/` knows an algorithm by name: the library's other modules hold no
string equal to a registered algorithm's name and import no module that registers one (they reach
an algorithm through the registry and its class: `Algorithm.epoch_schedule`, `work_passes`,
`steady_state`, ...). Set apart: `algorithms/` (the classes and their registry), `experiments/`
(each notebook's runs name the algorithms they compare), `systems/cases.py` (the named cases of the
benchmarks, the validation, the survey and the projections, each written once). Prose (docstrings,
help texts) may name them.

The library scanned is the one imported (`distsgd.__file__`), so that `test_add_an_algorithm`
runs this test on a copy with an algorithm added."""
from __future__ import annotations

import ast
from pathlib import Path

import distsgd
from distsgd.algorithms import REGISTRY

LIB = Path(distsgd.__file__).resolve().parent
SET_APART = ("algorithms/", "experiments/", "systems/cases.py")


def algorithm_modules() -> set[str]:
    """The modules that register an algorithm, as `distsgd.algorithms.<name>`."""
    return {cls.__module__ for cls in REGISTRY.values()}


def imported(path: Path, lib: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The absolute module names an import statement of the file at `path` (below `lib`) reads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package = ["distsgd", *path.relative_to(lib).parts[:-1]]
    base = package[:len(package) - (node.level - 1)] if node.level else []
    module = [*base, *(node.module.split(".") if node.module else [])]
    return [".".join(module)] + [".".join([*module, a.name]) for a in node.names]


def names_known(path: Path, lib: Path, names: set[str], modules: set[str]) -> list[str]:
    """Where the file at `path` (below `lib`) names an algorithm: a string constant equal to a name of `names`
    (docstrings and other prose never equal one), or an import of one of `modules`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"{path.relative_to(lib)}:{node.lineno}: {node.value!r}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [f"{path.relative_to(lib)}:{node.lineno}: imports {m}"
                      for m in imported(path, lib, node) if m in modules]
    return found


def scanned(lib: Path = LIB) -> list[Path]:
    """Every module of the library outside `SET_APART`."""
    return [p for p in sorted(lib.rglob("*.py"))
            if not p.relative_to(lib).as_posix().startswith(SET_APART)]


def test_no_module_outside_algorithms_names_an_algorithm() -> None:
    names, modules = set(REGISTRY), algorithm_modules()
    found = [hit for path in scanned() for hit in names_known(path, LIB, names, modules)]
    assert not found, "algorithms known by name outside algorithms/:\n" + "\n".join(found)


def test_a_name_or_an_import_is_seen(tmp_path: Path) -> None:
    """A comparison with a name and an import of an algorithm's module, planted in a module of a
    library laid out like the kit's, are both found; the same name in a docstring is not."""
    planted = tmp_path / "systems" / "planted.py"
    planted.parent.mkdir()
    planted.write_text('"""What ddp sends."""\nfrom ..algorithms.dear import grid_twins\n\n\n'
                       'def f(algo):\n    return algo == "ddp"\n')
    assert scanned(tmp_path) == [planted]
    assert names_known(planted, tmp_path, {"ddp", "dear"}, {"distsgd.algorithms.dear"}) == [
        "systems/planted.py:2: imports distsgd.algorithms.dear", "systems/planted.py:6: 'ddp'"]
