#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for the Slurm tests and for trying StarForge on Slurm.
#
#   scripts/slurm.sh start    install (when missing), start whatever daemon is not running, wait
#                             until every node answers; a second start is a no-op
#   scripts/slurm.sh status   sinfo of the cluster (exit 1 when slurmctld does not answer)
#   scripts/slurm.sh stop     end the daemons this script started and wait until they are gone
#   scripts/slurm.sh env      the line to eval so that sinfo/sbatch/squeue talk to this cluster
#
# Shape (like the embedded inventory): partition h200 (default) = nodes h200-[1-2], partition
# h100 = node h100-1; every node 8 fake GPUs (gres gpu:h200:8 / gpu:h100:8), 32 fake CPUs.
# All nodes are slurmd processes on this host (Debian builds Slurm with MULTIPLE_SLURMD), each with
# its own port, spool dir and pid file. The GPUs are character devices made with mknod (major 195,
# as NVIDIA's): nothing opens them, Slurm only needs them to exist to hand out
# CUDA_VISIBLE_DEVICES. Measured facts behind each setting: the reference note
# "slurm-on-one-machine" in the project's shared notes.
#
# State, config, logs: ${STARFORGE_SLURM_DIR:-/var/tmp/starforge-slurm} (never inside the repo).
# The config is also linked at /etc/slurm/slurm.conf when that path is free, so Slurm's commands
# find it without SLURM_CONF; setting SLURM_CONF="$DIR/etc/slurm.conf" always works.
set -euo pipefail

DIR="${STARFORGE_SLURM_DIR:-/var/tmp/starforge-slurm}"
CONF="$DIR/etc/slurm.conf"
CTLD_PORT="${STARFORGE_SLURM_PORT:-16817}"
NODES=(h200-1 h200-2 h100-1)
NODE_PORTS=(17001 17002 17003)
START_TIMEOUT_S=60
export SLURM_CONF="$CONF"

log() { echo "slurm.sh: $*" >&2; }

install_packages() {
    local missing=0 cmd
    # slurmrestd is not used by the tests: bench/admissions.py measures it as an anchor.
    for cmd in slurmctld slurmd sinfo sbatch munged slurmrestd; do
        command -v "$cmd" >/dev/null 2>&1 || missing=1
    done
    [[ $missing -eq 0 ]] && return 0
    log "installing slurmctld slurmd slurm-client slurmrestd munge from Debian"
    # Another process may hold apt's lock (a parallel setup): wait for it rather than fail.
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends slurmctld slurmd slurm-client slurmrestd munge >/dev/null
}

# A pid file names a live process (not a zombie left for PID 1 to reap).
alive() {
    local pid
    pid="$(cat "$1" 2>/dev/null)" || return 1
    [[ -n "$pid" && -d "/proc/$pid" ]] || return 1
    ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null
}

start_munge() {
    if alive /run/munge/munged.pid; then return 0; fi
    if ! id munge >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin munge
    fi
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        mungekey --create --keyfile=/etc/munge/munge.key
    fi
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
    chmod 0700 /etc/munge /var/lib/munge /var/log/munge
    chmod 0400 /etc/munge/munge.key
    chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
}

make_fake_gpus() {
    local i
    mkdir -p "$DIR/dev"
    for i in 0 1 2 3 4 5 6 7; do
        [[ -c "$DIR/dev/nvidia$i" ]] || mknod "$DIR/dev/nvidia$i" c 195 "$i"
    done
}

write_config() {
    local host
    host="$(hostname -s)"
    mkdir -p "$DIR/etc" "$DIR/state" "$DIR/log" "$DIR/run"
    for node in "${NODES[@]}"; do mkdir -p "$DIR/spool/$node"; done
    cat >"$CONF.new" <<EOF
# Written by scripts/slurm.sh: a test cluster of 3 nodes on one host. Do not edit (rewritten).
ClusterName=starforge
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start again only after cred_expire s (default 120).
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# The 2-core host declares 32 CPUs and plenty of memory per node.
SlurmdParameters=config_overrides
GresTypes=gpu
# No cgroups here: processes are tracked by parent pid; no task containment.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=2000
SchedulerType=sched/backfill
# Batch jobs start on the next 1 s tick instead of after batch_sched_delay (3 s) or the 30 s
# backfill cycle (which is what starts a requeued job once its credential expired). The main
# loop tests every pending job each 2 s, not 60: after slurmctld restarts, backfill sometimes
# left a job pending on idle nodes until that loop ran (43-65 s seen in the suite).
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1,sched_interval=2
# Accounting without slurmdbd: one key=value line per finished job (sacct is not available).
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
# Finished jobs stay visible to squeue/scontrol for 10 minutes (there is no sacct).
MinJobAge=600
# A node whose slurmd comes back is usable again; a dead slurmd is noticed within ~10 s.
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
KillWait=2
MailProg=/bin/true
NodeName=h200-[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=[${NODE_PORTS[0]}-${NODE_PORTS[1]}] CPUs=32 RealMemory=512000 Gres=gpu:h200:8 State=UNKNOWN
NodeName=h100-1 NodeHostname=$host NodeAddr=127.0.0.1 Port=${NODE_PORTS[2]} CPUs=32 RealMemory=512000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=h200 Nodes=h200-[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=h100 Nodes=h100-1 MaxTime=INFINITE State=UP
EOF
    cat >"$DIR/etc/gres.conf.new" <<EOF
# Written by scripts/slurm.sh. No NVML in Debian's build: devices are declared, not detected.
AutoDetect=off
NodeName=h200-[1-2] Name=gpu Type=h200 File=$DIR/dev/nvidia[0-7]
NodeName=h100-1 Name=gpu Type=h100 File=$DIR/dev/nvidia[0-7]
EOF
    mv "$CONF.new" "$CONF"
    mv "$DIR/etc/gres.conf.new" "$DIR/etc/gres.conf"
    # Let plain `sinfo`/`sbatch` find this cluster, unless the machine has a Slurm of its own.
    mkdir -p /etc/slurm
    if [[ ! -e /etc/slurm/slurm.conf || -L /etc/slurm/slurm.conf ]]; then
        ln -sfn "$CONF" /etc/slurm/slurm.conf
    fi
}

daemons_running() {
    alive "$DIR/run/slurmctld.pid" || return 1
    for node in "${NODES[@]}"; do alive "$DIR/run/slurmd-$node.pid" || return 1; done
}

# Every node answers and is usable: idle, mixed or allocated (not down, drained, unknown).
nodes_ready() {
    local states
    states="$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)" || return 1
    [[ "$(wc -l <<<"$states")" -eq ${#NODES[@]} ]] || return 1
    ! grep -qvE ' (idle|mix|alloc|comp)$' <<<"$states"
}

wait_ready() {
    local deadline=$((SECONDS + START_TIMEOUT_S)) resumed=0 down
    until nodes_ready; do
        # Nodes an earlier test set down or drained are made usable: start means all usable.
        down="$(sinfo -h -N -t down,drain,fail -o '%N' 2>/dev/null | sort -u | paste -sd, || true)"
        if [[ -n "$down" && $resumed -eq 0 ]] && ! sinfo -h -N -o '%t' | grep -q '\*'; then
            scontrol update nodename="$down" state=resume 2>/dev/null || true
            resumed=1
        fi
        if ((SECONDS >= deadline)); then
            log "nodes not ready after ${START_TIMEOUT_S}s (logs: $DIR/log)"
            sinfo -N >&2 || true
            return 1
        fi
        sleep 0.1
    done
}

cmd_start() {
    install_packages
    if daemons_running && alive /run/munge/munged.pid && nodes_ready; then
        echo "slurm: already running (3 nodes; conf $CONF)"
        return 0
    fi
    start_munge
    make_fake_gpus
    write_config
    if ! alive "$DIR/run/slurmctld.pid"; then
        slurmctld -f "$CONF"
    fi
    local i
    for i in "${!NODES[@]}"; do
        if ! alive "$DIR/run/slurmd-${NODES[$i]}.pid"; then
            slurmd -f "$CONF" -N "${NODES[$i]}"
        fi
    done
    wait_ready
    echo "slurm: up, partitions h200 (h200-[1-2]) and h100 (h100-1), 8 GPUs per node;" \
        "conf $CONF, logs $DIR/log"
}

stop_pidfile() {
    alive "$1" || return 0
    kill -TERM "$(cat "$1" 2>/dev/null)" 2>/dev/null || true
}

cmd_stop() {
    local pidfiles=("$DIR/run/slurmctld.pid") node deadline
    for node in "${NODES[@]}"; do pidfiles+=("$DIR/run/slurmd-$node.pid"); done
    pidfiles+=(/run/munge/munged.pid)
    for f in "${pidfiles[@]}"; do stop_pidfile "$f"; done
    deadline=$((SECONDS + 30))
    for f in "${pidfiles[@]}"; do
        while alive "$f"; do
            if ((SECONDS >= deadline)); then
                kill -KILL "$(cat "$f" 2>/dev/null)" 2>/dev/null || true
            fi
            sleep 0.05
        done
    done
    echo "slurm: stopped"
}

cmd_status() {
    if ! scontrol ping >/dev/null 2>&1; then
        echo "slurm: not running (conf $CONF)"
        return 1
    fi
    sinfo
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export SLURM_CONF=$CONF" ;;
*)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
