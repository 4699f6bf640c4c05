"""Intervals on predicted times and the pick's near-best chance (seer.predict.uncertainty)."""

from __future__ import annotations

from dataclasses import replace
from math import comb

import numpy as np
import pandas as pd
import pytest

from seer.layers.shapes import LAYER_KINDS, layer_frame
from seer.predict.uncertainty import (ALL_KINDS, INTERVAL_KINDS, MIN_CALIBRATION_RUNS, check_intervals,
                                      check_near_best, conformal_quantiles, fit_intervals, interval_bounds,
                                      interval_kind, near_best_probability, pick_margin)
from seer.schema import INTERVAL_COLUMNS, INTERVAL_LEVELS, PREDICTION_COLUMNS, PYTORCH_COLUMNS
from seer.training.calibrate import calibration_half, near_best_curve


def test_interval_kinds_are_the_layer_kinds_and_each_layer_gets_the_first_that_applies():
    assert set(INTERVAL_KINDS[:-1]) == {k.name for k in LAYER_KINDS} and INTERVAL_KINDS[-1] == "other"
    frame = layer_frame(pd.DataFrame([
        dict(batch=1, in_ch=32, out_ch=32, in_h=8, in_w=8, kernel_h=3, kernel_w=3, groups=32),  # depthwise
        dict(batch=1, in_ch=32, out_ch=32, in_h=8, in_w=8, kernel_h=3, kernel_w=3, groups=32, dilation_h=2,
             dilation_w=2),  # depthwise and dilated: depthwise comes first
        dict(batch=1, in_ch=3, out_ch=8, in_h=8, in_w=8, kernel_h=3, kernel_w=3),  # square
        dict(batch=1, in_ch=3, out_ch=8, in_h=8, in_w=8, kernel_h=3, kernel_w=3, stride_h=2),  # none of them
        dict(batch=1, in_ch=3, out_ch=8, in_d=4, in_h=8, in_w=8, kernel_d=3, kernel_h=3, kernel_w=3),  # 3D
    ]))
    assert interval_kind(frame).tolist() == ["depthwise", "depthwise", "square", "other", "3D"]


def test_conformal_intervals_cover_fresh_draws_at_their_level():
    rng = np.random.default_rng(0)
    calibration, fresh = rng.standard_t(4, 2000) * 0.1, rng.standard_t(4, 200_000) * 0.1
    for (low, high), level in zip(conformal_quantiles(calibration), INTERVAL_LEVELS):
        assert low < 0 < high
        assert abs(np.mean((fresh >= low) & (fresh <= high)) * 100 - level) < 2.5
    # Skewed errors give skewed intervals: a model that underestimates has a long upper tail.
    (low, high), _ = conformal_quantiles(np.abs(calibration))
    assert low >= 0 and high > 0


def test_a_kind_with_few_runs_takes_the_wider_of_its_own_quantiles_and_those_over_every_kind():
    rng = np.random.default_rng(1)
    kinds = np.array(["square"] * MIN_CALIBRATION_RUNS + ["3D"] * 20 + ["depthwise"] * 3, dtype=object)
    log_ratio = np.r_[rng.normal(0, 0.05, MIN_CALIBRATION_RUNS), rng.normal(0, 1.0, 20), [0.0, 0.001, -0.001]]
    fitted = fit_intervals(log_ratio, kinds)
    # 3D erred more than the kinds together: per level the wider of both (20 runs resolve the 80%
    # level; at 95% its own are its extremes, so its bounds hold each of its runs). Depthwise erred
    # less: it keeps the quantiles over every kind (no entry of its own), as does a kind without runs.
    assert set(fitted) == {ALL_KINDS, "square", "3D"}
    three_d = log_ratio[kinds == "3D"]
    own = conformal_quantiles(three_d)
    assert own[-1] == [three_d.min(), three_d.max()] and own[0] != own[-1]
    for (low, high), (all_low, all_high), (own_low, own_high) in zip(fitted["3D"], fitted[ALL_KINDS], own):
        assert low == min(all_low, own_low) and high == max(all_high, own_high)
    check_intervals({"A": fitted}, ["A"], "test")  # still widening with the level
    times = np.array([[1.0], [1.0], [1.0]])
    bounds = interval_bounds(times, np.array(["square", "3D", "depthwise"], dtype=object), ["A"], {"A": fitted})
    assert bounds.shape == (3, 1, len(INTERVAL_LEVELS), 2)
    assert bounds[0, 0, 0].tolist() == pytest.approx(np.exp(fitted["square"][0]).tolist())
    assert bounds[1, 0, 0].tolist() == pytest.approx(np.exp(fitted["3D"][0]).tolist())
    assert bounds[2, 0, 0].tolist() == pytest.approx(np.exp(fitted[ALL_KINDS][0]).tolist())
    # An algorithm without quantiles, or a missing time, has no bounds.
    assert np.isnan(interval_bounds(np.array([[1.0, np.nan]]), np.array(["square"]), ["B", "A"], {"A": fitted})).all()


def test_the_near_best_chance_rises_with_the_pick_margin_and_is_calibrated_on_its_training():
    rng = np.random.default_rng(2)
    n = 4000
    times = rng.uniform(1, 2, (n, 3))
    scores = times * np.exp(rng.normal(0, 0.1, (n, 3)))  # a noisy model of the times
    best = times.min(axis=1)
    curve = near_best_curve(scores, times)
    check_near_best(curve, "test")
    margin = pick_margin(scores)
    chance = near_best_probability(margin, curve)
    near = times[np.arange(n), np.nanargmin(scores, axis=1)] <= best * 1.01
    assert abs(chance.mean() - near.mean()) < 0.01  # isotonic regression keeps the mean
    assert chance[margin > np.quantile(margin, 0.9)].mean() > chance[margin < np.quantile(margin, 0.1)].mean() + 0.2
    # One algorithm that runs: the widest margin; none: no chance.
    only = np.array([[1.0, np.nan, np.nan], [np.nan, np.nan, np.nan]])
    assert pick_margin(only)[0] == np.inf and np.isnan(pick_margin(only)[1])
    assert near_best_probability(pick_margin(only), curve)[0] == curve["probability"][-1]
    assert np.isnan(near_best_probability(pick_margin(only), {})).all()


@pytest.mark.parametrize("intervals, words", [
    ({"X": {ALL_KINDS: [[-0.1, 0.1], [-0.2, 0.2]]}}, "per algorithm"),
    ({"A": {"square": [[-0.1, 0.1], [-0.2, 0.2]]}}, "one for all kinds"),
    ({"A": {ALL_KINDS: [[-0.1, 0.1]]}}, "per level"),
    ({"A": {ALL_KINDS: [[0.1, -0.1], [-0.2, 0.2]]}}, "low <= high"),
    ({"A": {ALL_KINDS: [[-0.1, 0.1], [-0.2, float("nan")]]}}, "within e\\^50"),
    ({"A": {ALL_KINDS: [[-0.1, 0.1], [-0.2, 1e300]]}}, "within e\\^50"),
    ({"A": {ALL_KINDS: [[-0.3, 0.3], [-0.2, 0.2]]}}, "widen with the level"),
    ({"A": {ALL_KINDS: [[-1, 1], [-2, 2]]}}, "log ratios"),
])
def test_a_model_files_intervals_are_checked(intervals, words):
    with pytest.raises(ValueError, match=words):
        check_intervals(intervals, ["A"], "test")


@pytest.mark.parametrize("curve, words", [
    ({"margin": [0.0, 1.0]}, "margin and probability"),
    ({"margin": [1.0, 0.0], "probability": [0.5, 0.6]}, "must rise"),
    ({"margin": [0.0, 1.0], "probability": [0.6, 0.5]}, "must rise"),
    ({"margin": [0.0, 1.0], "probability": [0.5, 1.5]}, "in \\[0, 1\\]"),
    ({"margin": [], "probability": []}, "finite knots"),
    ({"margin": [0.0, float("inf")], "probability": [0.5, 0.6]}, "finite knots"),
])
def test_a_model_files_near_best_curve_is_checked(curve, words):
    with pytest.raises(ValueError, match=words):
        check_near_best(curve, "test")


def test_predictions_carry_intervals_and_the_pick_chance_and_the_intervals_hold_their_time(small_models):
    from seer.predict.persist import load_model

    model = load_model("h100", models_dir=small_models)
    layers = pd.DataFrame([dict(batch=32, in_ch=256, out_ch=64, in_h=56, in_w=56, kernel_h=1, kernel_w=1),
                           dict(batch=1, in_ch=64, out_ch=64, in_h=56, in_w=56, kernel_h=3, kernel_w=3, pad_h=1,
                                pad_w=1)])
    for math in model.maths:
        predictions = model.predict(layers, math)
        assert list(predictions.columns) == ["layer", *PREDICTION_COLUMNS]
        low80, high80, low95, high95 = (predictions[c].to_numpy() for c in INTERVAL_COLUMNS)
        assert np.isfinite(low95).all() and (low95 <= low80).all() and (low80 < high80).all()
        assert (high80 <= high95).all()
        chance = predictions.drop_duplicates("layer")["pick_near_best"]
        assert chance.between(0, 1).all()
        picks = model.pick(layers, math)
        assert (picks["best_low80"] <= picks["best_ms"]).all() and picks["pick_near_best"].notna().all()


def test_the_calibration_half_is_about_half_of_the_shapes_and_stable():
    ids = [f"{i:012x}" for i in range(4000)]
    half = calibration_half(ids)
    assert 0.45 < half.mean() < 0.55 and (calibration_half(ids[::-1]) == half[::-1]).all()


def test_seer_calibrate_changes_no_time_or_pick_and_a_model_without_calibration_still_predicts(
        small_models, small_dataset, tmp_path):
    import json
    import shutil

    from seer.cli import main
    from seer.predict import persist

    models = tmp_path / "models"
    shutil.copytree(small_models, models)
    layers = pd.DataFrame([dict(batch=8, in_ch=64, out_ch=128, in_h=28, in_w=28, kernel_h=3, kernel_w=3, pad_h=1,
                                pad_w=1)])
    calibrated = persist.load(models / "h100").predict(layers, "fma")
    # The same model without its calibration: the card and file of a model trained before it.
    bare = persist.load(models / "h100")
    bare.predictors = {m: replace(p, intervals={}, near_best={}) for m, p in bare.predictors.items()}
    bare.card = {k: v for k, v in bare.card.items() if k != "calibration"}
    persist.save(bare, models / "h100")
    uncalibrated = persist.load(models / "h100").predict(layers, "fma")
    # What calibration gives: the intervals (PyTorch's too), the near-best chance, and the guard
    # that compares the intervals.
    calibrated_only = [*INTERVAL_COLUMNS, "pick_near_best", *(c for c in PYTORCH_COLUMNS if c != "pytorch_ms")]
    assert uncalibrated[calibrated_only[:-1]].isna().all().all()
    pd.testing.assert_frame_equal(uncalibrated.drop(columns=calibrated_only),
                                  calibrated.drop(columns=calibrated_only))
    assert main(["calibrate", "--gpu", "h100", "--data-dir", str(small_dataset.parent),
                 "--models-dir", str(models)]) == 0
    again = persist.load(models / "h100").predict(layers, "fma")
    pd.testing.assert_frame_equal(again, calibrated)
    card = json.loads((models / "h100" / "model.json").read_text())
    assert card["calibration"]["split"] == "test1" and card["calibration"]["shapes"]["fma"] > 100
    assert card["calibration"]["min_kind_runs"] == MIN_CALIBRATION_RUNS and card["calibration"]["rare_kinds"]


def test_the_report_counts_how_often_sampling_alone_puts_a_calibrated_intervals_coverage_out_of_tolerance():
    from seer.reporting.report import chance_off_by_sampling, sampling_z

    rng = np.random.default_rng(0)
    for runs, level in ((50, 80), (129, 80), (200, 95), (60, 95)):
        covered = rng.binomial(runs, level / 100, size=200_000) / runs * 100
        simulated = np.mean(np.abs(covered - level) > 5.0)
        assert chance_off_by_sampling(runs, level) == pytest.approx(simulated, abs=0.004)
    # Exactly 5 points off is inside: of 100 runs at 80%, 75 and 85 covered are not misses, 74 and 86 are.
    assert chance_off_by_sampling(100, 80, tolerance_pct=5.0) == pytest.approx(
        sum(comb(100, k) * 0.8**k * 0.2 ** (100 - k) for k in range(101) if abs(k - 80) > 5))
    assert sampling_z(72.0, 80, 100) == pytest.approx(-2.0)
