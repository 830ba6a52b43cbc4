#!/usr/bin/env bash
# Stop the single-host Slurm that tests/slurm/start.sh started: cancel all jobs and wait for them, then stop the
# daemons by the PIDs in their PID files (slurmd(s), slurmctld, slurmdbd, MariaDB, munged) and wait for each to exit.
# Never kills by name. Idempotent: what is not running is skipped.
#
#   tests/slurm/stop.sh            stop, keep the state dir (configs, database, logs): the next start is warm
#   tests/slurm/stop.sh --purge    stop and delete the state dir
# Env: MBRIDGE_SLURM_STATE (as for start.sh), MBRIDGE_SLURM_TIMEOUT [30] seconds to wait for jobs / each daemon.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

PURGE=0
[[ ${1:-} == --purge ]] && PURGE=1
TIMEOUT=${MBRIDGE_SLURM_TIMEOUT:-30}
T0=$(now)

if [[ ! -d $STATE ]]; then
    log "nothing to stop: no $STATE"
    exit 0
fi

# ------------------------------------------------------------------------------------------------------- jobs first
# slurmd does not kill running steps when it stops, so cancel the jobs while slurmctld and the slurmds still run.
no_jobs() { [[ -z $(squeue -h -o %A) ]]; }
if alive "$RUN/slurmctld.pid" slurmctld && [[ -f $CONF ]]; then
    mapfile -t jobs < <(squeue -h -o %A 2>/dev/null || true)
    if ((${#jobs[@]})); then
        log "cancelling ${#jobs[@]} job(s): ${jobs[*]}"
        scancel "${jobs[@]}" 2>/dev/null || true
        wait_until "$TIMEOUT" no_jobs || log "WARNING: jobs still listed after ${TIMEOUT}s: $(squeue -h -o '%A %T' | tr '\n' ' ')"
    fi
fi

# ---------------------------------------------------------------------------------------------------------- daemons
# stop_daemon PIDFILE COMM
stop_daemon() {
    local pidfile=$1 comm=$2 pid
    if ! alive "$pidfile" "$comm"; then
        rm -f "$pidfile"
        return 0
    fi
    pid=$(pid_of "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_until "$TIMEOUT" eval "! alive '$pidfile' '$comm'"; then
        log "WARNING: $comm (pid $pid) ignored SIGTERM for ${TIMEOUT}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_until 10 eval "! alive '$pidfile' '$comm'" || log "WARNING: $comm (pid $pid) still alive"
    fi
    log "stopped $comm (pid $pid)"
    rm -f "$pidfile"
}

for f in "$RUN"/slurmd-*.pid; do
    [[ -e $f ]] && stop_daemon "$f" slurmd
done
stop_daemon "$RUN/slurmctld.pid" slurmctld
stop_daemon "$RUN/slurmdbd.pid" slurmdbd
stop_daemon "$RUN/mariadb.pid" mariadbd
stop_daemon "$RUN/munged.pid" munged

# The /etc/slurm/slurm.conf link start.sh made points at a config that no longer serves: remove it.
if [[ -L /etc/slurm/slurm.conf && $(readlink /etc/slurm/slurm.conf) == "$CONF" ]]; then
    rm -f /etc/slurm/slurm.conf
fi

if ((PURGE)); then
    rm -rf -- "$STATE"
    log "removed $STATE"
fi
log "stopped in $(since "$T0") s"
