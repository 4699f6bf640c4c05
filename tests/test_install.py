"""A plain (non-editable) install finds the shipped models from any working directory."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from conftest import DATASET, REPO


@pytest.mark.slow
def test_a_wheel_installed_elsewhere_predicts_with_the_shipped_models(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(REPO)],
                   check=True, cwd=tmp_path)
    wheel = next(wheels.glob("seer-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The new environment borrows this one's dependencies (numpy, pandas, numba, ...) by
    # path; a path in a .pth file is not itself scanned for .pth files, so this
    # environment's editable seer stays invisible there.
    borrowed = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    (site / "borrowed.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--quiet", str(wheel)], check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEER_MODELS_DIR")}
    located = subprocess.run([str(python), "-c", "import seer, seer.predict.persist as p; print(p.models_root())"],
                             check=True, capture_output=True, text=True, cwd=elsewhere, env=env).stdout.strip()
    assert Path(located).is_relative_to(site) and (Path(located) / "h100" / "model.json").exists()
    assert (Path(located) / "h200" / "bwd_filter" / "model.json").exists()  # a backward pass's models
    result = subprocess.run([str(venv / "bin" / "seer"), "predict", str(DATASET / "Test-set-II.txt"), "-o",
                             "pred.csv"], capture_output=True, text=True, cwd=elsewhere, env=env)
    assert result.returncode == 0, result.stderr
    frame = pd.read_csv(elsewhere / "pred.csv")
    assert (frame["rank"] == 1).sum() == int((DATASET / "Test-set-II.txt").read_text().split()[0])
