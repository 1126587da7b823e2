"""The VRL-SGD authors' epoch schedule: a warm start of S-SGD, and a model average at every epoch end.

Neither is in the paper (Liang et al., arXiv 1912.12844): its Algorithm 1 is the update rule of
`vrl_sgd` alone, started from x_0 with Delta_i = 0. Both are in how the authors ran every method
(S-SGD, Local SGD, VRL-SGD) for their recorded curves (zerolxf/VRL-SGD at commit 119d245):

* **warm start** (`Readme.md`, "Warm Up"; every command of `train.sh` passes ``-r``): training
  resumes from a model trained by 2 epochs of SGD (``<model>_init.pth``). `Config.warm_start_epochs`
  = W makes the first W·E steps of a run (E = `epoch_steps`, the run's steps per epoch) S-SGD steps,

      g   = (1/N) sum_j (grad F_j(x; xi_j))          one all-reduce of the gradients
      x  <- x - gamma * (g + wd * x)                  the optimizer's step, the same on every rank

  (Goyal et al. 2017, eq. 1; weight decay is the optimizer's). The models stay equal. The
  algorithm's own state starts after them, as in a run resumed from the authors' init file: its
  period clock first ticks at step W·E, VRL-SGD's Delta_i is still 0 there.
* **epoch-end average** (`trainer.py`: ``Trainer.train`` calls the model's ``_sync_period()`` after
  the last batch of every epoch; `restarted.py`: one all-reduce of the flat parameters). With
  `Config.epoch_average`, after the last step t of every epoch ((t + 1) mod E == 0)

      x_i <- (1/N) sum_j x_j                          one all-reduce of the model

  and nothing else: VRL-SGD's Delta_i is not updated (the authors' Delta update lives in their
  optimizer's period sync, `DistributedSgd.py` ``_update_params``, which this call bypasses), and
  the period clock goes on counting (their optimizer's ``iter_cnt`` is not reset), so the next
  period still ends k steps after the previous one.

Choices of this implementation: an epoch end that is also a period end is averaged once (the
period's average already made the models equal; the authors all-reduce a second time, a no-op
on the models); epoch ends inside the warm start are not averaged (the models are equal); the
warm start is part of the run's `steps` and of its byte counts (the authors' init run is a
separate run); floating-point buffers are averaged with the parameters, as in the algorithms'
own averages (the authors broadcast buffers from rank 0).
"""
from __future__ import annotations

import torch

from .flat import average


class EpochSchedule:
    """Mixin of an averaging algorithm (`local_sgd`, `vrl_sgd`): the warm start and the epoch-end
    average of the module doc, read from `self.facts` and `self.epoch_steps` (set by `setup`)."""

    epoch_schedule = True
    model: torch.nn.Module
    epoch_steps: int

    def warm_start_steps(self) -> int:
        """Steps of the S-SGD warm start: warm_start_epochs x epoch_steps."""
        epochs = self.facts.warm_start_epochs
        if epochs and self.epoch_steps < 1:
            raise RuntimeError(f"warm_start_epochs={epochs} needs the run's steps per epoch: "
                               "setup(..., epoch_steps=E) with E >= 1")
        return epochs * self.epoch_steps

    def warm(self, step: int) -> bool:
        """Whether `step` (counted from 0) is a step of the S-SGD warm start."""
        return step < self.warm_start_steps()

    def epoch_ends(self, step: int) -> bool:
        """Whether `step` is the last of an epoch and the models are averaged after it
        (epoch_average on, outside the warm start)."""
        if not self.facts.epoch_average:
            return False
        if self.epoch_steps < 1:
            raise RuntimeError("epoch_average needs the run's steps per epoch: "
                               "setup(..., epoch_steps=E) with E >= 1")
        return (step + 1) % self.epoch_steps == 0 and not self.warm(step)

    def average_gradients(self) -> None:
        """The warm start's S-SGD step: every gradient replaced by its mean over the ranks, in one
        flat all-reduce (a parameter without a gradient gets zeros, so every rank sends the same
        layout)."""
        grads = []
        for p in self.model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        average(self.comm, grads)

    def average_models(self) -> None:
        """The epoch-end average x_i <- mean_j x_j of the averaged tensors (parameters and
        floating-point buffers), touching no other state."""
        average(self.comm, self.tensors)
