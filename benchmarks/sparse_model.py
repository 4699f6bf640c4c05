"""How well the sparse kernels' model predicts, leaving each layer out (CPU).

    python benchmarks/sparse_model.py --gpu h200 --grid file:resnet50_800x1216 --out benchmarks/results/h200-sparse-model

(Each held-out layer refits the whole model, its own leave-one-out included: the time grows with
the square of the layers, so ``--grid`` keeps one grid's; ``benchmarks/sparse_seed.py`` tests whole
networks left out instead.)

On the GPU's sparse measurements (``data/<gpu>/sparse_measurements``), per layer
(``dense_shape_id``): the model (:mod:`seer.predict.sparse`) fitted on the other layers
predicts the held-out layer's sparse-kernel times at every level and pattern. Reports per
kernel the mean and median absolute percentage error, and how often the measured time lies
inside the interval; and per layer the break-even sparsity, measured (the lowest level of the
grid at which the best sparse kernel beats the best cuDNN algorithm on the same input) against
predicted (the held-out model's lowest sparsity whose best sparse time lies below the best
cuDNN time: the measured dense one, and seer's predicted one, as ``seer predict`` compares).
Writes ``sparse-model.json`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from seer.algorithms import algorithm_names
from seer.dataset.build import read_measurements, read_sparse_measurements
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.sparse import (SPARSE_KERNELS, fit_sparse_model, leave_one_layer_out, sparse_training_rows)
from seer.schema import INTERVAL_LEVELS


def grid_level(value: float, levels: list[float]) -> float | None:
    """The lowest grid level at or above a continuous break-even (None: above every level)."""
    if not np.isfinite(value):
        return None
    above = [level for level in levels if level >= value - 1e-12]
    return above[0] if above else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grid", help="only this grid's layers (the table's grid column, e.g. file:resnet50_800x1216)")
    args = parser.parse_args(argv)

    source = args.data_dir / args.gpu / "sparse_measurements"
    table = read_sparse_measurements(source)
    if args.grid:
        table = table[table["grid"] == args.grid].reset_index(drop=True)
    rows = sparse_training_rows(table)
    held = leave_one_layer_out(rows)
    full = fit_sparse_model(table, args.gpu, source)  # its intervals: quantiles of these same residuals

    kernels = {}
    for algo in SPARSE_KERNELS:
        group = held[held["algo"] == algo]
        if group.empty:
            continue
        y, p = group["time_ms"].to_numpy(), group["predicted_ms"].to_numpy()
        ape = np.abs(p / y - 1)
        by_level = {f"{level:g}": round(float(100 * ape[group["sparsity"].to_numpy() == level].mean()), 2)
                    for level in sorted(group["sparsity"].unique())}
        coverage = {}
        for level in INTERVAL_LEVELS:
            low, high = full.quantiles[algo][str(level)]
            coverage[str(level)] = round(float(np.mean((y >= p * np.exp(low)) & (y <= p * np.exp(high)))), 3)
        kernels[algo] = {"runs": int(len(group)), "layers": int(group["dense_shape_id"].nunique()),
                         "mape_percent": round(float(100 * ape.mean()), 2),
                         "median_ape_percent": round(float(100 * np.median(ape)), 2),
                         "p90_ape_percent": round(float(100 * np.quantile(ape, 0.9)), 2),
                         "mape_percent_by_sparsity": by_level, "interval_coverage": coverage}

    cudnn = set(algorithm_names("cudnn"))
    ok = table[(table["status"] == "ok") & (table["time_ms"] > 0)]
    levels = sorted(float(v) for v in rows["sparsity"].unique())
    dense = read_measurements(args.data_dir / args.gpu / "measurements")
    dense = dense[dense["shape_id"].isin(table["dense_shape_id"]) & (dense["status"] == "ok")
                  & dense["algo"].isin(cudnn) & (dense["math"] == "fma")]
    dense_best = dense.groupby("shape_id")["time_ms"].min()
    layers = table.drop_duplicates("dense_shape_id").set_index("dense_shape_id")[list(LAYER_COLUMNS)]

    # seer's own prediction of the best cuDNN time, as `seer predict --math fma` ranks it.
    from seer.predict.persist import load_model

    model = load_model(args.gpu, math="fma")
    predicted = model.predict(layers.reset_index(drop=True), "fma", algorithms=["cudnn"])
    predicted_best = predicted.groupby("layer")["predicted_ms"].min().to_numpy()

    per_layer = []
    inside = {algo: {str(level): [] for level in INTERVAL_LEVELS} for algo in kernels}
    for position, (layer_id, shape) in enumerate(layers.iterrows()):
        held_model = fit_sparse_model(table[table["dense_shape_id"] != layer_id], args.gpu)
        # Held-out coverage: the layer's runs against intervals whose quantiles never saw it.
        for algo in held_model.kernels:
            mine = held[(held["dense_shape_id"] == layer_id) & (held["algo"] == algo)]
            if mine.empty:
                continue
            ratio = np.log(mine["time_ms"].to_numpy() / mine["predicted_ms"].to_numpy())
            for level in INTERVAL_LEVELS:
                low, high = held_model.quantiles[algo][str(level)]
                inside[algo][str(level)].extend(((ratio >= low) & (ratio <= high)).tolist())
        frame = shape.to_frame().T.astype(np.int64)
        entry = {"dense_shape_id": layer_id,
                 "layer": f"{shape['in_ch']}x{shape['in_h']}x{shape['in_w']} -> {shape['out_ch']}, "
                          f"{shape['kernel_h']}x{shape['kernel_w']} s{shape['stride_h']}",
                 "measured_dense_best_cudnn_ms": round(float(dense_best.get(layer_id, np.nan)), 5),
                 "predicted_dense_best_cudnn_ms": round(float(predicted_best[position]), 5)}
        for pattern in sorted(ok["sparsity_pattern"].dropna().unique()):
            mine = ok[(ok["dense_shape_id"] == layer_id) & (ok["sparsity_pattern"] == pattern)]
            best_sparse = mine[mine["algo"].isin(SPARSE_KERNELS)].groupby("sparsity")["time_ms"].min()
            best_cudnn = mine[mine["algo"].isin(cudnn)].groupby("sparsity")["time_ms"].min()
            beats = [float(s) for s in levels if s in best_sparse and s in best_cudnn and best_sparse[s] < best_cudnn[s]]
            entry[f"measured_break_even_{pattern}"] = min(beats) if beats else None
        for what, dense_ms in (("vs_measured_cudnn", entry["measured_dense_best_cudnn_ms"]),
                               ("vs_predicted_cudnn", entry["predicted_dense_best_cudnn_ms"])):
            value = float(held_model.break_even(frame, np.array([dense_ms]))[0])
            entry[f"predicted_break_even_{what}"] = None if not np.isfinite(value) else value
            entry[f"predicted_break_even_{what}_grid"] = grid_level(value, levels)
        per_layer.append(entry)

    for algo, by_level in inside.items():
        kernels[algo]["held_out_interval_coverage"] = {level: round(float(np.mean(v)), 3)
                                                       for level, v in by_level.items()}
    agreement = {}
    for what in ("vs_measured_cudnn", "vs_predicted_cudnn"):
        for pattern in ("relu", "uniform"):
            measured = [e[f"measured_break_even_{pattern}"] for e in per_layer]
            guess = [e[f"predicted_break_even_{what}_grid"] for e in per_layer]
            same = sum(m == g for m, g in zip(measured, guess))
            index = {level: i for i, level in enumerate([*levels, None])}
            within_one = sum(abs(index[m] - index[g]) <= 1 for m, g in zip(measured, guess))
            agreement[f"{what}_{pattern}"] = {"layers": len(per_layer), "same_grid_level": same,
                                              "within_one_level": within_one,
                                              "measured_with_break_even": sum(m is not None for m in measured),
                                              "predicted_with_break_even": sum(g is not None for g in guess)}

    result = {"command": "python benchmarks/sparse_model.py --gpu " + args.gpu
                         + (f" --grid {args.grid}" if args.grid else "") + " --out " + str(args.out),
              "gpu": args.gpu, "training": full.card, "coefficients": full.coefficients,
              "leave_one_layer_out": kernels, "break_even": per_layer, "break_even_agreement": agreement,
              "grid_levels": levels}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sparse-model.json").write_text(json.dumps(result, indent=1) + "\n")

    lines = [f"# The sparse kernels' model, {args.gpu}: leave one layer out", "",
             f"`{result['command']}` (CPU), on `data/{args.gpu}/sparse_measurements` ({full.card['rows']} ok runs of "
             f"the sparse kernels, {full.card['layers']} layers of grid {args.grid or 'every grid'}; sparsity "
             f"{', '.join(f'{v:g}' for v in levels)}; patterns {', '.join(full.card['patterns'])}).", "",
             "| kernel | runs | layers | MAPE | median APE | 90th pct APE | 80% / 95% interval held* | "
             "held out** |", "|---|---|---|---|---|---|---|---|"]
    for algo, k in kernels.items():
        lines.append(f"| {algo} | {k['runs']} | {k['layers']} | {k['mape_percent']:.1f}% | "
                     f"{k['median_ape_percent']:.1f}% | {k['p90_ape_percent']:.1f}% | "
                     f"{100 * k['interval_coverage']['80']:.0f}% / {100 * k['interval_coverage']['95']:.0f}% | "
                     f"{100 * k['held_out_interval_coverage']['80']:.0f}% / "
                     f"{100 * k['held_out_interval_coverage']['95']:.0f}% |")
    lines += ["", "*The shipped intervals are these same leave-one-layer-out residuals' quantiles, so their coverage "
              "here is by construction. **Held out: each layer's runs against the intervals of the model fitted "
              "without it (its quantiles from the other layers' leave-one-out residuals).", "",
              "Break-even sparsity per layer (measured: lowest grid level where the best sparse kernel beat the best "
              "cuDNN algorithm on the same input; predicted: the held-out model against the best cuDNN time, "
              "measured dense or predicted by seer, rounded up to the grid):", "",
              "| agreement | layers | same grid level | within one level | measured with one | predicted with one |",
              "|---|---|---|---|---|---|"]
    for key, a in agreement.items():
        lines.append(f"| {key} | {a['layers']} | {a['same_grid_level']} | {a['within_one_level']} | "
                     f"{a['measured_with_break_even']} | {a['predicted_with_break_even']} |")
    lines += ["", "| layer | best cuDNN ms measured / predicted | measured relu / uniform | predicted vs measured "
              "cuDNN | predicted vs predicted cuDNN |", "|---|---|---|---|---|"]

    def show(v) -> str:
        return "none" if v is None else f"{v:g}"

    for e in per_layer:
        lines.append(f"| {e['layer']} | {e['measured_dense_best_cudnn_ms']:.3f} / {e['predicted_dense_best_cudnn_ms']:.3f}"
                     f" | {show(e['measured_break_even_relu'])} / {show(e['measured_break_even_uniform'])} | "
                     f"{show(e['predicted_break_even_vs_measured_cudnn'])} | "
                     f"{show(e['predicted_break_even_vs_predicted_cudnn'])} |")
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
