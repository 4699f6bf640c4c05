"""The cuSNN seed's experiments on the ``sparse-seed`` layers, and how well seer predicts them (CPU).

    python benchmarks/sparse_seed.py --gpu h200 --out benchmarks/results/h200-sparse-seed \
        --plot reports/h200-sparse-seed.png

Reads the GPU's sparse measurements (``data/<gpu>/sparse_measurements``): the layers of
DenseNet-121/169/201 and ResNet-101/152 at 224x224, batches 1, 2, 4 and 8 (grid
``sparse-seed``), every sparse kernel at each sparsity level and every cuDNN algorithm at one
level (their times do not depend on the input's zeros: ``docs/sparse.md``), and ResNet-50's
layers at 800x1216 (the data the shipped model was first fitted on). Of the grid, the runs on
ReLU-like zeros (``relu``), as the seed's.

1. **Measured**: per layer and level, the best sparse kernel against the best cuDNN algorithm;
   each layer's break-even sparsity (where the best sparse kernel's time crosses the best cuDNN
   time, linear between the two grid levels around the crossing); by layer kind and batch, the
   share of layers with a break-even at or below 0.9. ``seed-table.csv`` holds the seed's table
   (IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM, GEMM and the sparse kernels per layer and level).
2. **Predicted, held out**: a sparse-kernel model fitted without the layers it is tested on
   (``--fit-on``: ResNet-50's layers only, as shipped before these data, and ResNet-50's with
   the ResNets' of this grid, tested on the DenseNet layers no ResNet has), the dense times
   from seer's forward model. Per (layer, level): the pick among every algorithm (right where
   its measured time is within 1% of the fastest; regret), the sparse-or-dense decision alone
   (each side at its best measured algorithm), and the break-even error.
3. **Energy**: where both were read (``--energy``), the best sparse kernel's energy per call
   against the best cuDNN algorithm's.
Writes ``summary.json``, ``summary.md`` and ``seed-table.csv``; ``--plot`` draws the ratio of the
best sparse kernel to the best cuDNN algorithm against sparsity per layer kind.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import algorithm_names
from seer.dataset.build import read_sparse_measurements
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.sparse import SPARSE_KERNELS, fit_sparse_model

SEED_GRID = "sparse-seed"
#: The pattern of zeros of the seed's experiments (after a ReLU).
SEED_PATTERN = "relu"
#: The seed's dense algorithms, shown beside the sparse kernels (cuSNN's t1-t3).
SEED_DENSE = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM")
#: Which networks of the grid each layer belongs to (for the held-out split).
RESNETS, DENSENETS = ("resnet101", "resnet152"), ("densenet121", "densenet169", "densenet201")


def markdown_table(frame: pd.DataFrame) -> list[str]:
    """``frame`` as the lines of a Markdown table (None and NaN cells empty)."""
    cells = frame.astype(object).where(frame.notna(), "")
    return (["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
            + ["| " + " | ".join(map(str, row)) + " |" for row in cells.itertuples(index=False)])


def layer_kind(row) -> str:
    """The layer's kind as the seed's table groups them: kernel and stride."""
    if row["in_ch"] == 3:
        return "stem 7x7 s2"
    return f"{row['kernel_h']}x{row['kernel_w']} s{row['stride_h']}"


def network_shapes(names, batches=(1, 2, 4, 8)) -> set:
    """The dense shape ids of these networks' layers at these batches."""
    from seer.layers.known_networks import network_layers

    return {layer.shape.shape_id for name in names for b in batches for layer in network_layers(name, b)}


def crossing(levels: np.ndarray, sparse_ms: np.ndarray, dense_ms: float) -> float:
    """Where the best sparse time falls below ``dense_ms``: linear between the two levels around
    the first level at which it is below; the lowest level where it is below there; NaN: never."""
    below = np.flatnonzero(sparse_ms < dense_ms)
    if not len(below):
        return np.nan
    k = below[0]
    if k == 0:
        return float(levels[0])
    s0, s1, t0, t1 = levels[k - 1], levels[k], sparse_ms[k - 1], sparse_ms[k]
    return float(s0 + (t0 - dense_ms) / (t0 - t1) * (s1 - s0))


def measured_frame(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (layer, level): the best cuDNN and best sparse measured times; and per (layer, algo)
    the cuDNN times (the median over the levels each was timed at)."""
    cudnn = set(algorithm_names("cudnn"))
    ok = table[(table["status"] == "ok") & (table["time_ms"] > 0)]
    dense = ok[ok["algo"].isin(cudnn)].groupby(["dense_shape_id", "algo"])["time_ms"].median().rename("time_ms")
    sparse = ok[ok["algo"].isin(SPARSE_KERNELS)]
    per_level = sparse.pivot_table(index=["dense_shape_id", "sparsity"], columns="algo", values="time_ms",
                                   aggfunc="median")
    per_level["best_sparse_ms"] = per_level[[k for k in SPARSE_KERNELS if k in per_level]].min(axis=1)
    best_dense = dense.groupby("dense_shape_id").min()
    per_level = per_level.join(best_dense.rename("best_cudnn_ms"), on="dense_shape_id")
    return per_level.reset_index(), dense.reset_index()


def evaluate(model, seed: pd.DataFrame, layers: pd.DataFrame, per_level: pd.DataFrame, dense: pd.DataFrame,
             dense_predicted: pd.DataFrame, held: set, levels=None) -> dict:
    """Pick, decision and break-even of ``model`` (a sparse-kernel model) on the ``held`` layers
    (picks at ``levels`` only, where given; the break-even over every level)."""
    every_level = per_level[per_level["dense_shape_id"].isin(held)].copy()
    rows = every_level if levels is None else every_level[every_level["sparsity"].isin(levels)]
    frame = layers.loc[rows["dense_shape_id"]].reset_index(drop=True)
    sparse_pred = model.times(frame, rows["sparsity"].to_numpy())
    kernels = model.kernels
    measured_dense = dense.pivot(index="dense_shape_id", columns="algo", values="time_ms")
    right = regret = side_right = side_regret = 0.0
    picks, outcomes = [], []
    for i, (_, row) in enumerate(rows.iterrows()):
        layer = row["dense_shape_id"]
        predicted = dict(dense_predicted.loc[layer].dropna()) if layer in dense_predicted.index else {}
        predicted.update({k: sparse_pred[i, j] for j, k in enumerate(kernels) if np.isfinite(sparse_pred[i, j])})
        measured = dict(measured_dense.loc[layer].dropna())
        measured.update({k: row[k] for k in kernels if k in row and np.isfinite(row[k])})
        fastest = min(measured.values())
        ranked = sorted((ms, algo) for algo, ms in predicted.items() if algo in measured)
        pick = ranked[0][1]
        ratio = measured[pick] / fastest
        best_sparse_pred = min((predicted[k] for k in kernels if k in predicted), default=np.inf)
        best_dense_pred = min((ms for a, ms in predicted.items() if a not in kernels), default=np.inf)
        side = row["best_sparse_ms"] if best_sparse_pred < best_dense_pred else row["best_cudnn_ms"]
        side_ratio = side / fastest
        right += ratio <= 1.01
        regret += ratio - 1
        side_right += side_ratio <= 1.01
        side_regret += side_ratio - 1
        picks.append(pick)
        outcomes.append((row["sparsity"], ratio, side_ratio))
    n = len(rows)
    out = {"cases": n, "layers": int(rows["dense_shape_id"].nunique()),
           "pick_within_1pct": round(float(right / n), 4), "pick_mean_regret": round(float(regret / n), 4),
           "decision_within_1pct": round(float(side_right / n), 4),
           "decision_mean_regret": round(float(side_regret / n), 4),
           "sparse_picked": round(float(np.mean([p in kernels for p in picks])), 4)}
    levels = np.array(sorted(rows["sparsity"].unique()))
    by_level = {}
    for level in levels:
        mine = [(r, s) for lv, r, s in outcomes if lv == level]
        by_level[f"{level:g}"] = {"pick_within_1pct": round(float(np.mean([r <= 1.01 for r, _ in mine])), 4),
                                  "pick_mean_regret": round(float(np.mean([r - 1 for r, _ in mine])), 4),
                                  "decision_within_1pct": round(float(np.mean([s <= 1.01 for _, s in mine])), 4)}
    out["by_sparsity"] = by_level
    # Break-even: measured (interpolated on the grid) against the model's, on the measured best cuDNN
    # time (the sparse model alone) and on seer's predicted one (as seer predict reports it).
    errors = {"vs_measured_cudnn": [], "vs_predicted_cudnn": []}
    agree = {"vs_measured_cudnn": 0, "vs_predicted_cudnn": 0}
    ids = sorted(rows["dense_shape_id"].unique())
    for layer in ids:
        mine = every_level[every_level["dense_shape_id"] == layer].sort_values("sparsity")
        dense_ms = float(mine["best_cudnn_ms"].iloc[0])
        measured = crossing(mine["sparsity"].to_numpy(), mine["best_sparse_ms"].to_numpy(), dense_ms)
        shape = layers.loc[[layer]].reset_index(drop=True)
        for what, reference in (("vs_measured_cudnn", dense_ms),
                                ("vs_predicted_cudnn", float(np.nanmin(dense_predicted.loc[layer].to_numpy(dtype=float))))):
            predicted = float(model.break_even(shape, np.array([reference]))[0])
            agree[what] += np.isfinite(predicted) == np.isfinite(measured)
            if np.isfinite(predicted) and np.isfinite(measured):
                errors[what].append(abs(predicted - measured))
    out["break_even"] = {what: {"layers": len(ids), "both_have_one": len(e), "same_existence": int(agree[what]),
                                "median_abs_error": round(float(np.median(e)), 4) if e else None,
                                "mean_abs_error": round(float(np.mean(e)), 4) if e else None,
                                "within_0.05": round(float(np.mean(np.array(e) <= 0.05)), 4) if e else None}
                         for what, e in errors.items()}
    return out


def energy_summary(seed: pd.DataFrame) -> dict:
    """Best sparse kernel against best cuDNN algorithm in energy per call, where both were read."""
    frame = seed[seed["energy_mj"].notna()]
    if frame.empty:
        return {}
    cudnn = set(algorithm_names("cudnn"))
    out = {}
    for level in sorted(frame["sparsity"].unique()):
        mine = frame[frame["sparsity"] == level]
        dense = mine[mine["algo"].isin(cudnn)].groupby("dense_shape_id")["energy_mj"].min()
        sparse = mine[mine["algo"].isin(SPARSE_KERNELS)].groupby("dense_shape_id")["energy_mj"].min()
        both = dense.index.intersection(sparse.index)
        if len(both):
            ratio = sparse[both] / dense[both]
            out[f"{level:g}"] = {"layers": int(len(both)), "median_sparse_over_cudnn": round(float(ratio.median()), 3),
                                 "sparse_lower": int((ratio < 1).sum())}
    return out


def energy_picks(seed: pd.DataFrame, gpu: str) -> dict:
    """By level: the shipped models' least-energy pick (``--objective energy``: the sparse kernels'
    power model beside the dense algorithms' energy models) against the measured least energy, on
    the runs with a reading (in sample: the power model learnt from these readings)."""
    from seer.predict.persist import load_model

    model = load_model(gpu, math="fma")
    read = seed[seed["energy_mj"].notna() & (seed["status"] == "ok")]
    out = {}
    for level, group in read.groupby("sparsity"):
        layers = group.drop_duplicates("dense_shape_id").reset_index(drop=True)
        frame = layers[list(LAYER_COLUMNS)].assign(sparsity=level)
        rows = model.predict(frame, "fma", objective="energy").dropna(subset=["algo", "predicted_mj"])
        rows["dense_shape_id"] = layers["dense_shape_id"].to_numpy()[rows["layer"].to_numpy()]
        measured = group.set_index(["dense_shape_id", "algo"])["energy_mj"]
        rows = rows.join(measured.rename("measured_mj"), on=["dense_shape_id", "algo"]).dropna(subset=["measured_mj"])
        regrets = [g.sort_values("predicted_mj")["measured_mj"].iloc[0] / g["measured_mj"].min() - 1
                   for _, g in rows.groupby("dense_shape_id")]
        out[f"{level:g}"] = {"layers": len(regrets), "within_1pct": int(np.sum(np.array(regrets) <= 0.01)),
                             "mean_regret": round(float(np.mean(regrets)), 4),
                             "sparse_picked": int(sum(g.sort_values("predicted_mj")["algo"].iloc[0] in SPARSE_KERNELS
                                                      for _, g in rows.groupby("dense_shape_id")))}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)

    source = args.data_dir / args.gpu / "sparse_measurements"
    table = read_sparse_measurements(source)
    table = table[table["math"] == "fma"]
    # The seed's ReLU zeros: the grid's runs on crowded inputs are another experiment (docs/sparse.md).
    seed = table[(table["grid"] == SEED_GRID) & (table["sparsity_pattern"] == SEED_PATTERN)]
    per_level, dense = measured_frame(seed)
    layers = seed.drop_duplicates("dense_shape_id").set_index("dense_shape_id")[list(LAYER_COLUMNS)].astype(np.int64)
    layers = layers.assign(kind=[layer_kind(r) for _, r in layers.iterrows()])
    levels = np.array(sorted(per_level["sparsity"].unique()))

    # 1. Measured break-even per layer, and by kind and batch.
    breaks = {}
    for layer, mine in per_level.groupby("dense_shape_id"):
        mine = mine.sort_values("sparsity")
        breaks[layer] = crossing(mine["sparsity"].to_numpy(), mine["best_sparse_ms"].to_numpy(),
                                 float(mine["best_cudnn_ms"].iloc[0]))
    layers["measured_break_even"] = pd.Series(breaks)
    by_kind = []
    for (kind, batch), group in layers.groupby(["kind", "batch"]):
        b = group["measured_break_even"]
        by_kind.append({"kind": kind, "batch": int(batch), "layers": int(len(group)),
                        "with_break_even": int(b.notna().sum()), "at_or_below_0.9": int((b <= 0.9).sum()),
                        "median_break_even": None if b.notna().sum() == 0 else round(float(b.median()), 3)})
    one_and_three = layers[layers["kind"].isin(["1x1 s1", "3x3 s1", "1x1 s2", "3x3 s2"])]
    share_09 = float((one_and_three["measured_break_even"] <= 0.9).mean())

    # The seed's table, per layer and level.
    table_rows = per_level.join(layers[["batch", "in_ch", "in_h", "out_ch", "kernel_h", "stride_h", "kind"]],
                                on="dense_shape_id")
    wide = dense.pivot(index="dense_shape_id", columns="algo", values="time_ms")[list(SEED_DENSE)]
    table_rows = table_rows.join(wide, on="dense_shape_id")
    args.out.mkdir(parents=True, exist_ok=True)
    columns = ["dense_shape_id", "kind", "batch", "in_ch", "in_h", "out_ch", "kernel_h", "stride_h", "sparsity",
               *SEED_DENSE, "best_cudnn_ms", *[k for k in SPARSE_KERNELS if k in table_rows], "best_sparse_ms"]
    table_rows[columns].round(5).to_csv(args.out / "seed-table.csv", index=False)

    # 2. Held out: the sparse model fitted without the tested layers; dense times from seer's model.
    from seer.predict.persist import load_model

    forward = load_model(args.gpu, math="fma")
    predicted = forward.predict(layers[list(LAYER_COLUMNS)].reset_index(drop=True), "fma", algorithms=["cudnn"])
    predicted["dense_shape_id"] = layers.index.to_numpy()[predicted["layer"].to_numpy()]
    dense_predicted = predicted.dropna(subset=["algo"]).pivot(index="dense_shape_id", columns="algo",
                                                              values="predicted_ms")
    resnet50 = table[table["grid"] != SEED_GRID]
    resnet_ids = network_shapes(RESNETS) & set(layers.index)
    densenet_only = set(layers.index) - resnet_ids
    resnets = seed[seed["dense_shape_id"].isin(resnet_ids)]
    trained_levels = sorted(resnet50["sparsity"].unique())
    unseen_levels = sorted(set(levels) - set(trained_levels))
    fits = {"resnet50_800x1216 -> every sparse-seed layer": (resnet50, set(layers.index), None),
            "resnet50_800x1216 + ResNet-101/152 -> DenseNet layers": (
                pd.concat([resnet50, resnets]), densenet_only, None),
            f"the same at {', '.join(f'{v:g}' for v in trained_levels)} -> DenseNet layers at "
            f"{', '.join(f'{v:g}' for v in unseen_levels)}": (
                pd.concat([resnet50, resnets[resnets["sparsity"].isin(trained_levels)]]), densenet_only,
                unseen_levels)}
    held_out = {}
    for label, (train, held, at) in fits.items():
        model = fit_sparse_model(train, args.gpu)
        held_out[label] = evaluate(model, seed, layers, per_level, dense, dense_predicted, held, at)
        held_out[label]["trained_on_layers"] = int(train["dense_shape_id"].nunique())
        print(label, json.dumps({k: v for k, v in held_out[label].items() if k != "by_sparsity"}), flush=True)

    # 3. Energy.
    energy = energy_summary(seed)
    by_energy = energy_picks(seed, args.gpu)

    result = {"command": f"python benchmarks/sparse_seed.py --gpu {args.gpu} --out {args.out}"
                         + (f" --plot {args.plot}" if args.plot else ""),
              "gpu": args.gpu, "layers": int(len(layers)), "levels": [float(v) for v in levels],
              "measured_by_kind_and_batch": by_kind,
              "share_of_1x1_and_3x3_layers_with_break_even_at_or_below_0.9": round(share_09, 4),
              "held_out": held_out, "energy": energy, "least_energy_picks_in_sample": by_energy}
    (args.out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# The cuSNN seed's layers on sparse inputs, {args.gpu}", "",
             f"`{result['command']}` (CPU), on `data/{args.gpu}/sparse_measurements/{SEED_GRID}.parquet`: "
             f"{len(layers)} layers (DenseNet-121/169/201, ResNet-101/152 at 224x224, batches 1, 2, 4, 8), "
             f"sparsity {', '.join(f'{v:g}' for v in levels)} (ReLU-like zeros), strict FP32.", "",
             "## Measured break-even (best sparse kernel against best cuDNN algorithm)", "",
             "| kind | batch | layers | with a break-even | at or below 0.9 | median break-even |",
             "|---|---|---|---|---|---|"]
    for k in by_kind:
        median = "none" if k["median_break_even"] is None else f"{k['median_break_even']:.3f}"
        lines.append(f"| {k['kind']} | {k['batch']} | {k['layers']} | {k['with_break_even']} | "
                     f"{k['at_or_below_0.9']} | {median} |")
    lines += ["", f"1x1 and 3x3 layers with a break-even at or below 0.9: {100 * share_09:.1f}%.", "",
              "## Predicted, on held-out layers", "",
              "| fitted on -> tested on | cases | pick within 1% | pick mean regret | sparse-or-dense within 1% | "
              "its mean regret | break-even median error (measured / predicted cuDNN) | within 0.05 |",
              "|---|---|---|---|---|---|---|---|"]
    for label, h in held_out.items():
        b1, b2 = h["break_even"]["vs_measured_cudnn"], h["break_even"]["vs_predicted_cudnn"]
        lines.append(f"| {label} | {h['cases']} | {100 * h['pick_within_1pct']:.1f}% | "
                     f"{100 * h['pick_mean_regret']:.1f}% | {100 * h['decision_within_1pct']:.1f}% | "
                     f"{100 * h['decision_mean_regret']:.1f}% | {b1['median_abs_error']} / {b2['median_abs_error']} | "
                     f"{b1['within_0.05']} / {b2['within_0.05']} |")
    lines += ["", "By sparsity level (pick within 1% / its mean regret), per fit as above:", "",
              "| sparsity | " + " | ".join(f"fit {i + 1}" for i in range(len(held_out))) + " |",
              "|---|" + "---|" * len(held_out)]
    for level in (f"{v:g}" for v in levels):
        cells = [f"{100 * h['by_sparsity'][level]['pick_within_1pct']:.1f}% / "
                 f"{100 * h['by_sparsity'][level]['pick_mean_regret']:.1f}%" if level in h["by_sparsity"] else ""
                 for h in held_out.values()]
        lines.append(f"| {level} | " + " | ".join(cells) + " |")
    if energy:
        lines += ["", "## Energy per call (where both were read)", "",
                  "| sparsity | layers | best sparse / best cuDNN (median) | sparse lower |", "|---|---|---|---|"]
        for level, e in energy.items():
            lines.append(f"| {level} | {e['layers']} | {e['median_sparse_over_cudnn']} | {e['sparse_lower']} |")
    if by_energy:
        lines += ["", "The shipped models' least-energy pick (`--objective energy`) against the measured least energy, "
                  "on the runs with a reading (in sample for the sparse kernels' power):", "",
                  "| sparsity | layers | within 1% | mean energy regret | sparse kernel picked |", "|---|---|---|---|---|"]
        for level, e in by_energy.items():
            lines.append(f"| {level} | {e['layers']} | {e['within_1pct']} | {100 * e['mean_regret']:.1f}% | "
                         f"{e['sparse_picked']} |")
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    if args.plot:
        plot(per_level, layers, args.plot, args.gpu)
    return 0


def plot(per_level: pd.DataFrame, layers: pd.DataFrame, path: Path, gpu: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = per_level.join(layers[["kind", "batch"]], on="dense_shape_id")
    frame["ratio"] = frame["best_sparse_ms"] / frame["best_cudnn_ms"]
    batches = sorted(frame["batch"].unique())
    fig, axes = plt.subplots(1, len(batches), figsize=(4 * len(batches), 3.6), sharey=True)
    for ax, batch in zip(np.atleast_1d(axes), batches):
        for kind, group in frame[frame["batch"] == batch].groupby("kind"):
            stats = group.groupby("sparsity")["ratio"].quantile([0.25, 0.5, 0.75]).unstack()
            line, = ax.plot(stats.index, stats[0.5], marker="o", ms=3, label=f"{kind} ({group['dense_shape_id'].nunique()})")
            ax.fill_between(stats.index, stats[0.25], stats[0.75], color=line.get_color(), alpha=0.15)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_title(f"batch {batch}")
        ax.set_xlabel("share of zeros in the input")
    np.atleast_1d(axes)[0].set_ylabel("best sparse kernel / best cuDNN (median, IQR)")
    np.atleast_1d(axes)[-1].legend(fontsize=7)
    fig.suptitle(f"seer's sparse kernels against cuDNN, {gpu.upper()}, strict FP32: below the dashed line the "
                 "sparse kernel is faster", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
