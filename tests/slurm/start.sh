#!/usr/bin/env bash
# shellcheck disable=SC2034  # (the @VAR@ values are read indirectly by render)
# Start a real single-host Slurm (munged, MariaDB + slurmdbd, slurmctld, one slurmd per emulated node) on loopback.
#
# Idempotent: daemons already running from this state dir are kept (found by the PID files this script made), missing
# ones are started; if the generated config changed (other env), the cluster is stopped and started again.
# Needs root (installs Debian packages when missing, runs the daemons as root). No systemd needed.
#
# Env:
#   MBRIDGE_SLURM_STATE     state dir: configs, logs, pid files, database, spool  [/tmp/cloudai-mbridge-slurm]
#   MBRIDGE_SLURM_NODES     emulated nodes node1..nodeN, one slurmd each          [2]
#   MBRIDGE_SLURM_CPUS      CPUs each node claims (may exceed the real cores)     [max(nproc, ceil(4/N))]
#   MBRIDGE_SLURM_GPUS      emulated GPUs (gres gpu, files linked to /dev/null)   [0]
#   MBRIDGE_SLURM_TIMEOUT   seconds to wait for each daemon / for the nodes       [60]
#   MBRIDGE_SLURM_LINK_ETC  1: link /etc/slurm/slurm.conf to this cluster's config, so no SLURM_CONF is needed  [1]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

T0=$(now)
NNODES=${MBRIDGE_SLURM_NODES:-2}
GPUS=${MBRIDGE_SLURM_GPUS:-0}
TIMEOUT=${MBRIDGE_SLURM_TIMEOUT:-60}
LINK_ETC=${MBRIDGE_SLURM_LINK_ETC:-1}
NCPU=$(nproc)
CPUS_DEFAULT=$(((4 + NNODES - 1) / NNODES))
((CPUS_DEFAULT > NCPU)) || CPUS_DEFAULT=$NCPU
CPUS=${MBRIDGE_SLURM_CPUS:-$CPUS_DEFAULT}
HOST=$(hostname -s)

for v in NNODES GPUS TIMEOUT CPUS; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { log "ERROR: $v must be a whole number, got '${!v}'"; exit 2; }
done
((NNODES >= 1 && NNODES <= 64)) || { log "ERROR: MBRIDGE_SLURM_NODES must be 1..64"; exit 2; }
((CPUS >= 1)) || { log "ERROR: MBRIDGE_SLURM_CPUS must be >= 1"; exit 2; }
[[ $(id -u) == 0 ]] || { log "ERROR: run as root (installs packages, runs the Slurm daemons as root)"; exit 2; }

# ---------------------------------------------------------------------------------------------------------- packages
PKGS=(slurm-wlm slurmdbd munge mariadb-server libpmix-dev)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]} (Debian packages)"
    t=$(now)
    # Debian's mpi_pmix.so dlopens the unversioned libpmix.so, which only libpmix-dev ships.
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
    log "packages installed in $(since "$t") s"
fi

# ------------------------------------------------------------------------------------------------------------ config
mkdir -p "$STATE"/{etc,run,log,ctld,lib,dev,mysql} "$RUN" "$LOG"
chmod 700 "$STATE/etc" "$STATE/lib"
for ((i = 1; i <= NNODES; i++)); do mkdir -p "$STATE/spool/node$i" "$STATE/tmp/node$i"; done

[[ -s $STATE/etc/munge.key ]] || {
    dd if=/dev/urandom of="$STATE/etc/munge.key" bs=1024 count=1 status=none
    chmod 600 "$STATE/etc/munge.key"
}
[[ -s $STATE/etc/db.pass ]] || {
    (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$STATE/etc/db.pass")
}
DB_PASS=$(<"$STATE/etc/db.pass")

if ((GPUS > 0)); then
    for ((g = 0; g < GPUS; g++)); do ln -sfn /dev/null "$STATE/dev/gpu$g"; done
    GRES_TYPES="GresTypes=gpu"
    NODE_GRES="Gres=gpu:$GPUS"
    GRES_LINES="NodeName=node[1-$NNODES] Name=gpu File=$STATE/dev/gpu[0-$((GPUS - 1))]"
else
    GRES_TYPES="# no emulated GPUs (MBRIDGE_SLURM_GPUS=0): no GresTypes, so CloudAI adds no --gpus-per-node"
    NODE_GRES=""
    GRES_LINES="# no GPUs"
fi

# render TEMPLATE OUT: replace @VAR@ by the value of shell variable VAR.
render() {
    local text var val
    text=$(<"$1")
    for var in STATE HOST NNODES CPUS CTLD_PORT DBD_PORT DB_PORT DB_PASS SLURMD_PORT_FIRST SLURMD_PORT_LAST \
        GRES_TYPES NODE_GRES GRES_LINES; do
        val=${!var}
        text=${text//@${var}@/$val}
    done
    [[ $text != *@[A-Z_]*@* ]] || { log "ERROR: unreplaced @VAR@ in $1"; exit 1; }
    printf '%s\n' "$text" >"$2"
}
SLURMD_PORT_LAST=$((SLURMD_PORT_FIRST + NNODES - 1))
(
    umask 077
    render "$HERE/slurm.conf.in" "$STATE/etc/slurm.conf.new"
    render "$HERE/slurmdbd.conf.in" "$STATE/etc/slurmdbd.conf.new"
    render "$HERE/gres.conf.in" "$STATE/etc/gres.conf.new"
)

any_alive() {
    local f
    for f in "$RUN"/*.pid; do
        [[ -e $f ]] || continue
        local c
        c=$(basename "$f" .pid)
        c=${c%%-node*}
        [[ $c == mariadb ]] && c=mariadbd
        alive "$f" "$c" && return 0
    done
    return 1
}
changed=0
for f in slurm.conf slurmdbd.conf gres.conf; do
    cmp -s "$STATE/etc/$f.new" "$STATE/etc/$f" || changed=1
done
if ((changed)) && any_alive; then
    log "config changed: stopping the running cluster first"
    "$HERE/stop.sh"
fi
for f in slurm.conf slurmdbd.conf gres.conf; do mv -f "$STATE/etc/$f.new" "$STATE/etc/$f"; done
chmod 644 "$STATE/etc/slurm.conf" "$STATE/etc/gres.conf"
chmod 600 "$STATE/etc/slurmdbd.conf" # slurmdbd refuses a config others can read
chmod 755 "$STATE/etc"

# port_free PORT: nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# started NAME PIDFILE COMM: wait for the PID file of a daemon just launched and for that PID to be alive.
started() {
    wait_until "$TIMEOUT" alive "$2" "$3" || die "$1 did not start (no live PID in $2)"
}

# ready NAME PIDFILE COMM CMD...: wait until CMD succeeds; fail at once if the daemon exits meanwhile.
ready() {
    local name=$1 pidfile=$2 comm=$3
    shift 3
    _ready_or_dead() { "$@" >/dev/null 2>&1 && return 0; alive "$pidfile" "$comm" || return 0; return 1; }
    wait_until "$TIMEOUT" _ready_or_dead "$@" || die "$name does not answer within ${TIMEOUT}s"
    alive "$pidfile" "$comm" || die "$name exited"
    "$@" >/dev/null 2>&1 || die "$name does not answer"
}

# ------------------------------------------------------------------------------------------------------------ munged
MUNGE_SOCK="$RUN/munge.socket"
munge_ok() { munge -n -S "$MUNGE_SOCK" | unmunge -S "$MUNGE_SOCK"; }
if ! alive "$RUN/munged.pid" munged; then
    log "starting munged"
    rm -f "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
    munged --force --socket="$MUNGE_SOCK" --key-file="$STATE/etc/munge.key" --pid-file="$RUN/munged.pid" \
        --log-file="$LOG/munged.log" --seed-file="$STATE/lib/munged.seed" </dev/null >>"$LOG/munged.out" 2>&1 ||
        die "munged failed to start"
    started munged "$RUN/munged.pid" munged
fi
ready munged "$RUN/munged.pid" munged munge_ok

# ----------------------------------------------------------------------------------------------------------- MariaDB
DB_SOCK="$RUN/mysqld.sock"
DATADIR="$STATE/mysql/data"
if [[ ! -d $DATADIR/mysql ]]; then
    log "initialising MariaDB in $DATADIR"
    mkdir -p "$DATADIR" "$STATE/mysql/tmp"
    mariadb-install-db --no-defaults --user=root --datadir="$DATADIR" --auth-root-authentication-method=socket \
        --skip-test-db >"$LOG/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (see $LOG/mariadb-install.log)"
fi
if ! alive "$RUN/mariadb.pid" mariadbd; then
    port_free "$DB_PORT" || die "port $DB_PORT is taken by another process (not this state dir's MariaDB)"
    log "starting MariaDB on 127.0.0.1:$DB_PORT"
    rm -f "$DB_SOCK"
    # mariadbd does not daemonize: detach it (own session, no inherited stdio) and let it write its PID file.
    setsid mariadbd --no-defaults --user=root --datadir="$DATADIR" --tmpdir="$STATE/mysql/tmp" --socket="$DB_SOCK" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$RUN/mariadb.pid" \
        --log-error="$LOG/mariadb.log" --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 \
        </dev/null >>"$LOG/mariadb.out" 2>&1 &
    started MariaDB "$RUN/mariadb.pid" mariadbd
fi
ready MariaDB "$RUN/mariadb.pid" mariadbd mariadb-admin --no-defaults --socket="$DB_SOCK" -uroot ping
# CREATE OR REPLACE: IF NOT EXISTS would keep an older password.
mariadb --no-defaults --socket="$DB_SOCK" -uroot -e "
    CREATE OR REPLACE USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
    CREATE OR REPLACE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "could not create the MariaDB user for slurmdbd"

# ---------------------------------------------------------------------------------------------------------- slurmdbd
# slurmctld dies on a fresh start ("no TRES") unless slurmdbd answers first.
if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
    port_free "$DBD_PORT" || die "port $DBD_PORT is taken by another process (not this state dir's slurmdbd)"
    log "starting slurmdbd on 127.0.0.1:$DBD_PORT"
    slurmdbd </dev/null >>"$LOG/slurmdbd.out" 2>&1 || die "slurmdbd failed to start"
    started slurmdbd "$RUN/slurmdbd.pid" slurmdbd
fi
ready slurmdbd "$RUN/slurmdbd.pid" slurmdbd port_open "$DBD_PORT"

# --------------------------------------------------------------------------------------------------------- slurmctld
ctld_up() { scontrol ping | grep UP >/dev/null; }
if ! alive "$RUN/slurmctld.pid" slurmctld; then
    port_free "$CTLD_PORT" || die "port $CTLD_PORT is taken by another process (not this state dir's slurmctld)"
    log "starting slurmctld on 127.0.0.1:$CTLD_PORT"
    slurmctld -f "$CONF" </dev/null >>"$LOG/slurmctld.out" 2>&1 || die "slurmctld failed to start"
    started slurmctld "$RUN/slurmctld.pid" slurmctld
fi
ready slurmctld "$RUN/slurmctld.pid" slurmctld ctld_up

# ------------------------------------------------------------------------------------------------------------ slurmd
for ((i = 1; i <= NNODES; i++)); do
    node=node$i
    pidf="$RUN/slurmd-$node.pid"
    alive "$pidf" slurmd && continue
    port=$((SLURMD_PORT_FIRST + i - 1))
    port_free "$port" || die "port $port is taken by another process (not $node's slurmd)"
    log "starting slurmd $node on 127.0.0.1:$port"
    slurmd -f "$CONF" -N "$node" </dev/null >>"$LOG/slurmd-$node.out" 2>&1 || die "slurmd -N $node failed to start"
done
for ((i = 1; i <= NNODES; i++)); do started "slurmd $i" "$RUN/slurmd-node$i.pid" slurmd; done

# ------------------------------------------------------------------------------------------------------------- ready
# all_idle: every node of partition local is idle (mixed/allocated also count as up: jobs may be running on a re-run).
all_idle() {
    local out
    out=$(sinfo -h -N -p local -o '%N %t') || return 1
    [[ $(wc -l <<<"$out") -eq $NNODES ]] || return 1
    ! grep -qvE ' (idle|mix|alloc|comp)$' <<<"$out"
}
# sacct answers without error (it lags a moment after slurmctld registers with slurmdbd).
sacct_ok() {
    local err
    err=$(sacct -n -X -o JobID 2>&1 >/dev/null) && [[ -z $err ]]
}
wait_until "$TIMEOUT" all_idle || {
    sinfo -N -l >&2 || true
    die "nodes did not all become idle within ${TIMEOUT}s"
}
wait_until "$TIMEOUT" sacct_ok || die "sacct does not answer within ${TIMEOUT}s: $(sacct -n -X 2>&1 | tail -n 3)"

# ---------------------------------------------------------------------------------------------------- /etc/slurm link
ETC_CONF=/etc/slurm/slurm.conf
etc_note=""
if [[ $LINK_ETC == 1 ]]; then
    if [[ -L $ETC_CONF || ! -e $ETC_CONF ]]; then
        target=$(readlink "$ETC_CONF" 2>/dev/null || true)
        if [[ -z $target || $target == "$CONF" || $target == */etc/slurm.conf ]]; then
            mkdir -p /etc/slurm
            ln -sfn "$CONF" "$ETC_CONF"
            etc_note="$ETC_CONF -> $CONF, so Slurm commands find this cluster without SLURM_CONF"
        fi
    fi
    [[ -n $etc_note ]] || etc_note="$ETC_CONF is someone else's file: left alone, export SLURM_CONF as below"
fi

log "cluster up in $(since "$T0") s: $NNODES node(s) x $CPUS CPU(s)$( ((GPUS)) && echo " x $GPUS GPU(s)"), partition local"
[[ -z $etc_note ]] || log "$etc_note"
sinfo -N -o '%N %P %t %c %G' >&2
# The one line a shell needs (stdout, so `eval "$(tests/slurm/start.sh)"` works):
echo "export SLURM_CONF=$CONF"
