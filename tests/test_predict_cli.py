"""``seer predict``: what it writes, what it shows, and one line with exit code 2 for every mistake."""

from __future__ import annotations

import errno
import io
import json
import subprocess
import sys
import tempfile

import pandas as pd
import pytest

from conftest import DATASET
from seer import output
from seer.cli import main
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict import persist
from seer.schema import INTERVAL_COLUMNS, PREDICTION_COLUMNS, PYTORCH_COLUMNS

LAYERS = DATASET / "Test-set-II.txt"
N_LAYERS = int(LAYERS.read_text().split()[0])


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(code: int, err: str, where: str) -> None:
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert where in err, err


def test_the_api_takes_a_layer_files_name_and_no_layers_at_all(small_models):
    """model.predict(path) reads the layer file as seer predict does (it raised ValueError on the
    name's characters); no layers give no rows (a numpy reshape error before)."""
    from pathlib import Path

    from seer.layers.files import read_layers

    model = persist.load_model(models_dir=small_models)
    expected = model.predict(read_layers(LAYERS), math="fma")
    for given in (str(LAYERS), Path(LAYERS)):
        assert model.predict(given, math="fma").equals(expected)
    empty = model.predict([], math="fma")
    assert empty.empty and list(empty.columns) == list(expected.columns)
    assert model.pick([], math="fma").empty


def test_csv_has_the_promised_columns_ranks_and_the_models_picks(small_models, tmp_path, capsys):
    out = tmp_path / "pred.csv"
    code, shown, _ = run(capsys, "predict", LAYERS, "--models-dir", small_models, "--math", "fma", "-o", out)
    assert code == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["layer", *PREDICTION_COLUMNS] and set(frame["math"]) == {"fma"}
    layers = frame.groupby(list(LAYER_COLUMNS), sort=False)
    assert layers.ngroups == len(frame.drop_duplicates(list(LAYER_COLUMNS)))
    for _, group in layers:
        assert sorted(group["rank"]) == list(range(1, len(group) + 1))
    assert frame["predicted_ms"].gt(0).all()
    model = persist.load(small_models / "h100")
    shapes = pd.read_csv(out).drop_duplicates(list(LAYER_COLUMNS))[list(LAYER_COLUMNS)].reset_index(drop=True)
    assert list(frame.loc[frame["rank"] == 1, "algo"]) == list(model.predictors["fma"].select(shapes))
    # With --out the terminal shows counts, not every layer.
    assert f"{N_LAYERS} layers predicted (written to {out})" in " ".join(shown.split())
    assert "IMPLICIT" in shown and "lie outside the shapes" in shown


def test_json_is_one_object_per_layer_with_its_algorithms(small_models, tmp_path, capsys):
    out = tmp_path / "pred.json"
    assert run(capsys, "predict", LAYERS, "--models-dir", small_models, "-o", out)[0] == 0
    layers = json.loads(out.read_text())
    csv = tmp_path / "pred.csv"
    assert run(capsys, "predict", LAYERS, "--models-dir", small_models, "-o", csv, "--format", "csv")[0] == 0
    frame = pd.read_csv(csv)
    assert len(layers) == N_LAYERS and [layer["layer"] for layer in layers] == list(range(N_LAYERS))
    for layer in layers[:20]:
        ranks = [a["rank"] for a in layer["algorithms"]]
        assert ranks == list(range(1, len(ranks) + 1)) and layer["pick"] == layer["algorithms"][0]["algo"]
        assert set(layer) >= {*LAYER_COLUMNS, "math", "extrapolated", "algorithms"}
    assert sum(len(layer["algorithms"]) for layer in layers) == len(frame)


def test_standard_input_and_standard_output(small_models, capsys, monkeypatch):
    lines = LAYERS.read_text().splitlines()
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(["3", *lines[1:4]]) + "\n"))
    code, out, err = run(capsys, "predict", "-", "--models-dir", small_models, "-o", "-")
    assert code == 0
    frame = pd.read_csv(io.StringIO(out))
    assert list(frame.columns) == ["layer", *PREDICTION_COLUMNS] and frame.drop_duplicates(list(LAYER_COLUMNS)).shape[0] == 3
    assert "3 layers predicted (written to standard output)" in " ".join(err.split())


def test_a_table_up_to_fifty_layers_a_summary_beyond_unless_asked(small_models, tmp_path, capsys):
    few = tmp_path / "few.txt"
    few.write_text("\n".join(["5", *LAYERS.read_text().splitlines()[1:6]]) + "\n")
    code, out, _ = run(capsys, "predict", few, "--models-dir", small_models)
    assert code == 0 and "fastest" in out and "runner-up" in out and "layers predicted" not in out
    code, out, _ = run(capsys, "predict", LAYERS, "--models-dir", small_models)
    assert code == 0 and f"{N_LAYERS} layers predicted" in out and "runner-up" not in out
    code, out, _ = run(capsys, "predict", LAYERS, "--models-dir", small_models, "--table", "all")
    assert code == 0 and "runner-up" in out and str(N_LAYERS) in out
    code, out, _ = run(capsys, "predict", few, "--models-dir", small_models, "--table", "summary")
    assert code == 0 and "5 layers predicted" in out


def test_a_layer_with_no_algorithm_predicted_to_run_keeps_a_row(small_models, tmp_path, capsys):
    model = persist.load(small_models / "h100")
    predictor = model.predictors["default"]
    predictor.supports = {algo: "never" for algo in predictor.algorithms}
    persist.save(model, tmp_path / "never" / "h100")
    few = tmp_path / "few.txt"
    few.write_text("\n".join(["2", *LAYERS.read_text().splitlines()[1:3]]) + "\n")
    code, out, _ = run(capsys, "predict", few, "--models-dir", tmp_path / "never")
    assert code == 0 and out.count("no algorithm predicted to run") == 2 and "nan" not in out
    assert run(capsys, "predict", few, "--models-dir", tmp_path / "never", "-o", tmp_path / "p.csv")[0] == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert len(rows) == 3 and all(",default,,,," in row for row in rows[1:]) and "nan" not in "".join(rows)
    assert run(capsys, "predict", few, "--models-dir", tmp_path / "never", "-o", tmp_path / "p.json")[0] == 0
    layers = json.loads((tmp_path / "p.json").read_text())
    assert [(layer["pick"], layer["algorithms"]) for layer in layers] == [(None, []), (None, [])]


def test_zero_layers_give_an_empty_table_not_a_traceback(small_models, tmp_path, capsys):
    source = tmp_path / "none.txt"
    source.write_text("0\n")
    assert run(capsys, "predict", source, "--models-dir", small_models, "-o", tmp_path / "none.csv")[0] == 0
    assert list(pd.read_csv(tmp_path / "none.csv").columns) == ["layer", *PREDICTION_COLUMNS]
    assert run(capsys, "predict", source, "--models-dir", small_models, "-o", tmp_path / "none.json")[0] == 0
    assert json.loads((tmp_path / "none.json").read_text()) == []


@pytest.mark.parametrize("content, where", [
    ("2\n1 64 56 64 56 3 1 1\n", "pred.txt:1: count"),
    ("1\n1 64 56 64 56 3 1\n", "pred.txt:2: padding"),
    ("1\n1 64 56 64 56 3 1 1 9\n", "pred.txt:2: padding"),
    ("1\n1 64 5x6 64 56 3 1 1\n", "pred.txt:2: in_width"),
    ("1\n0 64 56 64 56 3 1 1\n", "pred.txt:2: batch"),
    ("1\n1 64 56 64 55 3 1 1\n", "pred.txt:2: out_width"),
    ("1\n1 6_4 56 64 56 3 1 1\n", "pred.txt:2: in_ch"),
    ("1\n+8 64 56 64 56 3 1 1\n", "pred.txt:2: batch"),
    ("1\n1 64 56 ６４ 56 3 1 1\n", "pred.txt:2: out_ch"),
    ("1\n9223372036854775808 64 56 64 56 3 1 1\n", "pred.txt:2: batch: must be between 1 and 2147483647"),
    # The layer CSV (read by its extension).
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,groups\n1,10,8,5,5,3,3,4\n", "pred.csv:2: in_ch: 10 is not a"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h\n", "pred.csv:1: kernel_w: missing column"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,5,3,9\n", "pred.csv:2: kernel_w: 9 is larger"),
])
def test_malformed_files_name_file_line_and_field_and_write_nothing(small_models, tmp_path, capsys, content, where):
    source = tmp_path / where.split(":")[0]
    source.write_text(content)
    out = tmp_path / "out.csv"
    code, _, err = run(capsys, "predict", source, "--models-dir", small_models, "--out", out)
    _refused(code, err, where)
    assert not out.exists() and list(tmp_path.iterdir()) == [source]  # no temporary file either


def test_a_mistake_after_many_good_layers_leaves_no_output(small_models, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("seer.cli.PREDICT_CHUNK", 64)  # the good layers are written before the bad one is read
    lines = LAYERS.read_text().splitlines()[1:]
    source = tmp_path / "late.txt"
    source.write_text("\n".join([str(len(lines) + 1), *lines, "1 64 56 64 99 3 1 1"]) + "\n")
    code, _, err = run(capsys, "predict", source, "--models-dir", small_models, "-o", tmp_path / "out.csv")
    _refused(code, err, f"late.txt:{len(lines) + 2}: out_width")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.txt"]


def test_unusable_output_paths_are_one_line(small_models, tmp_path, capsys):
    cases = [(tmp_path / "no-such-folder" / "p.csv", "no such folder"),
             (tmp_path, "is a directory"),
             (tmp_path / ("p" * 300 + ".csv"), "file name too long")]
    for out, words in cases:
        code, _, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "-o", out)
        _refused(code, err, words)


@pytest.mark.parametrize("failure, words", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on the device"),
    (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),
    (OSError(errno.EROFS, "Read-only file system"), "read-only file system"),
])
def test_a_full_or_read_only_disk_leaves_nothing_behind(small_models, tmp_path, capsys, monkeypatch, failure, words):
    # Tests run as root, for whom permissions do not apply: the failing call is simulated
    # where the real one would fail (creating the file, or writing the rows).
    if isinstance(failure, PermissionError) or failure.errno == errno.EROFS:
        def refuse(*args, **kwargs):
            raise failure
        monkeypatch.setattr(tempfile, "mkstemp", refuse)
    else:
        def full(self, predictions):
            raise failure
        monkeypatch.setattr(output.PredictionWriter, "write", full)
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "-o", out)
    _refused(code, err, words)
    assert list(tmp_path.iterdir()) == []


def test_unknown_gpu_lists_the_trained_models_and_a_missing_model_says_how_to_train(small_models, tmp_path, capsys):
    code, _, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "--gpu", "v100")
    _refused(code, err, "v100")
    assert "h100" in err and "seer train" in err
    code, _, err = run(capsys, "predict", LAYERS, "--models-dir", tmp_path / "none")
    _refused(code, err, "seer train")


def test_the_shipped_model_predicts_right_after_install(tmp_path, capsys):
    out = tmp_path / "shipped.csv"
    assert run(capsys, "predict", LAYERS, "--out", out)[0] == 0
    frame = pd.read_csv(out)
    assert set(frame["math"]) == {"default"} and (frame["rank"] == 1).sum() == N_LAYERS


def test_the_python_api(small_models):
    import seer

    model = seer.load_model("h100", models_dir=small_models)
    layers = seer.read_layers(LAYERS)
    predictions = model.predict(layers, math="fma")
    assert list(predictions.columns) == ["layer", *PREDICTION_COLUMNS]
    assert predictions["layer"].nunique() == len(layers) == N_LAYERS
    picks = model.pick(layers.head(3), math="fma")
    assert list(picks["best_algo"]) == list(predictions.query("rank == 1")["algo"][:3])
    assert isinstance(model, seer.Model) and model.maths == ["fma", "default"]
    assert repr(model).startswith("<seer Model for h100: math modes fma, default;") and len(repr(model)) < 300
    with pytest.raises(seer.InputError, match="has no 'fp16' math mode"):
        model.predict(layers, math="fp16")
    grouped = pd.DataFrame({"batch": [8], "in_ch": [64], "out_ch": [64], "groups": [64], "in_h": [28], "in_w": [40],
                            "kernel_h": [3], "kernel_w": [3], "pad_h": [1], "pad_w": [1]})
    assert model.predict(grouped, math="fma")["groups"].eq(64).all()
    with pytest.raises(seer.InputError, match="in_ch: 64 is not a multiple of groups=3"):
        model.predict(grouped.assign(groups=3), math="fma")


GENERAL_CSV = """batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,stride_h,stride_w,pad_h,pad_w,groups,dilation_h,dilation_w
32,128,128,56,56,3,3,1,1,1,1,32,1,1
1,768,192,17,17,1,7,1,1,0,3,1,1,1
2,64,64,64,96,3,3,1,1,2,2,1,2,2
"""


def test_a_layer_csv_of_every_kind_is_predicted_and_described(small_models, tmp_path, capsys):
    source = tmp_path / "layers.csv"
    source.write_text(GENERAL_CSV)
    code, shown, err = run(capsys, "predict", source, "--models-dir", small_models, "--math", "fma")
    assert code == 0, err
    text = " ".join(shown.split())
    assert "32x128x56x56 -> 128, 3x3 s1 p1 g32" in text and "1x768x17x17 -> 192, 1x7 s1 p0,3" in text
    assert "2x64x64x96 -> 64, 3x3 s1 p2 d2" in text
    out = tmp_path / "pred.csv"
    assert run(capsys, "predict", source, "--models-dir", small_models, "-o", out)[0] == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["layer", *PREDICTION_COLUMNS]
    assert frame.drop_duplicates(list(LAYER_COLUMNS))["groups"].tolist() == [32, 1, 1]
    three_d = tmp_path / "volumes.csv"
    three_d.write_text("batch,in_ch,out_ch,in_d,in_h,in_w,kernel_d,kernel_h,kernel_w,pad_d,pad_h,pad_w\n"
                       "2,32,64,32,32,32,3,3,3,1,1,1\n")
    code, shown, err = run(capsys, "predict", three_d, "--models-dir", small_models, "--math", "fma")
    assert code == 0 and "2x32x32x32x32 -> 64, 3x3x3 s1 p1" in " ".join(shown.split()), err


def test_output_through_a_symbolic_link_writes_its_target_and_keeps_the_link(small_models, tmp_path, capsys):
    target_dir = tmp_path / "elsewhere"
    target_dir.mkdir()
    link = tmp_path / "p.csv"
    link.symlink_to(target_dir / "p.csv")  # dangling until written
    code, _, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "-o", link)
    assert code == 0, err
    assert link.is_symlink() and (target_dir / "p.csv").is_file()
    assert pd.read_csv(link)["rank"].eq(1).sum() == 300
    assert sorted(p.name for p in target_dir.iterdir()) == ["p.csv"]  # no temporary file left


def test_output_onto_a_fifo_feeds_its_reader_and_stays_a_fifo(small_models, tmp_path, capsys):
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code, _, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "-o", fifo)
    reader.join(timeout=60)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert pd.read_csv(io.BytesIO(got[0]))["rank"].eq(1).sum() == 300


@pytest.mark.parametrize("device, minor", [("null", 3), ("full", 7)])
def test_output_onto_a_device_is_written_through_never_replaced(small_models, tmp_path, capsys, device, minor):
    import os
    import stat

    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    node = tmp_path / device  # a copy of /dev/null or /dev/full (character device 1, minor)
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    code, _, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "-o", node)
    assert stat.S_ISCHR(os.lstat(node).st_mode), "the device node must stay a device node"
    assert sorted(p.name for p in tmp_path.iterdir()) == [device]
    if device == "null":
        assert code == 0, err
    else:  # /dev/full refuses every write: one line, exit 2
        _refused(code, err, "no space left on the device")


def test_the_table_marks_a_pick_slower_than_its_runner_up_and_says_which_picks_need_seer_torch():
    from rich.console import Console

    from seer import cli
    from seer.layers.files import read_layers

    layers = read_layers(LAYERS).head(2).reset_index(drop=True)
    rows = layers.assign(best_algo=["SEER_IMPLICIT_GEMM", "GEMM"], best_ms=[0.52, 0.30], best_mj=float("nan"),
                         runner_up=["IMPLICIT_PRECOMP_GEMM", "FFT"], runner_up_ms=[0.50, 0.40],
                         runner_up_mj=float("nan"), extrapolated=False)
    console = Console(file=io.StringIO(), width=250)
    cli._print_table(console, "h100", "fma", rows)
    shown = console.file.getvalue()
    assert f"0.52 {cli.ABOVE_RUNNER_UP}" in shown and f"0.3 {cli.ABOVE_RUNNER_UP}" not in shown
    assert "the pick's time is above the runner-up's" in shown
    assert "1 of 2 picks are seer's own kernels" in shown and "--algo cudnn" in shown


def test_a_layer_too_large_for_the_gpus_memory_gets_no_time(small_models, tmp_path, capsys):
    import seer

    # About 68 GB of input, 80 GB with the output: no H100 can hold it, whatever the algorithm.
    source = tmp_path / "huge.txt"
    source.write_text("2\n256 4096 128 4096 128 3 1 1\n32 64 56 64 56 3 1 1\n")
    predictions = seer.load_model("h100", models_dir=small_models).predict(seer.read_layers(source), "fma")
    huge = predictions[predictions["layer"] == 0]
    assert len(huge) == 1 and huge["algo"].isna().all() and huge["predicted_ms"].isna().all()
    assert predictions[predictions["layer"] == 1]["predicted_ms"].notna().all()
    code, shown, _ = run(capsys, "predict", source, "--models-dir", small_models, "--math", "fma")
    assert code == 0 and "does not fit in the GPU's memory" in shown
    code, shown, _ = run(capsys, "predict", source, "--models-dir", small_models, "--math", "fma", "--table", "summary")
    assert code == 0 and "does not fit in the GPU's memory   1" in " ".join(shown.split("\n"))


def test_names_and_other_labels_pass_through_to_the_table_csv_and_json(small_models, tmp_path, capsys):
    source = tmp_path / "named.csv"
    source.write_text('name,batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,stage\n'
                      'conv1,32,3,64,224,224,7,7,"stem, first"\n'
                      '[b]x,1,64,64,56,56,3,3,s2\n'
                      'conv1,32,3,64,224,224,7,7,\n')
    code, shown, err = run(capsys, "predict", source, "--models-dir", small_models, "--math", "fma")
    assert code == 0, err
    rows = [line.split() for line in shown.splitlines()]
    assert ["0", "conv1"] in [row[:2] for row in rows] and ["1", "[b]x"] in [row[:2] for row in rows]
    out = tmp_path / "pred.csv"
    assert run(capsys, "predict", source, "--models-dir", small_models, "--math", "fma", "-o", out)[0] == 0
    frame = pd.read_csv(out, keep_default_na=False)
    assert list(frame.columns) == ["layer", "name", "stage", *PREDICTION_COLUMNS]
    first = frame.drop_duplicates("layer")
    assert first["layer"].tolist() == [0, 1, 2] and first["name"].tolist() == ["conv1", "[b]x", "conv1"]
    assert first["stage"].tolist() == ["stem, first", "s2", ""]
    # Same shapes, same predictions: only the layer number and labels tell the two conv1 apart.
    same = frame[frame["layer"] != 1].groupby("layer")["predicted_ms"].apply(list).tolist()
    assert same[0] == same[1]
    out = tmp_path / "pred.json"
    assert run(capsys, "predict", source, "--models-dir", small_models, "--math", "fma", "-o", out)[0] == 0
    layers = json.loads(out.read_text())
    assert [(layer["layer"], layer["name"], layer["stage"]) for layer in layers] == [
        (0, "conv1", "stem, first"), (1, "[b]x", "s2"), (2, "conv1", "")]
    assert list(layers[0])[:4] == ["layer", "name", "stage", "batch"]


def test_rows_layer_writes_one_row_per_layer_with_its_pick_and_runner_up(small_models, tmp_path, capsys):
    full, short = tmp_path / "full.csv", tmp_path / "short.csv"
    for out, rows in ((full, "algorithm"), (short, "layer")):
        code, shown, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "--rows", rows, "-o", out)
        assert code == 0, err
        assert f"{N_LAYERS} layers predicted (written to {out})" in " ".join(shown.split())
    every, layers = pd.read_csv(full), pd.read_csv(short)
    runner_up_intervals = [c.replace("predicted_", "runner_up_") for c in INTERVAL_COLUMNS]
    assert list(layers.columns) == ["layer", *LAYER_COLUMNS, "math", "pick", "predicted_ms", *INTERVAL_COLUMNS,
                                    "predicted_mj", "runner_up", "runner_up_ms", *runner_up_intervals,
                                    "runner_up_mj", "extrapolated", "pick_near_best", *PYTORCH_COLUMNS]
    assert layers["layer"].tolist() == list(range(N_LAYERS))
    first = every[every["rank"] == 1].set_index("layer")
    second = every[every["rank"] == 2].set_index("layer").reindex(range(N_LAYERS))
    assert layers["pick"].tolist() == first["algo"].tolist()
    assert layers["predicted_ms"].tolist() == first["predicted_ms"].tolist()  # the same text, so the same numbers
    assert layers["runner_up"].fillna("").tolist() == second["algo"].fillna("").tolist()
    np_equal = pd.Series(layers["runner_up_ms"].to_numpy()).equals(pd.Series(second["predicted_ms"].to_numpy()))
    assert np_equal and layers[list(LAYER_COLUMNS)].equals(first[list(LAYER_COLUMNS)].reset_index(drop=True))
    # JSON: the same keys and values, one object per layer.
    out = tmp_path / "short.json"
    assert run(capsys, "predict", LAYERS, "--models-dir", small_models, "--rows", "layer", "-o", out)[0] == 0
    objects = json.loads(out.read_text())
    assert [list(o) for o in objects[:1]] == [list(layers.columns)] and len(objects) == N_LAYERS
    assert [o["pick"] for o in objects] == layers["pick"].tolist()
    assert [o["runner_up_ms"] for o in objects] == [None if pd.isna(v) else v for v in layers["runner_up_ms"]]


def test_rows_layer_carries_labels_and_marks_a_layer_without_runner_up_or_pick(small_models, tmp_path, capsys):
    source = tmp_path / "named.csv"
    source.write_text('name,batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,stage\n'
                      '"a,b",32,3,64,224,224,7,7,"stem ""x"""\n'
                      'conv2,1,64,64,56,56,3,3,\n')
    out = tmp_path / "pred.csv"
    assert run(capsys, "predict", source, "--models-dir", small_models, "--rows", "layer", "-o", out)[0] == 0
    frame = pd.read_csv(out, keep_default_na=False)
    assert list(frame.columns)[:4] == ["layer", "name", "stage", "batch"]
    assert frame["name"].tolist() == ["a,b", "conv2"] and frame["stage"].tolist() == ['stem "x"', ""]
    # No algorithm at all: pick and runner-up empty, in CSV and JSON.
    model = persist.load(small_models / "h100")
    predictor = model.predictors["default"]
    predictor.supports = {algo: "never" for algo in predictor.algorithms}
    persist.save(model, tmp_path / "never" / "h100")
    for name in ("p.csv", "p.json"):
        assert run(capsys, "predict", source, "--models-dir", tmp_path / "never", "--rows", "layer",
                   "-o", tmp_path / name)[0] == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    empty = "," * (2 * (3 + len(INTERVAL_COLUMNS)) + 1)  # the pick's and the runner-up's columns
    assert len(rows) == 3 and all(f",default{empty}False," in row for row in rows[1:]), rows
    # With no pick, what to run is PyTorch's own choice, where the model predicts it.
    written = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    has_pytorch = model.predictors["default"].policies != {}
    assert written["recommended"].tolist() == (["PYTORCH"] * 2 if has_pytorch else [""] * 2)
    assert (written["pytorch_ms"] != "").all() == has_pytorch
    objects = json.loads((tmp_path / "p.json").read_text())
    assert [(o["pick"], o["predicted_ms"], o["runner_up"]) for o in objects] == [(None, None, None)] * 2


def test_rows_layer_of_no_layers_and_without_out(small_models, tmp_path, capsys):
    source = tmp_path / "none.txt"
    source.write_text("0\n")
    assert run(capsys, "predict", source, "--models-dir", small_models, "--rows", "layer", "-o", tmp_path / "n.csv")[0] == 0
    assert (tmp_path / "n.csv").read_text() == ",".join(output.layer_rows(pd.DataFrame(
        columns=["layer", *PREDICTION_COLUMNS])).columns) + "\n"
    assert "runner_up_ms" in (tmp_path / "n.csv").read_text()
    code, _, err = run(capsys, "predict", LAYERS, "--models-dir", small_models, "--rows", "layer")
    _refused(code, err, "--rows says what --out holds")


def test_a_missing_layer_file_is_refused_at_once_in_the_readers_words(tmp_path, capsys):
    from seer.errors import InputError
    from seer.layers.files import read_layers

    for path in (tmp_path / "missing.txt", tmp_path):
        code, _, err = run(capsys, "predict", path, "--models-dir", tmp_path / "no-models")
        with pytest.raises(InputError) as reader:
            read_layers(path)
        _refused(code, err, str(reader.value))
    # Before the prediction stack loads: neither numpy nor pandas is imported to say so.
    probe = ("import sys, seer.cli; code = seer.cli.main(['predict', sys.argv[1]]); "
             "print(code, 'pandas' in sys.modules, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "missing.txt")], capture_output=True, text=True)
    assert done.stdout.split() == ["2", "False", "False"], done.stderr


def test_building_the_parser_loads_no_numerical_library_and_its_choices_stay_in_step():
    from seer import cli
    from seer.schema import MATH_MODE_NAMES, OBJECTIVES, STEP_OPTIMIZERS

    assert cli.MATH_MODE_CHOICES == MATH_MODE_NAMES and cli.OBJECTIVE_CHOICES == OBJECTIVES
    assert cli.STEP_OPTIMIZER_CHOICES == STEP_OPTIMIZERS
    from seer.networks.profile_network import COMPILE_MODES

    assert cli.COMPILE_MODE_CHOICES == COMPILE_MODES
    assert cli.FORMAT_CHOICES == output.FORMATS and cli.ROWS_CHOICES == output.ROWS
    probe = "import sys, seer.cli; seer.cli.build_parser(); print(sorted({'numpy', 'pandas', 'numba'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
