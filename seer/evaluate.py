"""How good the models are on held-out layers, beside cuDNN's heuristic and fixed choices.

Two test sets: Test-set-I (the 30% of grid shapes held out by the split) and Test-set-II
(layers of networks not in the training grids). For each and each math mode:

- per algorithm, the time model's error on the runs that succeeded: MAPE, median APE, the
  share within +-10%, and R^2 of log time;
- selection: top-1 accuracy (the pick is the measured fastest), regret (time of the pick /
  fastest measured - 1: mean, p95, max) and picks of algorithms that did not run, for our
  model, cuDNN's heuristic top pick and each single fixed algorithm; the measured fastest
  is the oracle;
- on Test-set-II, the total time of each network at each batch if every layer used the
  policy's pick.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from seer.modeling import ModelSet, training_frames
from seer.predict import shapes_frame

SPLITS = {"test1": "Test-set-I", "test2": "Test-set-II"}


def regression_metrics(measured, predicted) -> dict[str, float]:
    """MAPE, median APE and share within +-10% (percent), and R^2 of log time."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    ape = np.abs(predicted / measured - 1)
    log_m, log_p = np.log(measured), np.log(predicted)
    total = ((log_m - log_m.mean()) ** 2).sum()
    r2 = 1 - ((log_m - log_p) ** 2).sum() / total if total > 0 else float("nan")
    return {"n": int(len(measured)), "mape_pct": float(ape.mean() * 100), "median_ape_pct": float(np.median(ape) * 100),
            "within_10pct": float((ape <= 0.10).mean() * 100), "r2_log": float(r2)}


def regrets(measured: pd.DataFrame, picks: pd.Series) -> np.ndarray:
    """Per layer, time of the pick / fastest measured - 1; NaN where the pick did not run.

    ``measured`` has one row per layer and one column per algorithm (NaN: did not run);
    ``picks`` names an algorithm per layer (None or NaN: no pick).
    """
    picks = picks.reindex(measured.index)
    chosen = np.array([measured.at[i, a] if isinstance(a, str) and a in measured.columns else np.nan
                       for i, a in zip(measured.index, picks)], dtype=float)
    return chosen / measured.min(axis=1).to_numpy() - 1


def selection_metrics(measured: pd.DataFrame, picks: pd.Series) -> dict[str, float]:
    """Top-1 accuracy and regret statistics of one pick per layer (see :func:`regrets`).

    A pick that did not run, or no pick, counts as a miss and is left out of the regret
    statistics (``picks_not_run`` counts them).
    """
    regret = regrets(measured, picks)
    ran = np.isfinite(regret)
    r = regret[ran]
    return {"layers": int(len(measured)), "top1_pct": float(np.mean(ran & (regret <= 0)) * 100),
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


def evaluate(models: ModelSet, table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Every figure of the report, as tidy frames: ``regression``, ``selection``, ``networks``
    and ``points`` (predicted and measured time per test run, for plots)."""
    regression, selection, points, per_layer = [], [], [], []
    for split, split_name in SPLITS.items():
        for math, selector in models.selectors.items():
            shapes, measured = training_frames(table, math, split)
            if shapes.empty:
                continue
            families = {"ours": pd.DataFrame(selector.predict_unmasked(shapes), index=shapes.index,
                                             columns=selector.algorithms_)}
            if math in models.baselines:
                families["seer"] = pd.DataFrame(models.baselines[math].predict_times(shapes, selector.algorithms_),
                                                index=shapes.index, columns=selector.algorithms_)
            for family, predicted in families.items():
                for algo in selector.algorithms_:
                    ran = measured[algo].notna() & predicted[algo].notna()
                    if ran.sum() == 0:
                        continue
                    regression.append({"split": split_name, "math": math, "algo": algo, "family": family,
                                       "runs": int(measured[algo].notna().sum())}
                                      | regression_metrics(measured.loc[ran, algo], predicted.loc[ran, algo]))
                    points.append(pd.DataFrame({"split": split_name, "math": math, "algo": algo, "family": family,
                                                "measured_ms": measured.loc[ran, algo],
                                                "predicted_ms": predicted.loc[ran, algo]}))
            policies = _model_picks(models, math, shapes, table)
            seer_picks = policies.pop("seer", None)  # the report lists it after the oracle
            policies["oracle"] = measured.idxmin(axis=1)
            if seer_picks is not None:
                policies["seer"] = seer_picks
            policies |= {f"always {a}": pd.Series(a, index=shapes.index) for a in measured.columns
                         if measured[a].notna().any()}
            for name, picks in policies.items():
                selection.append({"split": split_name, "math": math, "policy": name}
                                 | selection_metrics(measured, picks))
                if split == "test2" and name in ("ours", "seer", "cudnn heuristic"):
                    per_layer.append(pd.DataFrame({"math": math, "policy": name,
                                                   "regret_pct": regrets(measured, picks) * 100}))
    return {"regression": pd.DataFrame(regression), "selection": pd.DataFrame(selection),
            "points": pd.concat(points, ignore_index=True) if points else pd.DataFrame(),
            "networks": network_totals(models, table),
            "regret_per_layer": pd.concat(per_layer, ignore_index=True) if per_layer else pd.DataFrame()}


def _model_picks(models: ModelSet, math: str, shapes: pd.DataFrame, table: pd.DataFrame) -> dict[str, pd.Series]:
    """Picks per shape (aligned with ``shapes``, whose index holds shape ids) of our model,
    SEER's model and cuDNN's heuristic."""
    selector = models.selectors[math]
    times, scores = (pd.DataFrame(a, index=shapes.index, columns=selector.algorithms_)
                     for a in selector.predict_with_scores(shapes))
    picks = {"ours": _fastest(scores),
             "cudnn heuristic": heuristic_picks(table, shapes.index, math).set_axis(shapes.index)}
    if math in models.baselines:
        seer_times = pd.DataFrame(models.baselines[math].predict_times(shapes, selector.algorithms_),
                                  index=shapes.index, columns=selector.algorithms_)
        # SEER's times, over the algorithms seer's support decisions expect to run.
        picks["seer"] = _fastest(seer_times.where(times.notna()))
    return picks


def _fastest(times: pd.DataFrame) -> pd.Series:
    """Name of the smallest finite time per row (NaN where there is none)."""
    finite = np.isfinite(times)
    return times.where(finite, np.inf).idxmin(axis=1).where(finite.any(axis=1))


def network_totals(models: ModelSet, table: pd.DataFrame) -> pd.DataFrame:
    """Total time of each Test-set-II network and batch, every layer using a policy's pick."""
    from seer.grids import NETWORK_BATCHES
    from seer.networks import TEST_SET_II_NETWORKS, network_layers

    rows = []
    for math, selector in models.selectors.items():
        measured = training_frames(table, math, split=None)[1][selector.algorithms_]
        for network in TEST_SET_II_NETWORKS:
            for batch in NETWORK_BATCHES:
                layers = [layer.shape for layer in network_layers(network, batch)]
                ids = [s.shape_id for s in layers]
                known = [i for i in ids if i in measured.index]
                if len(known) < len(ids):
                    continue  # a layer without measurements: no honest total
                times = measured.loc[ids].reset_index(drop=True)
                # A network repeats shapes: the picks come back one per layer, by position.
                frame = shapes_frame(layers).set_axis(pd.Index(ids, name="shape_id"))
                picks = {name: policy.reset_index(drop=True)
                         for name, policy in _model_picks(models, math, frame, table).items()}
                row = {"math": math, "network": network, "batch": batch, "layers": len(ids),
                       "oracle_ms": float(times.min(axis=1).sum())}
                for name, policy in picks.items():
                    chosen = [times.at[i, a] if isinstance(a, str) else np.nan for i, a in policy.items()]
                    row[f"{name}_ms"] = float(np.sum(chosen)) if np.all(np.isfinite(chosen)) else float("nan")
                rows.append(row)
    return pd.DataFrame(rows)


def _markdown(frame: pd.DataFrame, floatfmt: str = ".1f") -> str:
    shown = frame.copy()
    for column in shown.columns:
        if pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else format(v, floatfmt))
    header = "| " + " | ".join(map(str, shown.columns)) + " |"
    rule = "|" + "---|" * len(shown.columns)
    body = ["| " + " | ".join(map(str, row)) + " |" for row in shown.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def write_report(results: dict[str, pd.DataFrame], models: ModelSet, path: Path) -> list[Path]:
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
        fig, axes = plt.subplots(2, len(algos), figsize=(3.2 * len(algos), 6.4), squeeze=False)
        for row, math in enumerate(("fma", "default")):
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
        written.append(_save(fig, f"{models.gpu}: {family} model, predicted vs measured time, {split} (band: +-10%)",
                             Path(f"{stem}-{split.lower().replace('-', '')}-{family}-scatter.png")))
    written.append(_regret_plot(results, models, stem, plt))
    sel = results["selection"]
    lines = [f"# seer evaluation on {models.gpu}", "",
             f"Models: seer's own (`ours`) and SEER's (`seer`), trained {models.card.get('trained_at')} on "
             f"`{models.card['training_data']['file']}` (sha256 {models.card['training_data']['sha256'][:12]}...).",
             "Regret = time of the pick / fastest measured - 1. A pick that did not run counts as a miss "
             "and is left out of the regret figures.", ""]
    for split in SPLITS.values():
        if sel.empty or split not in set(sel["split"]):
            continue
        lines += [f"## {split}", "", "### Selection", ""]
        main = sel[(sel["split"] == split) & ~sel["policy"].str.startswith("always")]
        lines += [_markdown(main.drop(columns="split")), "", "Single fixed algorithms:", "",
                  _markdown(sel[(sel["split"] == split) & sel["policy"].str.startswith("always")].drop(columns="split")),
                  "", "### Time per algorithm (runs that succeeded)", ""]
        reg = results["regression"]
        lines += [_markdown(reg[reg["split"] == split].drop(columns="split"), ".2f"), ""]
    if not results["networks"].empty:
        lines += ["## Test-set-II networks, every layer using the pick", "", _markdown(results["networks"], ".2f"), ""]
    lines += ["Plots: " + ", ".join(f"`{p.name}`" for p in written), ""]
    path.write_text("\n".join(lines))
    return [path, *written]


def _regret_plot(results, models, stem, plt) -> Path:
    """Regret distribution (CDF over layers) per policy, Test-set-II, both math modes."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
    per_layer = results.get("regret_per_layer")
    for ax, math in zip(axes[0], ("fma", "default")):
        if per_layer is not None and not per_layer.empty:
            for policy, group in per_layer[per_layer["math"] == math].groupby("policy"):
                values = np.sort(group["regret_pct"].dropna().to_numpy())
                ax.step(np.maximum(values, 1e-2), np.arange(1, len(values) + 1) / len(values), where="post", label=policy)
        ax.set_xscale("log")
        ax.set_xlabel("regret % (log; 0 drawn at 0.01)")
        ax.set_ylabel("share of Test-set-II layers")
        ax.set_title(f"{math} math")
        ax.legend(fontsize=7)
    return _save(fig, f"{models.gpu}: regret of each policy on Test-set-II", Path(f"{stem}-regret.png"))


def _save(fig, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
