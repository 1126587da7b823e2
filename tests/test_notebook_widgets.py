"""In a Jupyter kernel a run's progress bar is an ipywidgets bar (tqdm.auto), not text.

JupyterLab draws a widget-view output as a live bar; papermill, nbval and terminals keep its
text/plain fallback. A notebook executed with nbclient (what papermill and nbval run) stores both
outputs and, in its metadata, the widgets' final state: the bar of a run that finished must end
at its last step, not red ("danger"), which tqdm's notebook bar shows for a bar closed before its
total (as it did while the launcher's last progress poll lagged the run's end).
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
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "import distsgd\n"
        f"r = distsgd.run(model='mlp', data='digits', nproc=2, steps=20, batch_size=8, log_every=5,\n"
        f"                eval_every=0, eval_samples=64, out={str(tmp_path / 'runs')!r})\n"
        "print(r.summary['status'], r.summary['steps'])")]
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = nb.cells[0].outputs
    streams = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "finished 20" in streams, outputs
    assert "IProgress not found" not in streams, streams
    bars = [o for o in outputs if o.output_type == "display_data" and WIDGET_VIEW in o.data]
    assert len(bars) == 1, [list(o.get("data", {})) for o in outputs]
    assert "/20 " in bars[0].data["text/plain"]                         # the text fallback

    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    progress = [m["state"] for m in state.values() if m["model_name"] == "FloatProgressModel"]
    assert [(p["value"], p["max"]) for p in progress] == [(20.0, 20.0)], progress
    assert progress[0]["bar_style"] != "danger", progress
