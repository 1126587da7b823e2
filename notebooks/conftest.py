"""nbval over the notebooks (`make test`): no progress bars.

nbval reads a kernel's IOPub messages only after the cell's execution reply, so what a long cell
publishes meanwhile queues in ZeroMQ (about a thousand messages) and the rest is dropped. Measured
on notebook 04's training cell (15 runs, 130 s): 1,193 messages arrived (983 of them the progress
widgets' updates) and the cell's closing "idle" status did not, so nbval failed the cell with
"Timeout of 5 seconds exceeded waiting for output". JupyterLab and papermill read IOPub as it
comes and keep their bars; here tqdm's own switch turns them off (`launch._ProgressBar`).
"""
import os

os.environ["TQDM_DISABLE"] = "1"
