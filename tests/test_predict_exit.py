"""``seer predict`` run as a program ends as soon as its work is done (Python's teardown of the
modules it loaded is skipped), with its output flushed and its file whole; called from Python,
``seer.cli.main`` returns."""

from __future__ import annotations

import subprocess
import sys

from conftest import DATASET
from seer.cli import main

LAYERS = DATASET / "Test-set-II.txt"


def _seer(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seer", *map(str, argv)], capture_output=True, text=True)


def test_the_program_exits_with_its_output_flushed_and_its_file_whole(small_models, tmp_path, capsys):
    written = tmp_path / "program.csv"
    done = _seer("predict", LAYERS, "--models-dir", small_models, "-o", written)
    assert done.returncode == 0, done.stderr
    assert "layers predicted (written to" in done.stdout and "outside the shapes" in done.stdout
    # From Python the same command returns (this test goes on) and writes the same file.
    assert main(["predict", str(LAYERS), "--models-dir", str(small_models), "-o", str(tmp_path / "call.csv")]) == 0
    assert written.read_bytes() == (tmp_path / "call.csv").read_bytes()
    # Standard output, block-buffered into a pipe, is flushed before the process ends.
    done = _seer("predict", LAYERS, "--models-dir", small_models, "-o", "-", "--rows", "layer")
    assert done.returncode == 0 and done.stdout.count("\n") == int(LAYERS.read_text().split()[0]) + 1
    # A mistake keeps its one line and exit code.
    done = _seer("predict", tmp_path / "missing.txt")
    assert done.returncode == 2 and done.stderr.endswith("missing.txt: no such file\n") and done.stdout == ""
