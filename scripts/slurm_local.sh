#!/usr/bin/env bash
# A throwaway one-node Slurm cluster on localhost, for tests (tests/support/slurm_cluster.py) and by hand.
#
#   slurm_local.sh install     apt-get install slurm-wlm and munge when a daemon is missing (root)
#   slurm_local.sh start DIR   munged, slurmctld and slurmd with every file inside DIR (a fresh
#                              directory the caller owns), on free ports; returns once the node
#                              is idle. `. DIR/env.sh` points sbatch, squeue, ... at it.
#   slurm_local.sh stop DIR    cancels DIR's jobs and stops DIR's daemons, by their pid files
#
# Clusters in different DIRs coexist: each has its own munge socket and key, ports, state, spool
# and pid files. Clients and daemons talk over 127.0.0.1 (SlurmctldHost and NodeAddr), but the
# daemons listen on every address: slurmctld has no option against it, and slurmd's (NoInAddrAny)
# binds the address the host's name resolves to, rarely 127.0.0.1 outside this machine's
# /etc/hosts. Their RPCs need the cluster's own munge key, written afresh into DIR.
# Written against Debian 12's slurm-wlm 22.05; kept to options that later releases still accept.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin # the daemons, for a caller whose PATH lacks them

usage() {
    echo "usage: $0 install | start DIR | stop DIR" >&2
    exit 2
}

installed() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null
}

install() {
    installed && return 0
    # Two test processes (pytest-xdist workers) may get here at once: one installs, the other
    # waits for it and then finds everything installed. apt-get runs without the lock's fd 9,
    # so that a daemon a package's postinst starts cannot hold the lock after we exit.
    exec 9>/tmp/mtcore-slurm-install.lock
    flock -w 900 9
    installed && return 0
    # Another apt-get (scripts/setup.sh's) may hold apt's locks: dpkg's lock is waited for with
    # the timeout below, the package lists' lock (apt-get update) has no timeout, hence the retry.
    local try
    for try in $(seq 30); do
        apt-get update -qq 9>&- && break
        [[ $try -lt 30 ]] || return 1
        sleep 10
    done
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
        slurm-wlm munge >/dev/null 9>&-
}

# A TCP port nothing listens on at 127.0.0.1, drawn at random below the kernel's ephemeral range
# so that outgoing connections do not take it; random so that two clusters started at the same
# moment do not pick the same one. Not in $avoid.
free_port() {
    local avoid=${1:-0} port
    for _ in $(seq 200); do
        port=$((10000 + RANDOM % 22000))
        [[ $port == "$avoid" ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    echo "slurm_local: no free port found" >&2
    return 1
}

write_conf() {
    local dir=$1 host=$2 cpus=$3 mem_mb=$4 ctld_port=$5 slurmd_port=$6
    cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm_local.sh: a one-node cluster whose files all live in $dir.
ClusterName=mtcore
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (120 s by
# default; a test of requeues waits for each)
AuthInfo=socket=$dir/munge.socket,cred_expire=15
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# One job per CPU: two 1-CPU jobs run side by side on a 2-CPU node.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=1000
ReturnToService=2
# The node as written here, whatever slurmd detects (no INVAL drain on a small mismatch).
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=300
# A job may be queued again (scontrol requeue: submitit's answer to a time limit's signal or a
# preemption); a job stopped that way has its processes killed 5 s after SIGTERM, not 30.
JobRequeue=1
KillWait=5
NodeName=$host NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munged() {
    local dir=$1
    dd if=/dev/urandom of="$dir/munge.key" bs=1 count=1024 status=none
    chmod 0400 "$dir/munge.key"
    # --force: munged refuses some setups (running as root, a key under /tmp) without it.
    munged --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
        --seed-file="$dir/munged.seed" </dev/null >>"$dir/munged.out" 2>&1
}

node_state() {
    sinfo -h -o %T 2>/dev/null | head -n1 || true
}

logs() {
    local dir=$1 log
    for log in munged.out munged.log slurmctld.out slurmctld.log slurmd.out slurmd.log; do
        [[ -s "$dir/$log" ]] || continue
        echo "==> $dir/$log <==" >&2
        tail -n 25 "$dir/$log" >&2
    done
}

start() {
    local dir
    dir=$(cd "$1" && pwd)
    local host cpus mem_mb ctld_port slurmd_port
    host=$(hostname -s)
    cpus=$(getconf _NPROCESSORS_ONLN)  # not nproc: it follows OMP_NUM_THREADS, which tests set
    # RealMemory a little under the real total: slurmd drains a node that has less than it says.
    mem_mb=$(awk '/^MemTotal:/ {m = int($2 / 1024) - 512; print (m < 512 ? 512 : m)}' /proc/meminfo)
    ctld_port=$(free_port)
    slurmd_port=$(free_port "$ctld_port")
    mkdir -p "$dir/state" "$dir/spool"
    write_conf "$dir" "$host" "$cpus" "$mem_mb" "$ctld_port" "$slurmd_port"
    echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env.sh"
    export SLURM_CONF=$dir/slurm.conf
    # Whatever started is stopped again when a later step fails.
    trap 'logs "$dir"; stop "$dir"' ERR
    start_munged "$dir"
    # The daemons' own output (errors before their log file opens) goes to DIR/*.out, not to
    # the caller's stdout and stderr: a caller reading those pipes to their end would wait forever.
    slurmctld -f "$SLURM_CONF" </dev/null >>"$dir/slurmctld.out" 2>&1
    slurmd -f "$SLURM_CONF" -N "$host" </dev/null >>"$dir/slurmd.out" 2>&1
    local state=
    for _ in $(seq 120); do
        state=$(node_state)
        [[ $state == idle ]] && break
        sleep 0.5
    done
    if [[ $state != idle ]]; then
        echo "slurm_local: node $host not idle after 60 s (state: ${state:-none})" >&2
        false
    fi
    trap - ERR
    echo "export SLURM_CONF=$SLURM_CONF"
}

# Whether pid $1 is alive (not a zombie) and is the program $2: a pid file may outlive its
# process, and the pid may then be another program's.
running() {
    local stat
    [[ -n $1 ]] && stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    # /proc/PID/stat: "PID (COMM) STATE ..."
    [[ $stat == "$1 ($2) "* && $stat != "$1 ($2) Z"* ]]
}

stop_daemon() {
    local pidfile=$1 name=$2 pid
    [[ -f $pidfile ]] || return 0
    pid=$(cat "$pidfile")
    running "$pid" "$name" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        running "$pid" "$name" || return 0
        sleep 0.1
    done
    echo "slurm_local: $name ($pid) ignored SIGTERM for 10 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
}

stop() {
    local dir
    dir=$(cd "$1" && pwd)
    export SLURM_CONF=$dir/slurm.conf
    # Jobs first: slurmstepd and the job's processes outlive a stopped slurmd.
    if [[ -f $SLURM_CONF ]] && running "$(cat "$dir/slurmctld.pid" 2>/dev/null)" slurmctld; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        # shellcheck disable=SC2086  # one argument per job id
        [[ -z $jobs ]] || scancel --full --quiet $jobs 2>/dev/null || true
        for _ in $(seq 50); do
            [[ -z "$(squeue -h -o %i 2>/dev/null)" ]] && break
            sleep 0.2
        done
    fi
    stop_daemon "$dir/slurmd.pid" slurmd
    stop_daemon "$dir/slurmctld.pid" slurmctld
    stop_daemon "$dir/munged.pid" munged
}

[[ $# -ge 1 ]] || usage
case $1 in
    install) install ;;
    start | stop)
        [[ $# -eq 2 && -d $2 ]] || usage
        "$1" "$2"
        ;;
    *) usage ;;
esac
