"""How good the models are on held-out layers, beside cuDNN's heuristic and fixed choices: the figures.

Two test sets: Test-set-I (the 30% of grid shapes held out by the split) and Test-set-II
(layers of networks not in the training grids). For each and each math mode:

- per algorithm, the time model's error on the runs that succeeded: MAPE, median APE, the
  share within +-10%, and R^2 of log time;
- selection: top-1 accuracy (the pick is the measured fastest), regret (time of the pick /
  fastest measured - 1: mean, p95, max) and picks of algorithms that did not run, for our
  model, cuDNN's heuristic top pick and each single fixed algorithm, among cuDNN's
  algorithms (what a framework runs); the measured fastest is the oracle;
- selection among every algorithm, seer's own kernels included, on the layers where each
  was timed (the kernels may have been timed on part of the grid only);
- per layer kind (square, grouped, depthwise, 1xN, non-square input, dilated, 3D): the
  selection figures and the time models' MAPE; SEER's model only on square layers, the
  only ones its inputs describe;
- on Test-set-II, the total time of each network at each batch if every layer used the
  policy's pick;
- on the test layers with energy readings, the energy and power models' error, and the
  least-energy pick against the fastest one, judged by measured energy and by time.

Everything comes out as tidy frames; :mod:`seer.reporting.report` writes them up with plots.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from seer.algorithms import algorithm_names, get_algorithm
from seer.dataset.views import math_rows, recorded_runs, training_frames
from seer.layers.grids import network_shapes_of_test_set_ii
from seer.layers.shapes import LAYER_COLUMNS, is_seer_layer, layer_frame, layer_kind_flags
from seer.predict.model import Model
from seer.predict.uncertainty import ALL_KINDS, INTERVAL_KINDS, NEAR_BEST, interval_kind
from seer.schema import INTERVAL_LEVELS, SPLITS, TEST_SPLITS
from seer.training.calibrate import CALIBRATION_SPLIT, calibration_half

#: Measurement columns the evaluation reads (the energy ones where the table has them).
EVALUATION_COLUMNS = (*LAYER_COLUMNS, "shape_id", "math", "algo", "status", "time_ms", "split", "heuristic_rank",
                      "power_w", "energy_mj")


def regression_metrics(measured, predicted) -> dict[str, float]:
    """MAPE, median APE and share within +-10% (percent), and R^2 of log time."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    ape = np.abs(predicted / measured - 1)
    log_m, log_p = np.log(measured), np.log(predicted)
    total = ((log_m - log_m.mean()) ** 2).sum()
    r2 = 1 - ((log_m - log_p) ** 2).sum() / total if total > 0 else float("nan")
    return {"n": int(len(measured)), "mape_pct": float(ape.mean() * 100), "median_ape_pct": float(np.median(ape) * 100),
            "within_10pct": float((ape <= 0.10).mean() * 100), "r2_log": float(r2)}


def chosen_times(measured: pd.DataFrame, names) -> np.ndarray:
    """Per layer (row of ``measured``: one column per algorithm or policy, NaN where it did not
    run), the measured time of the one ``names`` gives for it, in row order; NaN where that did
    not run, is no column, or no name is given (None, NaN)."""
    names = [a if isinstance(a, str) else "" for a in names]
    columns = measured.columns.get_indexer(names)
    values = measured.to_numpy(dtype=float)
    return np.where(columns >= 0, values[np.arange(len(values)), np.clip(columns, 0, None)], np.nan)


def regrets(measured: pd.DataFrame, picks: pd.Series) -> np.ndarray:
    """Per layer, time of the pick / fastest measured - 1; NaN where the pick did not run.

    ``measured`` has one row per layer and one column per algorithm (NaN: did not run);
    ``picks`` names an algorithm per layer (None or NaN: no pick).
    """
    return chosen_times(measured, picks.reindex(measured.index)) / measured.min(axis=1).to_numpy() - 1


def selection_metrics(measured: pd.DataFrame, picks: pd.Series) -> dict[str, float]:
    """Top-1 accuracy and regret statistics of one pick per layer (see :func:`regrets`).

    ``near_best_pct`` is the share of layers whose pick is within :data:`NEAR_BEST` of
    the fastest. A pick that did not run, or no pick, counts as a miss and is left out of
    the regret statistics (``picks_not_run`` counts them).
    """
    regret = regrets(measured, picks)
    ran = np.isfinite(regret)
    r = regret[ran]
    return {"layers": int(len(measured)), "top1_pct": float(np.mean(ran & (regret <= 0)) * 100),
            "near_best_pct": float(np.mean(ran & (regret <= NEAR_BEST)) * 100),
            "mean_regret_pct": float(r.mean() * 100) if ran.any() else float("nan"),
            "p95_regret_pct": float(np.percentile(r, 95) * 100) if ran.any() else float("nan"),
            "max_regret_pct": float(r.max() * 100) if ran.any() else float("nan"),
            "picks_not_run": int((~ran).sum())}


def heuristic_picks(table: pd.DataFrame, shape_ids, math: str) -> pd.Series:
    """cuDNN's pick per shape: the best-ranked algorithm of cudnnGetConvolutionForwardAlgorithm_v7
    that ran (a framework falls back down the list when the first choice fails)."""
    rows = table[(table["math"] == math) & table["shape_id"].isin(shape_ids) & (table["status"] == "ok")
                 & table["heuristic_rank"].notna()]
    best = rows.sort_values("heuristic_rank").drop_duplicates("shape_id")
    return best.set_index("shape_id")["algo"].reindex(shape_ids)


def evaluate(model: Model, table: pd.DataFrame,
             progress: Callable[[int, int, str], None] | None = None) -> dict[str, pd.DataFrame]:
    """Every figure of the report, as tidy frames: ``regression``, ``selection``, ``networks``,
    ``points`` (predicted and measured time per test run, for plots), ``by_kind``,
    ``energy`` and ``energy_selection`` (empty without readings), ``coverage`` (of the
    intervals) and ``near_best`` (the pick's chance of being near the fastest, predicted
    against measured; both empty for a model without calibration). ``progress`` is told each
    step (split and math mode) as it starts."""
    regression, selection, points, per_layer, by_kind, energy, energy_selection = [], [], [], [], [], [], []
    coverage, near_best = [], []
    steps = len(TEST_SPLITS) * len(model.predictors) + 1
    for number, (split, math) in enumerate((s, m) for s in TEST_SPLITS for m in model.predictors):
        if progress:
            progress(number, steps, f"{SPLITS[split]}, {math} math")
        split_name = SPLITS[split]
        predictor = model.predictors[math]
        shapes, measured = training_frames(table, math, split, partial=True)
        if shapes.empty:
            continue
        recorded = recorded_runs(table, math, split, measured)
        families = {"ours": pd.DataFrame(predictor.predict_unmasked(shapes), index=shapes.index,
                                         columns=predictor.algorithms)}
        if math in model.baselines:
            families["seer"] = pd.DataFrame(model.baselines[math].predict_times(shapes, predictor.algorithms),
                                            index=shapes.index, columns=predictor.algorithms)
        for family, predicted in families.items():
            for algo in predictor.algorithms:
                ran = measured[algo].notna() & predicted[algo].notna()
                if ran.sum() == 0:
                    continue
                regression.append({"split": split_name, "math": math, "algo": algo, "family": family,
                                   "runs": int(measured[algo].notna().sum())}
                                  | regression_metrics(measured.loc[ran, algo], predicted.loc[ran, algo]))
                points.append(pd.DataFrame({"split": split_name, "math": math, "algo": algo, "family": family,
                                            "measured_ms": measured.loc[ran, algo],
                                            "predicted_ms": predicted.loc[ran, algo]}))
        # cuDNN's algorithms, what a framework runs, on every layer; seer's own kernels
        # beside them below, on the layers where every algorithm was timed.
        cudnn = [a for a in measured.columns if get_algorithm(a).source == "cudnn"]
        own = [a for a in measured.columns if a not in cudnn]
        predicted = _predicted(model, math, shapes)
        policies = _model_picks(model, math, shapes, table, cudnn, predicted)
        seer_picks = policies.pop("seer", None)  # the report lists it after the oracle
        policies["oracle"] = measured[cudnn].idxmin(axis=1)
        if seer_picks is not None:
            policies["seer"] = seer_picks
        policies |= {f"always {a}": pd.Series(a, index=shapes.index) for a in cudnn
                     if measured[a].notna().any()}
        square = is_seer_layer(layer_frame(shapes))
        for name, picks in policies.items():
            # SEER's model is scored where its inputs exist: square, ungrouped, undilated 2D layers.
            scored = measured.loc[square, cudnn] if name == "seer" else measured[cudnn]
            selection.append({"split": split_name, "math": math, "algorithms": CUDNN, "policy": name}
                             | selection_metrics(scored, picks))
            if split == "test2" and name in ("ours", "seer", "cudnn heuristic"):
                per_layer.append(pd.DataFrame({"math": math, "policy": name,
                                               "regret_pct": regrets(measured[cudnn], picks) * 100}))
        if own:
            selection += _with_own_kernels(split_name, math, shapes, measured, recorded.all(axis=1),
                                           _fastest(predicted[1]), policies)
        by_kind += _by_kind(split_name, math, shapes, measured[cudnn], families["ours"], policies)
        # The calibration half of Test-set-I fitted the intervals and the near-best curve: they
        # are judged on the rest of it, and on Test-set-II.
        unseen = ~calibration_half(shapes.index) if split == CALIBRATION_SPLIT else np.ones(len(shapes), dtype=bool)
        coverage += _coverage(split_name, math, predictor, shapes[unseen], measured[unseen],
                              families["ours"][unseen])
        if own:
            judged = unseen & recorded.all(axis=1).to_numpy()
            near_best += _near_best(split_name, math, predictor, shapes, measured[judged], predicted[1])
        if "energy_mj" in table.columns and predictor.power:
            rows = math_rows(table, math)
            fits, picks = _energy_scores(split_name, math, predictor, shapes, rows[rows["split"] == split],
                                         families["ours"], predicted)
            energy += fits
            energy_selection += picks
    if progress:
        progress(steps - 1, steps, "Test-set-II networks")
    return {"regression": pd.DataFrame(regression), "selection": pd.DataFrame(selection),
            "points": pd.concat(points, ignore_index=True) if points else pd.DataFrame(),
            "networks": network_totals(model, table),
            "regret_per_layer": pd.concat(per_layer, ignore_index=True) if per_layer else pd.DataFrame(),
            "by_kind": pd.DataFrame(by_kind), "energy": pd.DataFrame(energy),
            "energy_selection": pd.DataFrame(energy_selection), "coverage": pd.DataFrame(coverage),
            "near_best": pd.DataFrame(near_best)}


def _coverage(split: str, math: str, predictor, shapes: pd.DataFrame, measured: pd.DataFrame,
              predicted: pd.DataFrame) -> list[dict]:
    """Per algorithm, :func:`seer.predict.uncertainty.interval_kind` of layer and level: how many
    of the runs that succeeded measured inside their time's interval, and the interval's median
    width (high / low)."""
    if not predictor.intervals:
        return []
    algorithms = list(predicted.columns)
    frame = layer_frame(shapes)
    kinds = interval_kind(frame)
    bounds, _ = predictor.uncertainty(frame, predicted.to_numpy(dtype=float), predicted.to_numpy(dtype=float))
    m = measured.reindex(columns=algorithms).to_numpy(dtype=float)
    rows = []
    for j, algo in enumerate(algorithms):
        ran = np.isfinite(m[:, j]) & np.isfinite(bounds[:, j, 0, 0])
        for kind in [*INTERVAL_KINDS, ALL_KINDS]:
            members = ran & ((kinds == kind) if kind != ALL_KINDS else True)
            if not members.any():
                continue
            for k, level in enumerate(INTERVAL_LEVELS):
                low, high = bounds[members, j, k, 0], bounds[members, j, k, 1]
                inside = (m[members, j] >= low) & (m[members, j] <= high)
                rows.append({"split": split, "math": math, "algo": algo, "kind": kind, "level_pct": level,
                             "runs": int(members.sum()), "coverage_pct": float(inside.mean() * 100),
                             "median_width": float(np.median(high / low))})
    return rows


#: Bins of the predicted chance that a pick is near the fastest, for the report's calibration table.
NEAR_BEST_BINS = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0)


def _near_best(split: str, math: str, predictor, shapes: pd.DataFrame, measured: pd.DataFrame,
               scores: pd.DataFrame) -> list[dict]:
    """Per bin of the predicted chance that the pick (among every algorithm) is within
    NEAR_BEST of the fastest, on the layers where every algorithm was timed: how many layers,
    the mean chance predicted and the share measured near the fastest."""
    if not predictor.near_best or measured.empty:
        return []
    scores = scores.loc[measured.index]
    _, chance = predictor.uncertainty(layer_frame(shapes.loc[measured.index]), scores.to_numpy(dtype=float),
                                      scores.to_numpy(dtype=float))
    near = regrets(measured, _fastest(scores)) <= NEAR_BEST
    picked = np.isfinite(chance)
    bins = np.digitize(chance[picked], NEAR_BEST_BINS[1:-1])
    rows = [{"split": split, "math": math, "chance": "all", "layers": int(picked.sum()),
             "predicted_pct": float(chance[picked].mean() * 100), "measured_pct": float(near[picked].mean() * 100)}]
    for b, (low, high) in enumerate(zip(NEAR_BEST_BINS, NEAR_BEST_BINS[1:])):
        members = bins == b
        if members.any():
            rows.append({"split": split, "math": math, "chance": f"{low:.2f}-{high:.2f}", "layers": int(members.sum()),
                         "predicted_pct": float(chance[picked][members].mean() * 100),
                         "measured_pct": float(near[picked][members].mean() * 100)})
    return rows


#: What the ``algorithms`` column of the selection frame says a policy chose among.
CUDNN, WITH_OWN = "cudnn", "cudnn+seer"


def _with_own_kernels(split: str, math: str, shapes: pd.DataFrame, measured: pd.DataFrame, complete: pd.Series,
                      ours: pd.Series, cudnn_policies: dict[str, pd.Series]) -> list[dict]:
    """Selection among every algorithm, seer's kernels included, on the layers where every
    one was timed: our pick among all, the oracle, and the cuDNN-only picks against them."""
    if not complete.any():
        return []
    scored = measured[complete.to_numpy()]
    policies = {"ours": ours, "oracle": scored.idxmin(axis=1)}
    policies |= {f"{name} (cudnn only)": cudnn_policies[name] for name in ("ours", "cudnn heuristic", "oracle")}
    own = [a for a in measured.columns if get_algorithm(a).source != "cudnn"]
    policies |= {f"always {a}": pd.Series(a, index=shapes.index) for a in own if scored[a].notna().any()}
    return [{"split": split, "math": math, "algorithms": WITH_OWN, "policy": name}
            | selection_metrics(scored, picks) for name, picks in policies.items()]


#: The energy picks compared, and what each picks from: our predicted energy (``--objective
#: energy``) or time, the measured least energy, the measured fastest.
ENERGY_POLICIES = ("ours, least energy", "ours, fastest", "least energy measured", "fastest measured")


def _energy_scores(split: str, math: str, predictor, shapes: pd.DataFrame, rows: pd.DataFrame,
                   unmasked: pd.DataFrame, predicted: tuple[pd.DataFrame, pd.DataFrame]) -> tuple[list[dict], list[dict]]:
    """On the layers of ``shapes`` with energy readings, among the algorithms with an energy
    model: each model's error (energy per call = predicted time x predicted power, and power
    alone), and :data:`ENERGY_POLICIES`' picks judged by measured energy and by measured time,
    on the layers where every algorithm that ran has a reading. ``unmasked`` and ``predicted``
    are the times and pick scores the evaluation already has for ``shapes``."""
    modelled = [a for a in predictor.algorithms if a in predictor.power]
    ran = rows[(rows["status"] == "ok") & rows["algo"].isin(modelled) & rows["shape_id"].isin(shapes.index)]
    read = ran["energy_mj"].notna()
    if not read.any():
        return [], []
    layers = pd.unique(ran.loc[read, "shape_id"])
    table = {value: ran.pivot(index="shape_id", columns="algo", values=value).reindex(index=layers, columns=modelled)
             for value in ("energy_mj", "power_w", "time_ms")}
    watts = pd.DataFrame(predictor.predict_power(shapes.loc[layers]), index=layers,
                         columns=predictor.algorithms)[modelled]
    unmasked_mj = unmasked.loc[layers, modelled] * watts
    fits = []
    for algo in modelled:
        has = table["energy_mj"][algo].notna()
        if not has.any():
            continue
        for quantity, estimate in (("energy_mj", unmasked_mj), ("power_w", watts)):
            fits.append({"split": split, "math": math, "algo": algo, "quantity": quantity}
                        | regression_metrics(table[quantity].loc[has, algo], estimate.loc[has, algo]))
    complete = (table["energy_mj"].notna() == table["time_ms"].notna()).all(axis=1)
    if not complete.any():
        return fits, []
    energy_mj, time_ms = table["energy_mj"][complete], table["time_ms"][complete]
    times, scores = (frame.loc[energy_mj.index, modelled] for frame in predicted)
    # What --objective energy ranks by: the reported (masked) time x predicted power.
    energies = times * watts.loc[energy_mj.index]
    picks = dict(zip(ENERGY_POLICIES, (_fastest(energies), _fastest(scores), energy_mj.idxmin(axis=1),
                                       time_ms.idxmin(axis=1))))
    return fits, [{"split": split, "math": math, "judged_by": judged, "policy": name}
                  | selection_metrics(measured, picked)
                  for judged, measured in (("energy", energy_mj), ("time", time_ms)) for name, picked in picks.items()]


#: Policies compared per layer kind; SEER's model only on square layers, where its inputs exist.
KIND_POLICIES = ("ours", "cudnn heuristic", "seer", "oracle")


def _by_kind(split: str, math: str, shapes: pd.DataFrame, measured: pd.DataFrame, predicted: pd.DataFrame,
             policies: dict[str, pd.Series]) -> list[dict]:
    """Per layer kind (:data:`seer.layers.shapes.LAYER_KINDS`; a layer may be of several): the
    selection figures of each policy, and our time model's MAPE over every run that succeeded."""
    rows = []
    kinds = layer_kind_flags(layer_frame(shapes))
    for kind in kinds.columns:
        mask = kinds[kind].to_numpy()
        if not mask.any():
            continue
        m, p = measured[mask], predicted[mask].reindex(columns=measured.columns)
        ran = m.notna() & p.notna()
        fit = regression_metrics(m.to_numpy()[ran.to_numpy()], p.to_numpy()[ran.to_numpy()]) if ran.any().any() else {}
        for name in KIND_POLICIES:
            if name not in policies or (name == "seer" and kind != "square"):
                continue
            rows.append({"split": split, "math": math, "kind": kind, "layers": int(mask.sum()), "policy": name}
                        | selection_metrics(m, policies[name][mask])
                        | ({"time_mape_pct": fit.get("mape_pct"), "runs": fit.get("n")} if name == "ours" else {}))
    return rows


def _predicted(model: Model, math: str, shapes: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Our model's times and pick scores per shape (``shapes``' index) and algorithm."""
    predictor = model.predictors[math]
    times, scores = (pd.DataFrame(a, index=shapes.index, columns=predictor.algorithms)
                     for a in predictor.predict_with_scores(shapes))
    return times, scores


def _model_picks(model: Model, math: str, shapes: pd.DataFrame, table: pd.DataFrame,
                 algorithms: list[str] | None = None,
                 predicted: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> dict[str, pd.Series]:
    """Picks per shape (aligned with ``shapes``, whose index holds shape ids) of our model,
    SEER's model and cuDNN's heuristic, among ``algorithms`` (None: all); ``predicted`` is
    :func:`_predicted`'s answer where the caller has it."""
    predictor = model.predictors[math]
    times, scores = predicted if predicted is not None else _predicted(model, math, shapes)
    if algorithms is not None:
        times, scores = times.reindex(columns=algorithms), scores.reindex(columns=algorithms)
    picks = {"ours": _fastest(scores),
             "cudnn heuristic": heuristic_picks(table, shapes.index, math).set_axis(shapes.index)}
    if math in model.baselines:
        seer_times = pd.DataFrame(model.baselines[math].predict_times(shapes, predictor.algorithms),
                                  index=shapes.index, columns=predictor.algorithms).reindex(columns=times.columns)
        # SEER's times, over the algorithms seer's support decisions expect to run.
        picks["seer"] = _fastest(seer_times.where(times.notna()))
    return picks


def _fastest(times: pd.DataFrame) -> pd.Series:
    """Name of the smallest finite time per row (NaN where there is none)."""
    finite = np.isfinite(times)
    return times.where(finite, np.inf).idxmin(axis=1).where(finite.any(axis=1))


def network_totals(model: Model, table: pd.DataFrame) -> pd.DataFrame:
    """Total time of each Test-set-II network and batch, every layer using a policy's pick."""
    rows = []
    for math, predictor in model.predictors.items():
        # PyTorch runs cuDNN's algorithms: the policies choose among those.
        cudnn = [a for a in predictor.algorithms if a in algorithm_names("cudnn", pass_=None)]
        measured = training_frames(table, math, split=None)[1][cudnn]
        for network, batch, layers in network_shapes_of_test_set_ii():
            ids = [s.shape_id for s in layers]
            known = [i for i in ids if i in measured.index]
            if len(known) < len(ids):
                continue  # a layer without measurements: no honest total
            times = measured.loc[ids].reset_index(drop=True)
            # A network repeats shapes: the picks come back one per layer, by position.
            frame = layer_frame(layers).set_axis(pd.Index(ids, name="shape_id"))
            picks = {name: policy.reset_index(drop=True)
                     for name, policy in _model_picks(model, math, frame, table, cudnn).items()}
            row = {"math": math, "network": network, "batch": batch, "layers": len(ids),
                   "oracle_ms": float(times.min(axis=1).sum())}
            for name, policy in picks.items():
                chosen = [times.at[i, a] if isinstance(a, str) else np.nan for i, a in policy.items()]
                row[f"{name}_ms"] = float(np.sum(chosen)) if np.all(np.isfinite(chosen)) else float("nan")
            rows.append(row)
    return pd.DataFrame(rows)
