"""Issue 44, items 1 and 5: scripts/quickstart.sh uses the CloudAI already in .venv, whatever its source, and says so
in one line (it asked GitHub again, exit 1, after a first run from CLOUDAI_WHEEL_DIR); its list of reports starts
with the page to open first and labels CloudAI's own pages as CloudAI's.

The set-up runs on a copy of the script in a folder built here: a .venv without pip (nothing can be installed, so any
attempt to reach GitHub or an index fails as it does offline) holding a stand-in torch, CloudAI's dist-info with
the direct_url.json that pip writes for each source, and a stand-in cloudai_mbridge; the real _cloudai.py decides
what is too old. Seconds, no network, no Slurm."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

SCRIPT = ROOT / "scripts" / "quickstart.sh"
TESTED_COMMIT = re.search(r'^TESTED_COMMIT = "([0-9a-f]{40})"$', (ROOT / "cloudai_mbridge" / "_cloudai.py").read_text(),
                          re.MULTILINE)[1]
OTHER_COMMIT = "0123456789abcdef0123456789abcdef01234567"

# What `python -m cloudai_mbridge` does in the copy: its version, and the dry-run and preflight's folders.
FAKE_MAIN = """
import sys
from pathlib import Path

args = sys.argv[1:]
if args == ["--version"]:
    print("cloudai-mbridge 0.0.0 (stand-in)")
    raise SystemExit(0)
out = Path(args[args.index("--output-dir") + 1])
if args[0] == "dry-run":
    (out / "refit_cpu_smoke_2026-01-01_00-00-00" / "refit_cpu_smoke" / "0" / "1").mkdir(parents=True)
elif args[0] == "preflight":
    out.mkdir(parents=True, exist_ok=True)
    for name in ("preflight.csv", "preflight.html"):
        (out / name).write_text(name)
"""


def sh(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .venv without pip, with torch at the script's pinned version (a stand-in), made once: tests copy it."""
    folder = tmp_path_factory.mktemp("venv") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    torch_version = re.search(r"^TORCH_VERSION=(\S+)$", SCRIPT.read_text(), re.MULTILINE)[1]
    (site_packages(folder) / "torch").mkdir()
    (site_packages(folder) / "torch" / "__init__.py").write_text(f'__version__ = "{torch_version}+cpu"\n')
    return folder


def site_packages(venv: Path) -> Path:
    (found,) = (venv / "lib").glob("python3*/site-packages")
    return found


def checkout(tmp_path: Path, venv: Path, direct_url: dict | str | None = "none", version: str = "1.6.0") -> Path:
    """A copy of the checkout's parts the script reads, with .venv; CloudAI in it as pip would leave it installed
    from a source whose direct_url.json is ``direct_url`` (None: none written, as from an index; "none": no
    CloudAI)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(SCRIPT, repo / "scripts" / "quickstart.sh")
    (repo / "cloudai_mbridge").mkdir()
    shutil.copy2(ROOT / "cloudai_mbridge" / "_cloudai.py", repo / "cloudai_mbridge" / "_cloudai.py")
    (repo / "cloudai_mbridge" / "__init__.py").write_text("")
    (repo / "cloudai_mbridge" / "__main__.py").write_text(FAKE_MAIN)
    (repo / "pyproject.toml").write_text("[project]\nname = 'stand-in'\n")
    (repo / "setup.py").write_text("")
    shutil.copytree(venv, repo / ".venv", symlinks=True)
    # this package counts as installed (the script's stamp: pyproject.toml + setup.py, and the folder)
    digest = hashlib.sha256((repo / "pyproject.toml").read_bytes() + (repo / "setup.py").read_bytes()).hexdigest()
    (repo / ".venv" / ".cloudai-mbridge-installed").write_text(f"{digest[:16]} {repo}\n")
    if direct_url != "none":
        sp = site_packages(repo / ".venv")
        (sp / "cloudai").mkdir()
        (sp / "cloudai" / "__init__.py").write_text("")
        info = sp / f"cloudai-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cloudai\nVersion: {version}\n")
        (info / "INSTALLER").write_text("pip\n")
        if direct_url is not None:
            (info / "direct_url.json").write_text(json.dumps(direct_url))
    return repo


def quickstart(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The script as the docs show it, with CLOUDAI_WHEEL_DIR unset unless given."""
    base = {k: v for k, v in os.environ.items() if k not in ("CLOUDAI_WHEEL_DIR", "TORCH_INDEX_URL", "VIRTUAL_ENV")}
    return sh(str(repo / "scripts" / "quickstart.sh"), *args, cwd=repo,
              env={**base, "PYTHON": sys.executable, **env})


def wheel_url(path: Path, sha: str = "ab" * 32) -> dict:
    return {"url": path.as_uri(), "archive_info": {"hash": f"sha256={sha}", "hashes": {"sha256": sha}}}


def cloudai_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if "CloudAI" in ln and "cloudai-mbridge 0.0.0" not in ln]


# ---------------------------------------------------------------------------------------------- item 1: set-up


@pytest.mark.parametrize("mode", ["--setup-only", "--dry-run"])
def test_cloudai_from_a_wheel_is_used_without_github_or_the_wheel_dir(tmp_path: Path, venv: Path, mode: str) -> None:
    """The issue's case: a first run installed CloudAI from CLOUDAI_WHEEL_DIR; the docs' commands without it, GitHub
    out of reach, exited 1 trying GitHub again."""
    wheel = tmp_path / "wheels" / "cloudai-1.6.0+unknown-py3-none-any.whl"
    repo = checkout(tmp_path, venv, wheel_url(wheel), version="1.6.0+unknown")
    proc = quickstart(repo, mode)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [ln.split("] ", 1)[1] for ln in cloudai_lines(proc.stdout)] == [
        f"CloudAI 1.6.0+unknown already in .venv, from the wheel {wheel}: using it"
    ], proc.stdout
    assert "installing CloudAI" not in proc.stdout and "GitHub" not in proc.stdout + proc.stderr


def the_cloudai_lines(repo: Path, **env: str) -> list[str]:
    proc = quickstart(repo, "--setup-only", **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installing CloudAI" not in proc.stdout
    return [ln.split("] ", 1)[1] for ln in cloudai_lines(proc.stdout)]


def test_cloudai_at_the_tested_commit_from_github_is_used_as_it_is(tmp_path: Path, venv: Path) -> None:
    url = {"url": "https://github.com/NVIDIA/cloudai.git", "vcs_info": {"vcs": "git", "commit_id": TESTED_COMMIT}}
    assert the_cloudai_lines(checkout(tmp_path, venv, url)) == [
        f"CloudAI 1.6.0 already in .venv, from git https://github.com/NVIDIA/cloudai.git at commit {TESTED_COMMIT}: "
        "using it"]


def test_cloudai_at_another_commit_is_reported_not_installed_over(tmp_path: Path, venv: Path) -> None:
    """The old script installed the tested commit over it (from GitHub, so offline it exited 1)."""
    url = {"url": "https://user:token@github.com/NVIDIA/cloudai.git",
           "vcs_info": {"vcs": "git", "commit_id": OTHER_COMMIT}}
    lines = the_cloudai_lines(checkout(tmp_path, venv, url))
    assert lines[0] == (f"CloudAI 1.6.0 already in .venv, from git https://github.com/NVIDIA/cloudai.git at commit "
                        f"{OTHER_COMMIT}: using it"), "the token in the URL is not printed"
    assert len(lines) == 2 and f"not at commit {TESTED_COMMIT}" in lines[1] and "kept as it is" in lines[1]
    assert "pip uninstall -y cloudai, then run this again" in lines[1]


def test_cloudai_from_an_editable_checkout_is_used_as_it_is(tmp_path: Path, venv: Path) -> None:
    src = tmp_path / "cloudai-src"
    src.mkdir()
    url = {"url": src.as_uri(), "dir_info": {"editable": True}}
    assert the_cloudai_lines(checkout(tmp_path, venv, url)) == [
        f"CloudAI 1.6.0 already in .venv, from the editable checkout {src}: using it"]


def test_cloudai_from_an_index_is_used_as_it_is(tmp_path: Path, venv: Path) -> None:
    (line,) = the_cloudai_lines(checkout(tmp_path, venv, None))
    assert line.startswith("CloudAI 1.6.0 already in .venv, from a package index") and line.endswith(": using it")


def test_a_wheel_dir_with_another_wheel_is_reported_not_installed_over(tmp_path: Path, venv: Path) -> None:
    installed = tmp_path / "old" / "cloudai-1.6.0-py3-none-any.whl"
    repo = checkout(tmp_path, venv, wheel_url(installed))
    other = tmp_path / "new"
    other.mkdir()
    (other / "cloudai-1.7.0-py3-none-any.whl").write_bytes(b"another build")
    lines = the_cloudai_lines(repo, CLOUDAI_WHEEL_DIR=str(other))
    assert lines[0] == f"CloudAI 1.6.0 already in .venv, from the wheel {installed}: using it"
    wheel = other / "cloudai-1.7.0-py3-none-any.whl"
    assert len(lines) == 2 and f"not CLOUDAI_WHEEL_DIR's {wheel}; kept as it is" in lines[1]


def test_the_wheel_dir_holding_the_installed_wheel_adds_nothing(tmp_path: Path, venv: Path) -> None:
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel = folder / "cloudai-1.6.0-py3-none-any.whl"
    wheel.write_bytes(b"the build")
    sha = hashlib.sha256(b"the build").hexdigest()
    repo = checkout(tmp_path, venv, wheel_url(tmp_path / "elsewhere" / wheel.name, sha))  # same bytes, moved
    assert len(the_cloudai_lines(repo, CLOUDAI_WHEEL_DIR=str(folder))) == 1
    repo2 = checkout(tmp_path / "b", venv, wheel_url(wheel))  # same path
    assert len(the_cloudai_lines(repo2, CLOUDAI_WHEEL_DIR=str(folder))) == 1


def test_without_cloudai_it_still_asks_github_and_names_the_wheel_dir(tmp_path: Path, venv: Path) -> None:
    """The fresh-clone path is unchanged: no CloudAI in .venv -> GitHub at the tested commit; offline (here: no pip
    in .venv) it fails saying CLOUDAI_WHEEL_DIR."""
    proc = quickstart(checkout(tmp_path, venv), "--setup-only")
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "already in .venv" not in out
    if shutil.which("git"):
        assert f"installing CloudAI at commit {TESTED_COMMIT} from https://github.com/NVIDIA/cloudai" in proc.stdout
    assert "CLOUDAI_WHEEL_DIR" in proc.stderr


def test_without_cloudai_the_wheel_dir_is_used(tmp_path: Path, venv: Path) -> None:
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "cloudai-1.6.0-py3-none-any.whl").write_bytes(b"the build")
    proc = quickstart(checkout(tmp_path, venv), "--setup-only", CLOUDAI_WHEEL_DIR=str(folder))
    assert proc.returncode == 1, "no pip in this .venv: the install itself fails"
    assert f"installing CloudAI from {folder / 'cloudai-1.6.0-py3-none-any.whl'} (CLOUDAI_WHEEL_DIR)" in proc.stdout


def test_a_cloudai_too_old_for_the_plugin_is_replaced_and_said_so(tmp_path: Path, venv: Path) -> None:
    wheel = tmp_path / "cloudai-1.0.0-py3-none-any.whl"
    proc = quickstart(checkout(tmp_path, venv, wheel_url(wheel), version="1.0.0"), "--setup-only")
    assert proc.returncode != 0, "no pip in this .venv: the replacement itself fails"
    assert f"CloudAI 1.0.0 in .venv (from the wheel {wheel}) is older than 1.6" in proc.stdout
    assert "replacing it" in proc.stdout


def test_an_editable_checkout_too_old_is_left_to_its_owner(tmp_path: Path, venv: Path) -> None:
    src = tmp_path / "cloudai-src"
    src.mkdir()
    url = {"url": src.as_uri(), "dir_info": {"editable": True}}
    proc = quickstart(checkout(tmp_path, venv, url, version="1.0.0"), "--setup-only")
    assert proc.returncode == 1
    assert "an editable checkout is not installed over" in proc.stderr and "replacing" not in proc.stdout


# ---------------------------------------------------------------------------------------------- item 5: listing

# The top of a real refit_cpu_smoke run's folder: our report (cloudai_mbridge/reports/refit_table.py), CloudAI's
# status table (StatusReporter: <scenario>.html) and DSE summary (DSEReporter: <scenario>-dse-report.html).
REFIT_RUN = ["mbridge_refit.csv", "mbridge_refit.html", "mbridge_refit.png", "refit_cpu_smoke-dse-report.html",
             "refit_cpu_smoke.html"]
AB_RUN = ["gpu_dispatcher_ab.html", "mbridge_ab.csv", "mbridge_ab.html", "mbridge_ab_change.png",
          "mbridge_ab_times.png", "mbridge_runs.csv"]


def results(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text(name)
    (folder / "mbridge_inputs").mkdir()  # folders are not reports
    (folder / "refit_cpu_smoke").mkdir()
    (folder / ".hidden").write_text("")
    return folder


def listing(*folders: Path) -> list[str]:
    proc = sh(str(SCRIPT), "--list-reports", *map(str, folders))
    assert proc.returncode == 0 and not proc.stderr, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


def test_a_refit_runs_list_opens_with_our_page_and_labels_cloudais(tmp_path: Path) -> None:
    root = results(tmp_path / "results" / "refit_cpu_smoke_2026-01-01_00-00-00", REFIT_RUN)
    assert listing(root) == [
        f"  {root}/mbridge_refit.html   (open this first)",
        f"  {root}/mbridge_refit.csv",
        f"  {root}/mbridge_refit.png",
        f"  {root}/refit_cpu_smoke-dse-report.html   (written by CloudAI)",
        f"  {root}/refit_cpu_smoke.html   (written by CloudAI)",
    ]


def test_an_ab_runs_list_opens_with_the_ab_page(tmp_path: Path) -> None:
    root = results(tmp_path / "ab", AB_RUN)
    lines = listing(root)
    assert lines[0] == f"  {root}/mbridge_ab.html   (open this first)"
    assert lines[-1] == f"  {root}/gpu_dispatcher_ab.html   (written by CloudAI)"
    assert [ln.strip() for ln in lines[1:-1]] == [f"{root}/{n}" for n in
                                                   ("mbridge_ab.csv", "mbridge_ab_change.png", "mbridge_ab_times.png",
                                                    "mbridge_runs.csv")]


def test_a_dry_runs_list_opens_with_the_preflight_page(tmp_path: Path) -> None:
    root = results(tmp_path / "refit_cpu_smoke_x", [])  # a dry-run writes no report at the top
    pre = results(tmp_path / "preflight_refit_cpu_smoke", ["preflight.csv", "preflight.html"])
    assert listing(root, pre) == [f"  {pre}/preflight.html   (open this first)", f"  {pre}/preflight.csv"]


def test_an_empty_list_says_none(tmp_path: Path) -> None:
    assert listing(tmp_path / "missing") == ["  none"]


def test_the_dry_run_ends_with_the_list_the_preflight_page_first(tmp_path: Path, venv: Path) -> None:
    repo = checkout(tmp_path, venv, wheel_url(tmp_path / "cloudai-1.6.0-py3-none-any.whl"))
    proc = quickstart(repo, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tail = proc.stdout.splitlines()[-3:]
    assert tail[0].endswith("Reports, the page to open first at the top:"), tail
    assert tail[1:] == ["  results/preflight_refit_cpu_smoke/preflight.html   (open this first)",
                        "  results/preflight_refit_cpu_smoke/preflight.csv"]


def test_the_docs_show_the_labels_the_script_prints() -> None:
    doc = (ROOT / "docs" / "quickstart.md").read_text()
    assert "(open this first)" in doc and "(written by CloudAI)" in doc and "--list-reports" in doc
