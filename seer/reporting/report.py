"""The evaluation report: a markdown file and its plots, from :func:`seer.reporting.scoring.evaluate`'s frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import PASS_TITLES
from seer.predict.model import Model
from seer.predict.uncertainty import ALL_KINDS, NEAR_BEST
from seer.reporting.scoring import CUDNN, WITH_OWN
from seer.schema import MATH_MODE_NAMES, SPLITS, TEST_SPLITS


#: How the report names the two model families of the evaluation frames (``ours``, ``seer``).
FAMILY_LABELS = {"ours": "seer's models", "seer": "SEER baseline"}


def label(name: str) -> str:
    """A policy or family as the report names it: ``ours (cudnn only)`` reads ``seer's models (cudnn only)``."""
    head, _, rest = str(name).partition(" (")
    return FAMILY_LABELS.get(head, head) + (f" ({rest}" if rest else "")


def _markdown(frame: pd.DataFrame, floatfmt: str = ".1f") -> str:
    shown = frame.rename(columns={"family": "model"})
    for column in ("policy", "model"):
        if column in shown.columns:
            shown[column] = shown[column].map(label)
    for column in shown.columns:
        if pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else format(v, floatfmt))
    header = "| " + " | ".join(map(str, shown.columns)) + " |"
    rule = "|" + "---|" * len(shown.columns)
    body = ["| " + " | ".join(map(str, row)) + " |" for row in shown.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def write_report(results: dict[str, pd.DataFrame], model: Model, path: Path) -> list[Path]:
    """Markdown report and PNG plots (predicted vs measured; regret); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    written = []
    stem = path.with_suffix("")
    points = results["points"]
    for (split, family) in points[["split", "family"]].drop_duplicates().itertuples(index=False) if not points.empty else []:
        sub = points[(points["split"] == split) & (points["family"] == family)]
        algos = list(dict.fromkeys(sub["algo"]))
        fig, axes = plt.subplots(len(MATH_MODE_NAMES), len(algos), figsize=(3.2 * len(algos), 3.2 * len(MATH_MODE_NAMES)),
                                 squeeze=False)
        for row, math in enumerate(MATH_MODE_NAMES):
            for col, algo in enumerate(algos):
                ax = axes[row][col]
                p = sub[(sub["math"] == math) & (sub["algo"] == algo)]
                ax.loglog(p["measured_ms"], p["predicted_ms"], ".", ms=3, alpha=0.6)
                if not p.empty:
                    low, high = p[["measured_ms", "predicted_ms"]].min().min(), p[["measured_ms", "predicted_ms"]].max().max()
                    ax.plot([low, high], [low, high], "k-", lw=0.8)
                    ax.fill_between([low, high], [low * 0.9, high * 0.9], [low * 1.1, high * 1.1], color="k", alpha=0.1)
                ax.set_title(f"{algo}\n{math}", fontsize=8)
                ax.set_xlabel("measured ms", fontsize=7)
                ax.set_ylabel("predicted ms", fontsize=7)
                ax.tick_params(labelsize=6)
        written.append(_save(fig, f"{model.gpu}: {label(family)}, predicted vs measured time, {split} (band: +-10%)",
                             Path(f"{stem}-{split.lower().replace('-', '')}-{family}-scatter.png")))
    written.append(_regret_plot(results, model, stem, plt))
    sel = results["selection"]
    source = model.card.get("transferred_from")  # a model carried over from another GPU (seer.training.transfer)
    if source:
        carried = (f", carried over from {source['gpu']}'s (its trees, trained {source.get('trained_at')} on "
                   f"`{source['training_data']['file']}`); time scales, PyTorch's own choice and intervals fitted")
        baseline = (f"{carried}; the {FAMILY_LABELS['seer']} (SEER's model, reproduced) fitted on this GPU's "
                    "ncu-profiled runs" if model.baselines else f" (no {FAMILY_LABELS['seer']}){carried}")
    elif model.baselines:
        baseline = f" and the {FAMILY_LABELS['seer']} (SEER's model, reproduced)"
    elif model.pass_ != "fwd":
        baseline = f" (no {FAMILY_LABELS['seer']}: SEER's model is of the forward's algorithms)"
    else:
        baseline = (f" (no {FAMILY_LABELS['seer']}: SEER's model learns from ncu profiles, and no training run of "
                    "this GPU was profiled)")
    lines = [f"# seer evaluation on {', '.join(filter(None, (model.gpu, PASS_TITLES[model.pass_])))}", "",
             f"Models: {FAMILY_LABELS['ours']}{baseline}, trained "
             f"{model.card.get('trained_at')} on "
             f"`{model.card['training_data']['file']}` (sha256 {model.card['training_data']['sha256'][:12]}...).",
             "Regret = time of the pick / fastest measured - 1. A pick that did not run counts as a miss "
             "and is left out of the regret figures. `near_best_pct`: share of layers whose pick is within "
             f"{NEAR_BEST:.0%} of the fastest; where algorithms run the same kernel, which measured fastest is "
             "timing noise."
             + (f" The {FAMILY_LABELS['seer']} is scored on the square, ungrouped, undilated 2D layers only "
                "(`layers` says how many): its inputs describe no other kind." if model.baselines else ""), ""]
    for split in (SPLITS[s] for s in TEST_SPLITS):
        if sel.empty or split not in set(sel["split"]):
            continue
        lines += [f"## {split}", "", "### Selection among cuDNN's algorithms", ""]
        here = sel[(sel["split"] == split) & (sel["algorithms"] == CUDNN)].drop(columns=["split", "algorithms"])
        fixed = here["policy"].str.startswith("always")
        lines += [_markdown(here[~fixed]), "", "Single fixed algorithms:", "", _markdown(here[fixed]), ""]
        own = sel[(sel["split"] == split) & (sel["algorithms"] == WITH_OWN)].drop(columns=["split", "algorithms"])
        if not own.empty:
            lines += ["### Selection with seer's own kernels", "",
                      "Among every algorithm, seer's kernels included, on the layers where every one was timed "
                      "(`layers`). Regret is against the fastest of them all: the `(cudnn only)` rows are the "
                      "picks above, and `oracle (cudnn only)` is what seer's kernels save at best.", "",
                      _markdown(own), ""]
        lines += ["### Time per algorithm (runs that succeeded)", ""]
        reg = results["regression"]
        lines += [_markdown(reg[reg["split"] == split].drop(columns="split"), ".2f"), ""]
    kinds = results.get("by_kind", pd.DataFrame())
    if not kinds.empty:
        lines += ["## Per layer kind", "",
                  "A layer may be of several kinds (a dilated depthwise layer counts under both). SEER's model "
                  "is scored on square layers only: its inputs describe no other kind. `time_mape_pct` is our "
                  "time model's MAPE over every algorithm's successful runs on the kind's layers.", ""]
        for split in kinds["split"].unique():
            lines += [f"### {split}", "", _markdown(kinds[kinds["split"] == split].drop(columns="split"), ".2f"), ""]
    energy, energy_picks = results.get("energy", pd.DataFrame()), results.get("energy_selection", pd.DataFrame())
    if not energy.empty:
        lines += ["## Energy per call", "",
                  "On the test layers with energy readings (`seer collect --energy`), among the algorithms with an "
                  "energy model. Energy per call is predicted as predicted time x predicted power; the `power_w` "
                  "rows score the power model alone. The picks: ours by predicted energy (`--objective energy`) and "
                  "by predicted time, and the measured least-energy and fastest algorithms, judged by measured "
                  "energy (regret: energy of the pick / least energy - 1) and by measured time, on the layers where "
                  "every such algorithm that ran has a reading.", ""]
        for split in energy["split"].unique():
            lines += [f"### {split}", "", _markdown(energy[energy["split"] == split].drop(columns="split"), ".2f"), ""]
            if not energy_picks.empty and split in set(energy_picks["split"]):
                lines += [_markdown(energy_picks[energy_picks["split"] == split].drop(columns="split"), ".2f"), ""]
    lines += _uncertainty_lines(results)
    if not results["networks"].empty:
        lines += ["## Test-set-II networks, every layer using the pick", "", _markdown(results["networks"], ".2f"), ""]
    lines += ["Plots: " + ", ".join(f"`{p.name}`" for p in written), ""]
    path.write_text("\n".join(lines))
    return [path, *written]


#: Coverage further than this from the nominal level, in points, is counted as a miss.
COVERAGE_TOLERANCE = 5.0
#: Fewer runs than this, and a cell's coverage is not judged: 1 run in 50 moves it 2 points.
MIN_JUDGED_RUNS = 50
#: Cells with this many runs are counted apart: their coverage is measured to about 3 points.
LARGE_CELL_RUNS = 200
#: A cell's coverage this many standard errors of sampling from its level is the intervals' miss,
#: not the luck of which layers the cell holds.
BEYOND_SAMPLING_Z = 3.0


def sampling_z(coverage_pct, level_pct, runs) -> np.ndarray:
    """How many standard errors of a binomial sample of ``runs`` runs a coverage lies from its
    level: what a perfectly calibrated interval's coverage varies by from cell to cell."""
    p = np.asarray(level_pct, dtype=float) / 100
    return (np.asarray(coverage_pct, dtype=float) / 100 - p) / np.sqrt(p * (1 - p) / np.asarray(runs, dtype=float))


def chance_off_by_sampling(runs, level_pct, tolerance_pct: float = COVERAGE_TOLERANCE) -> np.ndarray:
    """Per cell, the chance that a perfectly calibrated interval, over ``runs`` independent runs,
    covers more than ``tolerance_pct`` points away from its level (binomial tails)."""
    from scipy.stats import binom  # evaluation only: prediction never imports scipy

    n, p = np.asarray(runs, dtype=float), np.asarray(level_pct, dtype=float) / 100
    # Covered counts up to ``below`` are too few, counts above ``above`` too many (rounded first:
    # 100 x 0.75 in floats is not 75).
    below = np.ceil(np.round(n * (p - tolerance_pct / 100), 9)) - 1
    above = np.floor(np.round(n * (p + tolerance_pct / 100), 9))
    return binom.cdf(below, n, p) + binom.sf(above, n, p)


def _beyond_chance() -> float:
    """A normal variable's chance of lying more than :data:`BEYOND_SAMPLING_Z` standard deviations out."""
    from scipy.stats import norm

    return float(2 * norm.sf(BEYOND_SAMPLING_Z))


def _uncertainty_lines(results: dict[str, pd.DataFrame]) -> list[str]:
    """The report's sections on the intervals' coverage and the near-best chance."""
    coverage, near_best = results.get("coverage", pd.DataFrame()), results.get("near_best", pd.DataFrame())
    lines = []
    if not coverage.empty:
        judged = coverage[(coverage["runs"] >= MIN_JUDGED_RUNS) & (coverage["kind"] != ALL_KINDS)]
        off = judged[(judged["coverage_pct"] - judged["level_pct"]).abs() > COVERAGE_TOLERANCE]
        lines += ["## Intervals on predicted times", "",
                  "Each predicted time has an interval at 80% and 95% (`predicted_ms_low80`, ... in `seer predict`'s "
                  "output), split-conformal per algorithm and layer kind "
                  "(`seer.predict.uncertainty`), on the calibration half of Test-set-I (`seer.training.calibrate`). "
                  "Judged here on the other half of Test-set-I and on Test-set-II. `coverage_pct`: the share of the "
                  "held-out runs that succeeded whose measured time lies inside; `median_width`: the interval's "
                  "high / low. Over all algorithms and kinds:", ""]
        overall = coverage[coverage["kind"] == ALL_KINDS].groupby(["split", "math", "level_pct"]).apply(
            lambda g: pd.Series({"runs": int(g["runs"].sum()),
                                 "coverage_pct": float((g["coverage_pct"] * g["runs"]).sum() / g["runs"].sum())}),
            include_groups=False).reset_index()
        overall["runs"] = overall["runs"].astype(int)
        large = judged["runs"] >= LARGE_CELL_RUNS
        large_off = int(off["runs"].ge(LARGE_CELL_RUNS).sum())
        by_chance = chance_off_by_sampling(judged["runs"], judged["level_pct"])
        off = off.assign(sampling_z=sampling_z(off["coverage_pct"], off["level_pct"], off["runs"]))
        beyond = off[off["sampling_z"].abs() > BEYOND_SAMPLING_Z]
        lines += [_markdown(overall, ".1f"), "",
                  f"Per algorithm and layer kind ({len(judged)} cells with at least {MIN_JUDGED_RUNS} runs): "
                  f"{len(judged) - len(off)} within {COVERAGE_TOLERANCE:g} points of the level, {len(off)} not; of "
                  f"the {int(large.sum())} cells with at least {LARGE_CELL_RUNS} runs, {large_off} not. Sampling "
                  f"alone moves a cell's coverage: intervals calibrated exactly would leave about "
                  f"{by_chance.sum():.0f} of these {len(judged)} cells ({by_chance[large.to_numpy()].sum():.1f} of the "
                  f"large ones) more than {COVERAGE_TOLERANCE:g} points off, were the runs independent (a binomial "
                  f"sample; a network repeats its blocks and a grid region holds alike layers, so that is a floor, "
                  f"and `sampling_z` overstates how far off a cell is). `sampling_z`: how many of sampling's "
                  f"standard errors the coverage lies from the level; {len(beyond)} cells lie more than "
                  f"{BEYOND_SAMPLING_Z:g} away ({int(beyond['sampling_z'].lt(0).sum())} covering less than their "
                  f"level), where sampling alone would put about {len(judged) * _beyond_chance():.1f}"
                  + (":" if len(off) else "."),
                  ""]
        if len(off):
            lines += [_markdown(off, ".1f"), ""]
        lines += ["Per algorithm, every kind:", "",
                  _markdown(coverage[coverage["kind"] == ALL_KINDS].drop(columns="kind"), ".2f"), ""]
    if not near_best.empty:
        lines += ["## The pick's chance of being near the fastest", "",
                  f"`pick_near_best` in `seer predict`'s output: the chance that the pick measures within "
                  f"{NEAR_BEST:.0%} of the fastest algorithm, from the pick's margin over the runner-up, calibrated "
                  "on the calibration half of Test-set-I. Judged on the other half and on Test-set-II, on the layers "
                  "where every algorithm was timed, "
                  "binned by the chance predicted: the mean predicted against the share measured near the fastest.",
                  "", _markdown(near_best, ".1f"), ""]
    return lines


def _regret_plot(results, model: Model, stem: Path, plt) -> Path:
    """Regret distribution (CDF over layers) per policy, Test-set-II, both math modes."""
    fig, axes = plt.subplots(1, len(MATH_MODE_NAMES), figsize=(5 * len(MATH_MODE_NAMES), 4), squeeze=False)
    per_layer = results.get("regret_per_layer")
    for ax, math in zip(axes[0], MATH_MODE_NAMES):
        if per_layer is not None and not per_layer.empty:
            for policy, group in per_layer[per_layer["math"] == math].groupby("policy"):
                values = np.sort(group["regret_pct"].dropna().to_numpy())
                ax.step(np.maximum(values, 1e-2), np.arange(1, len(values) + 1) / len(values), where="post", label=label(policy))
        ax.set_xscale("log")
        ax.set_xlabel("regret % (log; 0 drawn at 0.01)")
        ax.set_ylabel("share of Test-set-II layers")
        ax.set_title(f"{math} math")
        ax.legend(fontsize=7)
    return _save(fig, f"{model.gpu}: regret of each policy on Test-set-II", Path(f"{stem}-regret.png"))


def _save(fig, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
