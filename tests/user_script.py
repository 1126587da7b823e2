"""A user's own training script, as an ML-systems engineer would write it: their own process
group, model, optimizer, lr scheduler, DataLoader and loop; distsgd only through `distsgd.wrap`
and `distsgd.finalize` (tests/test_wrap.py launches it with torchrun).

    torchrun --nproc-per-node 3 tests/user_script.py DATA.pt RUNS.json OUT_DIR

DATA.pt: the initial weights ("init") and each rank's training samples in the order to train on
("x", "y": one tensor per rank); RUNS.json: a list of runs {"name", "algo", "params", "lr",
"momentum", "milestones" (optional: the lr halves at these steps), "batch_size"}; "algo"
"torch_ddp" is plain DistributedDataParallel, without distsgd. Each rank writes its final
parameters to OUT_DIR/<name>-rank<r>.pt.
"""
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import distsgd


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))


def train(run: dict, data: dict, rank: int) -> torch.nn.Module:
    model = make_model()
    model.load_state_dict(data["init"])
    optimizer = torch.optim.SGD(model.parameters(), lr=run["lr"], momentum=run["momentum"])
    if run["algo"] == "torch_ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        model, optimizer = distsgd.wrap(model, optimizer, run["algo"], **run["params"])
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, run.get("milestones", []), gamma=0.5)
    loader = DataLoader(TensorDataset(data["x"][rank], data["y"][rank]), batch_size=run["batch_size"],
                        shuffle=False)
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        scheduler.step()
    if run["algo"] != "torch_ddp":
        distsgd.finalize(model, optimizer)
    return model


def main(data_path: str, runs_path: str, out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = torch.load(data_path, weights_only=True)
    for run in json.loads(Path(runs_path).read_text()):
        model = train(run, data, rank)
        state = {k.removeprefix("module."): v for k, v in model.state_dict().items()}
        torch.save(state, Path(out_dir) / f"{run['name']}-rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
