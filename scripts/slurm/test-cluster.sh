#!/usr/bin/env bash
# A Slurm cluster on this machine, for running the scripts in scripts/slurm/ under a real Slurm
# (Debian 12: munge, slurmctld, slurmd, slurm-client; CI's Slurm test uses it): one controller
# and NODES compute nodes (default 2), each its own slurmd on its own loopback address
# (n1 on 127.0.0.1, n2 on 127.0.0.2, …). Everything it writes lives in DIR: its own MUNGE key and
# daemon, its own ports; nothing system-wide is changed. Needs root (slurmd starts each job as
# its user).
#
#   scripts/slurm/test-cluster.sh start DIR [NODES]   # prints the line to source: export SLURM_CONF=…
#   SLURM_CONF=DIR/slurm.conf sbatch …                 # squeue, scontrol, scancel likewise
#   scripts/slurm/test-cluster.sh stop DIR             # cancels the jobs, stops the daemons
#
# Each node looks like a Perlmutter GPU node to the scheduler, so the scripts' #SBATCH lines are
# accepted as shipped: features `gpu` and `cpu`, 4 GPUs (four names for /dev/null: run with
# GNN4C_DEVICE=cpu), 128 CPUs and 256 GB (more than the machine has: `config_overrides`); QOS
# names are not checked (no accounting database). Processes are tracked by the process tree (no
# cgroups); MPI ranks find each other through Slurm's pmi2; a requeued job may start again after
# 6 s (`cred_expire=5`; Slurm's default is 120 s).
set -euo pipefail

usage() { echo "usage: $0 start DIR [NODES] | stop DIR" >&2; exit 2; }
[[ $# -ge 2 && $# -le 3 ]] || usage
action=$1
nodes=${3:-2}
[[ $nodes =~ ^[1-9][0-9]?$ ]] || usage
mkdir -p "$2"
dir=$(cd "$2" && pwd)
conf=$dir/slurm.conf

kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
  kill -9 "$1" 2>/dev/null || true
}

stop_pidfile() {
  [[ -f $1 ]] || return 0
  local pid
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$1"
}

stop() {
  # Jobs first, while the daemons can still end them; then whatever is left of them (the job
  # step daemons this cluster's slurmds started, and their processes), then the daemons.
  if [[ -f $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    SLURM_CONF=$conf scancel --quiet --user "$(id -un)" 2>/dev/null || true
    for _ in $(seq 30); do
      [[ -z $(SLURM_CONF=$conf squeue -h -o %A 2>/dev/null) ]] && break
      sleep 0.5
    done
  fi
  local pid
  for pid in $(pgrep -x slurmstepd || true); do
    if { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf"; then
      kill_tree "$pid"
    fi
  done
  local pidfile
  for pidfile in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
    stop_pidfile "$pidfile"
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  [[ $(id -u) -eq 0 ]] || { echo "test-cluster: run as root (slurmd starts jobs as their user)" >&2; exit 1; }
  for cmd in munged mungekey slurmctld slurmd sbatch python3; do
    command -v "$cmd" >/dev/null 2>&1 || {
      echo "test-cluster: $cmd not found (apt-get install munge slurmctld slurmd slurm-client python3)" >&2
      exit 1
    }
  done
  stop
  local host
  host=$(hostname -s)
  mkdir -p "$dir/munge" "$dir/state" "$dir/log" "$dir/dev"
  # munged insists on a key and a socket folder only its own user can write; it (and the jobs'
  # users) must be able to pass through DIR.
  chmod a+x "$dir"
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir/munge"
  [[ -f $dir/munge/munge.key ]] || runuser -u munge -- mungekey -c -k "$dir/munge/munge.key"
  runuser -u munge -- munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
  cp "$dir/munge/munged.pid" "$dir/munged.pid"

  cat >"$conf" <<EOF
# Written by scripts/slurm/test-cluster.sh: $nodes nodes on $host.
ClusterName=gnn4c-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
JobRequeue=1
KillWait=5
MinJobAge=300
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
EOF
  local i names=()
  for i in $(seq "$nodes"); do
    names+=("n$i")
    mkdir -p "$dir/spool/n$i"
    echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.$i Port=$(free_port) CPUs=128 Boards=1 SocketsPerBoard=1 CoresPerSocket=64 ThreadsPerCore=2 RealMemory=256000 Gres=gpu:4 Features=gpu,cpu State=UNKNOWN" >>"$conf"
  done
  local list
  list=$(IFS=,; echo "${names[*]}")
  echo "PartitionName=test Nodes=$list Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO" >>"$conf"
  # GPUs need device files to be counted: four names for /dev/null.
  for i in 0 1 2 3; do ln -sf /dev/null "$dir/dev/gpu$i"; done
  echo "Name=gpu File=$dir/dev/gpu[0-3]" >"$dir/gres.conf"

  SLURM_CONF=$conf slurmctld -i
  for name in "${names[@]}"; do SLURM_CONF=$conf slurmd -N "$name"; done
  for _ in $(seq 100); do
    if [[ $(SLURM_CONF=$conf sinfo -h -N -o '%T' 2>/dev/null | grep -cx idle) -eq $nodes ]]; then
      echo "export SLURM_CONF=$conf"
      return 0
    fi
    sleep 0.2
  done
  echo "test-cluster: the nodes did not come up; logs in $dir/log:" >&2
  tail -n 20 "$dir"/log/*.log >&2 || true
  exit 1
}

case $action in
  start) start ;;
  stop) [[ $# -eq 2 ]] || usage; stop ;;
  *) usage ;;
esac
