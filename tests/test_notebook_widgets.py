"""In a Jupyter kernel a run's progress bar is an ipywidgets bar (tqdm.auto), not text.

JupyterLab draws it live; a notebook executed with nbclient (what papermill and nbval run) keeps
the widgets' final state in its metadata. A finished run's bar ends at its last step (not red,
"danger": tqdm's notebook bar closes so when closed before its total, as it did while the
launcher's last progress poll lagged the run's end) and its output is replaced by an empty one,
so the saved notebook refers to no closed widget (JupyterLab would show "Error displaying widget:
model not found" there); a diverged run's bar stays, red, at the step it reached.
"""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

LIB = Path(__file__).resolve().parent.parent / "lib"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@pytest.mark.multiproc
def test_progress_bar_is_a_widget_that_ends_at_the_last_step(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("ipywidgets")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(LIB), os.environ.get("PYTHONPATH")) if p))
    common = (f"model='mlp', data='digits', nproc=2, steps=20, batch_size=8, log_every=5, eval_every=0, "
              f"eval_samples=64, out={str(tmp_path / 'runs')!r}")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(f"import distsgd\nr = distsgd.run({common})\n"
                                          "print(r.summary['status'], r.summary['steps'])"),
                nbformat.v4.new_code_cell(f"try:\n    distsgd.run(lr=1e6, {common})\n"
                                          "except distsgd.DivergedError as e:\n    print('diverged')")]
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    finished, diverged = (c.outputs for c in nb.cells)
    streams = "".join(o.get("text", "") for o in [*finished, *diverged] if o.output_type == "stream")
    assert "finished 20" in streams and "diverged" in streams, finished + diverged
    assert "IProgress not found" not in streams, streams
    displays = [o for o in finished if o.output_type == "display_data"]
    assert [o.data for o in displays] == [{"text/plain": ""}], displays     # the widget's output, emptied
    red = [o for o in diverged if o.output_type == "display_data" and WIDGET_VIEW in o.data]
    assert len(red) == 1 and "/20 " in red[0].data["text/plain"], diverged  # stays, with its text fallback

    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    bars = sorted((m["state"]["value"], m["state"]["max"], m["state"]["bar_style"])
                  for m in state.values() if m["model_name"] == "FloatProgressModel")
    assert len(bars) == 2 and bars[1] == (20.0, 20.0, ""), bars           # finished: at its last step
    assert bars[0][0] < 20 and bars[0][2] == "danger", bars               # diverged: red where it stopped


@pytest.mark.multiproc
def test_tqdm_disable_turns_the_widget_off(tmp_path: Path, monkeypatch) -> None:
    """TQDM_DISABLE=1 (tqdm's own switch, which its notebook bar ignores) draws no widget: what
    notebooks/conftest.py sets for nbval, which drops IOPub messages beyond ZeroMQ's queue."""
    pytest.importorskip("ipywidgets")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(LIB), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "import distsgd\nr = distsgd.run(model='mlp', data='digits', nproc=2, steps=20, batch_size=8, log_every=5, "
        f"eval_every=0, eval_samples=64, out={str(tmp_path / 'runs')!r})\nprint(r.summary['status'])")]
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert [o.output_type for o in outputs] == ["stream"] and "finished" in outputs[0].text, outputs
    assert WIDGET_STATE not in nb.metadata.get("widgets", {}), nb.metadata
