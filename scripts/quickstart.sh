#!/usr/bin/env bash
# The first hour in one command: set up .venv (created once, reused after) and run the CPU refit quick start on the
# local Slurm, then name the report files. Run it again at any time: what is installed is kept, a new run is made.
#
#   scripts/quickstart.sh               set up, start the local Slurm (root on Debian), run, list the reports
#   scripts/quickstart.sh --dry-run     set up, then dry-run + preflight only (no Slurm needed)
#   scripts/quickstart.sh --setup-only  set up only (what .ci/run does before the tests)
#   scripts/quickstart.sh --list-reports FOLDER...  list the reports of a results folder as the end of a run does
#
# Steps: .venv with $PYTHON (>= 3.10) -> torch (CPU build, pinned) -> CloudAI (the one already in .venv, whatever its
# source; else the commit in cloudai_mbridge/_cloudai.py, from its repository, or the cloudai-*.whl in
# $CLOUDAI_WHEEL_DIR) -> this package (editable, test + payload extras) -> tests/slurm/start.sh -> cloudai-mbridge run
# of conf/test_scenario/refit_cpu_smoke.toml on conf/system/local_slurm.toml into results/. Without root, apt-get, or
# a Slurm that starts, it says why and does a dry-run and a preflight of the same scenario instead. It ends with the
# list of reports: the page to open first at the top, CloudAI's own pages last and labelled as CloudAI's.
#
# Env: PYTHON            interpreter for .venv                                  [python3]
#      CLOUDAI_WHEEL_DIR folder with a cloudai-*.whl, where GitHub cannot be reached (used only where .venv has
#                        no CloudAI, or one too old)
#      TORCH_INDEX_URL   where the CPU torch comes from; empty: pip's own configuration
#                        [https://download.pytorch.org/whl/cpu]
# Bash because it must work before any Python environment exists; in scripts/ so the checkout's root stays the
# package's.
set -euo pipefail

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

# The report files at the top of the folders given, the page to open first at the top (marked): our first HTML page
# (cloudai-mbridge's reports are mbridge_*, cloudai_mbridge/reports/; the preflight's are preflight.csv and .html),
# then our other files, then the pages CloudAI writes itself (its status table <scenario>.html, its DSE summary
# <scenario>-dse-report.html, a tarball of a failed run), labelled as CloudAI's. Folders' own order, then by name.
list_reports() {
    local dir f first="" ours=() cloudai=()
    for dir in "$@"; do
        for f in "$dir"/*; do
            [[ -f $f ]] || continue
            case ${f##*/} in
            mbridge_* | preflight.csv | preflight.html)
                if [[ -z $first && $f == *.html ]]; then first=$f; else ours+=("$f"); fi
                ;;
            *) cloudai+=("$f") ;;
            esac
        done
    done
    if [[ -n $first ]]; then printf '  %s   (open this first)\n' "$first"; fi
    for f in "${ours[@]}"; do printf '  %s\n' "$f"; done
    for f in "${cloudai[@]}"; do printf '  %s   (written by CloudAI)\n' "$f"; done
    if [[ -z $first ]] && ((${#ours[@]} + ${#cloudai[@]} == 0)); then printf '  none\n'; fi
}

mode=run
case ${1:-} in
"") ;;
--dry-run) mode=dry-run ;;
--setup-only) mode=setup ;;
--list-reports)
    shift
    list_reports "$@"
    exit 0
    ;;
*) die "unknown argument '$1'. Fix: no argument, --dry-run, --setup-only or --list-reports FOLDER..." ;;
esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."

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
# A CloudAI already in .venv, from any source (GitHub, a wheel, a folder, an editable checkout, an index), is used as
# it is and said so in one line; another commit than the tested one, or another wheel than CLOUDAI_WHEEL_DIR's, is
# reported, never installed over. CloudAI is installed (from CLOUDAI_WHEEL_DIR, else GitHub) only where there is none,
# or where it is older than cloudai-mbridge can use (MIN_CLOUDAI; an editable checkout is then left to its owner).
commit=$(sed -n 's/^TESTED_COMMIT = "\([0-9a-f]*\)"$/\1/p' cloudai_mbridge/_cloudai.py)
[[ ${#commit} == 40 ]] || die "no TESTED_COMMIT in cloudai_mbridge/_cloudai.py"
# One field a line: state (none, ok, too-old), version, where it came from (words), its commit where known, the
# sha256 of the wheel pip installed it from where it recorded one, "editable" or "", the oldest version
# cloudai-mbridge uses. The source is pip's direct_url.json in the dist-info; the version check is
# cloudai_mbridge/_cloudai.py's own (require_cloudai).
probe=$("$VPY" - <<'EOF'
import importlib.util
import json
import subprocess
from importlib import metadata
from urllib.parse import unquote, urlparse, urlunparse

spec = importlib.util.spec_from_file_location("_cloudai_check", "cloudai_mbridge/_cloudai.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
need = ".".join(map(str, check.MIN_CLOUDAI))


def bare(url):
    """The URL without a user or a token in it: it is printed."""
    u = urlparse(url)
    return urlunparse(u._replace(netloc=u.hostname + (f":{u.port}" if u.port else ""))) if u.hostname else url


def head(folder):
    try:
        out = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


try:
    dist = metadata.distribution("cloudai")
except metadata.PackageNotFoundError:
    print("none", "", "", "", "", "", need, sep="\n")
    raise SystemExit(0) from None
try:
    d = json.loads(dist.read_text("direct_url.json") or "{}")
except ValueError:
    d = {}
url = d.get("url", "")
path = unquote(urlparse(url).path) if url.startswith("file:") else bare(url)
commit = sha = editable = ""
if "vcs_info" in d:
    commit = d["vcs_info"].get("commit_id") or ""
    where = f"from {d['vcs_info'].get('vcs', 'git')} {path}" + (f" at commit {commit}" if commit else "")
elif "dir_info" in d:
    editable = "editable" if d["dir_info"].get("editable") else ""
    commit = head(path)
    where = f"from the {'editable checkout' if editable else 'folder'} {path}"
    where += f" at commit {commit}" if commit else ""
elif url:
    info = d.get("archive_info", {})
    sha = info.get("hashes", {}).get("sha256") or info.get("hash", "").partition("sha256=")[2]
    where = f"from the {'wheel' if url.endswith('.whl') else 'archive'} {path}"
else:
    where = "from a package index or --find-links (pip recorded no direct_url.json)"
try:
    check.require_cloudai()
    state = "ok"
except check.CloudAIMissingError:
    state = "too-old"
print(state, dist.version, where, commit, sha, editable, need, sep="\n")
EOF
) || die "cannot tell which CloudAI .venv holds (the messages above)"
mapfile -t found <<<"$probe"
((${#found[@]} == 7)) || die "cannot tell which CloudAI .venv holds: '$probe'"
wheel=""
if [[ -n ${CLOUDAI_WHEEL_DIR:-} ]]; then
    for w in "$CLOUDAI_WHEEL_DIR"/cloudai-*.whl; do
        if [[ -f $w ]]; then wheel=$(cd "$(dirname "$w")" && pwd)/$(basename "$w"); fi
    done
fi
replace="to replace it: .venv/bin/python -m pip uninstall -y cloudai, then run this again"
install_cloudai() {
    if [[ -n ${CLOUDAI_WHEEL_DIR:-} ]]; then
        [[ -n $wheel ]] || die "no cloudai-*.whl in CLOUDAI_WHEEL_DIR=$CLOUDAI_WHEEL_DIR. Fix: point it at the folder of the wheel, or unset it to install from GitHub"
        say "installing CloudAI from $wheel (CLOUDAI_WHEEL_DIR)"
        "$VPY" -m pip install -q --force-reinstall --no-deps "$wheel"
        "$VPY" -m pip install -q "$wheel"
    else
        command -v git >/dev/null || die "pip needs git to install CloudAI from its repository. Fix: apt-get install git, or set CLOUDAI_WHEEL_DIR"
        say "installing CloudAI at commit $commit from https://github.com/NVIDIA/cloudai (not on PyPI)"
        "$VPY" -m pip install -q "cloudai @ git+https://github.com/NVIDIA/cloudai.git@$commit" ||
            die "CloudAI could not be installed from GitHub (pip's messages above). Fix: where GitHub cannot be reached, set CLOUDAI_WHEEL_DIR to a folder holding its wheel"
    fi
}
case ${found[0]} in
none)
    install_cloudai
    ;;
too-old)
    if [[ ${found[5]} == editable ]]; then
        die "CloudAI ${found[1]} in .venv (${found[2]}) is older than ${found[6]}, the oldest cloudai-mbridge uses; an editable checkout is not installed over. Fix: update that checkout, or $replace"
    fi
    say "CloudAI ${found[1]} in .venv (${found[2]}) is older than ${found[6]}, the oldest cloudai-mbridge uses: replacing it"
    "$VPY" -m pip uninstall -q -y cloudai
    install_cloudai
    ;;
*)
    say "CloudAI ${found[1]} already in .venv, ${found[2]}: using it"
    if [[ -n ${found[3]} && ${found[3]} != "$commit" ]]; then
        say "  note: that CloudAI is not at commit $commit, the one cloudai-mbridge is tested with; kept as it is ($replace)"
    fi
    if [[ -n ${CLOUDAI_WHEEL_DIR:-} && -z $wheel ]]; then
        say "  note: CLOUDAI_WHEEL_DIR=$CLOUDAI_WHEEL_DIR holds no cloudai-*.whl; not needed, CloudAI is installed"
    elif [[ -n $wheel && ${found[2]} != "from the wheel $wheel" && ${found[4]} != "$(sha256sum "$wheel" | cut -d' ' -f1)" ]]; then
        say "  note: that CloudAI is not CLOUDAI_WHEEL_DIR's $wheel; kept as it is ($replace)"
    fi
    ;;
esac

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
folders=()
if [[ -n $root ]]; then folders+=("$root"); fi
if [[ $mode == dry-run ]]; then
    # its own folder, named by the scenario: the README's preflight of another scenario writes results/preflight/
    PREFLIGHT_OUT="$OUT/preflight_$(basename "$SCENARIO" .toml)"
    say "cloudai-mbridge preflight (every point: rules, memory, GPU-hours) into $PREFLIGHT_OUT"
    "$VPY" -m cloudai_mbridge preflight --system-config "$SYSTEM" --test-scenario "$SCENARIO" \
        --output-dir "$PREFLIGHT_OUT" >/dev/null || rc=$?
    folders+=("$PREFLIGHT_OUT")
fi
if ((rc)); then
    say "cloudai-mbridge $mode exited $rc (its messages above)"
fi
say "tests: .venv/bin/python -m pytest"
if [[ -n ${SLURM_CONF:-} && $mode == run ]]; then say "the local Slurm keeps running; tests/slurm/stop.sh stops it"; fi
if [[ $mode == run ]]; then
    say "done. Results: ${root:-none}. Reports, the page to open first at the top:"
else
    say "done (dry-run: nothing ran). Jobs written under: ${root:-none}. Reports, the page to open first at the top:"
fi
list_reports "${folders[@]}"
exit "$rc"
