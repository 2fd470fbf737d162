#!/usr/bin/env bash
# Stop what deploy/slurm/start.sh started under RUN_DIR: the jobs still running, the slurmds,
# slurmctld, slurmdbd, and munged when one of our start.sh runs started it and no Slurm daemon is left.
#
# Usage: deploy/slurm/stop.sh RUN_DIR [--purge]
#   --purge  also drop this cluster's accounting tables from MariaDB (for throw-away test clusters;
#            same SLURM_DB_* environment as start.sh).
set -euo pipefail

[[ $# -ge 1 ]] || { echo "usage: $0 RUN_DIR [--purge]" >&2; exit 2; }
RUN=$(realpath "$1")
PURGE=0
[[ "${2:-}" == "--purge" ]] && PURGE=1
export SLURM_CONF=$RUN/etc/slurm.conf
[[ -f "$SLURM_CONF" ]] || { echo "stop.sh: no $SLURM_CONF" >&2; exit 0; }

T0=$(date +%s.%N)
lap() { printf '%-34s %6.2fs\n' "$1" "$(echo "$(date +%s.%N) - $T0" | bc)" >&2; }

pid_of() { [[ -s "$1" ]] && cat "$1"; }

# Stop the daemons in pid files "$@" together: SIGTERM, then SIGKILL for those left after 10 s.
stop_pidfiles() {
    local f pid i
    local -a pids=()
    for f in "$@"; do
        [[ -s "$f" ]] || continue
        pid=$(cat "$f")
        rm -f "$f"
        # A stale pid file may name a pid that now belongs to someone else: check the program.
        [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == slurm* ]] || continue
        kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    done
    pid=""
    for ((i = 0; i < 100; i++)); do
        for pid in "${pids[@]}"; do
            [[ -d /proc/$pid ]] && break
            pid=""
        done
        [[ -z "${pid:-}" ]] && return 0
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        [[ -d /proc/$pid ]] || continue
        echo "$(cat "/proc/$pid/comm" 2>/dev/null) ($pid) ignored SIGTERM: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    done
}

cancel_jobs() {
    # slurmstepd and the job processes outlive slurmd: cancel while the controller still listens.
    local ids
    ids=$(timeout 10 squeue -h -o %i 2>/dev/null || true)
    [[ -n "$ids" ]] || return 0
    # shellcheck disable=SC2086  # one id per word
    timeout 10 scancel $ids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        [[ -z "$(timeout 5 squeue -h -t pending,running,completing -o %i 2>/dev/null || true)" ]] && return 0
        sleep 0.2
    done
    echo "jobs still active after scancel:" >&2
    timeout 5 squeue -t pending,running,completing >&2 || true
}

# Every process below pid $1, deepest first.
descendants() {
    local child
    for child in $(pgrep -P "$1" || true); do
        descendants "$child"
        echo "$child"
    done
}

# Our slurmsteps: they carry the SLURM_CONF they inherited from our slurmds.
our_steps() {
    local p
    for p in /proc/[0-9]*; do
        [[ "$(cat "$p/comm" 2>/dev/null)" == slurmstepd ]] || continue
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "SLURM_CONF=$SLURM_CONF" || continue
        echo "${p#/proc/}"
    done
}

# A step still tearing down its job keeps its slurmd (and our shutdown) waiting for the
# controller: let cancelled jobs finish first.
wait_for_steps() {
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -z "$(our_steps)" ]] && return 0
        sleep 0.2
    done
    echo "job steps still running:" $(our_steps) >&2
}

# Steps of a node whose slurmd died (and the job processes under them) keep running: kill their trees.
kill_leftover_steps() {
    local pid
    for pid in $(our_steps); do
        # shellcheck disable=SC2046  # one pid per word
        kill -KILL "$pid" $(descendants "$pid") 2>/dev/null || true
    done
}

# Is any Slurm daemon alive on this machine? (Exited ones may linger as zombies: not counted.)
other_slurm_daemons() {
    local stat
    for stat in /proc/[0-9]*/stat; do
        # /proc/PID/stat: "PID (comm) STATE ..."
        [[ "$(cat "$stat" 2>/dev/null)" =~ ^[0-9]+\ \((slurmctld|slurmd|slurmdbd)\)\ [^Z] ]] && return 0
    done
    return 1
}

stop_munge() {
    local pid current
    # Only a munged that one of our start.sh runs started (see start.sh), and only when no Slurm
    # daemon is left that needs it.
    pid=$(pid_of /run/munge/started-by-gpupool) || return 0
    if other_slurm_daemons; then
        echo "munged left running: other Slurm daemons use it" >&2
        return 0
    fi
    rm -f /run/munge/started-by-gpupool
    # The same munged still (not a later one that reused the pid file)?
    current=$(pid_of /run/munge/munged.pid || true)
    if [[ "$current" == "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == munged ]]; then
        kill -TERM "$pid"
    fi
}

purge_accounting() {
    local cluster db tables
    cluster=$(sed -n 's/^ClusterName=//p' "$SLURM_CONF")
    db=${SLURM_DB_NAME:-slurm_acct_db}
    local -a sql=(mariadb -h "${SLURM_DB_HOST:-127.0.0.1}" -P "${SLURM_DB_PORT:-3306}"
        -u "${SLURM_DB_ADMIN:-root}" --batch --skip-column-names "$db")
    tables=$("${sql[@]}" -e "SELECT GROUP_CONCAT(CONCAT('\`', table_name, '\`'))
        FROM information_schema.tables WHERE table_schema = '$db' AND table_name LIKE '${cluster}\\_%'")
    if [[ -n "$tables" && "$tables" != NULL ]]; then
        "${sql[@]}" -e "DROP TABLE $tables"
    fi
    "${sql[@]}" -e "DELETE FROM cluster_table WHERE name = '$cluster'" 2>/dev/null || true
    echo "accounting of cluster $cluster purged" >&2
}

main() {
    if [[ -s "$RUN/slurmctld.pid" ]]; then
        cancel_jobs
        wait_for_steps
        lap "jobs cancelled"
    fi
    # All daemons at once: each takes a second or two to shut down.
    stop_pidfiles "$RUN/slurmctld.pid" "$RUN"/slurmd-*.pid "$RUN/slurmdbd.pid"
    kill_leftover_steps
    lap "daemons stopped"
    stop_munge
    if ((PURGE)); then
        purge_accounting
    fi
    echo "stopped the Slurm cluster in $RUN" >&2
}

main
