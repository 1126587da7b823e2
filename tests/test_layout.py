"""The library's import graph (issue 32: a layout that is the data flow): no import circle between
its top-level modules and packages, and every import goes down the data flow (`STAGES`).

Every relative import counts: a late one inside a function, and one under ``if TYPE_CHECKING:`` (a
reader follows it all the same). A package (`distsgd.algorithms`, `distsgd.systems.timeline`, ...) is one
node: a circle inside a package is its own business."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

LIB = Path(__file__).resolve().parent.parent / "lib" / "distsgd"



def import_edges(lib: Path = LIB) -> set[tuple[str, str]]:
    """(importer, imported) for every relative import between two of the library's top-level
    modules or packages (distsgd.systems.timeline.simulator counts as timeline); the package's own
    __init__ (its public re-exports) left out."""
    edges = set()
    for path in lib.rglob("*.py"):
        parts = path.relative_to(lib).with_suffix("").parts
        if parts == ("__init__",):
            continue
        package = list(parts[:-1])                      # the importing file's package, below distsgd
        for imp in ast.walk(ast.parse(path.read_text())):
            if not isinstance(imp, ast.ImportFrom) or not imp.level:
                continue
            base = package[:len(package) - (imp.level - 1)]
            targets = [[*base, *imp.module.split(".")]] if imp.module else [[*base, a.name] for a in imp.names]
            edges |= {(parts[0], t[0]) for t in targets if t and t[0] != parts[0]}
    return edges


def circles(edges: set[tuple[str, str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (scipy.sparse.csgraph)."""
    nodes = sorted({n for e in edges for n in e})
    index = {n: i for i, n in enumerate(nodes)}
    rows, cols = zip(*((index[a], index[b]) for a, b in edges)) if edges else ((), ())
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, label = connected_components(graph, directed=True, connection="strong")
    groups = [{n for n in nodes if label[index[n]] == k} for k in set(label)]
    return [g for g in groups if len(g) > 1]


# the data flow, first to last: what a run is made of, the collectives, the algorithms, a run, the
# systems side that drives the algorithms (simulator, benchmarks), the verdicts on runs and
# projections, each notebook's experiments, the command line. A module imports only from stages
# before its own (lib/distsgd/README.md draws it).
STAGES = ["errors", "paths", "files", "lr_schedule", "comm", "data", "dropit", "models", "compress",
          "algorithms", "training", "systems", "verdicts", "experiments", "cli", "__main__"]


def climbs(edges: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The imports that go up the data flow (or name a module `STAGES` lacks)."""
    order = {name: i for i, name in enumerate(STAGES)}
    return sorted((a, b) for a, b in edges if order.get(a, -1) <= order.get(b, len(STAGES)))


def test_every_import_goes_down_the_data_flow() -> None:
    top = {p.stem for p in LIB.iterdir() if p.suffix == ".py" and p.stem != "__init__"} | \
        {p.name for p in LIB.iterdir() if (p / "__init__.py").is_file()}
    assert top == set(STAGES), f"top-level modules and packages not in STAGES: {sorted(top ^ set(STAGES))}"
    assert not climbs(import_edges()), f"imports that climb back up the data flow: {climbs(import_edges())}"


def test_a_climbing_import_is_seen() -> None:
    assert climbs({("training", "systems"), ("systems", "training")}) == [("training", "systems")]


def test_no_import_circle() -> None:
    found = [sorted(c) for c in circles(import_edges())]
    assert not found, f"import circle(s) in lib/distsgd: {found}"


def test_the_graph_sees_a_late_import_that_closes_a_circle(tmp_path) -> None:
    lib = tmp_path / "distsgd"
    (lib / "pkg").mkdir(parents=True)
    (lib / "__init__.py").write_text("from . import a, d\n")
    (lib / "a.py").write_text("from .pkg.b import f\n")
    (lib / "pkg" / "__init__.py").write_text("")
    (lib / "pkg" / "b.py").write_text("def f():\n    from .. import a\n")
    (lib / "c.py").write_text("from . import d\n")
    (lib / "d.py").write_text("import math\n")
    assert circles(import_edges(lib)) == [{"a", "pkg"}]


NOTEBOOKS = sorted((LIB.parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
THIN = 100       # issue 36: a notebook is its parameters, runs, figures and verdicts


def code_lines(path: Path) -> int:
    """Non-blank lines of a notebook's code cells."""
    import nbformat

    return sum(1 for c in nbformat.read(path, 4).cells if c.cell_type == "code"
               for line in c.source.splitlines() if line.strip())


def test_every_notebook_is_thin() -> None:
    assert len(NOTEBOOKS) == 11
    thick = {p.stem: n for p in NOTEBOOKS if (n := code_lines(p)) > THIN}
    assert not thick, f"notebooks over {THIN} non-blank code lines (move analysis to distsgd.experiments): {thick}"
