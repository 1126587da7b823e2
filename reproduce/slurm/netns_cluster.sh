#!/usr/bin/env bash
# A SLURM cluster of N nodes on this one Linux machine, for rehearsing the multi-node path
# (reproduce/rehearse.py, `make rehearse`): each node is a network namespace with its own
# address, host name, /etc/hosts and slurmd; slurmctld runs on the host; every link is shaped.
#
#   sudo reproduce/slurm/netns_cluster.sh up      # build it (tearing down a previous one first)
#   sudo reproduce/slurm/netns_cluster.sh down    # stop what `up` started, remove what it made
#
# Node K = namespace dsnK, address $NET.K on the bridge $BR (interface eth0 inside, so that
# GLOO_SOCKET_IFNAME=eth0 holds on every node), host name nodeK; the host is $NET.254. Each link
# is shaped with tbf at both ends (a full-duplex NIC of $RATE per node; this kernel has no netem).
# The cluster has its own slurm.conf ($WORK/slurm.conf: point SLURM_CONF at it; /etc/slurm is
# left alone), ports and state under $WORK. munged: a running one that answers is used (and left
# running), else one is started and stopped by `down`.
# Needs root, iproute2, tc, and Debian's slurmctld, slurmd, slurm-client and munge (installed
# with apt-get when missing). The recipe: ../shared/tools/slurm-netns (measured there).
#
# Variables: N (3), RATE (1gbit), CPUS per node (2), NET (10.79.0: the netns test uses 10.77.0,
# the shared recipe 10.78.0), BR (brds0), CTLD_PORT (6837), WORK (/tmp/distsgd-slurm-netns).
set -euo pipefail

N=${N:-3}
RATE=${RATE:-1gbit}
BURST=${BURST:-256kb}          # tbf's bucket: small ones stall gloo
CPUS=${CPUS:-2}
NET=${NET:-10.79.0}
BR=${BR:-brds0}
CTLD_PORT=${CTLD_PORT:-6837}
SLURMD_PORT=${SLURMD_PORT:-6838}
WORK=${WORK:-/tmp/distsgd-slurm-netns}
CONF="$WORK/slurm.conf"

alive() { local st; st=$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null) && [ "$st" != Z ]; }

# stop NAME PIDFILE...: SIGTERM the process of each pid file when its name is NAME, SIGKILL after 5 s
stop() {
  local name=$1 f p pids=""; shift
  for f in "$@"; do
    [ -s "$f" ] || continue
    p=$(cat "$f")
    if [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$name" ] && alive "$p"; then kill "$p"; pids="$pids $p"; fi
    rm -f "$f"
  done
  for _ in $(seq 50); do
    local left=""; for p in $pids; do if alive "$p"; then left="$left $p"; fi; done
    pids=$left; [ -z "$pids" ] && return 0; sleep 0.1
  done
  kill -9 $pids 2>/dev/null || true
}

down() {
  stop slurmd "$WORK"/run/slurmd.*.pid
  stop slurmctld "$WORK/run/slurmctld.pid"
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^dsn[0-9]+$/ {print $1}'); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)      # what still runs on the node: its jobs' tasks
    if [ -n "$pids" ]; then kill $pids 2>/dev/null || true; sleep 0.5; kill -9 $pids 2>/dev/null || true; fi
    ip netns del "$ns"
  done
  ip link del "$BR" 2>/dev/null || true
  if [ -s "$WORK/run/munged.pid.ours" ]; then stop munged "$WORK/run/munged.pid.ours"; fi
  rm -rf "$WORK"
}

munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

up() {
  [ "$(id -u)" = 0 ] || { echo "netns_cluster.sh: needs root" >&2; exit 1; }
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      slurmctld slurmd slurm-client munge >/dev/null
  fi
  down
  if ip -4 -o addr | grep -q " $NET\."; then echo "netns_cluster.sh: $NET.0/24 is in use; set NET" >&2; exit 1; fi
  mkdir -p "$WORK"/{run,log,state,spool}

  ip link add "$BR" type bridge
  ip addr add "$NET.254/24" dev "$BR"
  ip link set "$BR" up
  local hosts="$WORK/hosts"
  { echo "127.0.0.1 localhost"; echo "$NET.254 $(hostname)"; } >"$hosts"
  for k in $(seq "$N"); do
    ip netns add "dsn$k"
    ip link add "dsv$k" type veth peer name eth0 netns "dsn$k"
    ip link set "dsv$k" master "$BR" up
    ip -n "dsn$k" link set lo up
    ip -n "dsn$k" addr add "$NET.$k/24" dev eth0
    ip -n "dsn$k" link set eth0 up
    tc qdisc replace dev "dsv$k" root tbf rate "$RATE" burst "$BURST" latency 100ms
    tc -n "dsn$k" qdisc replace dev eth0 root tbf rate "$RATE" burst "$BURST" latency 100ms
    echo "$NET.$k node$k" >>"$hosts"
  done

  if ! munge_answers; then
    [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge; chown munge:munge /run/munge; chmod 755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    cp /run/munge/munged.pid "$WORK/run/munged.pid.ours"
    munge_answers
  fi

  {
    echo "ClusterName=distsgdrehearsal"
    echo "SlurmctldHost=$(hostname)($NET.254)"
    cat <<EOF
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldPidFile=$WORK/run/slurmctld.pid
SlurmdPidFile=$WORK/run/slurmd.%n.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd.%n.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
MinJobAge=300
EOF
    for k in $(seq "$N"); do echo "NodeName=node$k NodeAddr=$NET.$k CPUs=$CPUS State=UNKNOWN"; done
    echo "PartitionName=rehearsal Nodes=node[1-$N] Default=YES MaxTime=INFINITE State=UP"
  } >"$CONF"
  export SLURM_CONF="$CONF"

  slurmctld -c
  for k in $(seq "$N"); do
    mkdir -p "$WORK/spool/node$k"
    # nsenter --net, not `ip netns exec` (which remounts /sys and hides the cgroup mount slurmd reads)
    nsenter --net="/run/netns/dsn$k" unshare --uts --mount --propagation private sh -c \
      "hostname node$k && mount --bind '$hosts' /etc/hosts && exec slurmd -N node$k"
  done
  for _ in $(seq 120); do
    [ "$(sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')" = "idle " ] && break
    sleep 0.5
  done
  sinfo -N
  echo "cluster up: $N nodes of $CPUS CPUs, links $RATE; SLURM_CONF=$CONF"
}

case "${1:-}" in
  up) up ;;
  down) down; echo "cluster down" ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
