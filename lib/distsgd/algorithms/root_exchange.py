"""The compressed exchange through a root that the LIEC-SGD authors' methods share
(`chengyif/LIEC-SGD`, main.py: compressed_sgd = MEM-SGD, double_squeeze, liec_sgd): their
parameters, the gradient buckets, the root topology, and the server's error feedback.

Buckets. The flat gradient (trainable parameters in parameter order) is cut into buckets of at
most `bucket_mb` MiB (`buckets.plan_groups`, the rule of the authors' `_take_tensors`); each
bucket is compressed on its own, so the scaled sign has one scale per bucket. One bucket of
everything (a `bucket_mb` larger than the model; the authors' 50 MiB) is "SignSGD", 5 MiB
buckets are "Blockwise-SignSGD".

Root topology (the authors' parameter server is rank 0). Per bucket b of d_b entries:

    up:    every worker's payload gathered to the root (`Comm.gather`; payloads that sum in wire
           form, the identity's and random-k's, are reduced instead: `Comm.reduce`)
    root:  mean = (1/N) sum_j C(v_j,b); the server's computation happens on the root only
    down:  the root broadcasts (`Comm.broadcast`) either the dense result (4 d_b bytes) or its
           compressed payload |C(.)| (the scaled sign: ceil(d_b/8) + 4 bytes)

so the ledger's entries are the paper's messages: a gather / reduce entry's `nbytes` is what one
worker sends up, a broadcast's what it receives down. With the identity compressor and a dense
download this is P-SGD (the authors' `psgd`: reduce to the root, broadcast), synchronous SGD.

Floating-point buffers (BatchNorm statistics) are broadcast from the root every step, as the
authors' code does for every method (`sync_buffers`).
"""
from __future__ import annotations

import torch

from ..compress import NAMES, Compressor, ErrorFeedback, make
from .base import Algorithm, Param
from .buckets import plan_groups
from .flat import flatten, unflatten_into

PARAMS = (
    Param("compressor", "sign", "compressor: " + ", ".join(NAMES), lambda v: v in NAMES, ", ".join(NAMES)),
    Param("ratio", 0.01, "fraction of entries kept (topk, randk)", lambda v: 0 < v <= 1, "a number in (0, 1]"),
    Param("levels", 4, "QSGD quantization levels s", lambda v: 1 <= v <= 127, "an integer in 1..127"),
    Param("rank", 1, "PowerSGD rank", lambda v: v >= 1, "an integer >= 1"),
    Param("bucket_mb", 50.0, "compression buckets of at most this many MiB in parameter order "
          "(the authors' bucket_size; 50 = one bucket for models up to 50 MiB, SignSGD; "
          "5 = Blockwise-SignSGD)", lambda v: v > 0, "a number > 0"),
)

WORKER, SERVER = 0, 1
ROOT = 0                                # the authors' args.root: the rank that plays the server


class CompressedAlgorithm(Algorithm):
    """Base: bucketed compression of the flat gradient, gathered to the root and broadcast back."""

    compressor: str                     # its name; the compressor itself is self.codec
    ratio: float
    levels: int
    rank: int                           # PowerSGD's rank r (the process rank is comm.rank)
    bucket_mb: float

    def build(self) -> None:
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.numel = sum(p.numel() for p in self.trainable)
        self.codec: Compressor = make(self.compressor, self.ratio, self.levels, self.rank)   # C
        self.bounds: list[tuple[int, int]] = []          # each bucket's [lo, hi) in the flat gradient
        lo = 0
        for group in plan_groups(self.trainable, self.bucket_mb * 2**20):
            hi = lo + sum(p.numel() for p in group)
            self.bounds.append((lo, hi))
            lo = hi
        self.buffers = [b for b in self.model.buffers() if b.is_floating_point()]

    @property
    def is_root(self) -> bool:
        return self.comm.rank == ROOT

    def flat_grad(self) -> torch.Tensor:
        return flatten([torch.zeros_like(p) if p.grad is None else p.grad for p in self.trainable])

    def set_grad(self, flat: torch.Tensor) -> None:
        for p in self.trainable:
            if p.grad is None:
                p.grad = torch.empty_like(p)
        unflatten_into(flat, [p.grad for p in self.trainable])

    def seed(self, step: int, side: int, bucket: int) -> int:
        """Seed of bucket `bucket`'s compression at `step` on `side` (WORKER / SERVER). Payloads
        that are reduced (all-reducible compressors) and the server's use one seed on every rank
        (their random choices must agree); the workers' other compressors draw per rank."""
        shared = side == SERVER or self.codec.all_reducible
        rank = 0 if shared else self.comm.rank + 1
        return (((self.facts.seed * 1_000_003 + step) * 2 + side) * 65_537 + rank) * 1_009 + bucket

    def sync_buffers(self) -> None:
        """The root's floating-point buffers (BatchNorm statistics) broadcast to every worker."""
        if self.buffers:
            flat = flatten(self.buffers)
            self.comm.broadcast(flat, src=ROOT)
            unflatten_into(flat, self.buffers)

    def after_backward(self, step: int) -> None:
        self.sync_buffers()

    # ------------------------------------------------------------------ the root topology
    def upload(self, v: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every bucket of this worker's `v` compressed and sent to the root. Returns (c, mean):
        c = C(v) bucket by bucket (what this worker sent, dense) and, on the root only, the mean
        (1/N) sum_j C(v_j) of all workers' (None on the other ranks)."""
        c, mean = torch.empty_like(v), (torch.empty_like(v) if self.is_root else None)
        n = self.comm.world_size
        for b, (lo, hi) in enumerate(self.bounds):
            payload, ctx = self.codec.compress(v[lo:hi], self.seed(step, WORKER, b))
            c[lo:hi] = self.codec.decompress(payload, ctx)
            if self.codec.all_reducible:                  # sums in wire form: reduce
                total = payload.clone()
                self.comm.reduce(total, dst=ROOT, op="avg")
                if mean is not None:
                    mean[lo:hi] = self.codec.decompress(total, ctx)
            else:
                out = torch.empty(n * payload.numel(), dtype=payload.dtype, device=payload.device) \
                    if self.is_root else None
                self.comm.gather(out, payload, dst=ROOT)
                if mean is not None:
                    chunks = out.view(n, -1)
                    mean[lo:hi] = sum(self.codec.decompress(chunks[r], ctx) for r in range(n)) / n
        return c, mean

    def reduce_mean(self, v: torch.Tensor) -> torch.Tensor | None:
        """(1/N) sum_j v_j, dense, on the root (None elsewhere): one reduce per bucket."""
        total = v.clone()
        for lo, hi in self.bounds:
            self.comm.reduce(total[lo:hi], dst=ROOT, op="avg")
        return total if self.is_root else None

    def broadcast_dense(self, value: torch.Tensor | None) -> torch.Tensor:
        """The root's `value` on every rank, dense: one broadcast per bucket."""
        out = value if self.is_root else torch.empty(self.numel, device=self.trainable[0].device,
                                                     dtype=self.trainable[0].dtype)
        for lo, hi in self.bounds:
            self.comm.broadcast(out[lo:hi], src=ROOT)
        return out

    def broadcast_compressed(self, u: torch.Tensor | None, step: int) -> torch.Tensor:
        """q = C(u) of the root's `u`, bucket by bucket (the server's seed), broadcast as payloads
        and decompressed on every rank. The other ranks build their receive buffer and the
        decompression context from a zero bucket (the context depends only on the size, dtype and
        seed, `compress.base`)."""
        ref = self.trainable[0]
        q = torch.empty(self.numel, device=ref.device, dtype=ref.dtype)
        for b, (lo, hi) in enumerate(self.bounds):
            x = u[lo:hi] if self.is_root else torch.zeros(hi - lo, device=ref.device, dtype=ref.dtype)
            payload, ctx = self.codec.compress(x, self.seed(step, SERVER, b))
            self.comm.broadcast(payload, src=ROOT)
            q[lo:hi] = self.codec.decompress(payload, ctx)
        return q


class ServerCompression(CompressedAlgorithm):
    """Bidirectional compression: the root keeps an error e (its own compression residual, the
    authors' `s_residuals`, one flat vector over all buckets) and sends q = C(mean + e) down."""

    state_fields = ("server_memory",)
    server_memory: ErrorFeedback        # e: the server's compression error (non-zero on the root only)

    def build(self) -> None:
        super().build()
        self.server_memory = ErrorFeedback()

    def server_step(self, mean: torch.Tensor | None, step: int) -> torch.Tensor:
        """Root: u = mean + e; q = C(u); e <- u - q. Every rank: returns q."""
        u = self.server_memory.compensate(mean) if self.is_root else None
        q = self.broadcast_compressed(u, step)
        if self.is_root:
            self.server_memory.update(u, q)
        return q
