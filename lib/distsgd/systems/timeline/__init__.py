"""The timeline simulator: a step's compute stream and link(s) for every schedule of the kit, on a
layer profile (`distsgd.systems.layer_profile.Profile`), p ranks and a network (`NetModel`, the model
`Comm` emulates) or a two-level `Topology`. `simulate(...)` -> `Prediction` (step_s, compute_s,
exposed_comm_s, events, to_chrome_trace); `python -m distsgd simulate` sweeps configurations.

Modules: `topology` (which link, what cost), `streams` (one rank's compute stream and FIFO
links), `schedules` (S-SGD schedules, DDP, PS, ByteScheduler, DeAR), `local` (local SGD,
CoCoD-SGD, SSD-SGD, KAVG), `simulate` (steady state, Prediction, Chrome trace, DeAR's tuner on
simulated step times), `sweep` (the CLI's
table of configurations), `overheads` (the per-call issue and copy costs on the compute stream:
`simulate(..., overheads=Overheads(...))`, default none; `measure_costs.measure()` on this machine),
`effects` (Horovod's fusion cycle, compute contention, the per-message cost: `simulate(...,
effects=Effects(...))`, default off; on in the what-if CLI), `validate` (against the benchmark's
measured step times), `survey` (the error on the survey's real cluster: `python -m
distsgd.systems.timeline.survey`). Topology: `Topology(g, intra, inter, hierarchical=, servers=)`.
"""
from .effects import Effects
from .costs import Overheads
from .simulate import ALGORITHMS, Prediction, simulate
from .topology import Topology

__all__ = ["ALGORITHMS", "Effects", "Overheads", "Prediction", "Topology", "simulate"]
