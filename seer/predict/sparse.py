"""The time of seer's sparse kernels (``SEER_SPARSE_*``) on inputs with a share of zeros.

A small physical model per kernel, learnt from the sparse measurements of one GPU
(``data/<gpu>/sparse_measurements``):

    time_ms = a + b·(input elements) + c·(output elements) + d·(1 − sparsity)·(dense multiply-adds)
              + e·(list walks) + f·(1 − sparsity)·(taps · input channels per group)
              + g·(taps · blocks of 32 input channels per group)
              + h·(1 − sparsity)·(crowding − 1)·(taps · input channels per group)
              + i·(crowding − 1)·(taps · blocks of 32 input channels per group)

where a list walk is one (output position, 4 output channels, tap, block of 32 input channels):
what ``gather`` visits whether or not the block holds a non-zero. The last two terms are what one
thread walks in series (the non-zeros and the blocks under its filter): they set the time of
layers too small to fill the GPU (a 7x7 map with 1,000 input channels), where the work in
parallel does not. The last two are what the thread under the most crowded pixels reads and
walks beyond that (``crowding``: :func:`seer.layers.sparsity.pixel_crowding`, the most
non-zeros at one pixel over what evenly spread non-zeros give; 1 and below: none): with the
first alone, times of inputs crowded 8 to 50 times came out 10-30% low. The coefficients are
non-negative (each term is work that costs time), fitted by non-negative least squares on
the relative error. Each kernel's 80% and 95% intervals are the quantiles of log(measured /
predicted) over leave-one-layer-out fits (as :mod:`seer.predict.uncertainty` does with held-out
layers), per band of crowding (:data:`CROWDING_BANDS`), since the error grows with it. Only the
terms with (1 − sparsity) depend on the share of zeros, so at a given crowding a kernel's time
falls linearly with it and the break-even sparsity against a dense time has a closed form.

The collector's ``relu`` and ``uniform`` inputs spread their non-zeros evenly (crowding 0.8 to
1.2); its ``crowded`` inputs pile them on some pixels. Runs recorded before crowding was
measured (no ``input_crowding``) are from the first two and are taken as even (1), as is a layer
whose crowding is not given.

The model is stored as a small JSON file, ``models/<gpu>/sparse.json``; loading parses JSON
and checks every value's type and range, and builds nothing else.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

from seer.errors import InputError
from seer.schema import INTERVAL_COLUMNS, INTERVAL_LEVELS

if TYPE_CHECKING:  # imported where used: seer predict computes on layer tables, without pandas
    import pandas as pd

#: The model file in a GPU's models folder.
SPARSE_FILE = "sparse.json"
FORMAT, FORMAT_VERSION = "seer-sparse-model", 3
#: The sparse kernels modelled, in the order their rows are listed.
SPARSE_KERNELS: tuple[str, ...] = ("SEER_SPARSE_GATHER", "SEER_SPARSE_SCATTER", "SEER_SPARSE_POINTWISE")
#: The model's terms, in the order of its coefficients (sizes in millions, work in billions,
#: so that the coefficients are of similar scale).
TERMS: tuple[str, ...] = ("constant_ms", "ms_per_million_input_elements", "ms_per_million_output_elements",
                          "ms_per_billion_nonzero_multiply_adds", "ms_per_billion_list_walks",
                          "ms_per_thousand_nonzero_serial_reads", "ms_per_thousand_serial_blocks",
                          "ms_per_thousand_crowded_serial_reads", "ms_per_thousand_crowded_serial_blocks")
#: The terms that shrink with the input's zeros (times (1 − sparsity)); the others do not.
DENSITY_TERMS = (3, 5, 7)
#: The highest sparsity a break-even is looked for below: above it almost nothing is left.
BREAK_EVEN_LIMIT = 0.999
#: The column of a layer's break-even sparsity in predictions.
BREAK_EVEN_COLUMN = "break_even_sparsity"
#: The largest model file read.
_MAX_BYTES = 1 << 20


def _sizes(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    f = {c: frame[c].to_numpy(dtype=float) for c in ("batch", "in_ch", "out_ch", "groups", "in_d", "in_h", "in_w",
                                                     "kernel_d", "kernel_h", "kernel_w", "out_d", "out_h", "out_w")}
    taps = f["kernel_d"] * f["kernel_h"] * f["kernel_w"]
    positions = f["batch"] * f["out_d"] * f["out_h"] * f["out_w"]
    per_group = f["in_ch"] / f["groups"]
    return {"input": f["batch"] * f["in_ch"] * f["in_d"] * f["in_h"] * f["in_w"],
            "output": positions * f["out_ch"],
            "macs": positions * f["out_ch"] * per_group * taps,
            "walks": positions * np.ceil(f["out_ch"] / 4) * taps * np.ceil(per_group / 32),
            "serial_reads": taps * per_group, "serial_blocks": taps * np.ceil(per_group / 32)}


#: What the card's ``ranges`` bound: a layer outside any of them is an extrapolation.
RANGE_FIELDS = ("batch", "in_ch", "out_ch", "groups", "dims", "in_pixels", "taps", "sparsity", "crowding")


#: Edges of the bands of crowding whose held-out errors bound a kernel's times apart: even inputs
#: (the ``relu`` and ``uniform`` patterns give 0.8 to 1.2), mildly, strongly and very crowded ones.
CROWDING_BANDS: tuple[float, ...] = (1.5, 5.0, 12.0)
#: The fewest held-out runs of a kernel in a band for quantiles of the band's own; fewer: the kernel's.
MIN_BAND_RUNS = 40


def even_where_unknown(crowding: np.ndarray | None, count: int) -> np.ndarray:
    """``crowding`` per layer as floats, NaN (not measured) and a missing array as even (1)."""
    if crowding is None:
        return np.ones(count)
    crowding = np.asarray(crowding, dtype=float)
    return np.where(np.isnan(crowding), 1.0, crowding)


def crowding_band(crowding: np.ndarray | None, count: int) -> np.ndarray:
    """Each layer's band of :data:`CROWDING_BANDS` (0: even; None or NaN: even)."""
    return np.searchsorted(CROWDING_BANDS, even_where_unknown(crowding, count), side="left")


def _range_values(frame: pd.DataFrame, sparsity: np.ndarray, crowding: np.ndarray | None = None
                  ) -> dict[str, np.ndarray]:
    f = {c: frame[c].to_numpy(dtype=float) for c in ("batch", "in_ch", "out_ch", "groups", "in_d", "in_h", "in_w",
                                                     "kernel_d", "kernel_h", "kernel_w")}
    dims = frame["dims"].to_numpy(dtype=float) if "dims" in frame else np.where(f["in_d"] > 1, 3.0, 2.0)
    return {"batch": f["batch"], "in_ch": f["in_ch"], "out_ch": f["out_ch"], "groups": f["groups"], "dims": dims,
            "in_pixels": f["in_d"] * f["in_h"] * f["in_w"], "taps": f["kernel_d"] * f["kernel_h"] * f["kernel_w"],
            "sparsity": np.asarray(sparsity, dtype=float), "crowding": even_where_unknown(crowding, len(frame))}


def features(frame: pd.DataFrame, sparsity: np.ndarray, crowding: np.ndarray | None = None) -> np.ndarray:
    """The model's terms (:data:`TERMS`) per layer of ``frame`` (the layer columns) at ``sparsity``
    and ``crowding`` (None or NaN: even)."""
    s = _sizes(frame)
    density = 1.0 - np.asarray(sparsity, dtype=float)
    beyond_even = np.maximum(even_where_unknown(crowding, len(frame)) - 1.0, 0.0)
    return np.column_stack([np.ones(len(frame)), s["input"] / 1e6, s["output"] / 1e6,
                            density * s["macs"] / 1e9, s["walks"] / 1e9,
                            density * s["serial_reads"] / 1e3, s["serial_blocks"] / 1e3,
                            density * beyond_even * s["serial_reads"] / 1e3, beyond_even * s["serial_blocks"] / 1e3])


def run_crowding(rows: pd.DataFrame) -> np.ndarray | None:
    """The measured crowding of each run of a sparse measurements table (``input_crowding``;
    None for a table from before it was measured)."""
    return rows["input_crowding"].to_numpy(dtype=float) if "input_crowding" in rows else None


def runs_on(algo: str, frame: pd.DataFrame) -> np.ndarray:
    """Which layers of ``frame`` the kernel takes: ``pointwise`` only 1x1, stride 1, unpadded,
    ungrouped ones (``seer.gpu.sparse_kernels.pointwise_refusal``); the others every layer."""
    if algo != "SEER_SPARSE_POINTWISE":
        return np.ones(len(frame), dtype=bool)
    ones = (frame[["kernel_d", "kernel_h", "kernel_w", "stride_d", "stride_h", "stride_w", "groups"]] == 1).all(axis=1)
    return (ones & (frame[["pad_d", "pad_h", "pad_w"]] == 0).all(axis=1)).to_numpy()


def _fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the squared relative error of x @ w against y."""
    from scipy.optimize import nnls  # training only: prediction never imports scipy

    w, _ = nnls(x / y[:, None], np.ones(len(y)))
    return w


@dataclass
class SparseTimeModel:
    """Per sparse kernel: the coefficients of :data:`TERMS`, and the quantiles of
    log(measured / predicted) that bound its times (by level, low and high), over all its runs
    and per band of crowding (``band_quantiles``: one such dict per band; empty: the first
    for every band)."""

    gpu: str
    coefficients: dict[str, list[float]]
    quantiles: dict[str, dict[str, list[float]]]  # algo -> {"80": [low, high], "95": [...]}
    card: dict
    #: Per kernel with enough energy readings: average power (W) = a + b·log10(time in ms), held
    #: within the range of watts read ({"coefficients": [a, b], "range_w": [low, high]}).
    power: dict = field(default_factory=dict)
    band_quantiles: dict[str, list[dict[str, list[float]]]] = field(default_factory=dict)

    @property
    def kernels(self) -> list[str]:
        return [k for k in SPARSE_KERNELS if k in self.coefficients]

    @property
    def max_crowding(self) -> float:
        """The most crowded input a sparse kernel is recommended on: the most crowded the model
        learnt from (its card's range), or :data:`SPARSE_MAX_CROWDING` where it learnt from less."""
        learnt = self.card.get("ranges", {}).get("crowding", [1.0, 1.0])[1]
        return max(float(learnt), SPARSE_MAX_CROWDING)

    def energies(self, times: np.ndarray) -> np.ndarray:
        """Predicted mJ per call for :meth:`times`' array (ms x W), NaN for a kernel without a power model."""
        out = np.full(times.shape, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            for j, algo in enumerate(self.kernels):
                if algo in self.power:
                    (a, b), (low, high) = self.power[algo]["coefficients"], self.power[algo]["range_w"]
                    out[:, j] = times[:, j] * np.clip(a + b * np.log10(times[:, j]), low, high)
        return out

    def times(self, frame: pd.DataFrame, sparsity: np.ndarray, crowding: np.ndarray | None = None) -> np.ndarray:
        """Predicted ms (layers x :attr:`kernels`), NaN where a kernel does not take a layer."""
        x = features(frame, sparsity, crowding)
        out = np.full((len(frame), len(self.kernels)), np.nan)
        for j, algo in enumerate(self.kernels):
            out[:, j] = np.where(runs_on(algo, frame), x @ np.asarray(self.coefficients[algo]), np.nan)
        return out

    def outside(self, frame: pd.DataFrame, sparsity: np.ndarray, crowding: np.ndarray | None = None) -> np.ndarray:
        """Per layer: whether it lies outside what the model learnt from (the card's
        :data:`RANGE_FIELDS` ranges; a layer of more groups or another dimensionality than any
        it saw): its sparse rows are marked ``extrapolated``. A card without ranges marks none."""
        ranges = self.card.get("ranges")
        if not ranges:
            return np.zeros(len(frame), dtype=bool)
        values = _range_values(frame, sparsity, crowding)
        out = np.zeros(len(frame), dtype=bool)
        for name, (low, high) in ranges.items():
            v = values[name]
            out |= (v < low - 1e-9) | (v > high + 1e-9)
        return out

    def bounds(self, times: np.ndarray, crowding: np.ndarray | None = None) -> np.ndarray:
        """The bounds of ``times`` (:meth:`times`' array) at each layer's ``crowding`` (None or
        NaN: even): (layers, kernels, levels, 2)."""
        bands = len(CROWDING_BANDS) + 1
        offsets = np.array([[[q[str(level)] for level in INTERVAL_LEVELS]
                             for q in self.band_quantiles.get(a) or [self.quantiles[a]] * bands]
                            for a in self.kernels])  # (kernels, bands, levels, 2)
        chosen = np.moveaxis(offsets[:, crowding_band(crowding, len(times))], 1, 0)
        return times[:, :, None, None] * np.exp(chosen)

    def break_even(self, frame: pd.DataFrame, dense_ms: np.ndarray, crowding: np.ndarray | None = None
                   ) -> np.ndarray:
        """Per layer: the lowest sparsity at which a sparse kernel's predicted time lies below
        ``dense_ms`` (the best dense algorithm's predicted time, which does not depend on the
        input's zeros), at the layer's ``crowding`` (None or NaN: even), rounded up to 0.001;
        NaN where none does below :data:`BREAK_EVEN_LIMIT`."""
        dense_ms = np.asarray(dense_ms, dtype=float)
        at_zero = features(frame, np.zeros(len(frame)), crowding)
        best = np.full(len(frame), np.inf)
        for algo in self.kernels:
            w = np.asarray(self.coefficients[algo])
            shrinks = np.isin(np.arange(len(TERMS)), DENSITY_TERMS)
            fixed = at_zero[:, ~shrinks] @ w[~shrinks]  # the part that does not shrink with zeros
            per_density = at_zero[:, shrinks] @ w[shrinks]  # time(s) = fixed + (1 - s) * per_density
            with np.errstate(divide="ignore", invalid="ignore"):
                # time(s) < dense  <=>  s > 1 - (dense - fixed) / per_density
                level = np.where(per_density > 0, 1.0 - (dense_ms - fixed) / per_density,
                                 np.where(fixed < dense_ms, 0.0, np.inf))
            level = np.where(fixed + per_density < dense_ms, 0.0, level)
            best = np.where(runs_on(algo, frame), np.minimum(best, level), best)
        # The lowest level on a 0.001 grid whose time is strictly below: the next step up.
        rounded = np.floor(best * 1000 + 1e-9) / 1000 + 0.001
        rounded = np.where(best <= 0, 0.0, np.round(rounded, 3))
        return np.where(np.isfinite(dense_ms) & (rounded < BREAK_EVEN_LIMIT), rounded, np.nan)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "gpu": self.gpu, "terms": list(TERMS),
                           "coefficients": self.coefficients, "quantiles": self.quantiles, "power": self.power,
                           "crowding_bands": list(CROWDING_BANDS), "band_quantiles": self.band_quantiles,
                           "card": self.card}, indent=1, sort_keys=False) + "\n"


def sparse_training_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The ``ok`` runs of the sparse kernels in a sparse measurements table, sparsity above 0."""
    keep = table["algo"].isin(SPARSE_KERNELS) & (table["status"] == "ok") & (table["sparsity"] > 0)
    return table[keep & (table["time_ms"] > 0)].reset_index(drop=True)


def leave_one_layer_out(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (:func:`sparse_training_rows`) with ``predicted_ms``: each layer's times
    predicted by the kernel's model fitted on the other layers (by ``dense_shape_id``)."""
    out = rows.assign(predicted_ms=np.nan)
    for algo, group in rows.groupby("algo"):
        x = features(group, group["sparsity"].to_numpy(), run_crowding(group))
        y = group["time_ms"].to_numpy(dtype=float)
        layer = group["dense_shape_id"].to_numpy()
        for held in np.unique(layer):
            train = layer != held
            out.loc[group.index[~train], "predicted_ms"] = x[~train] @ _fit(x[train], y[train])
    return out


#: The fewest energy readings of a kernel for a power model of it.
MIN_POWER_READINGS = 10


def _fit_power(time_ms: np.ndarray, power_w: np.ndarray) -> dict:
    """Least squares of power on log10(time): longer calls keep more of the GPU busy."""
    x = np.column_stack([np.ones(len(time_ms)), np.log10(time_ms)])
    a, b = np.linalg.lstsq(x, power_w, rcond=None)[0]
    return {"coefficients": [float(a), float(b)], "range_w": [float(power_w.min()), float(power_w.max())]}


#: Inputs at most this crowded count as even for the power model (the first band of crowding).
EVEN_CROWDING = CROWDING_BANDS[0]


def fit_power(rows: pd.DataFrame) -> tuple[dict, dict]:
    """Per sparse kernel with :data:`MIN_POWER_READINGS` energy readings in ``rows``
    (:func:`sparse_training_rows`) on evenly spread non-zeros (:data:`EVEN_CROWDING`): its power
    model, and the leave-one-layer-out error of energy per call (from the measured time, so that
    it is the power model's alone), and its error on the crowded inputs' readings.

    Crowded inputs are left out of the fit: there ``gather``'s long calls keep few threads busy
    and draw little power (113-186 W on the H200, against 121-233 W on even inputs), so one line
    in log(time) through both would tilt downwards and price long calls on even inputs as cheap.
    Their energy is then overstated, never understated."""
    power, errors = {}, {}
    if "energy_mj" not in rows:
        return power, errors
    read = rows[rows["energy_mj"].notna() & (rows["power_w"] > 0)]
    crowded = even_where_unknown(run_crowding(read), len(read)) > EVEN_CROWDING
    for algo, group in read[~crowded].groupby("algo"):
        if len(group) < MIN_POWER_READINGS or group["dense_shape_id"].nunique() < 2:
            continue
        t, w, layer = (group[c].to_numpy() for c in ("time_ms", "power_w", "dense_shape_id"))
        t, w = t.astype(float), w.astype(float)
        power[algo] = _fit_power(t, w)
        ape = []
        for held in np.unique(layer):
            model = _fit_power(t[layer != held], w[layer != held])
            (a, b), (low, high) = model["coefficients"], model["range_w"]
            guess = np.clip(a + b * np.log10(t[layer == held]), low, high)
            ape.extend(np.abs(guess / w[layer == held] - 1))
        errors[algo] = {"readings": int(len(group)), "layers": int(len(np.unique(layer))),
                        "loo_power_mape_percent": round(float(100 * np.mean(ape)), 2)}
        other = read[crowded & (read["algo"] == algo)]
        if len(other):
            (a, b), (low, high) = power[algo]["coefficients"], power[algo]["range_w"]
            guess = np.clip(a + b * np.log10(other["time_ms"].to_numpy(dtype=float)), low, high)
            errors[algo] |= {"crowded_readings": int(len(other)), "crowded_power_mape_percent": round(
                float(100 * np.mean(np.abs(guess / other["power_w"].to_numpy(dtype=float) - 1))), 2)}
    return power, errors


def fit_sparse_model(table: pd.DataFrame, gpu: str, source: Path | None = None) -> SparseTimeModel:
    """Fit :class:`SparseTimeModel` on a sparse measurements table
    (:func:`seer.dataset.build.read_sparse_measurements`); ``source`` is the table's folder,
    whose files' SHA-256 the card records."""
    rows = sparse_training_rows(table)
    if rows.empty:
        raise InputError("no ok runs of seer's sparse kernels in the sparse measurements", field="sparse")
    held = leave_one_layer_out(rows)
    coefficients, quantiles, band_quantiles, errors = {}, {}, {}, {}
    for algo in SPARSE_KERNELS:
        group = held[held["algo"] == algo]
        if group.empty:
            continue
        y = group["time_ms"].to_numpy(dtype=float)
        x = features(group, group["sparsity"].to_numpy(), run_crowding(group))
        coefficients[algo] = [float(v) for v in _fit(x, y)]
        log_ratio = np.log(y / group["predicted_ms"].to_numpy())
        quantiles[algo] = _interval_quantiles(log_ratio)
        band = crowding_band(run_crowding(group), len(group))
        band_quantiles[algo] = [_interval_quantiles(log_ratio[band == b]) if (band == b).sum() >= MIN_BAND_RUNS
                                else quantiles[algo] for b in range(len(CROWDING_BANDS) + 1)]
        ape = np.abs(group["predicted_ms"].to_numpy() / y - 1)
        errors[algo] = {"runs": int(len(group)), "layers": int(group["dense_shape_id"].nunique()),
                        "loo_mape_percent": round(float(100 * ape.mean()), 2),
                        "loo_median_ape_percent": round(float(100 * np.median(ape)), 2),
                        "loo_mape_percent_by_pattern": {
                            str(pattern): round(float(100 * ape[(group["sparsity_pattern"] == pattern).to_numpy()].mean()), 2)
                            for pattern in sorted(group["sparsity_pattern"].unique())}}
    files = sorted(p for p in Path(source).iterdir() if p.is_file()) if source is not None else []
    card = {"trained_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data": {str(p.name): hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
            "rows": int(len(rows)), "layers": int(rows["dense_shape_id"].nunique()),
            "sparsity_levels": sorted(float(v) for v in rows["sparsity"].unique()),
            "patterns": sorted(str(v) for v in rows["sparsity_pattern"].unique()),
            "maths": sorted(str(v) for v in rows["math"].unique()) if "math" in rows else [],
            "ranges": {name: [float(v.min()), float(v.max())]
                       for name, v in _range_values(rows, rows["sparsity"].to_numpy(), run_crowding(rows)).items()},
            "fit": "non-negative least squares on the relative error, per kernel",
            "intervals": "quantiles of log(measured / predicted) over leave-one-layer-out fits, per band of "
                         f"crowding (edges {list(CROWDING_BANDS)}; a band of under {MIN_BAND_RUNS} runs takes the "
                         "kernel's)",
            "leave_one_layer_out": errors}
    power, power_errors = fit_power(rows)
    if power:
        card["power"] = {"fit": "least squares of watts on log10(ms) per kernel, held within the watts read, "
                                f"on inputs crowded at most {EVEN_CROWDING:g}; energy per call = predicted ms x "
                                "predicted watts",
                         "leave_one_layer_out": power_errors}
    return SparseTimeModel(gpu, coefficients, quantiles, card, power, band_quantiles)


def _interval_quantiles(log_ratio: np.ndarray) -> dict[str, list[float]]:
    """The central quantiles of ``log_ratio`` at each of :data:`INTERVAL_LEVELS`: {"80": [low, high], ...}."""
    return {str(level): [float(np.quantile(log_ratio, (1 - level / 100) / 2)),
                         float(np.quantile(log_ratio, 1 - (1 - level / 100) / 2))] for level in INTERVAL_LEVELS}


def save_sparse_model(model: SparseTimeModel, folder: Path) -> Path:
    """Write ``model`` to ``folder``/:data:`SPARSE_FILE`; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SPARSE_FILE
    try:
        before = load_sparse_model(folder)
    except InputError:  # a damaged file is replaced
        before = None
    if before is not None and (before.coefficients, before.quantiles, before.power, before.band_quantiles) == \
            (model.coefficients, model.quantiles, model.power, model.band_quantiles) and \
            {k: v for k, v in before.card.items() if k != "trained_at"} == \
            {k: v for k, v in model.card.items() if k != "trained_at"}:
        # Retraining on unchanged data changes no file: the date of the first such training stays.
        model = SparseTimeModel(model.gpu, model.coefficients, model.quantiles,
                                {**model.card, "trained_at": before.card.get("trained_at")}, model.power,
                                model.band_quantiles)
    path.write_text(model.to_json())
    return path


def _number(value, what: str, path: Path, low: float = -math.inf) -> float:
    # bool is an int to Python: refused, like anything that is not a finite number.
    if type(value) not in (int, float) or not math.isfinite(value) or value < low:
        raise InputError(f"not a valid sparse model file: {what} is {value!r}", path=path)
    return float(value)


def load_sparse_model(folder: Path) -> SparseTimeModel | None:
    """The sparse model in a GPU's models folder, checked; None where there is none.

    Loading parses JSON and checks each value's exact type: nothing in the file can build
    any object but lists of floats, or run code."""
    path = Path(folder) / SPARSE_FILE
    if not path.exists():
        return None
    if not path.is_file() or path.stat().st_size > _MAX_BYTES:
        raise InputError("not a valid sparse model file (not a regular file under 1 MiB)", path=path)
    try:
        # NaN and infinity read as None (refused below); an integer of over 20 digits as NaN (refused),
        # not as a number too large for a float.
        document = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda c: None,
                              parse_int=lambda t: int(t) if len(t.lstrip("-")) <= 20 else math.nan)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"not a valid sparse model file ({type(exc).__name__})", path=path) from None
    if (type(document) is not dict or document.get("format") != FORMAT
            or document.get("version") != FORMAT_VERSION or document.get("terms") != list(TERMS)):
        raise InputError(f"not a sparse model file of format {FORMAT} version {FORMAT_VERSION}; retrain with "
                         "`seer train --gpu GPU --sparse`", path=path)
    gpu, coefficients, quantiles, card = (document.get(k) for k in ("gpu", "coefficients", "quantiles", "card"))
    if type(gpu) is not str or type(coefficients) is not dict or type(quantiles) is not dict or type(card) is not dict:
        raise InputError("not a valid sparse model file: gpu, coefficients, quantiles or card missing", path=path)
    if not coefficients or set(coefficients) - set(SPARSE_KERNELS) or set(quantiles) != set(coefficients):
        raise InputError("not a valid sparse model file: its kernels are not seer's sparse kernels", path=path)
    ranges = card.get("ranges", {})
    if type(ranges) is not dict or set(ranges) - set(RANGE_FIELDS) or any(
            type(pair) is not list or len(pair) != 2 or any(type(v) not in (int, float) for v in pair)
            for pair in ranges.values()):
        raise InputError("not a valid sparse model file: its card's ranges", path=path)
    checked_w, checked_q = {}, {}
    for algo in coefficients:
        w = coefficients[algo]
        if type(w) is not list or len(w) != len(TERMS):
            raise InputError(f"not a valid sparse model file: {algo}'s coefficients", path=path)
        checked_w[algo] = [_number(v, f"a coefficient of {algo}", path, low=0.0) for v in w]
        if sum(checked_w[algo]) <= 0:
            raise InputError(f"not a valid sparse model file: {algo}'s coefficients are all 0", path=path)
        checked_q[algo] = _checked_quantiles(quantiles[algo], algo, path)
    bands = document.get("band_quantiles", {})
    if bands and (document.get("crowding_bands") != list(CROWDING_BANDS) or type(bands) is not dict
                  or set(bands) != set(checked_w)):
        raise InputError(f"not a sparse model file of the crowding bands {list(CROWDING_BANDS)}; retrain with "
                         "`seer train --gpu GPU --sparse`", path=path)
    checked_b = {}
    for algo, per_band in bands.items():
        if type(per_band) is not list or len(per_band) != len(CROWDING_BANDS) + 1:
            raise InputError(f"not a valid sparse model file: {algo}'s quantiles per band of crowding", path=path)
        checked_b[algo] = [_checked_quantiles(q, algo, path) for q in per_band]
    power = document.get("power", {})
    if type(power) is not dict or set(power) - set(checked_w):
        raise InputError("not a valid sparse model file: its power models", path=path)
    checked_p = {}
    for algo, entry in power.items():
        if type(entry) is not dict or set(entry) != {"coefficients", "range_w"} or any(
                type(entry[k]) is not list or len(entry[k]) != 2 for k in entry):
            raise InputError(f"not a valid sparse model file: {algo}'s power model", path=path)
        low, high = (_number(v, f"a power bound of {algo}", path, low=0.0) for v in entry["range_w"])
        if low > high:
            raise InputError(f"not a valid sparse model file: {algo}'s power bounds are reversed", path=path)
        checked_p[algo] = {"coefficients": [_number(v, f"a power coefficient of {algo}", path)
                                            for v in entry["coefficients"]], "range_w": [low, high]}
    return SparseTimeModel(gpu, checked_w, checked_q, card, checked_p, checked_b)


def _checked_quantiles(q, algo: str, path: Path) -> dict[str, list[float]]:
    """One {"80": [low, high], "95": [...]} of a model file, each value's type and order checked."""
    if type(q) is not dict or set(q) != {str(level) for level in INTERVAL_LEVELS}:
        raise InputError(f"not a valid sparse model file: {algo}'s quantiles", path=path)
    checked = {}
    for level, pair in q.items():
        if type(pair) is not list or len(pair) != 2:
            raise InputError(f"not a valid sparse model file: {algo}'s {level}% quantiles", path=path)
        low, high = (_number(v, f"a quantile of {algo}", path) for v in pair)
        if low > high:
            raise InputError(f"not a valid sparse model file: {algo}'s {level}% quantiles are reversed", path=path)
        checked[level] = [low, high]
    return checked


#: For a model that learnt from evenly spread non-zeros only (its crowding terms then 0), a sparse
#: kernel is not recommended for a layer whose input's non-zeros crowd on pixels more than this
#: (``crowding``: :func:`seer.layers.sparsity.pixel_crowding`): there its time is far above such a
#: model's. Timed alone on their inputs in five networks at 99% zeros on the H200 machine,
#: ``gather`` picks at crowding up to 4.1 beat the dense choice, those at 6.7-7.7 tied, and those
#: from 10.6 on lost by 1.3-2.8x (benchmarks/results/h200-sparse-network-graphs/; the bound is
#: set from those same 33 picks). A model that learnt from crowded inputs predicts at the
#: crowding, up to the most crowded input it saw (:attr:`SparseTimeModel.max_crowding`).
SPARSE_MAX_CROWDING = 5.0


def _is_dense_algo(algo) -> bool:
    return isinstance(algo, str) and not algo.startswith("SEER_SPARSE_")


def with_sparse_rows(predictions: pd.DataFrame, frame: pd.DataFrame, sparsity: np.ndarray,
                     model: SparseTimeModel, algorithms: Sequence[str] | None = None,
                     objective: str = "time", crowding: np.ndarray | None = None) -> pd.DataFrame:
    """``predictions`` (:meth:`seer.predict.model.Model.predict`'s frame for ``frame``) with,
    for each layer whose ``sparsity`` is above 0, a row per sparse kernel that takes it, ranked
    among the layer's rows by predicted time (``objective="energy"``: by predicted energy per
    call, the kernels with a power model only), and :data:`BREAK_EVEN_COLUMN` per layer (by time).

    A sparse kernel placed first by time becomes ``recommended`` only where it is surely faster
    (:mod:`seer.predict.guard`'s interval rule: the upper bound of its 80% interval lies below the
    lower bound of what would be recommended otherwise, PyTorch's choice or the dense pick; the
    guard's margins are calibrated on the dense pick's ratio to PyTorch's choice only); by energy,
    it is recommended as the dense pick is, unguarded. The sparse times are predicted at the
    layer's ``crowding`` (NaN or None: not measured, taken as even); beyond
    :attr:`SparseTimeModel.max_crowding` no sparse kernel is recommended. The rows
    of layers of sparsity 0 are left as they are; ``algorithms`` (names) limits the kernels."""
    import pandas as pd

    from seer.algorithms import algorithm_names

    sparsity = np.asarray(sparsity, dtype=float)
    energy = objective == "energy"
    kernels = [k for k in model.kernels if (algorithms is None or k in algorithms) and (not energy or k in model.power)]
    sparse = sparsity > 0
    out = predictions.copy()
    out[BREAK_EVEN_COLUMN] = np.nan
    if not kernels:
        return out
    layer = predictions["layer"].to_numpy()
    # The best dense cuDNN time per layer: what PyTorch could run instead, whatever the input holds.
    cudnn = predictions["algo"].isin(algorithm_names("cudnn")).fillna(False).to_numpy(dtype=bool)
    best_dense = np.full(len(frame), np.inf)
    np.minimum.at(best_dense, layer[cudnn], predictions["predicted_ms"].to_numpy(dtype=float)[cudnn])
    best_dense[~np.isfinite(best_dense)] = np.nan
    columns = [model.kernels.index(k) for k in kernels]
    every = model.times(frame, sparsity, crowding)
    times, bounds = every[:, columns], model.bounds(every, crowding)[:, columns]
    energies = model.energies(every)[:, columns] if energy else None
    picked = SparseTimeModel(model.gpu, {k: model.coefficients[k] for k in kernels},
                             {k: model.quantiles[k] for k in kernels}, model.card)
    # Every layer's, dense ones too (the share of zeros at which a sparse kernel would pay), so that
    # a layer's value does not depend on the other layers of the file.
    out[BREAK_EVEN_COLUMN] = picked.break_even(frame, best_dense, crowding)[layer]
    if not sparse.any():
        return out
    chosen = np.flatnonzero(sparse)
    in_sparse = np.isin(layer, chosen)
    pieces = [out[~in_sparse]]
    outside = model.outside(frame, sparsity, crowding)
    crowded = even_where_unknown(crowding, len(frame)) > model.max_crowding
    for i, rows in out[in_sparse].groupby("layer", sort=True):
        pieces.append(_layer_with_sparse(rows, kernels, times[i], bounds[i], bool(outside[i]),
                                         None if energies is None else energies[i],
                                         crowded=bool(crowded[i])))
    result = pd.concat(pieces, ignore_index=True)
    # Back in layer order; a layer's rows stay in rank order (a stable sort).
    result = result.iloc[np.argsort(result["layer"].to_numpy(), kind="stable")].reset_index(drop=True)
    for column in ("algo", "recommended"):  # concat of rows made one by one loses the dtypes
        result[column] = result[column].astype("string")
    result["rank"] = result["rank"].astype("Int64")
    return result


def _layer_with_sparse(rows: pd.DataFrame, kernels: list[str], times: np.ndarray, bounds: np.ndarray,
                       outside: bool = False, energies: np.ndarray | None = None,
                       crowded: bool = False) -> pd.DataFrame:
    """One layer's prediction rows with its sparse kernels' rows merged in by predicted time (by
    predicted energy where ``energies`` are given), ranks renumbered, and the recommendation
    where a sparse kernel comes first (guarded by time; never where the input is ``crowded``);
    the sparse rows are ``extrapolated`` where the dense ones are or the layer is ``outside``
    the sparse model's ranges."""
    import pandas as pd

    from seer.predict.guard import GUARD_LEVEL
    from seer.schema import PYTORCH_CHOICE

    dense = rows[rows["algo"].notna()]
    template = rows.iloc[[0]]
    new = []
    for j, algo in enumerate(kernels):
        if not np.isfinite(times[j]):
            continue
        row = template.copy()
        row["algo"] = algo
        row["predicted_ms"] = times[j]
        for c, column in enumerate(INTERVAL_COLUMNS):
            row[column] = bounds[j, c // 2, c % 2]
        row["predicted_mj"] = np.nan if energies is None else energies[j]
        row["extrapolated"] = bool(row["extrapolated"].iloc[0]) or outside
        new.append(row)
    if not new:
        return rows
    key = "predicted_ms" if energies is None else "predicted_mj"
    extra = pd.concat(new).sort_values(key, kind="stable")
    # Each sparse row goes before the first dense row (in the dense ranking) that is slower (costlier).
    order, d = [], 0
    dense_key = np.nan_to_num(dense[key].to_numpy(dtype=float), nan=np.inf)
    extra_key = extra[key].to_numpy(dtype=float)
    for k in range(len(extra)):
        while d < len(dense) and dense_key[d] <= extra_key[k]:
            order.append(("d", d))
            d += 1
        order.append(("s", k))
    order.extend(("d", m) for m in range(d, len(dense)))
    merged = pd.concat([(dense if kind == "d" else extra).iloc[[k]] for kind, k in order])
    merged["rank"] = pd.array(np.arange(1, len(merged) + 1), dtype="Int64")
    first = merged.iloc[0]
    if _is_dense_algo(first["algo"]):
        return merged
    before = template["recommended"].iloc[0]  # what is recommended without the sparse kernels
    before = before if isinstance(before, str) else None
    merged["pick_near_best"] = np.nan  # calibrated on dense picks only
    if crowded:  # more crowded than any input the model learnt from: its times do not hold
        merged["recommended"] = before
        return merged
    if energies is not None:  # by energy the pick is recommended unguarded, as a dense one is
        merged["recommended"] = first["algo"]
        return merged
    # A sparse kernel comes first: it replaces what would be recommended otherwise (the dense
    # pick or PyTorch's choice) only where its interval lies wholly below that one's. This stays
    # on the interval rule: the guard's margins (seer.predict.guard) are calibrated on the dense
    # pick's ratio to PyTorch's choice, not on a sparse kernel's ratio to a dense algorithm.
    if before is not None and before != PYTORCH_CHOICE and (dense["algo"] == before).any():
        reference = dense[dense["algo"] == before].iloc[0]
        low, point = reference[f"predicted_ms_low{GUARD_LEVEL}"], reference["predicted_ms"]
    else:
        low, point = template[f"pytorch_low{GUARD_LEVEL}"].iloc[0], template["pytorch_ms"].iloc[0]
    high = first[f"predicted_ms_high{GUARD_LEVEL}"]
    if np.isfinite(high) and np.isfinite(low):
        surely = high < low
    else:  # no bounds: the point times decide, as the guard does; nothing to compare: the pick stands
        surely = not np.isfinite(point) or first["predicted_ms"] < point
    merged["recommended"] = first["algo"] if surely else before
    return merged
