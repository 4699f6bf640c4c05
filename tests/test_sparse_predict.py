"""Sparse inputs on the prediction side: the ``sparsity`` column of layer files, the shipped
model of seer's sparse kernels' times (``models/h200/sparse.json``), the break-even sparsity,
and ``seer predict`` with and without the column."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from seer.cli import main
from seer.errors import InputError
from seer.layers.files import label_columns, read_layers
from seer.predict import persist
from seer.predict.sparse import (BREAK_EVEN_COLUMN, SPARSE_FILE, TERMS, SparseTimeModel, features,
                                 fit_sparse_model, load_sparse_model, run_crowding, sparse_training_rows)

ROOT = Path(__file__).resolve().parents[1]
SPARSE_DATA = ROOT / "data" / "h200" / "sparse_measurements"
SHIPPED = ROOT / "models" / "h200"
HEADER = "batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,stride_h,stride_w,pad_h,pad_w,sparsity\n"
# Three ResNet-50 layers at 800x1216 (seer/data/networks/resnet50_800x1216.csv).
CONV1, POINT, THREE = "1,3,64,800,1216,7,7,2,2,3,3", "1,64,64,200,304,1,1,1,1,0,0", "1,256,256,50,76,3,3,1,1,1,1"


def _three() -> pd.DataFrame:
    """The layer frame of the 3x3 layer, no labels."""
    return read_layers(io.StringIO(HEADER.replace(",sparsity", "") + f"{THREE}\n"), name="a.csv")


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- the column -----------------------------------------------------------------------------
def test_the_sparsity_column_is_read_as_a_share_of_zeros_and_labels_the_layers():
    text = HEADER + f"{CONV1},0.9\n{POINT},\n{THREE}, .5 \n{THREE},1e-2\n{THREE},0\n"
    frame = read_layers(io.StringIO(text), name="a.csv")
    assert frame["sparsity"].tolist() == [0.9, 0.0, 0.5, 0.01, 0.0]
    assert label_columns(frame) == ["sparsity"]  # carried into the predictions, like name


@pytest.mark.parametrize("cell", ["1", "1.0", "1.5", "-0.1", "abc", "0x1", "nan", "inf", "0.5.1", "\uff10.5", "5%",
                                  "0.9e", "1e5"])
def test_a_bad_sparsity_is_one_line_naming_file_line_and_field(cell, tmp_path, capsys):
    text = HEADER + f"{CONV1},0.5\n{POINT},{cell}\n"
    with pytest.raises(InputError) as info:
        read_layers(io.StringIO(text), name="a.csv")
    assert info.value.line == 3 and info.value.field == "sparsity" and "from 0 to below 1" in info.value.message
    source = tmp_path / "bad.csv"
    source.write_text(text, encoding="utf-8")
    code, _, err = run(capsys, "predict", source, "--gpu", "h200", "--math", "fma")
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert f"{source}:3: sparsity:" in err


def test_the_python_api_takes_sparsity_in_a_frame_and_refuses_a_bad_one():
    model = persist.load_model("h200", math="fma")
    frame = _three()
    out = model.predict(frame.assign(sparsity=[0.99]), "fma")
    assert out["algo"].str.startswith("SEER_SPARSE_").any() and BREAK_EVEN_COLUMN in out
    with pytest.raises(InputError, match="sparsity must be a number in"):
        model.predict(frame.assign(sparsity=[1.0]), "fma")
    # Without the column, nothing changes: no sparse rows, no break-even column.
    plain = model.predict(frame, "fma")
    assert not plain["algo"].str.startswith("SEER_SPARSE_").any() and BREAK_EVEN_COLUMN not in plain


# -- the shipped model ----------------------------------------------------------------------
def test_the_shipped_model_reproduces_the_measurements_within_its_stated_error():
    model = load_sparse_model(SHIPPED)
    assert model is not None and model.gpu == "h200"
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in SPARSE_DATA.iterdir() if p.is_file()}
    assert model.card["data"] == files  # provenance: the committed data it learnt from

    from seer.dataset.build import read_sparse_measurements

    rows = sparse_training_rows(read_sparse_measurements(SPARSE_DATA))
    assert len(rows) == model.card["rows"]
    for algo in model.kernels:
        mine = rows[rows["algo"] == algo]
        j = model.kernels.index(algo)
        predicted = model.times(mine, mine["sparsity"].to_numpy(), run_crowding(mine))[:, j]
        ape = np.abs(predicted / mine["time_ms"].to_numpy() - 1)
        # Fitted on all the layers, it does at least as well as left one layer out (the stated error).
        assert 100 * ape.mean() <= model.card["leave_one_layer_out"][algo]["loo_mape_percent"] + 0.5, algo
        low, high = model.quantiles[algo]["95"]
        ratio = mine["time_ms"].to_numpy() / predicted
        assert np.mean((ratio >= np.exp(low)) & (ratio <= np.exp(high))) >= 0.9, algo
    assert model.card["leave_one_layer_out"]["SEER_SPARSE_GATHER"]["loo_mape_percent"] < 20


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_training_the_sparse_model_writes_what_is_shipped(tmp_path, capsys, gpu):
    code, _, err = run(capsys, "train", "--gpu", gpu, "--sparse", "--data-dir", ROOT / "data",
                       "--models-dir", tmp_path)
    assert code == 0, err
    fresh, shipped = load_sparse_model(tmp_path / gpu), load_sparse_model(ROOT / "models" / gpu)
    assert fresh.card["data"] == shipped.card["data"] and fresh.card["rows"] == shipped.card["rows"]
    for algo in shipped.kernels:
        np.testing.assert_allclose(fresh.coefficients[algo], shipped.coefficients[algo], rtol=1e-6, atol=1e-9)
    # Trained again on the same data, the file does not change, its date included.
    first = (tmp_path / gpu / SPARSE_FILE).read_bytes()
    assert run(capsys, "train", "--gpu", gpu, "--sparse", "--data-dir", ROOT / "data", "--models-dir", tmp_path)[0] == 0
    assert (tmp_path / gpu / SPARSE_FILE).read_bytes() == first


def test_the_h100s_sparse_model_learnt_from_every_batch_of_the_seeds_layers():
    card = load_sparse_model(ROOT / "models" / "h100").card
    assert card["layers"] == 556 and card["ranges"]["batch"] == [1.0, 8.0]
    assert card["sparsity_levels"] == [0.5, 0.8, 0.9, 0.95, 0.99] and card["patterns"] == ["crowded", "relu"]
    errors = {algo: v["loo_mape_percent"] for algo, v in card["leave_one_layer_out"].items()}
    assert errors["SEER_SPARSE_GATHER"] < 12 and max(errors.values()) < 25, errors


def test_each_band_of_crowding_bounds_the_times_with_its_own_held_out_errors():
    from seer.predict.sparse import CROWDING_BANDS

    model = load_sparse_model(SHIPPED)
    frame = _three().loc[[0] * 5]
    crowding = np.array([np.nan, 1.0, 3.0, 8.0, 30.0])  # not measured, then each band
    times = model.times(frame, np.full(5, 0.99), crowding)
    bounds = model.bounds(times, crowding)
    j = model.kernels.index("SEER_SPARSE_GATHER")
    high = np.log(bounds[:, j, 0, 1] / times[:, j])  # the 80% interval's upper offset per layer
    expected = [model.band_quantiles["SEER_SPARSE_GATHER"][b]["80"][1] for b in (0, 0, 1, 2, 3)]
    np.testing.assert_allclose(high, expected)
    assert len(model.card["intervals"]) and model.card["intervals"].count(str(list(CROWDING_BANDS)))
    assert expected[1] < expected[3] < expected[4]  # the error grows with crowding
    pooled = SparseTimeModel(model.gpu, model.coefficients, model.quantiles, model.card)  # a file without bands
    np.testing.assert_allclose(np.log(pooled.bounds(times, crowding)[:, j, 0, 1] / times[:, j]),
                               model.quantiles["SEER_SPARSE_GATHER"]["80"][1])


@pytest.mark.parametrize("damage", [
    lambda d: d["coefficients"]["SEER_SPARSE_GATHER"].__setitem__(0, "1"),
    lambda d: d["coefficients"]["SEER_SPARSE_GATHER"].__setitem__(0, -1.0),
    lambda d: d["coefficients"]["SEER_SPARSE_GATHER"].__setitem__(0, True),
    lambda d: d["coefficients"]["SEER_SPARSE_GATHER"].pop(),
    lambda d: d["quantiles"]["SEER_SPARSE_GATHER"].__setitem__("80", [1.0, -1.0]),
    lambda d: d["coefficients"].__setitem__("os.system", [1.0] * len(TERMS)),
    lambda d: d["coefficients"]["SEER_SPARSE_GATHER"].__setitem__(0, 10 ** 400),
    lambda d: d["coefficients"]["SEER_SPARSE_GATHER"].__setitem__(0, float("inf")),
    lambda d: d["quantiles"]["SEER_SPARSE_GATHER"]["95"].__setitem__(0, float("nan")),
    lambda d: d.__setitem__("version", 1),  # the format before the serial terms
    lambda d: d.__setitem__("terms", ["constant_ms"]),
    lambda d: d["card"]["ranges"].__setitem__("batch", [1, "8"]),
    lambda d: d["power"]["SEER_SPARSE_GATHER"].__setitem__("range_w", [300.0, 100.0]),
    lambda d: d["power"]["SEER_SPARSE_GATHER"].__setitem__("coefficients", [1.0]),
    lambda d: d["power"].__setitem__("SEER_DIRECT", {"coefficients": [1.0, 0.0], "range_w": [1.0, 2.0]}),
    lambda d: d["card"]["ranges"].__setitem__("__class__", [1, 8]),
    lambda d: d["band_quantiles"]["SEER_SPARSE_GATHER"].pop(),
    lambda d: d["band_quantiles"]["SEER_SPARSE_GATHER"][1].__setitem__("80", [0.2, 0.1]),
    lambda d: d.__setitem__("crowding_bands", [2.0, 5.0, 12.0]),
    lambda d: d["band_quantiles"].pop("SEER_SPARSE_SCATTER"),
])
def test_a_damaged_sparse_model_file_is_refused_in_one_sentence(damage, tmp_path):
    document = json.loads((SHIPPED / SPARSE_FILE).read_text())
    damage(document)
    (tmp_path / SPARSE_FILE).write_text(json.dumps(document))
    with pytest.raises(InputError, match="sparse model file"):
        load_sparse_model(tmp_path)
    (tmp_path / SPARSE_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="sparse model file"):
        load_sparse_model(tmp_path)
    assert load_sparse_model(tmp_path / "none") is None


# -- the break-even sparsity --------------------------------------------------------------
def _synthetic(constant: float, per_billion: float) -> SparseTimeModel:
    """gather only: time = constant + (1 - sparsity) * per_billion * dense multiply-adds (in billions)."""
    w = [constant, 0.0, 0.0, per_billion] + [0.0] * (len(TERMS) - 4)
    return SparseTimeModel("h200", {"SEER_SPARSE_GATHER": w},
                           {"SEER_SPARSE_GATHER": {"80": [-0.1, 0.1], "95": [-0.2, 0.2]}}, {})


def test_break_even_is_the_lowest_sparsity_whose_predicted_time_is_below_the_dense_one():
    frame = _three()
    macs = features(frame, np.zeros(1))[0, 3]  # billions of dense multiply-adds
    model = _synthetic(0.01, 1.0)
    dense = 0.01 + 0.1995 * macs  # the sparse time equals it at sparsity 0.8005
    level = model.break_even(frame, np.array([dense]))[0]
    assert level == pytest.approx(0.801)
    times = model.times(frame.loc[[0, 0]], np.array([level, level - 0.001]))[:, 0]
    assert times[0] < dense <= times[1]
    assert model.break_even(frame, np.array([0.02 + macs]))[0] == 0.0  # faster even on a dense input
    assert np.isnan(model.break_even(frame, np.array([0.009]))[0])  # its fixed cost alone is slower
    assert np.isnan(model.break_even(frame, np.array([0.01 + 0.0005 * macs]))[0])  # only above 0.999
    assert np.isnan(model.break_even(frame, np.array([np.nan]))[0])  # no dense time to beat
    # The serial walk of one thread shrinks with the zeros too: the break-even counts both such terms.
    serial = features(frame, np.zeros(1))[0, 5]
    both = SparseTimeModel("h200", {"SEER_SPARSE_GATHER": [0.01, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]},
                           {"SEER_SPARSE_GATHER": {"80": [-0.1, 0.1], "95": [-0.2, 0.2]}}, {})
    dense = 0.01 + 0.1995 * (macs + serial)
    assert both.break_even(frame, np.array([dense]))[0] == pytest.approx(0.801)
    # So do the extra reads under crowded pixels: at crowding 3, twice the serial reads more.
    crowded = 0.01 + 0.1995 * (macs + 3 * serial)
    assert both.break_even(frame, np.array([crowded]), np.array([3.0]))[0] == pytest.approx(0.801)
    assert both.break_even(frame, np.array([crowded]), np.array([np.nan]))[0] < 0.8  # not measured: even


# -- seer predict ---------------------------------------------------------------------------
def test_by_energy_the_sparse_kernels_rank_by_predicted_time_times_their_power():
    model = persist.load_model("h200", math="fma")
    assert set(model.sparse.power) == {"SEER_SPARSE_GATHER", "SEER_SPARSE_SCATTER", "SEER_SPARSE_POINTWISE"}
    frame = pd.DataFrame([dict(zip(HEADER.strip().split(","), map(float, f"{THREE},{level}".split(","))))
                          for level in (0.5, 0.99)]).astype({c: "int64" for c in HEADER.strip().split(",")[:-1]})
    rows = model.predict(frame, "fma", objective="energy")
    sparse = rows[rows["algo"].astype(str).str.startswith("SEER_SPARSE_")]
    assert len(sparse) and sparse["predicted_mj"].notna().all()
    gather = sparse[sparse["algo"] == "SEER_SPARSE_GATHER"].iloc[0]
    (a, b), (low, high) = (model.sparse.power["SEER_SPARSE_GATHER"][k] for k in ("coefficients", "range_w"))
    watts = min(max(a + b * np.log10(gather["predicted_ms"]), low), high)
    assert gather["predicted_mj"] == pytest.approx(gather["predicted_ms"] * watts)
    for _, layer in rows.groupby("layer"):  # each layer ranked by energy, the sparse rows among the dense
        ranked = layer.dropna(subset=["predicted_mj"]).sort_values("rank")
        assert ranked["predicted_mj"].is_monotonic_increasing
        first = ranked.iloc[0]
        assert (layer["recommended"] == first["algo"]).all()  # by energy, the pick itself
    assert rows[rows["layer"] == 1].sort_values("rank")["algo"].iloc[0] == "SEER_SPARSE_GATHER"  # 99% zeros
    assert rows[rows["layer"] == 0].sort_values("rank")["algo"].iloc[0] != "SEER_SPARSE_GATHER"


def test_a_layer_outside_what_the_sparse_model_learnt_has_its_sparse_rows_marked_extrapolated():
    model = persist.load_model("h200", math="fma")
    assert model.sparse.card["ranges"]["batch"] == [1.0, 8.0] and model.sparse.card["ranges"]["groups"] == [1.0, 1.0]
    frame = pd.DataFrame([dict(zip(HEADER.strip().split(","), map(float, f"{THREE},0.95".split(","))))] * 3)
    frame = frame.astype({c: "int64" for c in frame.columns if c != "sparsity"})
    frame.loc[1, "batch"] = 32  # a batch it never saw
    frame.loc[2, "sparsity"] = 0.3  # fewer zeros than any it saw
    rows = model.predict(frame, "fma")
    sparse = rows[rows["algo"].astype(str).str.startswith("SEER_SPARSE_")]
    dense = rows[~rows["algo"].astype(str).str.startswith("SEER_SPARSE_")]
    marked = sparse.groupby("layer")["extrapolated"].all()
    assert not marked[0] and marked[1] and marked[2]
    # The dense rows keep the forward model's own mark.
    assert not dense.groupby("layer")["extrapolated"].any()[[0, 2]].any()


def test_predict_adds_the_sparse_kernels_and_the_break_even_to_sparse_layers_only(tmp_path, capsys):
    plain, sparse = tmp_path / "plain.csv", tmp_path / "sparse.csv"
    plain.write_text(HEADER.replace(",sparsity", "") + f"{CONV1}\n{POINT}\n{THREE}\n")
    sparse.write_text(HEADER + f"{CONV1},0\n{POINT},0.9\n{THREE},0.99\n")
    outs = {}
    for source in (plain, sparse):
        out = tmp_path / f"{source.stem}-pred.csv"
        code, _, err = run(capsys, "predict", source, "--gpu", "h200", "--math", "fma", "-o", out)
        assert code == 0, err
        outs[source.stem] = out
    before, after = (pd.read_csv(outs[k], keep_default_na=False) for k in ("plain", "sparse"))
    assert list(after.columns) == ["layer", "sparsity", BREAK_EVEN_COLUMN, *before.columns[1:]]
    # The dense layer: every value as without the column.
    dense = after[after["layer"] == 0].drop(columns=["sparsity", BREAK_EVEN_COLUMN])
    assert dense.to_csv(index=False) == before[before["layer"] == 0].to_csv(index=False)
    assert after.loc[after["layer"] == 0, BREAK_EVEN_COLUMN].eq("").all()
    for layer in (1, 2):
        rows = after[after["layer"] == layer]
        kernels = set(rows["algo"][rows["algo"].str.startswith("SEER_SPARSE_")])
        assert kernels == {"SEER_SPARSE_GATHER", "SEER_SPARSE_SCATTER", *(("SEER_SPARSE_POINTWISE",) if layer == 1
                                                                           else ())}
        assert rows["rank"].tolist() == list(range(1, len(rows) + 1))
        assert rows[~rows["algo"].isin(kernels)]["algo"].tolist() == before[before["layer"] == layer]["algo"].tolist()
        sparse_rows = rows[rows["algo"].isin(kernels)]
        assert (sparse_rows["predicted_ms_low80"].astype(float) < sparse_rows["predicted_ms"].astype(float)).all()
        recommended = rows["recommended"].iloc[0]
        if recommended in kernels:  # only where surely faster than PyTorch's choice
            chosen = rows[rows["algo"] == recommended].iloc[0]
            assert float(chosen["predicted_ms_high80"]) < float(rows["pytorch_low80"].iloc[0])
    # At 0.99, the 3x3 layer's gather is predicted faster than every cuDNN algorithm (measured: from 0.9).
    three = after[after["layer"] == 2]
    assert three["algo"].iloc[0] == "SEER_SPARSE_GATHER" and 0.8 < float(three[BREAK_EVEN_COLUMN].iloc[0]) < 0.99
    assert after.loc[after["layer"] == 1, BREAK_EVEN_COLUMN].eq("").all()  # a narrow 1x1: none


def test_a_file_whose_layers_are_all_dense_predicts_as_without_the_column(tmp_path, capsys):
    plain, zeros = tmp_path / "plain.csv", tmp_path / "zeros.csv"
    plain.write_text(HEADER.replace(",sparsity", "") + f"{CONV1}\n{POINT}\n{THREE}\n")
    zeros.write_text(HEADER + f"{CONV1},0\n{POINT},\n{THREE},0.0\n")
    texts = {}
    for source in (plain, zeros):
        for fmt in ("csv", "json"):
            out = tmp_path / f"{source.stem}-pred.{fmt}"
            assert run(capsys, "predict", source, "--gpu", "h200", "--math", "fma", "-o", out)[0] == 0
            texts[source.stem, fmt] = out.read_text()
    frame = pd.read_csv(io.StringIO(texts["zeros", "csv"]), dtype=str, keep_default_na=False)
    assert frame.drop(columns=["sparsity", BREAK_EVEN_COLUMN]).to_csv(index=False) == \
        pd.read_csv(io.StringIO(texts["plain", "csv"]), dtype=str, keep_default_na=False).to_csv(index=False)
    objects = json.loads(texts["zeros", "json"])
    for o in objects:
        del o["sparsity"], o[BREAK_EVEN_COLUMN]
    assert objects == json.loads(texts["plain", "json"])


def test_models_without_a_sparse_model_ignore_the_column(models_without_sparse):
    model = persist.load_model("h100", math="fma", models_dir=models_without_sparse)
    assert model.sparse is None
    frame = _three()
    assert model.predict(frame.assign(sparsity=[0.99]), "fma").equals(model.predict(frame, "fma"))


def test_fitting_needs_sparse_runs():
    with pytest.raises(InputError, match="no ok runs"):
        fit_sparse_model(pd.DataFrame({"algo": ["IMPLICIT_GEMM"], "status": ["ok"], "sparsity": [0.5],
                                       "time_ms": [1.0]}), "h200")


@pytest.mark.parametrize("argv", [["--gpu", "h100"], ["--gpu", "h200", "--pass", "bwd_data"]])
def test_a_sparsity_that_ranks_nothing_says_so_once(argv, tmp_path, capsys, models_without_sparse):
    if argv[1] == "h100":
        argv = [*argv, "--models-dir", str(models_without_sparse)]
    source = tmp_path / "layers.csv"
    source.write_text(HEADER + f"{THREE},0.99\n{THREE},0.95\n")
    code, _, err = run(capsys, "predict", source, "--math", "fma", *argv, "-o", tmp_path / "out.csv")
    assert code == 0 and err.count("the sparsity column ranks seer's sparse kernels only") == 1, err
    ranked = pd.read_csv(tmp_path / "out.csv")
    assert not ranked["algo"].astype(str).str.startswith("SEER_SPARSE_").any()


def test_a_sparsity_that_ranks_the_sparse_kernels_needs_no_note(tmp_path, capsys):
    source = tmp_path / "layers.csv"
    source.write_text(HEADER + f"{THREE},0.99\n")
    for objective in ("time", "energy"):  # by energy too: the H200's sparse model has their power
        code, _, err = run(capsys, "predict", source, "--math", "fma", "--gpu", "h200", "--objective", objective,
                           "-o", tmp_path / "out.csv")
        assert code == 0 and "ranks seer's sparse kernels only" not in err
        assert pd.read_csv(tmp_path / "out.csv")["algo"].astype(str).str.startswith("SEER_SPARSE_").any()


def test_the_table_shows_each_layers_zeros_and_break_even(tmp_path, capsys):
    source = tmp_path / "layers.csv"
    source.write_text(HEADER + f"{THREE},0.99\n{THREE},\n")
    code, out, _ = run(capsys, "predict", source, "--math", "fma", "--gpu", "h200")
    assert code == 0 and "zeros" in out and "break-even" in out and "99%" in out, out
    lines = [line for line in out.splitlines() if line.lstrip().startswith(("0 ", "1 "))]
    assert "99%" in lines[0] and "99%" not in lines[1], lines  # the dense layer shows no share of zeros
    # A file with no sparse layer keeps the table it had.
    source.write_text(HEADER + f"{THREE},\n")
    code, out, _ = run(capsys, "predict", source, "--math", "fma", "--gpu", "h200")
    assert code == 0 and "break-even" not in out


def test_a_dense_layers_break_even_does_not_depend_on_the_other_layers(tmp_path, capsys):
    values = []
    for text in (f"{THREE},0\n", f"{THREE},0\n{POINT},0.9\n"):
        source = tmp_path / "layers.csv"
        source.write_text(HEADER + text)
        assert run(capsys, "predict", source, "--math", "fma", "--gpu", "h200", "-o", tmp_path / "out.csv")[0] == 0
        rows = pd.read_csv(tmp_path / "out.csv")
        values.append(rows.loc[rows["layer"] == 0, "break_even_sparsity"].iloc[0])
    assert values[0] == values[1] and 0 < values[0] < 1, values


def test_where_a_sparse_kernel_leads_without_a_sure_gain_the_dense_pick_is_used_with_its_own_time(tmp_path, capsys):
    """8x512x14x14 -> 512, 3x3, at 99% zeros on the H200 under fma: gather is predicted fastest, but its
    interval overlaps WINOGRAD_NONFUSED's, so that dense pick is recommended: the table names it, and the
    training step uses it with its own time, not gather's."""
    from seer.predict.model import best_per_layer, recommended_rows
    from seer.predict.persist import load_passes
    from seer.predict.step import training_step

    layer = "8,512,512,14,14,3,3,1,1,1,1"
    layers = read_layers(io.StringIO(HEADER + f"{layer},0.99\n"), name="a.csv")
    models = load_passes("h200", math="fma")
    predictions = models["fwd"].predict(layers, "fma")
    picks = best_per_layer(predictions)
    assert picks["best_algo"].iloc[0] == "SEER_SPARSE_GATHER" and picks["recommended"].iloc[0] == "WINOGRAD_NONFUSED"
    winograd = predictions[predictions["algo"] == "WINOGRAD_NONFUSED"].iloc[0]
    assert recommended_rows(predictions, picks)["predicted_ms"].iloc[0] == winograd["predicted_ms"]
    step = training_step(models, layers, "fma")
    assert step["fwd_algo"].iloc[0] == "WINOGRAD_NONFUSED" and step["fwd_ms"].iloc[0] == winograd["predicted_ms"]
    source = tmp_path / "layers.csv"
    source.write_text(HEADER + f"{layer},0.99\n")
    code, out, _ = run(capsys, "predict", source, "--math", "fma", "--gpu", "h200")
    row = next(line for line in out.splitlines() if line.lstrip().startswith("0 "))
    assert code == 0 and row.rstrip().endswith("WINOGRAD_NONFUSED") and "a name: the dense pick" in out, out


def test_a_crowded_input_slows_the_sparse_kernel_and_beyond_what_was_learnt_it_is_not_recommended(tmp_path, capsys):
    model = persist.load_model("h200", math="fma")
    beyond = model.sparse.max_crowding * 2
    source = tmp_path / "layers.csv"
    source.write_text(HEADER.replace("sparsity", "sparsity,crowding") + f"{THREE},0.99,1.2\n{THREE},0.99,"
                      f"{beyond}\n{THREE},0.99,\n{THREE},0.99,3\n")
    layers = read_layers(source)
    assert np.isnan(layers["crowding"].iloc[2]) and layers["crowding"].iloc[1] == beyond
    predictions = model.predict(layers, "fma")
    gather = predictions[predictions["algo"] == "SEER_SPARSE_GATHER"].set_index("layer")["predicted_ms"]
    assert gather[2] < gather[0] < gather[3] < gather[1]  # not measured: even; the more crowded, the slower
    first = predictions[predictions["rank"] == 1].set_index("layer")
    assert first["algo"].iloc[[0, 2]].str.startswith("SEER_SPARSE_").all()
    recommended = first["recommended"].tolist()
    assert recommended[0] == recommended[2] == first["algo"].iloc[0]
    assert not recommended[1].startswith("SEER_SPARSE_")
    with pytest.raises(InputError, match="layer 0: crowding must be a number from 0"):
        persist.load_model("h200", math="fma").predict(layers.assign(crowding=-1.0), "fma")
    code, out, _ = run(capsys, "predict", source, "--math", "fma", "--gpu", "h200")
    assert code == 0 and "crowding: on 1 of 4 layers" in out, out
    source.write_text(HEADER.replace("sparsity", "sparsity,crowding") + f"{THREE},0.99,many\n")
    code, _, err = run(capsys, "predict", source, "--math", "fma", "--gpu", "h200")
    assert code == 2 and "layers.csv:2: crowding: crowding must be a number from 0" in err, err


def test_the_crowding_study_rebuilds_its_committed_tables(tmp_path, monkeypatch):
    """``benchmarks/sparse_crowding.py`` on the committed data and network picks gives the committed
    tables again: crowded over even times per band, and the shipped model against each pick."""
    from conftest import REPO, benchmark_module

    committed = REPO / "benchmarks" / "results" / "h200-sparse-crowding"
    picks = REPO / "benchmarks" / "results" / "h200-sparse-network-graphs" / "after-fix-0.99" / "picks.csv"
    monkeypatch.chdir(REPO)
    assert benchmark_module("sparse_crowding").main(["--gpu", "h200", "--picks", str(picks), "--out", str(tmp_path)]) == 0
    for name in ("ratios.csv", "picks-check.csv"):
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name
    checked = pd.read_csv(tmp_path / "picks-check.csv")
    # Every pick the guard takes won on its own input; the model's error there is the stated one.
    assert checked.loc[checked["guard_takes"], "gather_won"].all() and checked["guard_takes"].sum() == 6
    error = (checked["predicted_ms"] / checked["sparse_ms"] - 1).abs().mean()
    assert error < 0.1 < (checked["predicted_even_ms"] / checked["sparse_ms"] - 1).abs().mean()
    ratios = pd.read_csv(tmp_path / "ratios.csv")
    dense = ratios[~ratios["algo"].str.startswith("SEER_")]
    assert dense["50%"].between(0.98, 1.02).all()  # cuDNN's times do not depend on the zeros


def test_the_h200_sparse_model_on_the_h100s_runs_rebuilds_its_committed_table(tmp_path, monkeypatch):
    """``benchmarks/sparse_transfer.py``: the H200's shipped sparse model on the H100's sparse runs."""
    from conftest import REPO, benchmark_module

    committed = REPO / "benchmarks" / "results" / "h100-sparse-transfer"
    monkeypatch.chdir(REPO)
    assert benchmark_module("sparse_transfer").main(["--gpu", "h100", "--model-gpu", "h200", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "runs.csv").read_text() == (committed / "runs.csv").read_text()
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert set(runs["sparsity_pattern"]) == {"relu", "crowded"} and runs["other_gpu_ms"].notna().all()
    gather = runs[(runs["algo"] == "SEER_SPARSE_GATHER") & (runs["sparsity_pattern"] == "relu")]
    assert (gather["predicted_ms"] / gather["time_ms"] - 1).abs().mean() < 0.12
