#!/usr/bin/env bash
# The first hour in one command: set up .venv (created once, reused after) and run the CPU refit quick start on the
# local Slurm, then name the report files. Run it again at any time: what is installed is kept, a new run is made.
#
#   scripts/quickstart.sh               set up, start the local Slurm (root on Debian), run, list the reports
#   scripts/quickstart.sh --dry-run     set up, then dry-run + preflight only (no Slurm needed)
#   scripts/quickstart.sh --setup-only  set up only (what .ci/run does before the tests)
#
# Steps: .venv with $PYTHON (>= 3.10) -> torch (CPU build, pinned) -> CloudAI (the commit in
# cloudai_mbridge/_cloudai.py, from its repository; or the cloudai-*.whl in $CLOUDAI_WHEEL_DIR) -> this package
# (editable, test + payload extras) -> tests/slurm/start.sh -> cloudai-mbridge run of
# conf/test_scenario/refit_cpu_smoke.toml on conf/system/local_slurm.toml into results/. Without root, apt-get, or a
# Slurm that starts, it says why and does a dry-run and a preflight of the same scenario instead.
#
# Env: PYTHON            interpreter for .venv                                  [python3]
#      CLOUDAI_WHEEL_DIR folder with a cloudai-*.whl, where GitHub cannot be reached
#      TORCH_INDEX_URL   where the CPU torch comes from; empty: pip's own configuration
#                        [https://download.pytorch.org/whl/cpu]
# Bash because it must work before any Python environment exists; in scripts/ so the checkout's root stays the
# package's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TORCH_VERSION=2.13.0
SYSTEM=conf/system/local_slurm.toml
SCENARIO=conf/test_scenario/refit_cpu_smoke.toml
OUT=results
PY=${PYTHON:-python3}
VPY=.venv/bin/python

say() { printf '[quickstart %4ss] %s\n' "$SECONDS" "$*"; }
die() {
    printf 'quickstart: ERROR: %s\n' "$*" >&2
    exit 1
}

mode=run
case ${1:-} in
"") ;;
--dry-run) mode=dry-run ;;
--setup-only) mode=setup ;;
*) die "unknown argument '$1'. Fix: no argument, --dry-run or --setup-only" ;;
esac

# ------------------------------------------------------------------------------------------------------------ .venv
command -v "$PY" >/dev/null || die "no '$PY' on PATH. Fix: install Python >= 3.10 or set PYTHON=/path/to/python3"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "$PY is Python $("$PY" -c 'import platform; print(platform.python_version())'), older than 3.10. Fix: PYTHON=python3.11 $0"
if [[ -x $VPY ]] && ! "$VPY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    say ".venv is broken or too old: creating it again"
    rm -rf .venv
fi
if [[ ! -x $VPY ]]; then
    say "creating .venv with $PY (Python $("$PY" -c 'import platform; print(platform.python_version())'))"
    if ! "$PY" -m venv .venv >/dev/null 2>&1; then
        rm -rf .venv
        pkg="python$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            say "installing $pkg (Debian package; $PY has no venv module without it)"
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
            "$PY" -m venv .venv || { rm -rf .venv; die "$PY -m venv failed even with $pkg"; }
        else
            die "$PY -m venv failed (on Debian the module is the package $pkg). Fix: sudo apt-get install $pkg"
        fi
    fi
else
    say "reusing .venv ($("$VPY" -c 'import platform; print("Python", platform.python_version())'))"
fi

# ------------------------------------------------------------------------------------------------------------ torch
if "$VPY" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    say "torch $TORCH_VERSION already installed"
else
    index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
    from=(--index-url "$index")
    if [[ -z $index ]]; then
        from=()
        index="pip's own configuration"
    elif ! "$VPY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$index" \
        >/dev/null 2>&1; then
        say "$index cannot be reached: torch from pip's own configuration instead (TORCH_INDEX_URL chooses)"
        from=()
        index="pip's own configuration"
    fi
    say "installing torch==$TORCH_VERSION, CPU build, from $index (a minute or two)"
    "$VPY" -m pip install -q "${from[@]}" "torch==$TORCH_VERSION"
fi

# ---------------------------------------------------------------------------------------------------------- CloudAI
commit=$(sed -n 's/^TESTED_COMMIT = "\([0-9a-f]*\)"$/\1/p' cloudai_mbridge/_cloudai.py)
[[ ${#commit} == 40 ]] || die "no TESTED_COMMIT in cloudai_mbridge/_cloudai.py"
# What CloudAI in .venv came from: "git <commit>" or "file <path>" (pip's direct_url.json), else "none".
installed=$("$VPY" - <<'EOF'
import json
from importlib import metadata
from urllib.parse import unquote, urlparse
try:
    d = json.loads(metadata.distribution("cloudai").read_text("direct_url.json") or "{}")
except metadata.PackageNotFoundError:
    d = None
if d is None:
    print("none")
elif "vcs_info" in d:
    print("git", d["vcs_info"].get("commit_id"))
else:
    print("file", unquote(urlparse(d.get("url", "")).path))
EOF
)
if [[ -n ${CLOUDAI_WHEEL_DIR:-} ]]; then
    wheel=""
    for w in "$CLOUDAI_WHEEL_DIR"/cloudai-*.whl; do
        if [[ -f $w ]]; then wheel=$w; fi
    done
    [[ -n $wheel ]] || die "no cloudai-*.whl in CLOUDAI_WHEEL_DIR=$CLOUDAI_WHEEL_DIR. Fix: point it at the folder of the wheel, or unset it to install from GitHub"
    wheel=$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")
    if [[ $installed == "file $wheel" ]]; then
        say "CloudAI from $wheel already installed"
    else
        say "installing CloudAI from $wheel (CLOUDAI_WHEEL_DIR)"
        "$VPY" -m pip install -q --force-reinstall --no-deps "$wheel"
        "$VPY" -m pip install -q "$wheel"
    fi
else
    if [[ $installed == "git $commit" ]]; then
        say "CloudAI at commit $commit already installed"
    else
        command -v git >/dev/null || die "pip needs git to install CloudAI from its repository. Fix: apt-get install git, or set CLOUDAI_WHEEL_DIR"
        say "installing CloudAI at commit $commit from https://github.com/NVIDIA/cloudai (not on PyPI)"
        "$VPY" -m pip install -q "cloudai @ git+https://github.com/NVIDIA/cloudai.git@$commit" ||
            die "CloudAI could not be installed from GitHub (pip's messages above). Fix: where GitHub cannot be reached, set CLOUDAI_WHEEL_DIR to a folder holding its wheel"
    fi
fi

# ----------------------------------------------------------------------------------------------------- this package
stamp=.venv/.cloudai-mbridge-installed
want="$(cat pyproject.toml setup.py | sha256sum | cut -c1-16) $PWD"
if [[ $(cat "$stamp" 2>/dev/null) == "$want" ]] && "$VPY" -c 'import cloudai_mbridge' 2>/dev/null; then
    say "cloudai-mbridge already installed (editable)"
else
    say "installing cloudai-mbridge (editable) with the test and payload extras (megatron-core, pytest, ruff, ...)"
    "$VPY" -m pip install -q -e ".[test,payload]"
    printf '%s\n' "$want" >"$stamp"
fi
version=$("$VPY" -m cloudai_mbridge --version) || die "cloudai-mbridge does not start in .venv (its messages above)"
say "$version"
if [[ $mode == setup ]]; then
    say "set up; tests: .venv/bin/python -m pytest"
    exit 0
fi

# ------------------------------------------------------------------------------------------------------------ Slurm
if [[ $mode == run ]]; then
    why=""
    if [[ $(id -u) != 0 ]]; then
        why="not root (tests/slurm/start.sh installs Debian packages and runs the Slurm daemons as root)"
    elif ! command -v slurmctld >/dev/null && ! command -v apt-get >/dev/null; then
        why="no Slurm and no apt-get to install it (tests/slurm/start.sh is for Debian)"
    else
        say "starting the local Slurm: tests/slurm/start.sh (Debian packages on first use, daemons on loopback)"
        if line=$(tests/slurm/start.sh); then
            export SLURM_CONF="${line#export SLURM_CONF=}"
        else
            why="tests/slurm/start.sh failed (its messages above)"
        fi
    fi
    if [[ -n $why ]]; then
        say "no local Slurm: $why. A dry-run and a preflight instead"
        mode=dry-run
    fi
fi

# -------------------------------------------------------------------------------------------------------- the run
mkdir -p "$OUT"
before=$(ls -d "$OUT"/refit_cpu_smoke_* 2>/dev/null || true)
say "cloudai-mbridge $mode --system-config $SYSTEM --test-scenario $SCENARIO --output-dir $OUT"
rc=0
"$VPY" -m cloudai_mbridge "$mode" --system-config "$SYSTEM" --test-scenario "$SCENARIO" --output-dir "$OUT" || rc=$?
root=""
for d in "$OUT"/refit_cpu_smoke_*; do
    if [[ -d $d ]] && ! grep -qxF "$d" <<<"$before"; then root=$d; fi
done
reports=()
if [[ $mode == dry-run ]]; then
    # its own folder, named by the scenario: the README's preflight of another scenario writes results/preflight/
    PREFLIGHT_OUT="$OUT/preflight_$(basename "$SCENARIO" .toml)"
    say "cloudai-mbridge preflight (every point: rules, memory, GPU-hours) into $PREFLIGHT_OUT"
    "$VPY" -m cloudai_mbridge preflight --system-config "$SYSTEM" --test-scenario "$SCENARIO" \
        --output-dir "$PREFLIGHT_OUT" >/dev/null || rc=$?
    reports+=("$PREFLIGHT_OUT/preflight.csv" "$PREFLIGHT_OUT/preflight.html")
fi
if [[ -n $root ]]; then
    for f in "$root"/*; do
        if [[ -f $f ]]; then reports+=("$f"); fi
    done
fi
if ((rc)); then
    say "cloudai-mbridge $mode exited $rc (its messages above)"
fi
if [[ $mode == run ]]; then
    say "done. Results: ${root:-none}. Reports:"
else
    say "done (dry-run: nothing ran). Jobs written under: ${root:-none}. Reports:"
fi
for f in "${reports[@]}"; do printf '  %s\n' "$f"; done
((${#reports[@]})) || printf '  none\n'
say "tests: .venv/bin/python -m pytest"
if [[ -n ${SLURM_CONF:-} && $mode == run ]]; then say "the local Slurm keeps running; tests/slurm/stop.sh stops it"; fi
exit "$rc"
