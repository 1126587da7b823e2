""""Add an algorithm" (lib/distsgd/README.md, docs/algorithms.md): an algorithm defined in this file,
with no edit anywhere else, is registered, listed, trained over gloo with the kit's step, wrapped
into a torchrun-style loop (`distsgd.wrap`) and simulated, and the simulator charges the
collectives the real ranks issued. And the recipe as written: one new module in a copy of the
package, no other file edited (tests included), and the kit and the tests that iterate over every
algorithm take it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import distsgd
from distsgd import cli
from distsgd.algorithms import Algorithm, Param, register
from distsgd.algorithms.flat import flatten, unflatten_into
from distsgd.algorithms.registry import REGISTRY
from distsgd.comm import Comm
from distsgd.models import build_model
from distsgd.training.step import train_steps
from distsgd.systems.timeline import simulate
from distsgd.systems.timeline.driver import COLLECTIVE_COLUMNS
from distsgd.systems.timeline.simulator import collectives

from gloo import run_ranks
from test_timeline import TOY
from test_timeline_driver import mlp_profile

STEPS = 6


class SparseAveraging(Algorithm):
    """Gradients averaged every `every` steps (one all-reduce of the flat gradient), local steps
    otherwise: g <- (1/p) sum_i g_i when (t + 1) mod every == 0."""

    name = "test_sparse_averaging"
    summary = "test only: gradient average every `every` steps"
    params = (Param("every", 2, "steps between gradient averages", lambda v: v >= 1, "an integer >= 1"),)
    every: int

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        return 0, params["every"]

    def after_backward(self, step: int) -> None:
        if (step + 1) % self.every == 0:
            grads = [p.grad for p in self.model.parameters()]
            flat = flatten(grads)
            self.comm.all_reduce(flat, op="avg")
            unflatten_into(flat, grads)


def ensure_registered() -> None:
    if SparseAveraging.name not in REGISTRY:
        register(SparseAveraging)


@pytest.fixture
def registered() -> Iterator[None]:
    ensure_registered()
    yield
    REGISTRY.pop(SparseAveraging.name)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 64, generator=g), torch.randint(0, 10, (8,), generator=g)


def train_rank(rank: int, world: int) -> dict:
    """The kit's own loop pieces on this rank: Comm over gloo, setup, step.train_steps, finalize."""
    ensure_registered()
    torch.manual_seed(0)
    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    model = build_model("mlp", (64,), 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    algo = distsgd.algorithms.create(SparseAveraging.name, {"every": 2})
    config = distsgd.Config(algo=SparseAveraging.name, params={"every": 2}, nproc=world).validate()
    net = algo.setup(model, optimizer, comm, config.facts())
    train_steps(algo, optimizer, net, F.cross_entropy, lambda s: batch(s, rank), 0, STEPS)
    algo.finalize()
    rows = [(e.step, e.kind, e.scope, e.nbytes, e.group_size, rank) for e in comm.ledger.entries]
    comm.close()
    return {"rows": rows, "params": flatten([p.data for p in model.parameters()]).tolist()}


def wrapped_rank(rank: int, world: int) -> dict:
    """A user's torchrun loop: their process group, model and optimizer, `distsgd.wrap`."""
    ensure_registered()
    distsgd.comm.join_group("gloo")
    torch.manual_seed(0)
    model = build_model("mlp", (64,), 10)
    net, optimizer = distsgd.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), SparseAveraging.name, every=2)
    for step in range(STEPS):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()
    distsgd.finalize(net, optimizer)
    return {"params": flatten([p.data for p in model.parameters()]).tolist()}


def test_an_algorithm_defined_here_is_listed_trained_wrapped_and_simulated(
        registered: None, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["list"]) == 0
    assert SparseAveraging.name in capsys.readouterr().out

    trained = run_ranks(train_rank, 2)
    wrapped = run_ranks(wrapped_rank, 2)
    for t, w in zip(trained, wrapped):                 # the same rule through both entry points
        assert t["params"] == pytest.approx(w["params"], rel=1e-6, abs=1e-7)
    assert trained[0]["params"] != trained[1]["params"]     # local steps between the averages

    ledger = pd.DataFrame(trained[1]["rows"], columns=COLLECTIVE_COLUMNS)
    assert ledger.step.tolist() == [1, 3, 5]
    simulated = collectives(mlp_profile(), SparseAveraging.name, 2, STEPS, "10GbE", {"every": 2})
    pd.testing.assert_frame_equal(simulated, ledger, check_dtype=False)
    fast, slow = (simulate(TOY, SparseAveraging.name, 4, "10GbE", params={"every": k}).step_s for k in (4, 1))
    assert fast < slow


ROOT = Path(__file__).resolve().parent.parent
ADDED = "test_added_rule"
# The recipe's module: a rule with a parameter, a steady state and a pass over its buffers of its own.
MODULE = f'''"""Test only: the gradients averaged every `every` steps (one flat all-reduce), local steps
otherwise, each step's gradients first passed over once (a pass of its own, announced)."""
from __future__ import annotations

from typing import Any, Callable

from .base import Algorithm, Param
from .flat import flatten, unflatten_into
from .registry import register


@register
class AddedRule(Algorithm):
    name = "{ADDED}"
    summary = "test only: gradient average every `every` steps"
    params = (Param("every", 2, "steps between gradient averages", lambda v: v >= 1, "an integer >= 1"),)
    work_passes = ("added_pass",)
    every: int

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        return 0, params["every"]

    def _pass(self) -> None:
        self.comm.work("added_pass")
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.mul_(1.0)

    def timed_work(self) -> dict[str, Callable[[], None]]:
        return {{"added_pass": self._pass}}

    def after_backward(self, step: int) -> None:
        self._pass()
        if (step + 1) % self.every == 0:
            grads = [p.grad for p in self.model.parameters()]
            flat = flatten(grads)
            self.comm.all_reduce(flat, op="avg")
            unflatten_into(flat, grads)
'''
# What the kit does with it in the copy: listed, a valid run, simulated with its pass charged,
# its collectives listed, its pass among those the cost measurement times.
CHECKS = """
import subprocess, sys
import distsgd
from distsgd.algorithms import REGISTRY
from distsgd.systems.measure_costs import work_passes
from distsgd.systems.timeline import simulate
from distsgd.systems.timeline.costs import Overheads
from distsgd.systems.timeline.simulator import collectives
from test_timeline import TOY
name, every = sys.argv[1], {"every": 2}
assert distsgd.__file__.startswith(sys.argv[2]), distsgd.__file__
listing = subprocess.run([sys.executable, "-m", "distsgd", "list"], capture_output=True, text=True, check=True).stdout
assert name in listing
assert distsgd.Config(algo=name, params={"every": 3}, nproc=2).validate().params == {"every": 3}
plain = simulate(TOY, name, 4, "10GbE", params=every)
charged = simulate(TOY, name, 4, "10GbE", params=every, overheads=Overheads(work={"added_pass": 0.5}))
assert charged.compute_s > plain.compute_s
assert len(collectives(TOY, name, 4, 4, "10GbE", every)) == 2
assert "added_pass" in work_passes()
print("ok")
"""
# The tests that iterate over every algorithm (their cases for it: none, its defaults), run on the copy.
TESTS = ["tests/test_algorithm_names.py",
         "tests/test_training.py::test_every_module_of_an_algorithms_package_is_imported_so_its_algorithms_register",
         f"tests/test_cli.py::test_every_algorithm_of_list_runs_with_no_other_flag[{ADDED}]",
         f"tests/test_algorithm_state.py::test_parameters_are_annotated_attributes[{ADDED}]"]


def test_the_recipe_adds_an_algorithm_with_one_module_and_no_other_edit(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    # with the compiled modules (`make bytecode`; copytree keeps the sources' times, so they stay valid):
    # under PYTHONDONTWRITEBYTECODE every process below would compile the whole package again
    shutil.copytree(ROOT / "lib" / "distsgd", lib / "distsgd")
    (lib / "distsgd" / "algorithms" / f"{ADDED}.py").write_text(MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(lib), str(ROOT / "tests")])}
    kit = subprocess.run([sys.executable, "-c", CHECKS, ADDED, str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert kit.returncode == 0 and kit.stdout.strip() == "ok", kit.stderr[-3000:]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS], cwd=ROOT,
                           capture_output=True, text=True, env=env, timeout=300)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert f"{len(TESTS) + 1} passed" in tests.stdout        # the names test is two tests
