"""SSD-SGD against a one-process simulation of the authors' timeline (SPECS.md h) written here, per
tensor as their MXNet code runs it, for the local rules cosdcasgd and dc; with the rule "none" and
no pull after the warm-up every rank runs independent local SGD at lr eta_l / N; the ledger holds
one gradient all-reduce per step and nothing else; a warm-up covering the run is S-SGD."""
from __future__ import annotations

import pytest
import torch

import distsgd
from distsgd import ConfigError
from gloo import run_ranks

WORLD, STEPS, WARMUP, PERIOD = 2, 11, 2, 3
LR, MOMENTUM, WD, SCALE = 0.1, 0.5, 0.01, 2.0
SMALL = dict(model="mlp", data="digits", nproc=2, steps=10, batch_size=16, lr=0.1, momentum=0.9,
             weight_decay=0.0, log_every=5, eval_every=0, progress=False)


def _toy_model() -> torch.nn.Module:
    """Three tensors (weight, bias, weight): an odd count, so dc's shared counter alternates."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2, bias=False))


def _toy_loss(model: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + step)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g) + rank
    return 0.5 * ((model(x) - y) ** 2).mean()


def _flat(model: torch.nn.Module) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


VARIANTS = [  # params of each run (local_lr_scale SCALE added)
    {"period": PERIOD, "warmup": WARMUP, "local_rule": "cosdcasgd"},
    {"period": PERIOD, "warmup": WARMUP, "local_rule": "dc", "dc_lambda": 0.5},
    {"period": 100, "warmup": WARMUP, "local_rule": "none"},     # no pull after the warm-up
]


def _ssd_worker(rank: int, world: int) -> list[dict]:
    """SSD-SGD through its hooks on this rank, once per variant; trajectory, ledger, handles."""
    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.training.config import Config

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    config = Config(algo="ssd_sgd", nproc=world, lr=LR, momentum=MOMENTUM, weight_decay=WD)
    outs = []
    for params in VARIANTS:
        comm.ledger = type(comm.ledger)()
        model = _toy_model()
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
        algo = create("ssd_sgd", {**params, "local_lr_scale": SCALE})
        algo.setup(model, opt, comm, config.facts())
        trajectory = []
        for step in range(STEPS):
            comm.step = step
            algo.before_forward(step)
            opt.zero_grad()
            _toy_loss(model, rank, step).backward()
            algo.after_backward(step)
            algo.optimizer_step(step)
            algo.after_step(step)
            trajectory.append(_flat(model))
        in_flight = comm.pending()
        algo.finalize()
        comm.assert_drained()
        outs.append({"trajectory": trajectory, "final": _flat(model), "in_flight": in_flight,
                     "ledger": [(e.step, e.kind, e.nbytes) for e in comm.ledger.entries]})
    comm.close()
    return outs


def _simulate(world: int, rule: str, period: int, dc_lambda: float = 0.0):
    """The authors' timeline in one process, tensor by tensor: the model each rank's forward runs
    on after each step (per rank), and the global model after all pushes (the final pull)."""
    model = _toy_model()
    names = [n for n, _ in model.named_parameters()]
    wd = [WD if n.endswith("weight") else 0.0 for n in names]       # MXNet: no wd on biases
    start = [p.detach().clone() for p in model.parameters()]
    w_g = [t.clone() for t in start]
    v = [torch.zeros_like(t) for t in start]
    M = [[t.clone() for t in start] for _ in range(world)]          # forward's model
    L = [[t.clone() for t in start] for _ in range(world)]          # local copy
    state: list[dict] = [{} for _ in range(world)]                  # per tensor, created lazily
    local_num = [0] * world
    eta, eta_l = LR, SCALE * LR

    def grads(r: int, step: int) -> list[torch.Tensor]:
        with torch.no_grad():
            for p, t in zip(model.parameters(), M[r]):
                p.copy_(t)
        model.zero_grad()
        _toy_loss(model, r, step).backward()
        return [p.grad.clone() for p in model.parameters()]

    def server(gbar: list[torch.Tensor]) -> None:
        for j in range(len(w_g)):
            v[j] = MOMENTUM * v[j] + gbar[j] + wd[j] * w_g[j]
            w_g[j] = w_g[j] - eta * v[j]

    trajectory = [[] for _ in range(world)]
    for step in range(STEPS):
        g = [grads(r, step) for r in range(world)]
        server([sum(g[r][j] for r in range(world)) / world for j in range(len(w_g))])
        for r in range(world):
            if step < WARMUP:
                M[r] = [t.clone() for t in w_g]
                L[r] = [t.clone() for t in w_g]
            else:
                for j in range(len(w_g)):
                    w, gj = L[r][j], g[r][j] / world                # rescale_grad = 1 / (B N)
                    if j not in state[r]:
                        state[r][j] = w.clone()
                    if rule == "cosdcasgd":
                        s = state[r][j]
                        gs = ((1 - eta_l * wd[j]) * s - w) / 8
                        state[r][j] = w.clone()
                        L[r][j] = w - eta_l * (2 * gj + wd[j] * w + 0.5 * gs)
                    elif rule == "dc":
                        if local_num[r] % 2 == 0:
                            p = state[r][j]
                            state[r][j] = w.clone()
                            L[r][j] = w - eta_l * (gj + wd[j] * w + dc_lambda * gj * gj * (w - p))
                        else:
                            L[r][j] = w - eta_l * (gj + wd[j] * w)
                        local_num[r] += 1
                    else:
                        L[r][j] = w - eta_l * (gj + wd[j] * w)
                M[r] = [t.clone() for t in L[r]]
                if (step - WARMUP) % period == period - 1:         # pull after this push
                    L[r] = [t.clone() for t in w_g]
            trajectory[r].append(torch.cat([t.reshape(-1) for t in M[r]]))
    return trajectory, torch.cat([t.reshape(-1) for t in w_g])


def _local_sgd_reference(world: int) -> list[list[torch.Tensor]]:
    """Rule "none" without a pull after warm-up: S-SGD for WARMUP steps, then every rank alone
    x <- x - (eta_l / N) g_i - eta_l wd x on its own mean gradient g_i (the 1/N scales the
    gradient only; no wd on the bias)."""
    model = _toy_model()
    params = list(model.parameters())
    decay = torch.cat([torch.full((p.numel(),), WD if n.endswith("weight") else 0.0)
                       for n, p in model.named_parameters()])
    y = torch.nn.utils.parameters_to_vector(params).detach()
    v = torch.zeros_like(y)

    def grad(at: torch.Tensor, r: int, step: int) -> torch.Tensor:
        torch.nn.utils.vector_to_parameters(at, params)
        model.zero_grad()
        _toy_loss(model, r, step).backward()
        return torch.cat([p.grad.reshape(-1) for p in params])

    warm = []
    for step in range(WARMUP):
        gbar = sum(grad(y, r, step) for r in range(world)) / world
        v = MOMENTUM * v + gbar + decay * y
        y = y - LR * v
        warm.append(y)
    out = []
    for r in range(world):
        x, trajectory = y.clone(), list(warm)
        for step in range(WARMUP, STEPS):
            x = x - SCALE * LR / world * grad(x, r, step) - SCALE * LR * decay * x
            trajectory.append(x)
        out.append(trajectory)
    return out


@pytest.mark.multiproc
def test_timeline_matches_simulation_ledger_and_drained_handles():
    per_rank = run_ranks(_ssd_worker, WORLD)
    cos, dc, none = ([per_rank[r][i] for r in range(WORLD)] for i in range(len(VARIANTS)))

    for outs, (rule, lam) in ((cos, ("cosdcasgd", 0.0)), (dc, ("dc", 0.5))):
        ref, ref_final = _simulate(WORLD, rule, PERIOD, lam)
        for r, o in enumerate(outs):
            for step, got in enumerate(o["trajectory"]):
                torch.testing.assert_close(torch.tensor(got), ref[r][step], atol=1e-6, rtol=1e-5,
                                           msg=f"{rule} rank {r} step {step}")
            torch.testing.assert_close(torch.tensor(o["final"]), ref_final, atol=1e-6, rtol=1e-5)
            d = sum(p.numel() for p in _toy_model().parameters())
            assert o["ledger"] == [(s, "all_reduce", 4 * d) for s in range(STEPS)]   # one push a step
            # pulls after steps 4, 7, 10; the pushes of steps 8-10 wait for the next step
            assert o["in_flight"] == 3
        assert outs[0]["trajectory"][-1] != outs[1]["trajectory"][-1]    # local models differ

    ref = _local_sgd_reference(WORLD)
    for r, o in enumerate(none):
        for step, got in enumerate(o["trajectory"]):
            torch.testing.assert_close(torch.tensor(got), ref[r][step], atol=1e-6, rtol=1e-5,
                                       msg=f"none rank {r} step {step}")
    assert none[0]["final"] == none[1]["final"]     # the final pull: every rank at w_g


@pytest.mark.multiproc
def test_warmup_covering_the_run_is_ssgd():
    ssgd = distsgd.run(algo="ssgd", **SMALL)
    ssd = distsgd.run(algo="ssd_sgd", params={"warmup": SMALL["steps"]}, **SMALL)
    a, b = ssgd.state_dict(), ssd.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-6, rtol=1e-5, msg=k)
    assert ssd.summary["comm_bytes"] == ssgd.summary["comm_bytes"]


@pytest.mark.parametrize("params, fields", [({"local_rule": "global"}, {}), ({"period": 0}, {}),
                                            ({"glu": "none"}, {}), ({}, {"optimizer": "adam"})])
def test_bad_ssd_config(params, fields):
    with pytest.raises(ConfigError):
        distsgd.Config(algo="ssd_sgd", params=params, **fields).validate()


@pytest.mark.parametrize("rule", ["cosdcasgd", "dc", "none"])
def test_local_rule_allocates_no_model_sized_buffer(rule):
    """The local rule runs in place on its scratch buffers: a model-sized temporary per operation
    is a fresh, page-faulted allocation on a CPU (it made the rule ~5x slower)."""
    from torch.profiler import ProfilerActivity, profile

    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.training.config import Config

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    algo = create("ssd_sgd", {"warmup": 0, "local_rule": rule, "dc_lambda": 0.5})
    algo.setup(model, opt, Comm(0, 2, torch.device("cpu")), Config(algo="ssd_sgd", nproc=2, lr=LR, momentum=MOMENTUM,
                                                                    weight_decay=WD).facts())
    model(torch.randn(4, 256)).square().mean().backward()
    nbytes = algo.local.numel() * algo.local.element_size()
    algo._local_rule(algo._gradient().div_(2))                       # first call: nothing lazy left
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        algo._local_rule(algo._gradient().div_(2))
    allocated = sum(e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0)
    assert allocated < nbytes / 4, f"{allocated} B allocated by a rule on {nbytes} B of parameters"
