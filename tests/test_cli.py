"""The command line: every mistake is one sentence and the right exit code, never a traceback."""

import pandas as pd
import pytest

from conftest import gpu_available
from seer.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


def test_unknown_gpu_lists_the_known_ones(capsys, tmp_path):
    code, _, err = run(capsys, "collect", "--gpu", "v200", "--data-dir", str(tmp_path))
    assert code == 1 and "Unknown GPU 'v200'" in err and "h100" in err and "v100" in err
    assert "Traceback" not in err and not any(tmp_path.iterdir())


def test_a_bad_grid_file_names_file_line_and_field_and_collects_nothing(capsys, tmp_path):
    grid = tmp_path / "layers.txt"
    grid.write_text("2\n1 3 224 64 112 7 2 3\n8 64 56 64 57 3 1 1\n")
    code, _, err = run(capsys, "collect", "--gpu", "h100", "--grid", str(grid), "--data-dir", str(tmp_path / "d"))
    assert code == 2
    assert f"{grid}:3: out_width: is 57" in err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("argv, words", [
    (["--shard", "3/2"], "need 1 <= i <= n"),
    (["--shard", "x"], "i/n"),
    (["--math", "fp16"], "unknown math mode"),
    (["--algo", "IMPLICIT_GEMM,FAST"], "unknown algorithm 'FAST'"),
    (["--grid", "nosuchgrid"], "named grids are"),
])
def test_bad_options_exit_2(capsys, tmp_path, argv, words):
    code, _, err = run(capsys, "collect", "--gpu", "h100", "--data-dir", str(tmp_path), *argv)
    assert code == 2 and words in err


@pytest.mark.skipif(gpu_available(), reason="on a GPU host this would start a real collection")
def test_collect_without_a_gpu_stack_is_one_sentence(capsys, tmp_path):
    code, _, err = run(capsys, "collect", "--gpu", "h100", "--grid", "quick", "--data-dir", str(tmp_path))
    assert code == 1
    assert ("CuPy is not installed" in err) or ("No usable NVIDIA GPU" in err)
    assert "Traceback" not in err


def test_parse_without_records_says_what_to_run(capsys, tmp_path):
    code, _, err = run(capsys, "parse", "--gpu", "h100", "--data-dir", str(tmp_path))
    assert code == 2 and "seer collect --gpu h100" in err


def test_grid_command_prints_seer_format(capsys):
    code, out, _ = run(capsys, "grid", "quick")
    lines = out.splitlines()
    assert code == 0 and int(lines[0]) == len(lines) - 1 == 20


def test_gpus_command_lists_specs_and_what_seer_predicts_for_each(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "titan-xp" in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert "forward: every algorithm" in rows["h100"] and "cross-GPU" not in rows["h100"]
    assert "dgrad, wgrad: every algorithm" in rows["h200"] and "cross-GPU model" not in rows["h200"]
    assert "forward: every algorithm (h100's model, carried over)" in rows["h200"]
    assert "cross-GPU model" in rows["a100"] and "every algorithm" not in rows["a100"]
    code, out, _ = run(capsys, "gpus", "--models-dir", str(tmp_path))  # no models at all
    assert code == 0 and all("nothing (no model)" in line for line in out.splitlines() if line.startswith("│"))


def test_argparse_usage_errors_are_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["collect"])
    assert info.value.code == 2


def _broken_tables(tmp_path):
    """Measurement tables a user might hand seer train or seer evaluate, each broken one way:
    the bytes of one Parquet part, and what the one-line error must say."""
    from conftest import DATASET

    good = DATASET / "measurements" / "file%3Aunet3d.parquet"
    frame = pd.read_parquet(good)
    text = frame.assign(time_ms=[str(t) if i != 1 else "fast" for i, t in enumerate(frame["time_ms"])])
    variants = {"missing column": frame.drop(columns=["status"]), "non-numeric time": text}
    written = {}
    for name, variant in variants.items():
        variant.to_parquet(tmp_path / "part.parquet", index=False)
        written[name] = (tmp_path / "part.parquet").read_bytes()
    return {
        "truncated": (good.read_bytes()[:5000], "cannot be read as Parquet"),
        "not parquet": (b"shape_id,time_ms\nx,1\n", "cannot be read as Parquet"),
        "empty": (b"", "cannot be read as Parquet"),
        "missing column": (written["missing column"], "file%3Aunet3d.parquet: status: missing from the part's columns"),
        "non-numeric time": (written["non-numeric time"],
                             "file%3Aunet3d.parquet: time_ms: not a number 'fast' (row 2)"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "evaluate"])
@pytest.mark.parametrize("case", ["truncated", "not parquet", "empty", "missing column", "non-numeric time"])
def test_a_broken_measurements_table_is_one_line_and_exit_2(capsys, tmp_path, command, case):
    content, words = _broken_tables(tmp_path)[case]
    (tmp_path / "h100" / "measurements").mkdir(parents=True)
    (tmp_path / "h100" / "measurements" / "file%3Aunet3d.parquet").write_bytes(content)
    # train writes into a scratch models folder; evaluate reads the shipped models.
    models = ["--models-dir", str(tmp_path / "models")] if command == "train" else []
    code, _, err = run(capsys, command, "--gpu", "h100", "--data-dir", str(tmp_path), *models)
    assert code == 2 and "Traceback" not in err and words in err, err
    assert not (tmp_path / "models").exists()
