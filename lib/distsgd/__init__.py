"""distsgd: a reproducibility kit for communication-efficient distributed deep-learning training.

    import distsgd
    result = distsgd.run(algo="local_sgd", params={"period": 4}, nproc=4, steps=300)
    result.metrics      # pandas DataFrame, one row per logged step
    result.summary      # final evaluation and totals
    distsgd.load_results("results")   # every run under a directory: one pandas row per run

or any algorithm in one's own torchrun script (`distsgd.wrap`):

    model, optimizer = distsgd.wrap(model, optimizer, "local_sgd", period=8)
    ...                                  # the script's own loop
    distsgd.finalize(model, optimizer)
"""
from .errors import ConfigError, DivergedError, WorkerError
from .training.caps import Caps
from .training.config import Config
from .training.results import Result, load_results
from .training.runner import run
from .training.wrap import finalize, wrap

__all__ = ["Caps", "Config", "ConfigError", "DivergedError", "WorkerError", "Result", "finalize", "load_results",
           "run", "wrap"]
__version__ = "0.1.0"
