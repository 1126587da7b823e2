"""Collective timings on a real shaped network vs the in-process emulation (`Comm` with a net).

`python -m distsgd bench --validate-emulation` (root, Linux) checks that the alpha-beta model
that every emulated run relies on (distsgd.comm.netmodel) matches a real network of the same
bandwidth:

- real: p hosts are Linux network namespaces joined by a bridge, each host's veth shaped with
  ``tc qdisc ... tbf rate B`` (a per-host link of bandwidth B; netem, for latency, is not needed:
  alpha = 0 here), the ranks reach each other over private addresses that exist only inside the
  namespaces (GLOO_SOCKET_IFNAME = the namespace's veth);
- emulated: p local processes over loopback with ``net="B,0us"`` (`distsgd.training.launch.on_ranks`):
  `Comm` delays every collective to the model's cost.

Both sides run the same all-reduce / reduce-scatter / all-gather sizes through `Comm` and
report the median over repetitions of the slowest rank's time. They should agree within 15% for
messages >= 1 MiB (tbf's burst lets the first `burst` bytes through at line rate, so smaller
messages run faster than the rate; the burst here is 32 KiB).

`NamespaceNetwork` is also what tests/test_cluster_netns.py uses to run torchrun across hosts.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

MiB = 2**20
KINDS = ("all_reduce", "reduce_scatter", "all_gather")
SUBNET = "10.77.0"           # private, exists only inside the namespaces (the bridge has no IP)


class NetnsUnavailable(RuntimeError):
    """Namespaces cannot be created here (not root, no iproute2, a restricted kernel)."""


def netns_unavailable_reason() -> str | None:
    """Why `NamespaceNetwork` cannot work on this machine, or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode:
        raise NetnsUnavailable(f"ip {' '.join(args)}: {proc.stderr.strip()}")


@dataclass
class NamespaceNetwork:
    """`hosts` network namespaces on one bridge; host i has address ``10.77.0.<i+1>``.

    Use as a context manager: everything it created is deleted on exit. `rate` (tc syntax, e.g.
    "200mbit") shapes what each host sends with tbf.
    """

    hosts: int
    rate: str | None = None
    burst: str = "32kb"

    def __post_init__(self) -> None:
        tag = f"dsg{os.getpid() % 100000}"
        self.bridge = f"{tag}br"
        self.namespaces = [f"{tag}h{i}" for i in range(self.hosts)]
        self.ifnames = [f"{tag}n{i}" for i in range(self.hosts)]   # inside namespace i
        self._host_ends = [f"{tag}v{i}" for i in range(self.hosts)]
        self._created: list[tuple[str, ...]] = []

    def addr(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def __enter__(self) -> "NamespaceNetwork":
        reason = netns_unavailable_reason()
        if reason:
            raise NetnsUnavailable(reason)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._created.append(("link", "del", self.bridge))
            _ip("link", "set", self.bridge, "up")
            for i, (ns, inner, outer) in enumerate(zip(self.namespaces, self.ifnames, self._host_ends)):
                _ip("netns", "add", ns)
                self._created.append(("netns", "del", ns))
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                self._created.append(("link", "del", outer))
                _ip("link", "set", inner, "netns", ns)
                _ip("link", "set", outer, "master", self.bridge)
                _ip("link", "set", outer, "up")
                _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", inner)
                _ip("-n", ns, "link", "set", inner, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                if self.rate:
                    self.run(i, ["tc", "qdisc", "add", "dev", inner, "root", "tbf", "rate",
                                 self.rate, "burst", self.burst, "latency", "100ms"], check=True)
            self._wait_reachable()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for args in reversed(self._created):
            subprocess.run(["ip", *args], capture_output=True, timeout=30)
        self._created.clear()

    def command(self, i: int, argv: Sequence[str]) -> list[str]:
        """`argv` run inside host i."""
        return ["ip", "netns", "exec", self.namespaces[i], *argv]

    def run(self, i: int, argv: Sequence[str], check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(i, argv), capture_output=True, text=True, timeout=60,
                              check=check)

    def _wait_reachable(self, timeout_s: float = 10.0) -> None:
        """The bridge forwards only after its ports left the listening state: ping host 0."""
        deadline = time.monotonic() + timeout_s
        for i in range(1, self.hosts):
            while self.run(i, ["ping", "-c", "1", "-W", "1", self.addr(0)]).returncode:
                if time.monotonic() > deadline or shutil.which("ping") is None:
                    return                      # no ping: rely on the peers' own retries
                time.sleep(0.2)


# --------------------------------------------------------------------------- timing worker


def time_collectives(kinds: Sequence[str], sizes: Sequence[int], reps: int, net: str) -> list[dict]:
    """Run by every rank (torchrun-style environment): median over `reps` of the slowest rank's
    seconds for each collective kind and size (bytes of the collective's n, see netmodel)."""
    import torch

    from ..comm import Comm, parse_net

    comm = Comm.from_env("gloo", torch.device("cpu"), parse_net(net), timeout_s=300)
    rows = []
    try:
        p = comm.world_size
        for kind in kinds:
            for size in sizes:
                n = size // 4 // p * p                  # float32 elements, divisible by p
                big, small = torch.ones(n), torch.ones(n // p)
                call = {"all_reduce": lambda: comm.all_reduce(big),
                        "reduce_scatter": lambda: comm.reduce_scatter(small, big),
                        "all_gather": lambda: comm.all_gather(big, small)}[kind]
                call()                                  # warm-up: connections, buffers
                times = []
                for _ in range(reps):
                    comm.barrier()
                    t0 = time.perf_counter()
                    call()
                    elapsed = torch.tensor(time.perf_counter() - t0, dtype=torch.float64)
                    times.append(comm.reduce_uncounted(elapsed, "max").item())
                rows.append({"kind": kind, "bytes": n * 4, "p": p, "seconds": statistics.median(times)})
    finally:
        comm.close()
    return rows


def _time_collectives_on_rank(rank: int, world: int, kinds: Sequence[str], sizes: Sequence[int],
                              reps: int, net: str) -> list[dict]:
    """`time_collectives` as a function of `distsgd.training.launch.on_ranks` (which sets the environment)."""
    return time_collectives(kinds, sizes, reps, net)


def _worker_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m distsgd.systems.emulation_check")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--sizes", default=str(8 * MiB), help="bytes, comma separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--net", default="")
    ap.add_argument("--json", type=Path, required=True, help="rank 0 writes its rows here")
    a = ap.parse_args(argv)
    rows = time_collectives(a.kinds.split(","), [int(s) for s in a.sizes.split(",")], a.reps, a.net)
    if os.environ.get("RANK") == "0":
        a.json.write_text(json.dumps(rows))
    return 0


# --------------------------------------------------------------------------- the comparison


def _run_in_namespaces(commands: list[list[str]], envs: list[dict[str, str]], timeout_s: float) -> None:
    """One rank per command, each inside its namespace, meeting over TCP across the namespaces."""
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c, e in zip(commands, envs)]
    try:
        for rank, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=timeout_s)
            if proc.returncode:
                raise RuntimeError(f"bench rank {rank} failed ({proc.returncode}):\n{out[-3000:]}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _namespace_rank_env(rank: int, p: int, addr: str, port: int, ifname: str) -> dict[str, str]:
    """Rank `rank` alone on its namespace host, its gloo sockets on the namespace's veth."""
    return {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(p), "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": addr, "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": ifname}


def measure(p: int, bandwidth: str, sizes: Sequence[int], kinds: Sequence[str], reps: int,
            shaped: bool, timeout_s: float = 300) -> list[dict]:
    """Timings over p shaped namespaces (`shaped`, ranks meeting over TCP across them) or p local
    processes emulating `bandwidth` (meeting through a file, over loopback)."""
    if not shaped:
        from ..training.launch import on_ranks

        return on_ranks(_time_collectives_on_rank, p, list(kinds), list(sizes), reps,
                        f"{bandwidth},0us", timeout=timeout_s, join=None)[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        args = [sys.executable, "-m", "distsgd.systems.emulation_check", "--kinds", ",".join(kinds), "--sizes",
                ",".join(map(str, sizes)), "--reps", str(reps), "--json", str(out)]
        with NamespaceNetwork(p, rate=bandwidth.lower()) as net:
            envs = [_namespace_rank_env(r, p, net.addr(0), 29650, net.ifnames[r]) for r in range(p)]
            _run_in_namespaces([net.command(r, args) for r in range(p)], envs, timeout_s)
        return json.loads(out.read_text())


def validate_emulation(p: int = 4, bandwidth: str = "200Mbit", sizes: Sequence[int] = (MiB, 8 * MiB),
                       kinds: Sequence[str] = KINDS, reps: int = 3,
                       tolerance: float = 0.15) -> list[dict]:
    """Rows kind, MiB, p, shaped_s, emulated_s, model_s, rel_diff, ok (|rel_diff| <= tolerance)."""
    from ..comm import parse_net

    model = parse_net(f"{bandwidth},0us")
    real = measure(p, bandwidth, sizes, kinds, reps, shaped=True)
    emulated = measure(p, bandwidth, sizes, kinds, reps, shaped=False)
    rows = []
    for r, e in zip(real, emulated):
        diff = (e["seconds"] - r["seconds"]) / r["seconds"]
        rows.append({"kind": r["kind"], "MiB": r["bytes"] / MiB, "p": p,
                     "shaped_s": r["seconds"], "emulated_s": e["seconds"],
                     "model_s": model.cost(r["kind"], r["bytes"], p), "rel_diff": diff,
                     "ok": abs(diff) <= tolerance})
    return rows


def main(args: argparse.Namespace) -> int:
    """`python -m distsgd bench --validate-emulation`: print the comparison, 1 if any row fails."""
    reason = netns_unavailable_reason()
    if reason:
        print(f"error: cannot build the shaped network: {reason}", file=sys.stderr)
        return 2
    sizes = [round(float(s) * MiB) for s in args.sizes.split(",")]
    rows = validate_emulation(args.nproc, args.bandwidth, sizes, reps=args.reps,
                              tolerance=args.tolerance)
    print(f"p={args.nproc}, {args.bandwidth} per host (tc tbf) vs Comm's emulation, "
          f"median of {args.reps}, tolerance {args.tolerance:.0%}")
    print(f"{'collective':<15}{'MiB':>6}{'shaped s':>10}{'emulated s':>12}{'model s':>9}{'diff':>8}")
    for r in rows:
        print(f"{r['kind']:<15}{r['MiB']:>6.1f}{r['shaped_s']:>10.3f}{r['emulated_s']:>12.3f}"
              f"{r['model_s']:>9.3f}{r['rel_diff']:>+8.1%}  {'ok' if r['ok'] else 'OUTSIDE'}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
