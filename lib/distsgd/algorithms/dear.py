"""DeAR: decoupling the all-reduce into reduce-scatter and all-gather and pipelining both with
computation (Zhang, Shi, Chu, Wang, Li, Liu; ICDCS 2023, arXiv 2302.12445; code
lzhangbv/dear_pytorch `dear/dopt_rsag.py`, see SPECS.md section f).

The update is S-SGD's (a ring all-reduce *is* a reduce-scatter followed by an all-gather):

    backward of step t:   as soon as every gradient of fusion group g is ready,
                          shard_g <- reduce_scatter(grad_g) / p             (async, overlaps backward)
    "bp barrier" (optimizer_step): wait for every reduce-scatter; launch all_gather(shard_0)
    forward of step t+1:  at the first module of group g, wait for all_gather(shard_g) and launch
                          all_gather(shard_{g+1}) (pipelined with forward); then, for this
                          module only, x <- SGD(x, gathered averaged gradient), then its forward.

So each layer is updated just before its next use and the all-gather overlaps the next forward.
Bytes per rank per step: reduce-scatter + all-gather = 2(p-1)/p * n, one ring all-reduce (groups
are zero-padded to a multiple of p, at most p-1 elements each). `finalize()` flushes the pending
update of the last step (the paper's code skips it) so evaluation sees x_T; an evaluation between
steps also runs the forward pre-hooks and so sees the updated model.

Fusion groups are consecutive trainable modules in forward order, either by size (add modules
while the group stays within `threshold_mb`, the paper's THRESHOLD, default 25 MB) or by count
(`nearby_layers` modules per group when threshold_mb = 0; nearby_layers = 1 is "DeAR w/o TF").
With `tune`, the threshold is chosen during the first (tune_trials + 1) * tune_window steps from
measured iteration times (`tuner.GridTuner`, a documented grid search standing in for the paper's
Bayesian optimisation [reconstructed]); between trials the pending update is applied at the
barrier (still lossless) and the groups are rebuilt.

Works with SGD with momentum and weight decay (the update is re-implemented layer by layer,
`layerwise.sgd_update`); other optimizers are rejected before any process starts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..errors import ConfigError
from .base import Param, RunFacts
from .buckets import Bucket
from .layerwise import LayerwiseDeferred, unit_params
from .registry import register
from .tuner import GridTuner

if TYPE_CHECKING:
    from ..comm import Handle


class _Group(Bucket):
    """A fusion group: modules, their gradients in one padded buffer, and the local shard."""

    def __init__(self, modules: list[torch.nn.Module], p: int) -> None:
        super().__init__([q for m in modules for q in unit_params(m)], p)
        self.modules = modules
        self.shard = torch.zeros(self.buffer.numel() // p, dtype=self.buffer.dtype,
                                 device=self.buffer.device)
        self.gather: Handle | None = None


def fusion_groups(modules: list[torch.nn.Module], threshold_bytes: float, nearby: int) -> list[list[torch.nn.Module]]:
    """Consecutive modules grouped by size (threshold_bytes > 0: add modules while the group stays
    within the threshold; a module larger than it is alone) or by count (`nearby` per group),
    the rule of `fusion_counts`."""
    counts = fusion_counts([sum(q.numel() * q.element_size() for q in unit_params(m)) for m in modules],
                           threshold_bytes, nearby)
    groups, start = [], 0
    for k in counts:
        groups.append(modules[start:start + k])
        start += k
    return groups


def fusion_counts(nbytes: list[int], threshold_bytes: float, nearby: int) -> list[int]:
    """`fusion_groups` on the modules' gradient bytes only (forward order): the number of
    modules in each group; used where no modules are held (`grid_twins`)."""
    counts: list[int] = []
    size = 0
    for n in nbytes:
        full = size + n > threshold_bytes if threshold_bytes > 0 else bool(counts) and counts[-1] >= nearby
        if not counts or full:
            counts.append(0)
            size = 0
        counts[-1] += 1
        size += n
    return counts


def grid_twins(nbytes: list[int], threshold_mb: float, low: float, high: float, trials: int) -> list[float]:
    """The thresholds of the tuner's grid (`GridTuner(low, high, trials)`) whose fusion groups of
    layers of `nbytes` gradient bytes (forward order) are those of `threshold_mb` (`fusion_counts`,
    group by size). Known before any step time: if there is one, "tuned at least as fast as
    threshold_mb" holds by construction (the tuner keeps the fastest grid point), an identity, not a
    claim that can fail."""
    fixed = fusion_counts(nbytes, threshold_mb * 2**20, 1)
    return [x for x in GridTuner(low, high, trials).candidates if fusion_counts(nbytes, x * 2**20, 1) == fixed]


@register
class DeAR(LayerwiseDeferred):
    name = "dear"
    summary = "DeAR: reduce-scatter during backward, all-gather pipelined with the next forward"
    params = (
        Param("threshold_mb", 25.0, "fusion-group size threshold in MB (0: group by nearby_layers)",
              lambda v: v >= 0, "a number >= 0"),
        Param("nearby_layers", 1, "modules per fusion group when threshold_mb = 0 (1: DeAR w/o TF)",
              lambda v: v >= 1, "an integer >= 1"),
        Param("tune", False, "choose threshold_mb from measured iteration times during the first steps"),
        Param("tune_min_mb", 1.0, "tuner's lower bound in MB (paper: 1)", lambda v: v > 0, "a number > 0"),
        Param("tune_max_mb", 100.0, "tuner's upper bound in MB (paper: 100)", lambda v: v > 0, "a number > 0"),
        Param("tune_trials", 10, "thresholds tried (paper: 10)", lambda v: v >= 1, "an integer >= 1"),
        Param("tune_window", 5, "steps timed per trial; one extra window first is warm-up (paper: 5)",
              lambda v: v >= 1, "an integer >= 1"),
    )

    threshold_mb: float
    nearby_layers: int
    tune: bool
    tune_min_mb: float
    tune_max_mb: float
    tune_trials: int
    tune_window: int

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """Every step alike, after the tuner's windows (tune=true)."""
        return (params["tune_trials"] + 1) * params["tune_window"] if params["tune"] else 0, 1

    state_fields = ("fusion_mb", "tuning", "tuner")
    fusion_mb: float                    # the fusion threshold in use (threshold_mb, or the tuner's)
    tuning: bool                        # the tuner is still trying thresholds
    tuner: GridTuner | None             # its measurements (None without `tune`)

    @classmethod
    def check_run(cls, params: dict[str, Any], facts: RunFacts) -> None:
        super().check_run(params, facts)
        cls.check_tune_bounds(params)

    @staticmethod
    def check_tune_bounds(params: dict[str, Any]) -> None:
        """The tuner's bounds: tune_min_mb <= tune_max_mb (also checked by the timeline simulator,
        which runs the tuner without a Config)."""
        if params["tune_min_mb"] > params["tune_max_mb"]:
            raise ConfigError("params.tune_min_mb", params["tune_min_mb"], f"<= tune_max_mb ({params['tune_max_mb']})")

    def build(self) -> None:
        super().build()
        self.tuner = GridTuner(self.tune_min_mb, self.tune_max_mb, self.tune_trials) if self.tune else None
        self.tuning = self.tuner is not None
        self.fusion_mb = self.tuner.ask() if self.tuner is not None else self.threshold_mb
        self.regroup()
        self.window_start = 0.0

    def regroup(self) -> None:
        """(Re)build the fusion groups for the current threshold."""
        groups = fusion_groups(self.modules, self.fusion_mb * 2**20, self.nearby_layers)
        self.groups = [_Group(ms, self.comm.world_size) for ms in groups]
        self.group_of = {m: i for i, g in enumerate(self.groups) for m in g.modules}
        self.grad_of = {q: v for g in self.groups for q, v in zip(g.params, g.views())}
        self.param_group = {q: g for g in self.groups for q in g.params}

    # ------------------------------------------------------------------ backward
    def gradient_ready(self, q: torch.nn.Parameter) -> None:
        group = self.param_group[q]
        group.ready += 1
        if group.ready == len(group.params):
            self._reduce_scatter(group)

    def _reduce_scatter(self, group: _Group) -> None:
        group.pack()
        group.handle = self.comm.reduce_scatter(group.shard, group.buffer, op="avg", async_op=True)

    # ------------------------------------------------------------------ bp barrier
    def optimizer_step(self, step: int) -> None:
        """Wait for the reduce-scatters and start the all-gather pipeline; no update here."""
        self.flush()
        for group in self.groups:
            if group.handle is None:         # a parameter without gradient this step
                self._reduce_scatter(group)
        for group in self.groups:
            group.handle.wait()
            group.handle, group.ready = None, 0
        self.begin_update()
        self.gathered, self.launched = 0, 0
        self._launch_gather()
        if self.tuning:
            self._tune_step(step)

    def _launch_gather(self) -> None:
        if self.launched < len(self.groups):
            g = self.groups[self.launched]
            g.gather = self.comm.all_gather(g.buffer, g.shard, async_op=True)
            self.launched += 1

    def _gather_through(self, index: int) -> None:
        """Wait for the all-gathers of groups up to `index`, prefetching the next one."""
        while self.gathered <= index:
            self.groups[self.gathered].gather.wait()
            self.gathered += 1
            self._launch_gather()

    # ------------------------------------------------------------------ next forward
    def wait_for(self, module: torch.nn.Module) -> None:
        self._gather_through(self.group_of[module])

    def averaged_grad(self, q: torch.nn.Parameter) -> torch.Tensor:
        return self.grad_of[q]

    # ------------------------------------------------------------------ tuning
    def _tune_step(self, step: int) -> None:
        """At the end of each window of tune_window steps: time it (the first window is warm-up),
        tell the tuner, and switch to its next threshold (or the best one when done)."""
        window = self.tune_window
        if (step + 1) % window:
            return
        now = self.comm.now()
        if step + 1 > window:                # not the warm-up window
            elapsed = torch.tensor((now - self.window_start) / window, dtype=torch.float64)
            seconds = self.comm.reduce_uncounted(elapsed, op="max").item()   # all ranks agree
            self.tuner.tell(self.fusion_mb, seconds)
            nxt = self.tuner.ask()
            if nxt is None:
                nxt, self.tuning = self.tuner.best(), False
            if nxt != self.fusion_mb:
                self.flush()
                self.fusion_mb = nxt
                self.regroup()
        self.window_start = self.comm.now()

    def metrics(self) -> dict[str, float]:
        return {"threshold_mb": self.fusion_mb, "fusion_groups": len(self.groups)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The saved threshold's fusion groups first (the pending gradients go back into their
        buffers), then the fields and the pending update, whose all-gathers count as arrived."""
        self.fusion_mb = state["fusion_mb"]
        self.regroup()
        super().load_state_dict(state)
        self.gathered = self.launched = len(self.groups)
        self.window_start = self.comm.now()      # a tuning window restarts at the resume
