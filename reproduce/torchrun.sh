#!/usr/bin/env bash
# One distributed training run with torchrun, without SLURM: a single multi-GPU machine, or
# several machines started by hand (run this once on every node with the same MASTER_ADDR,
# MASTER_PORT and NNODES and its own NODE_RANK). Arguments go to `python -m distsgd train`;
# --backend comes from BACKEND; the world size is NNODES x NPROC_PER_NODE.
#
#   reproduce/torchrun.sh --algo ssgd --model resnet18 --data cifar10 --steps 15000 \
#       --batch-size 128 --lr 0.1 --out results/ssgd-p8                       # all local GPUs
#   BACKEND=gloo NPROC_PER_NODE=4 reproduce/torchrun.sh --algo local_sgd --model mlp \
#       --data digits --set period=8 --out results/cpu                       # CPU, 4 processes
#   # two machines, 8 GPUs each:
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 reproduce/torchrun.sh ...        # on node0
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 reproduce/torchrun.sh ...        # on node1
#
# Do not pass --nproc: torchrun parses every argument, and Python 3.11's argparse rejects
# --nproc as an ambiguous abbreviation of its --nproc-per-node. With --launcher env,
# distsgd takes the number of processes from WORLD_SIZE.
#
# Restarts: with MAX_RESTARTS=N torchrun restarts every rank of the job up to N times when one
# fails (`torchrun --max-restarts`). Each restart runs the same command with the same --out, so
# with --checkpoint-every it resumes from the run's last complete checkpoint and ends as an
# uninterrupted run would (tests/test_survive.py); without, it starts again from step 0. A
# failure that is no accident (a diverged run, a bad input) fails N + 1 times.
#   MAX_RESTARTS=3 BACKEND=gloo NPROC_PER_NODE=2 reproduce/torchrun.sh --model mlp \
#       --steps 2000 --checkpoint-every 100 --out results/cpu
#
# Variables (defaults in brackets):
#   NNODES [1]  NODE_RANK [0]  MASTER_ADDR [127.0.0.1]  MASTER_PORT [29500]
#   NPROC_PER_NODE [number of GPUs nvidia-smi lists, else 2]
#   BACKEND [nccl when GPUs are found, else gloo]
#   MAX_RESTARTS [0]  restarts of the job's ranks after a failure
#   NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME  network interface for multi-node runs [unset]
set -euo pipefail

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
fi

NNODES="${NNODES:-1}"
NODE_RANK="${NODE_RANK:-0}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
MASTER_PORT="${MASTER_PORT:-29500}"
MAX_RESTARTS="${MAX_RESTARTS:-0}"
if (( gpus > 0 )); then
    NPROC_PER_NODE="${NPROC_PER_NODE:-$gpus}"
    BACKEND="${BACKEND:-nccl}"
else
    NPROC_PER_NODE="${NPROC_PER_NODE:-2}"
    BACKEND="${BACKEND:-gloo}"
fi
if [[ "$BACKEND" == nccl ]]; then
    export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
    export TORCH_NCCL_ASYNC_ERROR_HANDLING="${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}"
fi

echo "node $NODE_RANK of $NNODES: $NPROC_PER_NODE rank(s), backend $BACKEND," \
     "master $MASTER_ADDR:$MASTER_PORT, up to $MAX_RESTARTS restart(s)" >&2

exec torchrun \
    --nnodes "$NNODES" \
    --node-rank "$NODE_RANK" \
    --nproc-per-node "$NPROC_PER_NODE" \
    --max-restarts "$MAX_RESTARTS" \
    --master-addr "$MASTER_ADDR" \
    --master-port "$MASTER_PORT" \
    -m distsgd train --launcher env --backend "$BACKEND" "$@"
