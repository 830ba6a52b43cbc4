"""Screenshots of every page the plugin writes, as headless Chromium shows them in a 1,400 px window.

Pages: the A/B and refit pages of the recorded GPU runs (``python3 -m cloudai_mbridge.reports.demo``), the same two
pages with a failed point each (the tests' dry-run with logs in Megatron's format: tests/test_reports.py
build_ab_results, tests/test_report_readability.py build_refit_page), and the preflight page of a Kimi-K2 sweep on
the B300 system whose points cover every verdict (fits, tight, does not fit under memory_check = "warn", rejected).
Each is screenshotted full-page, the blank bottom cropped, scaled to 1,000 px wide and stored as a 256-colour PNG.

Run (repo root, Chromium on PATH: ``apt-get install chromium``, as tests/test_html_chromium.py does):
    python3 benchmarks/report_screenshots.py [--out benchmarks/results/report_screenshots]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1400
STORED_WIDTH = 1000

TRAINING = """name = "kimi_k2_pretrain_{nodes}_nodes"
description = "Kimi-K2 pretraining, memory sweep"
test_template_name = "MBridgeTraining"
[cmd_args]
model = "kimi_k2"
tp = 8
pp = {pp}
{vp}gbs = {gbs}
train_iters = 24
memory_check = "warn"
ep = {ep}
mbs = {mbs}
"""
SCENARIO = """name = "kimi_k2_memory_sweep"
[[Tests]]
id = "kimi_k2_32_nodes"
test_name = "kimi_k2_pretrain_32_nodes"
num_nodes = 32
time_limit = "02:00:00"

[[Tests]]
id = "kimi_k2_16_nodes"
test_name = "kimi_k2_pretrain_16_nodes"
num_nodes = 16
time_limit = "02:00:00"
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    raise SystemExit("report_screenshots: chromium is not on PATH (apt-get install chromium)")


def shoot(browser: str, page: Path, png: Path, work: Path) -> Path:
    from PIL import Image, ImageChops

    raw = work / f"raw_{png.name}"
    subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WIDTH},6000", "--host-resolver-rules=MAP * ~NOTFOUND",
                    f"--user-data-dir={work / 'profile'}", f"--screenshot={raw}", page.resolve().as_uri()],
                   capture_output=True, timeout=120, check=True)
    image = Image.open(raw).convert("RGB")
    box = ImageChops.difference(image, Image.new("RGB", image.size, (255, 255, 255))).getbbox()
    if box:
        image = image.crop((0, 0, image.size[0], min(image.size[1], box[3] + 16)))
    height = round(image.size[1] * STORED_WIDTH / image.size[0])
    image = image.resize((STORED_WIDTH, height), Image.LANCZOS).quantize(colors=256)
    image.save(png, optimize=True)
    return png


def build(work: Path) -> dict[str, Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import CONF, run_cli
    from test_report_readability import build_refit_page
    from test_reports import build_ab_results

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    demo = work / "demo"
    subprocess.run([sys.executable, "-m", "cloudai_mbridge.reports.demo", "--output-dir", str(demo)], env=env,
                   check=True, capture_output=True, timeout=300)
    (work / "ab").mkdir()
    ab_root, _ = build_ab_results(work / "ab")
    (work / "refit").mkdir()
    refit = build_refit_page(work / "refit")
    conf = work / "conf"
    (conf / "test").mkdir(parents=True)
    (conf / "test_scenario").mkdir()
    (conf / "test" / "k32.toml").write_text(TRAINING.format(nodes=32, pp=8, vp="vp = 2\n", gbs=512, ep="[32, 7]",
                                                            mbs="[1, 8]"))
    (conf / "test" / "k16.toml").write_text(TRAINING.format(nodes=16, pp=4, vp="", gbs=768, ep=32,
                                                            mbs="[4, 12, 16]"))
    (conf / "test_scenario" / "sweep.toml").write_text(SCENARIO)
    (work / "pf").mkdir()
    proc = run_cli("preflight", "--system-config", str(CONF / "system" / "slurm_b300_efa.toml"), "--test-scenario",
                   str(conf / "test_scenario" / "sweep.toml"), "--output-dir", str(work / "pf" / "out"),
                   cwd=work / "pf", env=env)
    if proc.returncode != 0:
        raise SystemExit(f"preflight failed: {proc.stderr[-2000:]}")
    return {
        "ab_recorded_gpu_runs": demo / "mbridge_ab.html",
        "refit_recorded_gpu_runs": demo / "mbridge_refit.html",
        "ab_with_a_failed_point": ab_root / "mbridge_ab.html",
        "refit_with_failed_points": refit,
        "preflight_every_verdict": work / "pf" / "out" / "preflight.html",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "report_screenshots")
    args = parser.parse_args()
    browser = chromium()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, page in build(work).items():
            png = shoot(browser, page, args.out / f"{name}.png", work)
            print(f"RESULT {name}_kib={png.stat().st_size / 1024:.0f} KiB ({png})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
