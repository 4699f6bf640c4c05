"""The command line under faults around it: streams that cannot take output back, closed
pipes, usage mistakes, odd file names, broken optional packages, user code that exits, and
a kill -9 in mid-write. Each ends in one line and the promised exit code, or a right answer."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from conftest import DATASET
from seer.cli import main
from seer.errors import EXIT_BROKEN_PIPE
from seer.progress import CountProgress
from seer.schema import PREDICTION_COLUMNS

LAYERS = DATASET / "Test-set-II.txt"
SEER = [sys.executable, "-m", "seer"]
REPO = Path(__file__).resolve().parent.parent


def _layers(tmp_path: Path, copies: int, last: str | None = None) -> Path:
    """Test-set-II's layers repeated ``copies`` times, with ``last`` as one more line."""
    lines = LAYERS.read_text().splitlines()[1:] * copies + ([last] if last else [])
    path = tmp_path / "layers.txt"
    path.write_text("\n".join([str(len(lines)), *lines]) + "\n")
    return path


def _one_line(err: str, code: int, expected_code: int, *words: str) -> None:
    """Exit ``expected_code`` and one error line holding ``words`` (progress lines may precede it)."""
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == expected_code and "Traceback" not in err and len(errors) == 1, (code, err)
    assert err.endswith(errors[0] + "\n"), err
    for word in words:
        assert word in errors[0], (word, err)


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **extra}


def test_a_mistake_on_the_last_line_writes_nothing_to_standard_output(small_models, tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.setattr("seer.cli.PREDICT_CHUNK", 64)  # many chunks would go out before the bad line
    path = _layers(tmp_path, 2, last="1 64 56 64 99 3 1 1")
    code = main(["predict", str(path), "--models-dir", str(small_models), "-o", "-"])
    out, err = capsys.readouterr()
    assert out == ""
    _one_line(err, code, 2, f"layers.txt:{2 * 300 + 2}: out_width")
    # The same from standard input, which is copied aside while it is checked.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    code = main(["predict", "-", "--models-dir", str(small_models), "-o", "-", "--format", "json"])
    out, err = capsys.readouterr()
    assert out == ""
    _one_line(err, code, 2, f"<stdin>:{2 * 300 + 2}: out_width")
    # A good file read twice, or through the copy, gives the same predictions as a file written.
    good = _layers(tmp_path, 1)
    assert main(["predict", str(good), "--models-dir", str(small_models), "-o", str(tmp_path / "file.csv")]) == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(good.read_bytes())))
    capsys.readouterr()
    assert main(["predict", "-", "--models-dir", str(small_models), "-o", "-"]) == 0
    streamed = pd.read_csv(io.StringIO(capsys.readouterr().out))
    pd.testing.assert_frame_equal(streamed, pd.read_csv(tmp_path / "file.csv"))
    assert list(streamed.columns) == ["layer", *PREDICTION_COLUMNS]


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_the_command_quietly(small_models, tmp_path):
    path = _layers(tmp_path, 30)  # 9,000 layers: megabytes of CSV, far beyond a pipe's buffer
    command = [*SEER, "predict", str(path), "--models-dir", str(small_models), "-o", "-"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()) as process:
        assert process.stdout.readline().startswith(b"layer,batch,")  # as `| head -1` reads
        process.stdout.close()
        err = process.stderr.read().decode()
        code = process.wait(timeout=120)
    assert code == EXIT_BROKEN_PIPE and err == "", err


def test_usage_mistakes_are_one_line_with_the_hint_to_help(capsys):
    for argv, words in ((["predict"], "the following arguments are required: file (see seer predict --help)"),
                        (["predict", "x", "--table", "some"], "invalid choice: 'some'"),
                        (["no-such-command"], "(see seer --help)")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        _one_line(capsys.readouterr().err, stop.value.code, 2, words)


def test_a_gpus_folder_given_as_the_datasets_root_is_refused_before_anything_runs(tmp_path, capsys):
    """DATA_DIR/GPU/raw/ is where records are: a GPU's folder given as --data-dir would make a
    collection time again, into DATA_DIR/GPU/GPU/, what its records already hold."""
    (tmp_path / "h200" / "raw").mkdir(parents=True)
    for argv in (["collect", "--gpu", "h200", "--grid", "quick"], ["parse", "--gpu", "h200"],
                 ["train", "--gpu", "h200"], ["evaluate", "--gpu", "h200"]):
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--data-dir", str(tmp_path / "h200")])
        _one_line(capsys.readouterr().err, stop.value.code, 2, "--data-dir", "is a GPU's folder",
                  f"give its parent ({tmp_path})")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["h200", "raw"]  # nothing written


def test_a_file_name_with_a_newline_is_one_line(small_models, tmp_path, capsys):
    path = tmp_path / "two\nlines.txt"
    path.write_text("1\n1 64 56 64 99 3 1 1\n")
    code = main(["predict", str(path), "--models-dir", str(small_models)])
    _one_line(capsys.readouterr().err, code, 2, "two\\nlines.txt:2: out_width")


@pytest.mark.slow
def test_a_torchvision_that_fails_to_import_is_one_line_naming_it_and_the_fix(tmp_path):
    pytest.importorskip("torch")
    broken = tmp_path / "site" / "torchvision"
    broken.mkdir(parents=True)
    # What a torchvision built for another torch does at import.
    (broken / "__init__.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    done = subprocess.run([*SEER, "network", "resnet152", "--input", "1x3x224x224"], capture_output=True,
                          text=True, env=_env(PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)])))
    _one_line(done.stderr, done.returncode, 1, "torchvision is installed but fails to import",
              "operator torchvision::nms does not exist", "install the torchvision release made for torch")


def test_a_model_module_that_calls_sys_exit_is_one_line_not_a_silent_exit(small_models, tmp_path, capsys,
                                                                            monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "exits_when_built.py").write_text("import sys\ndef build():\n    sys.exit(3)\n")
    monkeypatch.chdir(tmp_path)
    for spec, words in (("exits_at_import:build", "it called sys.exit(0) while being imported"),
                        ("exits_when_built:build", "building 'exits_when_built:build' failed: SystemExit: 3")):
        code = main(["network", spec, "--input", "1x3x8x8", "--models-dir", str(small_models)])
        _one_line(capsys.readouterr().err, code, 2, words)


@pytest.mark.slow
def test_a_temporary_file_left_by_kill_9_is_removed_by_the_next_run(small_models, tmp_path):
    path = _layers(tmp_path, 100)  # 30,000 layers: seconds of writing
    out = tmp_path / "out" / "predictions.csv"
    out.parent.mkdir()
    command = [*SEER, "predict", str(path), "--models-dir", str(small_models), "-o", str(out)]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env()) as process:
        deadline = time.monotonic() + 60
        while not [p for p in out.parent.iterdir() if p.stat().st_size] and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    left = list(out.parent.iterdir())
    assert len(left) == 1 and left[0].name.startswith(".seer-") and left[0].stat().st_size, left
    assert main(["predict", str(LAYERS), "--models-dir", str(small_models), "-o", str(out)]) == 0
    assert list(out.parent.iterdir()) == [out]


def test_counting_progress_is_logged_where_no_terminal_shows_a_bar():
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    with CountProgress("predicting", console, "layers", log_every_s=0) as progress:
        progress.advance(32768)
        progress.advance(32768)
    assert "predicting: 65,536 layers" in console.file.getvalue()
