"""The evaluation report: a markdown file and its plots, from :func:`seer.reporting.scoring.evaluate`'s frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from seer.predict.model import Model
from seer.reporting.scoring import CUDNN, NEAR_BEST, WITH_OWN
from seer.schema import MATH_MODE_NAMES, SPLITS, TEST_SPLITS


def _markdown(frame: pd.DataFrame, floatfmt: str = ".1f") -> str:
    shown = frame.copy()
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
        written.append(_save(fig, f"{model.gpu}: {family} model, predicted vs measured time, {split} (band: +-10%)",
                             Path(f"{stem}-{split.lower().replace('-', '')}-{family}-scatter.png")))
    written.append(_regret_plot(results, model, stem, plt))
    sel = results["selection"]
    lines = [f"# seer evaluation on {model.gpu}", "",
             f"Models: seer's own (`ours`) and SEER's (`seer`), trained {model.card.get('trained_at')} on "
             f"`{model.card['training_data']['file']}` (sha256 {model.card['training_data']['sha256'][:12]}...).",
             "Regret = time of the pick / fastest measured - 1. A pick that did not run counts as a miss "
             "and is left out of the regret figures. `near_best_pct`: share of layers whose pick is within "
             f"{NEAR_BEST:.0%} of the fastest; where algorithms run the same kernel, which measured fastest is "
             "timing noise. SEER's model (`seer`) is scored on the square, "
             "ungrouped, undilated 2D layers only (`layers` says how many): its inputs describe no other kind.", ""]
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
    if not results["networks"].empty:
        lines += ["## Test-set-II networks, every layer using the pick", "", _markdown(results["networks"], ".2f"), ""]
    lines += ["Plots: " + ", ".join(f"`{p.name}`" for p in written), ""]
    path.write_text("\n".join(lines))
    return [path, *written]


def _regret_plot(results, model: Model, stem: Path, plt) -> Path:
    """Regret distribution (CDF over layers) per policy, Test-set-II, both math modes."""
    fig, axes = plt.subplots(1, len(MATH_MODE_NAMES), figsize=(5 * len(MATH_MODE_NAMES), 4), squeeze=False)
    per_layer = results.get("regret_per_layer")
    for ax, math in zip(axes[0], MATH_MODE_NAMES):
        if per_layer is not None and not per_layer.empty:
            for policy, group in per_layer[per_layer["math"] == math].groupby("policy"):
                values = np.sort(group["regret_pct"].dropna().to_numpy())
                ax.step(np.maximum(values, 1e-2), np.arange(1, len(values) + 1) / len(values), where="post", label=policy)
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
