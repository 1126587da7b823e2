"""The learning-rate schedules: the learning rate of a step, and the stage it belongs to.

`lr_at(config, step)` is the rate every algorithm trains with (the loop passes it to
`Algorithm.learning_rate`). After `warmup_steps` of linear warm-up, with t = step - warmup_steps:

    constant    lr
    cosine      lr * (1 + cos(pi * t / (steps - warmup_steps))) / 2
    step        lr * 0.1^s,  s = how many of 50% and 75% of the steps lie at or before step
    multistep   lr * 0.1^s,  s = how many of the config's `milestones` lie at or before step
    stagewise   lr / 2^s,    stage s lasting stage_steps * 2^s steps (T_s = T_0 * 2^s)

The step and multistep schedules are one rule (`milestones_of`): x0.1 at each milestone, a step
counted from 0 as in torch's ``MultiStepLR`` (default gamma 0.1); the step schedule's milestones
are fixed fractions of the run, multistep's are given in steps. Multistep is how a paper's epoch
milestones are written: LIEC-SGD's authors (``chengyif/LIEC-SGD``, SPECS.md section b) decay x0.1
at epoch 80 of 120, i.e. ``milestones=[80 * steps_per_epoch]``. A milestone at or past the last
step never applies (so a shortened run keeps the config's milestones).

The staged schedules (`STAGED`) hold their rate fixed within a stage; `stage_at` gives the stage
of a step and `DECAY` the factor between stages, so an algorithm that changes something per stage
(STL-SGD's period) reads them here instead of keeping its own copy of the stage arithmetic.
The stagewise schedule is STL-SGD's (SPECS.md section d: gamma halved, stage length doubled);
any algorithm can run on it, so STL-SGD's baselines train with the same rates.
"""
from __future__ import annotations

import math
from typing import Protocol


class Scheduled(Protocol):
    """The fields of a run's config that its schedule reads (`distsgd.Config` has them)."""

    lr: float
    steps: int
    schedule: str
    warmup_steps: int
    stage_steps: int
    milestones: list[int]

DECAY = {"step": 0.1, "multistep": 0.1, "stagewise": 0.5}   # the rate's factor from a stage to the next
STAGED = tuple(DECAY)                       # the schedules whose rate is constant within a stage
EXTERNAL = "external"   # the schedule of a `distsgd.wrap` config: the user's optimizer and
                        # scheduler set the rate; lr_at and stage_at are not asked
STEP_AT = (0.5, 0.75)                       # the step schedule's decays, as fractions of the steps
DEFAULT_STAGES = 3      # full stages of a stagewise schedule whose stage_steps is derived


def stagewise_stage(t: int, stage_steps: int) -> int:
    """Stage holding step t (counted from 0) when stage s lasts stage_steps * 2^s steps: stages
    0..s-1 end at stage_steps * (2^s - 1), so s = floor(log2(t // stage_steps + 1))."""
    return (t // stage_steps + 1).bit_length() - 1


def stage_end(stage: int, stage_steps: int) -> int:
    """First step after stage `stage` of the stagewise schedule (without warm-up)."""
    return stage_steps * (2 ** (stage + 1) - 1)


def milestones_of(config: Scheduled) -> list[float]:
    """The steps at which the step or multistep schedule of `config` decays: 50% and 75% of the
    steps (step), or the config's `milestones` (multistep)."""
    if config.schedule == "step":
        return [f * config.steps for f in STEP_AT]
    return list(config.milestones)


def default_stage_steps(steps: int, warmup_steps: int) -> int:
    """T_0 of a stagewise schedule given no stage_steps: the largest for which the steps after
    warm-up hold DEFAULT_STAGES full stages (T_0 * (2^3 - 1) <= steps - warmup_steps), at least 1."""
    return max(1, (steps - warmup_steps) // stage_end(DEFAULT_STAGES - 1, 1))


def stage_at(config: Scheduled, step: int) -> int:
    """How many times the schedule has decayed by `step` (0 during warm-up and for the
    schedules without stages)."""
    t = step - config.warmup_steps
    if t < 0 or config.schedule not in STAGED:
        return 0
    if config.schedule == "stagewise":
        return stagewise_stage(t, config.stage_steps)
    return sum(step >= m for m in milestones_of(config))


def lr_at(config: Scheduled, step: int) -> float:
    """Learning rate at `step`: linear warm-up, then the config's schedule (module docstring)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.schedule == "cosine":
        span = max(1, config.steps - config.warmup_steps)
        return 0.5 * config.lr * (1 + math.cos(math.pi * (step - config.warmup_steps) / span))
    if config.schedule in STAGED:
        return config.lr * DECAY[config.schedule] ** stage_at(config, step)
    return config.lr
