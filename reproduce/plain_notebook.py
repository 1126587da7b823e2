"""Run one notebook's code cells in order as a plain Python script, on a machine that has torch and
the kit's scientific packages but no Jupyter (papermill, nbclient and ipykernel absent: a GPU image,
a container). The defaults of the tagged `parameters` cell are the quick profile; `--set NAME=VALUE`
assigns after that cell, as papermill's injected cell would. IPython's `display` shows nothing;
figures go to files (matplotlib's Agg backend); the claims table goes to FIGURES/<notebook>/claims.csv
and the notebook's last cell compares it with the ledger, as under nbval.

    PYTHONPATH=lib python reproduce/plain_notebook.py 09_global_reductions --figures /tmp/figures

Used for the verdicts on another CPU (reproduce/validation/h200_2026-11-28/other_cpu/). A notebook run
with Jupyter is `reproduce/run.py`; this script is only for where Jupyter is not installed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", help="a notebook's stem, e.g. 09_global_reductions")
    parser.add_argument("--figures", type=Path, required=True, help="folder for figures and claims (DISTSGD_FIGURES)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a parameter after the parameters cell (a Python literal), e.g. --set dry_run=True")
    args = parser.parse_args(argv)
    path = REPO / "notebooks" / f"{args.notebook}.ipynb"
    if not path.is_file():
        parser.error(f"notebook: no {path}")
    import matplotlib

    matplotlib.use("Agg")
    os.environ.setdefault("DISTSGD_PROFILE", "quick")
    os.environ["DISTSGD_FIGURES"] = str(args.figures.resolve())
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    namespace: dict = {"__name__": "__main__", "display": lambda *a, **k: None}
    t0 = time.monotonic()
    for i, cell in enumerate(cells):
        source = "".join(line for line in cell["source"] if not line.lstrip().startswith(("%", "!")))
        try:
            exec(compile(source, f"{args.notebook}[{i}]", "exec"), namespace)
            if "parameters" in cell["metadata"].get("tags", []):
                for assignment in args.set:
                    exec(assignment, namespace)
        except Exception:
            traceback.print_exc()
            print(f"{args.notebook}: FAILED in code cell {i} after {time.monotonic() - t0:.0f} s", flush=True)
            return 1
    print(f"{args.notebook}: ok in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
