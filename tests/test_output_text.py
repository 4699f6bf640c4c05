"""seer.output's own text: byte for byte what pandas' to_csv and json.dumps write, faster, for any
columns a prediction frame may hold; and the one-row-per-layer form (``--rows layer``)."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from seer import output
from seer.layers.shapes import LAYER_COLUMNS
from seer.schema import INTERVAL_COLUMNS, PREDICTION_COLUMNS, PYTORCH_COLUMNS

#: Labels that quoting, escaping and missing values must get right.
LABELS = ["conv1", "a,b", 'say "hi"', "two\nlines", "cr\rhere", "", "ü and 中", " lead", "trail ", "#x", "1.0",
          None, float("nan"), "[b]"]


def _frame(layers: int = 40, seed: int = 0, extra: bool = False) -> pd.DataFrame:
    """A prediction frame as Model.predict and with_labels give it: rank-ordered rows per layer,
    some layers with one algorithm or none, labels of every awkward kind."""
    rng = np.random.default_rng(seed)
    rows = []
    for layer in range(layers):
        count = int(rng.integers(0, 5))
        fields = {name: int(rng.integers(1, 300)) for name in LAYER_COLUMNS}
        label = LABELS[layer % len(LABELS)]
        pytorch = float(np.exp(rng.normal(-3, 4))) if layer % 5 else np.nan  # per layer, as Model.predict
        guard = {"pytorch_ms": pytorch, **{c: pytorch * f for c, f in zip(PYTORCH_COLUMNS[1:-1], (0.9, 1.1, 0.8, 1.3))},
                 "recommended": None if not count and np.isnan(pytorch) else "PYTORCH" if layer % 2 else "ALGO_0"}
        for rank in range(1, max(count, 1) + 1):
            runs = count > 0
            ms = float(np.exp(rng.normal(-3, 4))) if runs else np.nan
            rows.append({"layer": layer, "name": label, "stage": LABELS[(layer * 7) % len(LABELS)], **fields,
                         "math": "default", "algo": f"ALGO_{int(rng.integers(0, 9))}" if runs else None,
                         "predicted_ms": ms, "predicted_mj": ms * 250 if runs and rank % 2 else np.nan,
                         **{c: ms * factor for c, factor in zip(INTERVAL_COLUMNS, (0.9, 1.1, 0.8, 1.3))},
                         "rank": rank if runs else None, "extrapolated": bool(layer % 3 == 0),
                         "pick_near_best": (layer % 10) / 9 if runs and layer % 4 else np.nan, **guard})
    frame = pd.DataFrame(rows)[["layer", "name", "stage", *PREDICTION_COLUMNS]]
    frame["algo"] = pd.array(frame["algo"], dtype="string")
    frame["rank"] = pd.array(frame["rank"], dtype="Int64")
    frame["recommended"] = pd.array(frame["recommended"], dtype="string")
    for special, value in ((0, 0.0), (1, -0.0), (2, 1e-5), (3, 1e16), (4, 123456789.0), (5, 5e-324)):
        frame.loc[special, "predicted_ms"] = value
    if extra:  # columns a later seer may add: an interval per algorithm, a choice per layer
        frame["predicted_ms_low"] = frame["predicted_ms"] * 0.9
        frame["pytorch_algo"] = pd.array(np.where(frame["layer"] % 2, "GEMM", None), dtype="string")
    return frame


@pytest.fixture
def new_columns(monkeypatch):
    """PREDICTION_COLUMNS as a later seer may have them: an interval bound per algorithm after
    predicted_ms, and PyTorch's choice per layer at the end, declared per layer."""
    columns = list(PREDICTION_COLUMNS)
    columns.insert(columns.index("predicted_ms") + 1, "predicted_ms_low")
    monkeypatch.setattr(output, "PREDICTION_COLUMNS", (*columns, "pytorch_algo"))
    monkeypatch.setattr(output, "PER_LAYER_COLUMNS", (*output.PER_LAYER_COLUMNS, "pytorch_algo"))


def _written(frame: pd.DataFrame, fmt: str, rows: str = "algorithm", chunks: int = 1) -> str:
    handle = io.StringIO()
    writer = output.PredictionWriter(handle, fmt, rows)
    edges = np.linspace(0, frame["layer"].max() + 1 if len(frame) else 0, chunks + 1).astype(int)
    for low, high in zip(edges[:-1], edges[1:]):
        writer.write(frame[(frame["layer"] >= low) & (frame["layer"] < high)])
    writer.close()
    return handle.getvalue()


@pytest.fixture(params=["arrow", "python"])
def text_path(request, monkeypatch):
    """Each way the CSV text is built: by Arrow (where this pyarrow writes floats as repr does),
    in blocks of a few rows, and by the Python loop (elsewhere)."""
    if request.param == "arrow" and not output._arrow_writes_floats():
        pytest.skip("this pyarrow writes some float otherwise than repr")
    monkeypatch.setattr(output, "_ARROW_FLOATS", request.param == "arrow")
    monkeypatch.setattr(output, "_ARROW_BLOCK_ROWS", 7)  # many blocks, layers cut across them
    return request.param


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunks", [1, 3])
def test_csv_is_pandas_to_csv_byte_for_byte(seed, chunks, text_path):
    frame = _frame(seed=seed)
    columns = output._output_columns(frame)
    assert _written(frame, "csv", chunks=chunks) == frame.to_csv(columns=columns, index=False)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_blocks_built_on_threads_are_written_in_order(threads, monkeypatch):
    """Arrow's blocks are built on a thread per core ahead of the writer: any number of threads,
    blocks shorter than a layer or than the threads, gives pandas' text."""
    if not output._arrow_writes_floats():
        pytest.skip("this pyarrow writes some float otherwise than repr")
    monkeypatch.setattr(output, "_cores", lambda: threads)
    monkeypatch.setattr(output, "_ARROW_BLOCK_ROWS", 3)
    frame = _frame(layers=60, seed=4)
    assert _written(frame, "csv", chunks=2) == frame.to_csv(columns=output._output_columns(frame), index=False)


def test_csv_carries_new_columns_and_a_per_layer_column_that_varies_stays_right(new_columns):
    frame = _frame(extra=True)
    columns = output._output_columns(frame)
    assert columns[-2:] == ["recommended", "pytorch_algo"] and "predicted_ms_low" in columns
    assert _written(frame, "csv") == frame.to_csv(columns=columns, index=False)
    # A label (per layer by its kind) that differs between a layer's rows is written row by row.
    frame["name"] = [f"row{i}" for i in range(len(frame))]
    assert _written(frame, "csv") == frame.to_csv(columns=columns, index=False)


def test_a_column_of_a_dtype_left_to_pandas_falls_back_to_it():
    frame = _frame()
    frame["when"] = pd.Timestamp("2024-01-02") + pd.to_timedelta(frame["layer"], unit="s")
    columns = output._output_columns(frame)
    assert _written(frame, "csv") == frame.to_csv(columns=columns, index=False)


def _json_reference(frame: pd.DataFrame) -> str:
    """The JSON of seer 0.7's writer, object by object with json.dumps (the specification)."""
    labels = [c for c in output._output_columns(frame)[1:] if c not in PREDICTION_COLUMNS]
    parts = []
    for layer, rows in frame.groupby("layer", sort=False):
        first = rows.iloc[0]
        def number(value):
            return None if np.isnan(value) else float(value)

        runs = [{"algo": r["algo"], "predicted_ms": float(r["predicted_ms"]),
                 **{c: number(r[c]) for c in INTERVAL_COLUMNS}, "predicted_mj": number(r["predicted_mj"]),
                 "rank": int(r["rank"])} for _, r in rows.iterrows() if not pd.isna(r["algo"])]
        parts.append(json.dumps({"layer": int(layer), **{c: output._json_label(first[c]) for c in labels},
                                 **{c: int(first[c]) for c in LAYER_COLUMNS}, "math": first["math"],
                                 "pick": runs[0]["algo"] if runs else None,
                                 "extrapolated": bool(first["extrapolated"]),
                                 "pick_near_best": number(first["pick_near_best"]),
                                 **{c: number(first[c]) for c in PYTORCH_COLUMNS[:-1]},
                                 "recommended": None if pd.isna(first["recommended"]) else first["recommended"],
                                 "algorithms": runs},
                                separators=(",", ":")))
    return "[\n" + ",\n".join(parts) + "\n]\n"


@pytest.mark.parametrize("chunks", [1, 4])
def test_json_is_json_dumps_of_each_layer_byte_for_byte(chunks):
    frame = _frame(seed=3)
    assert _written(frame, "json", chunks=chunks) == _json_reference(frame)
    assert output.layer_objects(frame) == json.loads(_json_reference(frame))
    assert _written(frame.iloc[:0], "json") == "[]\n"


def test_layer_rows_pick_the_first_and_second_row_of_each_layer_and_carry_new_columns(new_columns):
    frame = _frame(extra=True)
    layers = output.layer_rows(frame)
    runner_up_intervals = [c.replace("predicted_", "runner_up_") for c in INTERVAL_COLUMNS]
    assert list(layers.columns) == ["layer", "name", "stage", *LAYER_COLUMNS, "math", "pick", "predicted_ms",
                                    "predicted_ms_low", *INTERVAL_COLUMNS, "predicted_mj", "runner_up",
                                    "runner_up_ms", "runner_up_ms_low", *runner_up_intervals, "runner_up_mj",
                                    "extrapolated", "pick_near_best", *PYTORCH_COLUMNS, "pytorch_algo"]
    assert layers["pytorch_algo"].fillna("").tolist() == ["GEMM" if i % 2 else "" for i in layers["layer"]]
    assert layers["layer"].tolist() == sorted(frame["layer"].unique())
    for layer, rows in frame.groupby("layer"):
        got = layers[layers["layer"] == layer].iloc[0]
        assert got["pick"] is pd.NA if pd.isna(rows["algo"].iloc[0]) else got["pick"] == rows["algo"].iloc[0]
        assert got["predicted_ms"] == rows["predicted_ms"].iloc[0] or np.isnan(rows["predicted_ms"].iloc[0])
        if len(rows) > 1:
            assert (got["runner_up"], got["runner_up_ms"]) == (rows["algo"].iloc[1], rows["predicted_ms"].iloc[1])
        else:
            assert pd.isna(got["runner_up"]) and np.isnan(got["runner_up_ms"])
    # As text: CSV is what pandas writes of that frame; JSON has the same keys and values.
    assert _written(frame, "csv", "layer", chunks=3) == layers.to_csv(index=False)
    objects = json.loads(_written(frame, "json", "layer", chunks=2))
    assert [list(o) for o in objects] == [list(layers.columns)] * len(layers)
    assert [o["runner_up"] for o in objects] == [None if pd.isna(v) else v for v in layers["runner_up"]]
    assert [o["name"] for o in objects] == [None if pd.isna(v) else v for v in layers["name"]]


def test_fields_that_the_csv_module_quotes_are_quoted_as_it_does():
    for text in LABELS[:-3]:
        buffer = io.StringIO()
        pd.DataFrame({"a": [text], "b": [1]}).to_csv(buffer, index=False, header=False)
        assert output._csv_field(text) + ",1\n" == buffer.getvalue()


def test_text_goes_out_a_mebibyte_at_a_time():
    """A pipe whose reader left (`| head`) cuts a write short and refuses the next one; a single
    write of megabytes would end quietly, so the writers never make one."""
    class Recorder(io.StringIO):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def write(self, text):
            self.sizes.append(len(text))
            return super().write(text)

    frame = _frame(layers=9000)
    for fmt in output.FORMATS:
        handle = Recorder()
        output.PredictionWriter(handle, fmt).write(frame)
        assert sum(handle.sizes) > 2 * output._PIECE and max(handle.sizes) <= output._PIECE


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_repeated_floats_are_written_once_each_and_the_same(monkeypatch, zero):
    """Columns whose values repeat (repeated layers) are written value by distinct value: the
    same text, NaNs empty, and -0.0 (which a hash merges with 0.0) kept apart."""
    monkeypatch.setattr(output, "_ARROW_FLOATS", False)  # the Python loop's floats
    frame = pd.concat([_frame(seed=3)] * 4, ignore_index=True)
    frame.loc[7, "pick_near_best"] = zero
    monkeypatch.setattr(output, "_DEDUPLICATE_FLOATS", 8)
    columns = output._output_columns(frame)
    expected = frame.to_csv(columns=columns, index=False)
    assert _written(frame, "csv") == expected and frame["predicted_ms"].isna().any()
    calls = []
    original = np.unique
    monkeypatch.setattr(np, "unique", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert _written(frame, "csv") == expected and calls  # the distinct-value path ran


def test_arrow_writes_every_float_as_repr_does():
    """Floats of every magnitude and form, whole numbers, the bounds of Arrow's own form and
    their neighbours, signed zeros, NaN and infinities: Arrow's text is repr's (NaN empty)."""
    if not output._arrow_writes_floats():
        pytest.skip("this pyarrow writes some float otherwise than repr; the Python loop writes")
    rng = np.random.default_rng(0)
    exponents = rng.uniform(-330, 308, 200_000)
    with np.errstate(over="ignore"):  # the largest overflow to infinity: written too
        values = np.concatenate([
            (1 + rng.random(200_000)) * 10.0 ** exponents * rng.choice([-1, 1], 200_000),
            10.0 ** rng.uniform(-6, 9, 200_000),  # around the bounds, densely
            np.round(10.0 ** rng.uniform(-1, 17, 50_000)),  # whole numbers
            rng.integers(-10**6, 10**6, 50_000) / rng.choice([1, 2, 4, 8, 10, 100, 1000], 50_000),
            [b * f for b in output._ARROW_FLOAT_BOUNDS for f in (1, 1 + 1e-16, 1 - 1e-16, -1)],
            [np.nextafter(b, d) for b in output._ARROW_FLOAT_BOUNDS for d in (0, np.inf)],
            [0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, 1.7976931348623157e308],
        ])
    texts = output._arrow_float_cells(values).to_pylist()
    expected = ["" if v != v else repr(v) for v in values.tolist()]
    wrong = [(e, t) for e, t in zip(expected, texts) if e != t]
    assert not wrong, wrong[:5]


def test_a_pyarrow_that_writes_floats_otherwise_leaves_the_text_to_python(monkeypatch):
    """The check made once: where Arrow's text of one probe differs from repr, the Python loop
    writes, and the bytes are pandas' still."""
    real = output._arrow_float_cells
    monkeypatch.setattr(output, "_arrow_float_cells",
                        lambda values: real(np.full_like(values, 2.5)))  # a pyarrow that writes wrongly
    monkeypatch.setattr(output, "_ARROW_FLOATS", None)
    frame = _frame(seed=5)
    assert _written(frame, "csv") == frame.to_csv(columns=output._output_columns(frame), index=False)
    assert output._ARROW_FLOATS is False
