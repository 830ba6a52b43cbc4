from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from cloudai.core import Registry
from cloudai.systems.slurm import SlurmSystem
from helpers import CONF, ROOT, run_cli

from cloudai_mbridge import _cloudai
from cloudai_mbridge.registration import TRAINING_TEMPLATE, register
from cloudai_mbridge.workloads.training import MBridgeTrainingSlurmCommandGenStrategy, MBridgeTrainingTestDefinition


def test_register_is_idempotent_and_wires_training() -> None:
    register()
    register()
    reg = Registry()
    assert reg.test_definitions_map[TRAINING_TEMPLATE] is MBridgeTrainingTestDefinition
    assert "MegatronBridge" in reg.test_definitions_map, "the built-in workload must stay untouched"
    strategy = reg.get_command_gen_strategy(SlurmSystem, MBridgeTrainingTestDefinition)
    assert strategy is MBridgeTrainingSlurmCommandGenStrategy


def test_missing_cloudai_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_found(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(_cloudai.metadata, "version", not_found)
    with pytest.raises(_cloudai.CloudAIMissingError, match=r"not installed.*git\+https://github.com/NVIDIA/cloudai"):
        _cloudai.require_cloudai()


def test_old_cloudai_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cloudai.metadata, "version", lambda name: "1.2.3")
    with pytest.raises(_cloudai.CloudAIMissingError, match=r"1\.2\.3 is too old"):
        _cloudai.require_cloudai()


def test_cli_exits_2_with_install_hint_when_cloudai_missing(tmp_path) -> None:
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "def fake(name):\n"
        "    if name == 'cloudai':\n"
        "        raise m.PackageNotFoundError(name)\n"
        "    return real(name)\n"
        "m.version = fake\n"
        "from cloudai_mbridge.cli import main\n"
        "main(['--help'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert "CloudAI is not installed" in proc.stderr and "pip install" in proc.stderr


def test_cli_offers_all_cloudai_verbs(tmp_path) -> None:
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for verb in ("run", "dry-run", "generate-report", "verify-configs", "list", "install"):
        assert f"  {verb} " in proc.stdout, verb


@pytest.mark.parametrize(("switch", "expected"), [("1", "True"), ("0", "False")])
def test_plain_cloudai_sees_plugin_through_pth_hook(switch: str, expected: str, tmp_path) -> None:
    code = (
        "import cloudai; from cloudai.core import Registry; print('MBridgeTraining' in Registry().test_definitions_map)"
    )
    env = {"CLOUDAI_MBRIDGE_AUTOLOAD": switch, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.stdout.strip() == expected, proc.stderr


def test_pth_hook_does_not_import_cloudai_at_start(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; print('cloudai' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdout.strip() == "False"


def test_pth_hook_is_silent_when_the_package_is_gone(tmp_path) -> None:
    # A stale start file (an editable checkout deleted): the .pth and its hook module are there, the package is not.
    # Nothing is printed at start, and cloudai imports as without the plugin.
    import cloudai

    site_dir = tmp_path / "site"
    site_dir.mkdir()
    for name in ("cloudai_mbridge-autoload.pth", "_cloudai_mbridge_hook.py"):
        (site_dir / name).write_text((ROOT / name).read_text())
    cloudai_parent = str(Path(cloudai.__file__).resolve().parent.parent)
    code = (f"import site, sys; site.addsitedir({str(site_dir)!r}); sys.path.append({cloudai_parent!r}); "
            "hooked = any(type(f).__name__ == 'CloudAIMBridgeHook' for f in sys.meta_path); import cloudai; "
            "print(hooked, 'cloudai_mbridge' in sys.modules)")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin"})
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "True False", "")


@pytest.mark.parametrize("switch", ["0", "false", "no", "off"])
def test_switched_off_nothing_of_the_plugin_is_imported(switch: str, tmp_path) -> None:
    """CLOUDAI_MBRIDGE_AUTOLOAD=0: the .pth line reads the variable before anything else; no module of the plugin
    (the hook included) is imported, with or without cloudai."""
    code = ("import sys, cloudai; from cloudai.core import Registry; "
            "print(sorted(m for m in sys.modules if 'mbridge' in m and 'editable' not in m), "
            "[type(f).__name__ for f in sys.meta_path if 'MBridge' in type(f).__name__], "
            "'MBridgeTraining' in Registry().test_definitions_map)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={"CLOUDAI_MBRIDGE_AUTOLOAD": switch, "PATH": "/usr/bin:/bin"})
    assert proc.stdout.strip() == "[] [] False", proc.stderr


def test_verify_configs_passes_on_conf_and_fails_on_a_broken_file(tmp_path) -> None:
    proc = run_cli("verify-configs", str(CONF), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "t.toml").write_text(
        'name = "t"\ndescription = "d"\ntest_template_name = "MBridgeTraining"\n[cmd_args]\nmodel = "kimi_k2"\n'
        'gpu = "b300"\ntp = 0\n'
    )
    proc = run_cli("verify-configs", str(broken), cwd=tmp_path)
    assert proc.returncode == 2  # a file that cannot be read (cli/exits.py), as from dry-run and preflight
    assert "cmd_args.tp" in proc.stdout + proc.stderr
