#!/usr/bin/env bash
# Start a fake-GPU Slurm cluster on this machine, everything kept under RUN_DIR (no systemd):
# munged (shared, started only if not running), slurmdbd on the machine's MariaDB, slurmctld and one
# slurmd per fake node. Recipe: REAL-BACKENDS.md §1 (Slurm 22.05, Debian 12).
#
# Usage: deploy/slurm/start.sh RUN_DIR [--nodes N] [--gpus-per-node G] [--gpu-type T] [--shards-per-gpu S]
#                              [--cpu-nodes C]
#   --cpu-nodes (0): C GPU-less nodes cpu-1…cpu-C in a partition of their own, `cpu` (the GPU nodes
#   are then partition `gpu`, the default, and no longer ALL): where CPU-only jobs run (a cpu
#   flavor's nodes, docs/resources.md "CPU-only work").
#   --shards-per-gpu (8): each fake GPU is also S `gres/shard`s (Slurm 22.05 GPU sharing) that a
#   job asks for as --gres=shard:<n>; 0 leaves shards out. A GPU's shards and the GPU itself are
#   mutually exclusive: Slurm gives a device either whole or in shards, never both at once.
#   Progress goes to stderr; stdout gets one line for the caller:  export SLURM_CONF=RUN_DIR/etc/slurm.conf
#   so `eval "$(deploy/slurm/start.sh /tmp/c1)"` sets up the shell. Stop with deploy/slurm/stop.sh RUN_DIR.
#
# Environment:
#   SLURM_PORT_BASE     (16817) slurmctld=BASE, slurmdbd=BASE+2, node i (1-based) on BASE+10+i, CPU
#                        node j on BASE+10+N+j. A second cluster needs another base (at least
#                        10+N+C+1 ports away, e.g. +100).
#   SLURM_CLUSTER_NAME  (derived from RUN_DIR) accounting keeps one set of tables per cluster name, so
#                        clusters in different RUN_DIRs never see each other's job ids in sacct.
#   SLURM_DB_HOST/SLURM_DB_PORT (127.0.0.1/3306), SLURM_DB_ADMIN (root, no password): the MariaDB account
#                        that creates the database; SLURM_DB_NAME (slurm_acct_db); SLURM_DB_USER (slurm)
#                        and SLURM_DB_PASS (gpupool-slurmdbd): the account slurmdbd uses.
#   SLURM_START_TIMEOUT (90) seconds to wait for each daemon.
#   SLURM_NODE_CPUS (96), SLURM_NODE_MEMORY_MIB (1048576), SLURM_NODE_MEM_SPEC_MIB (32768),
#   SLURM_NODE_TMP_MIB (3932160), SLURM_NODE_DRIVER, SLURM_NODE_CUDA: each node's size and software.
#   SLURM_CPU_NODE_CPUS (128), SLURM_CPU_NODE_MEMORY_MIB (524288), SLURM_CPU_NODE_MEM_SPEC_MIB (16384),
#   SLURM_CPU_NODE_TMP_MIB (1048576): each CPU node's size.
set -euo pipefail

usage() {
    echo "usage: $0 RUN_DIR [--nodes N] [--gpus-per-node G] [--gpu-type T] [--shards-per-gpu S] [--cpu-nodes C]" >&2
    exit 2
}

[[ $# -ge 1 ]] || usage
mkdir -p "$1"
RUN=$(realpath "$1")
shift
NODES=4
GPUS=8
GPU_TYPE=a100
# 8 shards per GPU: one shard is 125 thousandths of a card (the portal's gpu_milli unit).
SHARDS=8
CPU_NODES=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --nodes) NODES=${2:?}; shift 2 ;;
        --gpus-per-node) GPUS=${2:?}; shift 2 ;;
        --gpu-type) GPU_TYPE=${2:?}; shift 2 ;;
        --shards-per-gpu) SHARDS=${2:?}; shift 2 ;;
        --cpu-nodes) CPU_NODES=${2:?}; shift 2 ;;
        *) usage ;;
    esac
done
[[ "$NODES" =~ ^[1-9][0-9]*$ && "$GPUS" =~ ^[1-9][0-9]*$ && "$GPU_TYPE" =~ ^[a-z0-9]+$ ]] || usage
[[ "$SHARDS" =~ ^[0-9]+$ && "$CPU_NODES" =~ ^[0-9]+$ ]] || usage

BASE=${SLURM_PORT_BASE:-16817}
CTLD_PORT=$BASE
SLURMD_PORT=$((BASE + 1))
DBD_PORT=$((BASE + 2))
NODE_PORT0=$((BASE + 10))
# Cluster names become MariaDB table prefixes: lowercase letters and digits, short.
CLUSTER=${SLURM_CLUSTER_NAME:-gp$(printf '%s' "$RUN" | sha1sum | cut -c1-10)}
DB_HOST=${SLURM_DB_HOST:-127.0.0.1}
DB_PORT=${SLURM_DB_PORT:-3306}
DB_ADMIN=${SLURM_DB_ADMIN:-root}
DB_NAME=${SLURM_DB_NAME:-slurm_acct_db}
DB_USER=${SLURM_DB_USER:-slurm}
DB_PASS=${SLURM_DB_PASS:-gpupool-slurmdbd}
TIMEOUT=${SLURM_START_TIMEOUT:-90}

ETC=$RUN/etc
export SLURM_CONF=$ETC/slurm.conf
T0=$(date +%s.%N)
lap() { printf '%-34s %6.2fs\n' "$1" "$(echo "$(date +%s.%N) - $T0" | bc)" >&2; }
die() { echo "start.sh: $*" >&2; exit 1; }

node_name() { echo "gpu-$GPU_TYPE-$1"; }
gpu_node_names() { local i; for ((i = 1; i <= NODES; i++)); do node_name "$i"; done; }
cpu_node_names() { local i; for ((i = 1; i <= CPU_NODES; i++)); do echo "cpu-$i"; done; }
node_names() { gpu_node_names; cpu_node_names; }

# Is the process in pid file $1 alive and running program $2? (pid files outlive crashed daemons.)
alive() {
    local pid
    [[ -s "$1" ]] || return 1
    pid=$(cat "$1")
    [[ -d /proc/$pid ]] && grep -q "$2" "/proc/$pid/comm" 2>/dev/null
}

# Poll command "$@" until it succeeds or TIMEOUT passes.
wait_for() {
    local what=$1 deadline
    shift
    deadline=$(($(date +%s) + TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        (($(date +%s) < deadline)) || return 1
        sleep 0.2
    done
    lap "$what"
}

write_fake_devices() {
    # Slurm 22.05 drops GPUs without File= and rejects plain files: symlinks to /dev/null work.
    local i g n
    mkdir -p "$RUN/fakedev"
    for ((i = 1; i <= NODES; i++)); do
        n=$(node_name "$i")
        for ((g = 0; g < GPUS; g++)); do
            ln -sfn /dev/null "$RUN/fakedev/$n-nvidia$g"
        done
    done
}

# Topology as node Features: one zone, one spine, the nodes split over two leaves (first half l1).
node_features() {
    local per_leaf=$(((NODES + 1) / 2))
    echo "zone-z1,spine-s1,leaf-l$((($1 - 1) / per_leaf + 1)),driver-$NODE_DRIVER,cuda-$NODE_CUDA"
}

# A realistic 8-GPU server (DESIGN §15): 96 cores, 1 TiB of which MemSpecLimit keeps 32 GiB for
# the node itself (jobs may have 992 GiB), 3.75 TiB of local disk (TmpDisk, MiB). The fake nodes
# may claim more than this machine has (SlurmdParameters=config_overrides).
NODE_CPUS=${SLURM_NODE_CPUS:-96}
NODE_MEMORY_MIB=${SLURM_NODE_MEMORY_MIB:-1048576}
NODE_MEM_SPEC_MIB=${SLURM_NODE_MEM_SPEC_MIB:-32768}
NODE_TMP_MIB=${SLURM_NODE_TMP_MIB:-3932160}
# The node's software, as features the inventory sync reads (driver-<v>, cuda-<v>).
NODE_DRIVER=${SLURM_NODE_DRIVER:-535.104.05}
NODE_CUDA=${SLURM_NODE_CUDA:-12.2}

node_size() {
    echo "CPUs=$NODE_CPUS RealMemory=$NODE_MEMORY_MIB MemSpecLimit=$NODE_MEM_SPEC_MIB TmpDisk=$NODE_TMP_MIB"
}

# A GPU-less server for CPU-only work: 128 cores, 512 GiB (16 GiB kept for the node), 1 TiB of disk.
CPU_NODE_CPUS=${SLURM_CPU_NODE_CPUS:-128}
CPU_NODE_MEMORY_MIB=${SLURM_CPU_NODE_MEMORY_MIB:-524288}
CPU_NODE_MEM_SPEC_MIB=${SLURM_CPU_NODE_MEM_SPEC_MIB:-16384}
CPU_NODE_TMP_MIB=${SLURM_CPU_NODE_TMP_MIB:-1048576}

cpu_node_size() {
    echo "CPUs=$CPU_NODE_CPUS RealMemory=$CPU_NODE_MEMORY_MIB MemSpecLimit=$CPU_NODE_MEM_SPEC_MIB" \
        "TmpDisk=$CPU_NODE_TMP_MIB"
}

joined() { paste -sd, -; }

# Accounting records gres/shard too, so sacct's AllocTRES shows a shard job's share of a card
# (Slurm 22.05 records allocated shards untyped; the typed TRES shows in ReqTRES only).
accounting_tres() {
    local tres="gres/gpu,gres/gpu:$GPU_TYPE"
    ((SHARDS > 0)) && tres+=",gres/shard,gres/shard:$GPU_TYPE"
    echo "$tres"
}

gres_types() { if ((SHARDS > 0)); then echo "GresTypes=gpu,shard"; else echo "GresTypes=gpu"; fi; }

node_gres() {
    local gres="gpu:$GPU_TYPE:$GPUS"
    ((SHARDS > 0)) && gres+=",shard:$((GPUS * SHARDS))"
    echo "$gres"
}

write_slurm_conf() {
    local i n tmp
    tmp=$(mktemp "$ETC/.slurm.conf.XXXXXX")
    cat >"$tmp" <<CONF
# Generated by deploy/slurm/start.sh: a fake-GPU cluster of $NODES nodes on this machine.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$RUN/state
SlurmdSpoolDir=$RUN/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$RUN/log/slurmctld.log
SlurmdLogFile=$RUN/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=$(accounting_tres)
# Jobs need an association (user, account), and its limits (GrpTRES) and QOS apply: the portal's
# Slurm accounts sync (docs/backends.md, "Native Slurm users") manages them. The portal's own jobs
# run as root, whose association registering the cluster creates.
AccountingStorageEnforce=associations,limits,qos
JobCompType=jobcomp/filetxt
JobCompLoc=$RUN/log/jobcomp.txt
SchedulerType=sched/backfill
# QOS preemption (docs/backends.md "Native Slurm users"): a job of a QOS that lists another in its
# Preempt= requeues that QOS's jobs when it needs their resources — the borrow QOS (<prefix>borrow)
# is listed by every class QOS, so a lender's own jobs take back GPUs lent to borrowers. The
# minimum runtime before preemption is per QOS (PreemptExemptTime, written by the sync). The
# portal's own jobs run in QOS normal, which preempts nothing and is never preempted.
PreemptType=preempt/qos
PreemptMode=REQUEUE
# preempt_youngest_first: of the jobs a preemptor may take, the youngest go first (the least work lost).
SchedulerParameters=bf_interval=5,preempt_youngest_first
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Memory is a consumable resource (CR_Core_Memory). Without a default a job that asks no --mem
# takes the whole node's memory and blocks every other job on it: with this one it gets 2 GiB per
# core it holds. The portal always asks its jobs' memory (--mem, DESIGN §15).
DefMemPerCPU=2048
$(gres_types)
ReturnToService=2
# Lets the fake nodes declare more CPUs/memory than this machine has.
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
# Finished jobs stay in squeue / scontrol for 5 min; sacct has them for good.
MinJobAge=300
# Short timeouts for tests: a dead slurmd marks its node DOWN after SlurmdTimeout, scancel's
# SIGTERM turns into SIGKILL after KillWait.
SlurmctldTimeout=30
SlurmdTimeout=8
KillWait=5
# Clients retry an unreachable controller for about MessageTimeout seconds (default 10).
MessageTimeout=5
# --- fake nodes, all on 127.0.0.1, one slurmd (own port) each ---
CONF
    for ((i = 1; i <= NODES; i++)); do
        n=$(node_name "$i")
        echo "NodeName=$n NodeAddr=127.0.0.1 Port=$((NODE_PORT0 + i)) $(node_size)" \
            "Gres=$(node_gres) Feature=$(node_features "$i") State=UNKNOWN" >>"$tmp"
    done
    for ((i = 1; i <= CPU_NODES; i++)); do
        echo "NodeName=cpu-$i NodeAddr=127.0.0.1 Port=$((NODE_PORT0 + NODES + i)) $(cpu_node_size)" \
            "Feature=zone-z1,spine-s1,leaf-l1 State=UNKNOWN" >>"$tmp"
    done
    if ((CPU_NODES > 0)); then
        echo "PartitionName=gpu Nodes=$(gpu_node_names | joined) Default=YES MaxTime=INFINITE State=UP" >>"$tmp"
        echo "PartitionName=cpu Nodes=$(cpu_node_names | joined) MaxTime=INFINITE State=UP" >>"$tmp"
    else
        echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$tmp"
    fi
    # mktemp makes it 0600: users' sbatch on the "login node" must read it (no secrets in it).
    chmod 0644 "$tmp"
    mv "$tmp" "$ETC/slurm.conf"
}

write_gres_conf() {
    local i n g
    {
        echo "# Generated by deploy/slurm/start.sh. Every fake GPU needs a char device: /dev/null symlinks."
        echo "AutoDetect=off"
        for ((i = 1; i <= NODES; i++)); do
            n=$(node_name "$i")
            echo "NodeName=$n Name=gpu Type=$GPU_TYPE File=$RUN/fakedev/$n-nvidia[0-$((GPUS - 1))]"
            # Shards are bound to their GPU through its device file: one line per GPU, so each
            # GPU has exactly SHARDS of them and a job's shards (one GPU per node in 22.05) share it.
            for ((g = 0; g < GPUS && SHARDS > 0; g++)); do
                echo "NodeName=$n Name=shard Count=$SHARDS File=$RUN/fakedev/$n-nvidia$g"
            done
        done
    } >"$ETC/gres.conf"
}

write_slurmdbd_conf() {
    # Holds the database password: 0600, owned by SlurmUser (root), or slurmdbd refuses it.
    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<CONF
# Generated by deploy/slurm/start.sh.
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$RUN/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=$DB_HOST
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
CONF
    )
}

start_munge() {
    if munge -n >/dev/null 2>&1; then
        lap "munged (already running)"
        return
    fi
    [[ -f /etc/munge/munge.key ]] || die "no /etc/munge/munge.key: run deploy/slurm/install.sh"
    mkdir -p /run/munge
    chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    # munged serves every cluster on the machine: mark it as ours (machine-wide, not per RUN_DIR),
    # so whichever stop.sh stops the last of our clusters stops it too, and one started by someone
    # else is never touched.
    cp /run/munge/munged.pid /run/munge/started-by-gpupool
    wait_for "munged" munge -n || die "munged did not start"
}

db_admin() { mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_ADMIN" --batch --skip-column-names "$@"; }

setup_database() {
    db_admin -e "SELECT 1" >/dev/null || die "cannot reach MariaDB at $DB_HOST:$DB_PORT as $DB_ADMIN"
    # slurmdbd connects over TCP to 127.0.0.1, which MariaDB may match as 'localhost' or '127.0.0.1'.
    db_admin -e "CREATE DATABASE IF NOT EXISTS \`$DB_NAME\`;
        CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
        CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON \`$DB_NAME\`.* TO '$DB_USER'@'localhost';
        GRANT ALL ON \`$DB_NAME\`.* TO '$DB_USER'@'127.0.0.1';"
    mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" -p"$DB_PASS" -e "SELECT 1" "$DB_NAME" >/dev/null \
        || die "user $DB_USER exists with another password: set SLURM_DB_PASS"
    lap "database $DB_NAME"
}

start_slurmdbd() {
    if alive "$RUN/slurmdbd.pid" slurmdbd; then
        lap "slurmdbd (already running)"
        return
    fi
    # slurmdbd has no -f: it reads slurmdbd.conf next to $SLURM_CONF.
    slurmdbd
    wait_for "slurmdbd" sacctmgr -n show cluster || { tail -5 "$RUN/log/slurmdbd.log" >&2; die "slurmdbd"; }
    # Registering the cluster before slurmctld starts saves the controller a retry cycle.
    if [[ -z "$(sacctmgr -n -P show cluster "$CLUSTER" format=cluster)" ]]; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null
        lap "cluster $CLUSTER registered"
    fi
}

start_slurmctld() {
    if alive "$RUN/slurmctld.pid" slurmctld; then
        lap "slurmctld (already running)"
        return
    fi
    slurmctld -f "$SLURM_CONF" -i # daemonizes; -i: ignore missing state files
    wait_for "slurmctld" scontrol ping || { tail -5 "$RUN/log/slurmctld.log" >&2; die "slurmctld"; }
}

start_slurmds() {
    local n
    for n in $(node_names); do
        mkdir -p "$RUN/spool/$n"
        alive "$RUN/slurmd-$n.pid" slurmd && continue
        # SLURM_CONF stays in the environment, so stop.sh can tell our slurmstepds from others'.
        slurmd -N "$n" -f "$SLURM_CONF"
    done
}

nodes_ready() {
    # Long state names; '*' marks a node that is not responding.
    [[ "$(sinfo -h -N -t idle,mixed,allocated -o '%N %T' | grep -vc '\*')" -ge "$((NODES + CPU_NODES))" ]]
}

main() {
    mkdir -p "$ETC" "$RUN/state" "$RUN/log" "$RUN/spool" "$RUN/jobs"
    write_fake_devices
    write_slurm_conf
    write_gres_conf
    write_slurmdbd_conf
    start_munge
    setup_database
    start_slurmdbd
    start_slurmctld
    start_slurmds
    wait_for "$((NODES + CPU_NODES)) slurmd nodes idle" nodes_ready || { sinfo -N >&2; die "nodes did not become idle"; }
    sinfo -N -o '%N %T %G %f' >&2
    echo "export SLURM_CONF=$SLURM_CONF"
}

main
