"""The timeline simulator: a step's compute stream and link(s) for every schedule of the kit, on a
layer profile (`distsgd.systems.layer_profile.Profile`), p ranks and a network (`NetModel`, the model
`Comm` emulates) or a two-level `Topology`. `simulate(...)` -> `Prediction` (step_s, compute_s,
exposed_comm_s, events, to_chrome_trace); `python -m distsgd simulate` sweeps configurations.

Modules: `topology` (which link, what cost), `streams` (one rank's compute stream and FIFO links),
`driver` (the algorithm's own class driven over the profile with a recording `SimComm`),
`simulator` (`simulate`: the steady state, `Prediction`, `RuntimeModel`, the collectives a run
issues), `sweep` (the CLI's table of configurations), `costs` (the per-call issue and copy costs and
an algorithm's own passes on the compute stream: `simulate(..., overheads=Overheads(...))`, by
default `costs.for_profile`; measured by `systems.measure_costs`), `effects` (compute
contention, the per-message cost: `simulate(..., effects=Effects(...))`, default off;
on in the what-if CLI), `error_band` (the simulator's error measured on a real cluster, keyed on the
runtime model), `validate` (against the benchmark's measured step times), `survey` (the error on the
survey's real cluster: `python -m distsgd.systems.timeline.survey`), `public_tables` (the error on the other
public real-cluster tables: PyTorch's DDP benchmark, Horovod's first table, GRACE). Topology: `Topology(g, intra,
inter, hierarchical=)`.
"""
from .effects import Effects
from .costs import Overheads
from .simulator import ALGORITHMS, Prediction, simulate
from .topology import Topology

__all__ = ["ALGORITHMS", "Effects", "Overheads", "Prediction", "Topology", "simulate"]
