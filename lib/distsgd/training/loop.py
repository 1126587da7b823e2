"""The per-rank training loop: data shard, model, optimizer, algorithm hooks, metrics.

`Trainer(...).train()` runs `distsgd.training.step.train_step` (before_forward -> forward/backward ->
after_backward -> optimizer_step -> after_step) every step, then `finalize()` and a final
evaluation. With ``checkpoint_every`` it saves a checkpoint every that many steps, and a run
restarted in the same directory resumes from the latest complete one (`distsgd.training.checkpoint`).
Each rank appends its metrics rows to its own file as they are logged (`metrics_log.MetricsLog`);
after a barrier rank 0 merges them into the run directory's metrics.csv and summary.json
(distsgd.training.results). A rank's entry point, which joins the
process group and builds the Trainer, is `distsgd.training.worker`.
"""
from __future__ import annotations

import contextlib
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from . import checkpoint, metrics_log, results
from .. import files
from ..algorithms import REGISTRY
from ..algorithms.flat import average_swapped_in, averaged_tensors
from ..comm import Comm
from ..comm.device_sync import synchronize
from .config import Config
from ..data import DataSource, load_data, partition
from .divergence import DivergenceCheck, NonFinite
from ..errors import Preempted
from ..models import build_model
from ..lr_schedule import lr_at
from .step import train_step


def make_optimizer(model: torch.nn.Module, config: Config) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                           weight_decay=config.weight_decay)


def loss_fn(ds: DataSource, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if ds.task == "regression":
        return F.mse_loss(out.reshape(-1), y.float())
    return F.cross_entropy(out, y)


@torch.no_grad()
def scored(model: torch.nn.Module, ds: DataSource, split: str, device: torch.device,
           limit: int | None) -> tuple[float, torch.Tensor | None]:
    """Mean loss of `model` on a split and which examples it classifies correctly (a bool tensor
    in the split's order, the first `limit`; None for regression)."""
    was_training = model.training
    model.eval()
    total, loss_sum, correct = 0, 0.0, []
    for x, y in ds.eval_batches(split, 512, device, limit):
        out = model(x)
        loss_sum += loss_fn(ds, out, y).item() * len(y)
        if ds.task != "regression":
            correct.append((out.argmax(1) == y).cpu())
        total += len(y)
    model.train(was_training)
    return loss_sum / total, torch.cat(correct) if correct else None


def accuracy(correct: torch.Tensor | None) -> float:
    """The fraction of examples classified correctly (`scored`'s tensor); NaN for regression."""
    return float("nan") if correct is None else correct.double().mean().item()


def evaluate(model: torch.nn.Module, ds: DataSource, split: str, device: torch.device,
             limit: int | None) -> tuple[float, float]:
    """Mean loss and accuracy (NaN for regression) of `model` on a split (`scored`)."""
    loss, correct = scored(model, ds, split, device, limit)
    return loss, accuracy(correct)


def steps_per_epoch(shard_sizes: list[int], batch_sizes: list[int]) -> int:
    """The run's steps per epoch: the fewest full batches any rank draws in one pass over its part
    of the training set (each rank's stream drops an epoch's incomplete last batch). With equal
    parts and batches, as the VRL-SGD authors' sampler gives, every rank's epoch; the same
    number on every rank, so epoch-end collectives (`Config.epoch_average`) pair up."""
    return min(n // b for n, b in zip(shard_sizes, batch_sizes))


class _Progress:
    """Rank 0's progress: a file the local launcher polls, or a tqdm bar under torchrun/srun."""

    def __init__(self, file: Path | None, total: int, enabled: bool) -> None:
        self.file = file
        self.bar = None
        self.last = 0.0
        if enabled and self.file is None:
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc="train", unit="step")

    def update(self, step: int, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        elif self.file is not None and time.perf_counter() - self.last > 0.3:
            files.write_text_atomic(self.file, f"{step} {loss}")
            self.last = time.perf_counter()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Trainer:
    """One rank's training run. `progress_file`: where to write the progress for a local
    launcher (None: a tqdm bar on rank 0); `before_step(step)`: called first in every step (the
    worker's fault injection); `stop_requested()`: whether this rank was asked to stop (the
    worker's signal handler), asked at every log step: when any rank was, all save a checkpoint
    there and raise `Preempted`."""

    def __init__(self, config: Config, comm: Comm, run_dir: Path, progress_file: Path | None = None,
                 before_step: Callable[[int], None] | None = None,
                 stop_requested: Callable[[], bool] | None = None) -> None:
        self.config, self.comm, self.run_dir = config, comm, run_dir
        self.progress_file, self.before_step = progress_file, before_step
        self.stop_requested = stop_requested
        self.device = comm.device
        c = config
        torch.manual_seed(c.seed)          # identical model initialisation on every rank
        self.ds = load_data(c.data, seed=c.seed, **c.data_options)
        shards = partition(self.ds.train_labels, comm.world_size, c.partition, c.seed)
        self.shard = shards[comm.rank]
        self.model = build_model(c.model, self.ds.input_shape, self.ds.num_classes,
                                 **c.model_options).to(self.device)
        self.optimizer = make_optimizer(self.model, c)
        self.algo = REGISTRY[c.algo](**c.params)          # resolved by Config.validate
        batches = type(self.algo).batch_sizes(self.algo.param_values(), c.facts())
        self.epoch_steps = steps_per_epoch([len(s) for s in shards], batches)
        self.net = self.algo.setup(self.model, self.optimizer, comm, c.facts(), epoch_steps=self.epoch_steps)
        self.evaluated_correct: torch.Tensor | None = None   # the last step's evaluation, per test example

    def batches(self, start: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's batch stream from its `start`-th batch on: the deterministic stream replayed
        from the first batch and the first `start` skipped, so that a resumed run reads exactly
        the batches (augmentation included) of an uninterrupted one."""
        seed = self.config.seed * 10_007 + self.comm.rank
        stream = self.ds.train_batches(self.shard, self.algo.batch_size(), seed, self.device)
        for _ in range(start):
            next(stream)
        return stream

    def train(self) -> None:
        c, comm = self.config, self.comm
        self.metrics = metrics_log.MetricsLog(metrics_log.metrics_file(self.run_dir, comm.rank))
        self.window = torch.zeros((), device=self.device)
        self.window_n, self.eval_s, self.elapsed_s = 0, 0.0, 0.0
        self.divergence = DivergenceCheck(self.model, comm, c.on_nan)
        start = self.resume()
        board = metrics_log.board_writer(self.run_dir, start) if c.tensorboard and comm.rank == 0 else None
        progress = _Progress(self.progress_file, c.steps, c.progress and comm.rank == 0)
        batches = self.batches(start)
        loss_of = partial(loss_fn, self.ds)
        self.net.train()
        t0 = time.perf_counter() - self.elapsed_s
        for step in range(start, c.steps):
            if self.before_step is not None:
                self.before_step(step)
            lr = self.algo.learning_rate(step, lr_at(c, step))
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            x, y = next(batches)
            self.window += train_step(self.algo, self.optimizer, self.net, loss_of, x, y, step)
            self.window_n += 1
            done = step + 1
            if done % c.log_every == 0 or done == c.steps:
                train_loss = (self.window / self.window_n).item()   # waits for the device: wall_s is what it did
                row = {"step": done,
                       "epoch": done * self.algo.batch_size() / len(self.shard),
                       "samples": done * self.algo.batch_size(),      # this rank's; summed on merge
                       "wall_s": time.perf_counter() - t0 - self.eval_s,
                       **comm.ledger.totals(),
                       "train_loss": train_loss,
                       "test_loss": float("nan"), "test_acc": float("nan"),
                       "lr": lr, **self.algo.metrics()}
                if c.eval_train and c.eval_every:        # a column of every row, NaN between evaluations
                    row["train_objective"] = float("nan")
                if c.eval_every and (done % c.eval_every == 0 or done == c.steps):
                    te = time.perf_counter()
                    with self.evaluated():
                        row["test_loss"], correct = scored(self.model, self.ds, "test", self.device, c.eval_samples)
                        row["test_acc"] = accuracy(correct)
                        if c.eval_train:
                            row["train_objective"] = self.objective()
                    self.eval_s += time.perf_counter() - te
                    if done == c.steps:
                        self.evaluated_correct = correct
                self.metrics.append(row)
                if board is not None:
                    metrics_log.board_scalars(board, row)
                progress.update(done, row["train_loss"])
                stop = self.divergence.check(done, self.window)
                self.window.zero_()
                self.window_n = 0
                if stop:                    # every rank stops at this step (distsgd.training.divergence)
                    break
                if done < c.steps and self.asked_to_stop():
                    self.elapsed_s = time.perf_counter() - t0
                    self.save_checkpoint(done)
                    raise Preempted(done, str(checkpoint.step_dir(self.run_dir, done)))
            if c.checkpoint_every and done % c.checkpoint_every == 0 and done < c.steps:
                self.elapsed_s = time.perf_counter() - t0
                self.save_checkpoint(done)
        divergence = self.divergence
        if not divergence.stopped:          # a diverged model is evaluated as it is
            self.algo.finalize()
            comm.assert_drained()
        synchronize(self.device)            # a GPU's queued work is part of the training time
        train_s = time.perf_counter() - t0 - self.eval_s
        progress.close()
        final, test_correct = self.final_metrics(train_s)
        self.metrics.close()
        if board is not None:
            board.close()
        results.write_rank_outputs(self.run_dir, comm.rank, final, comm.ledger,
                                   {"final": test_correct, "evaluated": self.evaluated_correct})
        comm.barrier()
        if comm.rank == 0:
            results.save_model(self.run_dir, self.model)
            results.merge_ranks(self.run_dir, comm.world_size, c, divergence.found)
            checkpoint.keep(self.run_dir, None)     # finished: nothing to resume
        comm.barrier()                      # every rank may now read the merged result

    # ------------------------------------------------------------------ checkpoints
    def state(self, step: int) -> dict[str, Any]:
        """This rank's state after `step` steps, everything the loop needs to go on as if never
        stopped; tensors and plain containers only. The algorithm's state first: taking it
        waits for the collectives in flight. The data-stream position is `step` (one batch a
        step)."""
        cuda = self.device.type == "cuda"
        found = self.divergence.found
        return {"step": step, "algo": self.algo.state_dict(), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": {"cpu": torch.get_rng_state(),
                        "cuda": torch.cuda.get_rng_state(self.device) if cuda else None},
                "ledger": self.comm.ledger.state_dict(), "metrics_csv": self.metrics.snapshot(),
                "window": self.window, "window_n": self.window_n,
                "elapsed_s": self.elapsed_s, "eval_s": self.eval_s,
                "nonfinite": None if found is None else found.to_dict()}

    def asked_to_stop(self) -> bool:
        """Whether any rank was asked to stop (`stop_requested`), agreed by every rank through
        one uncounted all-reduce on the control group (`Comm.agree`)."""
        if self.stop_requested is None:
            return False
        flag = torch.tensor([float(self.stop_requested())])
        return bool(self.comm.agree(flag, op="max").item())

    def save_checkpoint(self, step: int) -> None:
        """Every rank saves its state; once all have, rank 0 marks the checkpoint complete. The
        second barrier keeps every rank from going on (and failing) before it is marked."""
        checkpoint.save(self.run_dir, step, self.comm.rank, self.state(step))
        self.comm.barrier()
        if self.comm.rank == 0:
            checkpoint.mark_complete(self.run_dir, step, self.config)
        self.comm.barrier()

    def resume(self) -> int:
        """Load this rank's state from the run's latest complete checkpoint, if any (same config
        and code version); the step to start from (0 without one)."""
        directory = checkpoint.latest(self.run_dir, self.config)
        if directory is None:
            return 0
        state = checkpoint.load(directory, self.comm.rank)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.algo.load_state_dict(state["algo"])
        torch.set_rng_state(state["rng"]["cpu"])
        if state["rng"]["cuda"] is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        self.comm.ledger.load_state_dict(state["ledger"])
        self.metrics.restore(state["metrics_csv"])      # the rows up to the checkpoint's step
        self.window = state["window"].to(self.device)
        self.window_n, self.elapsed_s, self.eval_s = state["window_n"], state["elapsed_s"], state["eval_s"]
        if state["nonfinite"] is not None:
            self.divergence.found = NonFinite(**state["nonfinite"])
        return state["step"]

    def evaluated(self) -> contextlib.AbstractContextManager:
        """The model evaluated during the run: the average of the ranks' models with
        ``eval_average`` (`flat.average_swapped_in`), else the one the algorithm's authors
        evaluate (`Algorithm.evaluating`)."""
        if self.config.eval_average:
            return average_swapped_in(self.comm, averaged_tensors(self.model))
        return self.algo.evaluating()

    def objective(self) -> float:
        """The training objective of this rank's model: mean loss over the training set (up to
        eval_samples) plus the l2 term weight_decay/2 * ||x||^2 that weight decay optimizes."""
        loss, _ = evaluate(self.model, self.ds, "train", self.device, self.config.eval_samples)
        if self.config.weight_decay:
            with torch.no_grad():
                sq = sum(p.pow(2).sum() for p in self.model.parameters()).item()
            loss += 0.5 * self.config.weight_decay * sq
        return loss

    def final_metrics(self, train_s: float) -> tuple[dict, torch.Tensor | None]:
        """Evaluation of the final model (after finalize) and totals of this rank, and which test
        examples the final model classifies correctly (`scored`; None for regression)."""
        c = self.config
        train_loss, train_acc = evaluate(self.model, self.ds, "train", self.device, c.eval_samples)
        test_loss, test_correct = scored(self.model, self.ds, "test", self.device, c.eval_samples)
        return ({"final_train_loss": train_loss, "final_train_acc": train_acc,
                 "final_test_loss": test_loss, "final_test_acc": accuracy(test_correct),
                 "train_s": train_s, **self.comm.ledger.totals()}, test_correct)

