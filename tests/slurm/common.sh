# Shared settings and helpers of tests/slurm/start.sh and stop.sh (sourced, not run).
# shellcheck shell=bash disable=SC2034  # (variables read by the scripts that source this)

STATE=${MBRIDGE_SLURM_STATE:-/tmp/cloudai-mbridge-slurm}
CONF="$STATE/etc/slurm.conf"
RUN="$STATE/run"
LOG="$STATE/log"
# Every Slurm command and daemon this script runs reads this cluster's config, whatever /etc/slurm holds.
export SLURM_CONF="$CONF"

# Loopback ports (fixed, away from Slurm's and MariaDB's defaults so a system instance does not collide).
CTLD_PORT=16817
DBD_PORT=16819
DB_PORT=16306
SLURMD_PORT_FIRST=17001

log() { printf '[slurm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# alive PIDFILE COMM: the daemon named in PIDFILE runs (exited daemons linger as zombies here: PID 1 reaps
# nothing, so kill -0 would say yes; read the state letter in /proc/PID/stat, and the name against PID reuse).
alive() {
    local pidfile=$1 comm=$2 pid stat rest name
    [[ -s $pidfile ]] || return 1
    read -r pid <"$pidfile" 2>/dev/null || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    name=${stat#*(}
    name=${name%)*}
    rest=${stat##*) }
    [[ ${rest%% *} != [ZX] && $name == "$comm" ]]
}

pid_of() { local pid; read -r pid <"$1" 2>/dev/null && echo "$pid"; }

now() { echo "${EPOCHREALTIME}"; }

# since START: seconds elapsed, one decimal.
since() { awk -v a="$1" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }'; }

# wait_until SECONDS CMD...: poll CMD every 0.1 s until it succeeds; 1 when the deadline (whole seconds) passes.
wait_until() {
    local limit=$1 t
    shift
    t=${EPOCHREALTIME/./}
    local deadline=$((${t:0:-3} + limit * 1000))
    while true; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        t=${EPOCHREALTIME/./}
        ((${t:0:-3} < deadline)) || return 1
        sleep 0.1
    done
}

tail_logs() {
    local f
    for f in "$LOG"/*.log; do
        [[ -f $f ]] || continue
        printf '\n===== tail -n 25 %s =====\n' "$f" >&2
        tail -n 25 "$f" >&2
    done
}

die() {
    log "ERROR: $*"
    tail_logs
    exit 1
}
