"""Plain ``cloudai`` over every scenario CloudAI ships, with the plugin installed and without it: byte for byte alike.

Every scenario TOML of CloudAI's ``conf/`` (the pinned commit, conftest.py) is dry-run on every system kind CloudAI
ships an example of (Slurm, standalone, Kubernetes with a dummy kubeconfig whose API server, a stub of this test's,
answers 404 to every request on loopback, Run:ai, and a folder's own system files), and on Slurm once more with
``--single-sbatch``; then
``verify-configs`` over the whole ``conf/``, and ``install`` of the Sleep and NCCL scenarios with a fake ``srun`` whose
help lacks pyxis' container options. ``sinfo``, ``squeue``, ``sacct``, ``scontrol``, ``sbatch`` and ``scancel`` are
fakes that print nothing: no cluster is asked. Each side runs in its own folder tree of the same shape, all of one side
in one interpreter (cli_driver.py), both sides in parallel; the baseline with ``CLOUDAI_MBRIDGE_AUTOLOAD=0``.

Compared per command: the exit status (or the exception), the console output, and every file written under the
command's folder (names and bytes), after the side's root folder and timestamps are written alike. Left out: each
command's ``debug.log`` (CloudAI writes its DEBUG lines there, which name every registered report, ours included).
Whatever a command does (writes jobs, or fails the same way on a system it does not fit), it must do the same with
the plugin. The test also checks it is not vacuous: dry-runs that wrote job files on Slurm, standalone and Kubernetes.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

DRIVER = Path(__file__).with_name("cli_driver.py")
FAKES = ("sinfo", "squeue", "sacct", "scontrol", "sbatch", "scancel")
SRUN_WITHOUT_PYXIS = "Usage: srun [OPTIONS]\n  --mpi=type\n  --gpus-per-node=n\n  --ntasks-per-node=n\n"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "SERVER"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
# what differs from one run to the next whatever is installed: times (2026-11-29_06-00-00, 20261129_060000) and the
# random ids of bokeh's pages
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[_ T]\d{2}[-:]\d{2}[-:]\d{2}(?:[.,]\d+)?|(?<!\d)20\d{6}_\d{6}(?!\d)"
                       r"|\b[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\b")
JOB_FILES = (".sh", ".json", ".yaml")


def scenarios(conf: Path) -> list[Path]:
    found = []
    for path in sorted(conf.rglob("*.toml")):
        try:
            data = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if isinstance(data.get("Tests"), list):
            found.append(path)
    return found


def scenario_tests_folder(conf: Path, scenario: Path) -> Path:
    own = scenario.parent.parent / "test"
    return own if own.is_dir() else conf / "common" / "test"


class _NoCluster(http.server.BaseHTTPRequestHandler):
    """A Kubernetes API server that has nothing: every request gets 404 at once (a refused connection makes the
    Kubernetes client retry for seconds per call)."""

    def _answer(self) -> None:
        body = b'{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}'
        self.send_response_only(404)  # no Date header: CloudAI prints the response's headers
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *_args: Any) -> None:
        pass


def build_side(src: Path, root: Path, server: str) -> dict[str, Path]:
    """The side's folder tree: CloudAI's conf/, the system files, the fake Slurm commands."""
    shutil.copytree(src / "conf", root / "conf")
    (root / "kubeconfig").write_text(KUBECONFIG.replace("SERVER", server))
    systems = root / "systems"
    systems.mkdir()
    k8s = (root / "conf" / "common" / "system" / "kubernetes_cluster.toml").read_text()
    (systems / "kubernetes.toml").write_text(
        re.sub(r'(?m)^kube_config_path = ".*"$', f'kube_config_path = "{root / "kubeconfig"}"', k8s))
    fakebin = root / "fakebin"
    fakebin.mkdir()
    for name in FAKES:
        (fakebin / name).write_text("#!/bin/sh\nexit 0\n")
    (fakebin / "srun").write_text(f"#!/bin/sh\ncat <<'EOF'\n{SRUN_WITHOUT_PYXIS}EOF\n")
    for f in fakebin.iterdir():
        f.chmod(0o755)
    common = root / "conf" / "common" / "system"
    return {"slurm": common / "example_slurm_cluster.toml", "standalone": common / "standalone_system.toml",
            "kubernetes": systems / "kubernetes.toml", "runai": common / "example_runai_cluster.toml"}


def cases(root: Path, systems: dict[str, Path]) -> list[dict[str, Any]]:
    conf = root / "conf"
    found: list[dict[str, Any]] = []

    def add(case_id: str, args: list[str]) -> None:
        cwd = root / "cases" / case_id
        cwd.mkdir(parents=True)
        found.append({"id": case_id, "cwd": str(cwd), "args": args})

    for scenario in scenarios(conf):
        rel = scenario.relative_to(conf).with_suffix("").as_posix().replace("/", "__")
        own = scenario.parent.parent / "system"
        own_systems = sorted(own.glob("*.toml")) if own != conf / "common" / "system" else []
        kinds = {**systems, **{f"own-{p.stem}": p for p in own_systems}}
        for kind, system in kinds.items():
            common = ["--system-config", str(system), "--tests-dir", str(scenario_tests_folder(conf, scenario)),
                      "--test-scenario", str(scenario), "--hook-dir", str(conf / "hook"), "--output-dir", "out"]
            add(f"dry-run--{kind}--{rel}", ["dry-run", *common])
            if kind == "slurm":
                add(f"dry-run-single-sbatch--{kind}--{rel}", ["dry-run", "--single-sbatch", *common])
    # CloudAI's own Kubernetes example as shipped (no kubeconfig anywhere): CloudAI refuses while reading the system
    add("dry-run--kubernetes-no-kubeconfig--sleep", [
        "dry-run", "--system-config", str(conf / "common" / "system" / "kubernetes_cluster.toml"), "--tests-dir",
        str(conf / "common" / "test"), "--test-scenario", str(conf / "common" / "test_scenario" / "sleep.toml"),
        "--output-dir", "out"])
    add("verify-configs--conf", ["verify-configs", str(conf)])
    for name in ("sleep", "nccl_test"):
        add(f"install-srun-without-pyxis--{name}", [
            "install", "--system-config", str(systems["slurm"]), "--tests-dir", str(conf / "common" / "test"),
            "--hook-dir", str(conf / "hook"),
            "--test-scenario", str(conf / "common" / "test_scenario" / f"{name}.toml")])
    return found


def normalized(data: bytes, root: Path) -> bytes:
    text = data.decode("utf-8", errors="surrogateescape").replace(str(root), "<ROOT>")
    return TIMESTAMP.sub("<TIME>", text).encode("utf-8", errors="surrogateescape")


def tree(folder: Path, root: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (name -> normalized bytes); a .tgz CloudAI packs its results into is compared by
    its members (names and bytes), not by its compressed bytes, which hold mtimes."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name == "debug.log":
            continue
        name = TIMESTAMP.sub("<TIME>", path.relative_to(folder).as_posix())
        if path.name.endswith(".tgz"):
            with tarfile.open(path) as tar:
                for member in sorted(tar.getmembers(), key=lambda m: m.name):
                    data = tar.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
                    files[f"{name}!{TIMESTAMP.sub('<TIME>', member.name)}"] = normalized(data, root)
        else:
            files[name] = normalized(path.read_bytes(), root)
    return files


def console_lines(text: str, root: Path) -> bytes:
    """The console output, normalized, its lines sorted: CloudAI iterates over sets of report classes, whose order
    changes from one interpreter to the next (two runs of CloudAI alone differ in it), so the order of lines is not
    compared; every line is."""
    return b"\n".join(sorted(normalized(text.encode(), root).splitlines()))


def first_difference(a: dict[str, bytes], b: dict[str, bytes]) -> str:
    if a.keys() != b.keys():
        return f"files only without the plugin: {sorted(a.keys() - b.keys())}; only with: {sorted(b.keys() - a.keys())}"
    for name in a:
        if a[name] != b[name]:
            la, lb = a[name].decode(errors="replace").splitlines(), b[name].decode(errors="replace").splitlines()
            line = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y), min(len(la), len(lb)))
            return (f"{name}, line {line + 1}: {la[line] if line < len(la) else '<end>'!r} without the plugin, "
                    f"{lb[line] if line < len(lb) else '<end>'!r} with it")
    return ""


@pytest.fixture(scope="module")
def both_sides(cloudai_src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("conf-differential")
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoCluster)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    server = f"http://127.0.0.1:{api.server_address[1]}"
    sides: dict[str, Any] = {}
    for name in ("alone", "plugged"):
        root = base / {"alone": "side_a", "plugged": "side_b"}[name]  # one length: rich wraps its tables alike
        root.mkdir()
        systems = build_side(cloudai_src, root, server)
        case_list = cases(root, systems)
        (root / "cases.json").write_text(json.dumps(case_list))
        sides[name] = {"root": root, "cases": case_list}
    started = time.monotonic()
    procs = {}
    for name, side in sides.items():
        root = side["root"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SLURM_"))}
        # COLUMNS: rich's tables on the console wrap nothing, so a path is one string to normalize
        env.update(CLOUDAI_MBRIDGE_AUTOLOAD="0" if name == "alone" else "1", HOME=str(root / "home"), COLUMNS="500",
                   PATH=f"{root / 'fakebin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        env.pop("KUBECONFIG", None)
        argv = [sys.executable, str(DRIVER), str(root / "cases.json"), str(root / "results.json")]
        procs[name] = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for name, proc in procs.items():
            out = proc.communicate(timeout=1500)[0]
            assert proc.returncode == 0, f"the {name} driver failed: {out[-3000:]}"
            sides[name]["results"] = json.loads((sides[name]["root"] / "results.json").read_text())
    finally:
        api.shutdown()
        api.server_close()
    sides["seconds"] = time.monotonic() - started
    return sides


def test_every_shipped_scenario_is_alike_with_and_without_the_plugin(both_sides: dict[str, Any],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    alone, plugged = both_sides["alone"], both_sides["plugged"]
    problems = []
    wrote_jobs: dict[str, int] = {}
    for case in alone["cases"]:
        cid = case["id"]
        ra, rb = alone["results"][cid], plugged["results"][cid]
        rca, rcb = (normalized(str(r["rc"]).encode(), s["root"]) for r, s in ((ra, alone), (rb, plugged)))
        if rca != rcb:
            problems.append(f"{cid}: exit {rca!r} without the plugin, {rcb!r} with it")
            continue
        ca, cb = (console_lines(r["console"], s["root"]) for r, s in ((ra, alone), (rb, plugged)))
        if ca != cb:
            problems.append(f"{cid}: console output differs: "
                            f"{first_difference({'console': ca}, {'console': cb})}")
        ta = tree(alone["root"] / "cases" / cid, alone["root"])
        tb = tree(plugged["root"] / "cases" / cid, plugged["root"])
        if ta != tb:
            problems.append(f"{cid}: {first_difference(ta, tb)}")
        if cid.startswith("dry-run") and any(n.endswith(JOB_FILES) for n in ta):
            kind = cid.split("--")[1]
            wrote_jobs[kind] = wrote_jobs.get(kind, 0) + 1
    with capsys.disabled():
        print(f"\nCloudAI's conf/ with and without the plugin: {len(alone['cases'])} commands per side "
              f"({both_sides['seconds']:.0f} s wall, both sides in parallel); dry-runs that wrote job files, by "
              f"system: {dict(sorted(wrote_jobs.items()))}; differences: {len(problems)}")
        slow = sorted(plugged["results"].items(), key=lambda kv: -kv[1]["seconds"])[:3]
        print("  slowest with the plugin: " + ", ".join(f"{cid} {r['seconds']:.1f} s" for cid, r in slow))
        for p in problems[:20]:
            print(f"  DIFFERS: {p}")
    assert not problems, "\n".join(problems[:20])
    for kind in ("slurm", "standalone", "kubernetes"):
        assert wrote_jobs.get(kind, 0) >= 1, f"no dry-run on {kind} wrote a job: the comparison proved nothing there"
    assert wrote_jobs["slurm"] >= 10


def test_kubernetes_without_kubeconfig_is_refused_as_by_cloudai_alone(both_sides: dict[str, Any]) -> None:
    """CloudAI's "kubernetes" system stays CloudAI's: no kubeconfig, no dry-run, nothing written (the plugin's system
    type used to take scheduler "kubernetes" over, wrote 3 job folders and failed later)."""
    for side in ("alone", "plugged"):
        result = both_sides[side]["results"]["dry-run--kubernetes-no-kubeconfig--sleep"]
        assert "Kube config file" in str(result["rc"]) + result["console"], f"{side}: {result}"
        assert not (both_sides[side]["root"] / "cases" / "dry-run--kubernetes-no-kubeconfig--sleep" / "out").exists()


def test_install_checks_pyxis_as_cloudai_alone_does(both_sides: dict[str, Any]) -> None:
    """`cloudai install` on a Slurm whose srun lacks pyxis' options: CloudAI refuses, with the plugin installed too."""
    for name in ("sleep", "nccl_test"):
        cid = f"install-srun-without-pyxis--{name}"
        for side in ("alone", "plugged"):
            result = both_sides[side]["results"][cid]
            assert result["rc"] == 1 and "Required srun options missing: --container-image, --container-mounts" in (
                result["console"]), f"{side} {cid}: {result}"


def test_the_comparison_sees_a_difference(tmp_path: Path) -> None:
    """normalized/tree/first_difference can fail: a changed byte in a job file is found, a timestamp is not."""
    root = tmp_path / "r"
    for side, stamp, text in (("a", "2026-11-29_06-00-00", "srun foo\n"), ("b", "2026-11-29_07-11-12", "srun bar\n")):
        (root / side / f"s_{stamp}" / "0").mkdir(parents=True)
        (root / side / f"s_{stamp}" / "0" / "cloudai_sbatch_script.sh").write_text(f"# {stamp}\n{text}")
    ta, tb = tree(root / "a", root), tree(root / "b", root)
    assert first_difference(ta, tb) == ("s_<TIME>/0/cloudai_sbatch_script.sh, line 2: 'srun foo' without "
                                        "the plugin, 'srun bar' with it")
    same = "# 2026-11-29_08-00-00\nsrun foo\n"
    (root / "b" / "s_2026-11-29_07-11-12" / "0" / "cloudai_sbatch_script.sh").write_text(same)
    assert first_difference(ta, tree(root / "b", root)) == ""
    assert normalized(b"at 2026-11-29 06:00:01,123 in " + str(root).encode(), root) == b"at <TIME> in <ROOT>"
