"""How much of the answer-learnt time regressors' error is the kernel cuDNN launches, measured.

    OMP_NUM_THREADS=1 python benchmarks/kernel_oracle.py --gpu h100 --out benchmarks/results/h100-kernel-oracle.json

``benchmarks/answer_inputs.py`` kept one design for cuDNN's algorithms: per math mode and
algorithm, a boosted-tree regressor of log(time / baseline) per exact kernel path (the
algorithm's workspace zero or not) from the shape features and every cuDNN algorithm's
answer. Its Test-set-II MAPE is about 5% for GEMM and 8-14% for the rest, and the docs hold
that the rest is which kernel (tile, variant) cuDNN launches inside an algorithm, which no
descriptor call tells. This script measures that by giving the same regressors what the
run's CUPTI trace saw, as an oracle no predictor could have before the run:

- ``answers``: the kept design as is, fitted on every train run (reproduces answer_inputs.py
  ``--fit paths``, design ``all``), scored on every test run and on the traced ones;
- ``answers+variant_all``: and the traced main kernel's variant (``trace_variant``), one-hot
  over the algorithm's variants of the traced train runs (a variant train never ran: all
  zeros), fitted on every train run: only about half the train split is traced (the square
  layers of seer 0.2 were timed before tracing existed), so an untraced run has its one-hot
  columns zero and a flag column set;
- ``answers+kernels_all``: the same with every kernel name the traced call launched instead
  (multi-hot over the names of the traced train runs, ``traced_kernels/``): the full kernel
  identity, not only the main kernel's class;
- ``answers+launch_all``: ``answers+kernels_all`` and the launch of the run's longest traced
  kernel (log2 of 1 + grid blocks, block threads, registers, shared memory bytes): which tile
  and how many of them, the most a kernel's identity could tell;
- ``answers_traced``, ``answers+variant``, ``answers+kernels``: ``answers`` and the two oracles
  fitted on the traced train runs only (no flag), the controls of the two above;
- ``per_variant``: one ``answers`` regressor per (kernel path, variant), fitted on the traced
  train runs of that variant, where it has at least ``--min-runs``; a test run of any other
  variant takes ``answers+variant``'s time.
- ``per_predicted_variant``: no oracle: the same regressors, each test run taking the one of the
  variant a classifier predicts from the regressors' inputs (a histogram gradient-boosting
  classifier fitted on the traced train runs' variants); a run whose predicted variant has no
  regressor takes ``answers``'s time. What knowing the kernel is worth where it must be guessed.

The ncu ``variant`` column is not used: only about 3% of the runs were profiled, against
about half traced (``trace_variant`` classifies the traced main kernel by the same rules).
Every design is scored on Test-set-I and Test-set-II by MAPE %: ``answers`` on all of an
algorithm's measured runs (``runs=all``) and every design on the traced ones (``runs=traced``).
The per-run Test-set-II predictions are stored (``test2_runs``, 6 significant digits, the
figures summarised from those rounded values) so that ``summarise`` can be checked against
them; Test-set-I's (about 80,000 runs) are not. No subsampling: every train run is fitted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.ensemble import HistGradientBoostingClassifier

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answer_inputs import (CUDNN, SPLITS, answer_inputs, fit_paths, kernel_paths, predict_paths,  # noqa: E402
                           regressor, split_frames)

from seer.dataset.build import read_measurements  # noqa: E402
from seer.dataset.views import algorithm_rows, values_by_algorithm  # noqa: E402
from seer.layers.shapes import LAYER_COLUMNS  # noqa: E402
from seer.predict.features import shape_features  # noqa: E402
from seer.predict.persist import load_model  # noqa: E402
from seer.predict.predictors import baseline_ms  # noqa: E402
from seer.schema import DatasetDir  # noqa: E402
from seer.training.estimators import FIXED_COST_QUANTILE  # noqa: E402

DESIGNS = ("answers", "answers+variant_all", "answers+kernels_all", "answers+launch_all", "answers_traced",
           "answers+variant", "answers+kernels", "per_variant", "per_predicted_variant")
#: The designs that take an oracle input or were fitted on traced runs only: scored on traced runs only.
TRACED_ONLY = DESIGNS[1:-1]
#: The oracle designs fitted on every train run (an untraced one: oracle columns zero, a flag set).
ALL_TRAIN = ("answers+variant_all", "answers+kernels_all", "answers+launch_all")
#: The traced launch of a run's longest kernel, its ``launch`` oracle (log2 of each).
LAUNCH = ("grid_blocks", "block_threads", "registers", "shared_mem_bytes")
DIGITS = 6


def traced_frames(table: pd.DataFrame, kernels: pd.DataFrame, math: str, split: str, index) -> dict:
    """Per layer (``index``) and cuDNN algorithm: the traced main kernel's variant, the names
    of every kernel the traced call launched, and the launch of its longest kernel (``launch``:
    one frame per :data:`LAUNCH` field); None or NaN where the run has no trace."""
    rows = algorithm_rows(table, math, split)
    rows = rows[rows["algo"].isin(CUDNN)]
    variant = values_by_algorithm(rows, "trace_variant").reindex(index=index, columns=CUDNN)
    names = (kernels[kernels["math"] == math].groupby(["shape_id", "algo"])["kernel_name"]
             .agg(lambda s: tuple(sorted(set(s)))).unstack("algo"))
    names = names.reindex(index=index, columns=CUDNN)
    names = names.where(variant.notna())  # a run that did not succeed has no trace of its own
    of_math = kernels[kernels["math"] == math]
    longest = of_math.loc[of_math.groupby(["shape_id", "algo"])["duration_ns"].idxmax()]
    launch = {q: longest.pivot(index="shape_id", columns="algo", values=q).reindex(index=index, columns=CUDNN)
              .where(variant.notna()) for q in LAUNCH}
    return {"variant": variant, "kernels": names, "launch": launch}


def one_hot(values: np.ndarray, categories: list) -> np.ndarray:
    return (values[:, None] == np.asarray(categories, dtype=object)[None, :]).astype(float)


def multi_hot(sets: np.ndarray, names: list) -> np.ndarray:
    column = {n: j for j, n in enumerate(names)}
    out = np.zeros((len(sets), len(names)))
    for i, s in enumerate(sets):
        for n in s if isinstance(s, tuple) else ():
            if n in column:
                out[i, column[n]] = 1.0
    return out


def oracle_runs(model, table: pd.DataFrame, kernels: pd.DataFrame, math: str, algos: list[str],
                min_runs: int) -> tuple[list[dict], list[dict]]:
    """Per-run predictions of every design on both test splits, and per-algorithm counts of
    variants."""
    spec = model.predictors[math].feature_spec
    names = list(model.predictors[math].features)
    frames = {}
    for name, split in {"train": "train", **SPLITS}.items():  # SPLITS: report name -> split code
        frames[name] = split_frames(table, math, split)
        frames[name].update(traced_frames(table, kernels, math, split, frames[name]["times"].index))
    features = {name: shape_features(f["layers"], spec).to_numpy() for name, f in frames.items()}
    roof = {name: F[:, names.index("log2_roofline_floor_s")] for name, F in features.items()}
    runs_out, counts = [], []
    for algo in algos:
        started = time.perf_counter()
        times = {n: f["times"][algo].to_numpy(dtype=float) for n, f in frames.items()}
        variant = {n: f["variant"][algo].to_numpy(dtype=object) for n, f in frames.items()}
        kernel_sets = {n: f["kernels"][algo].to_numpy(dtype=object) for n, f in frames.items()}
        measured = {n: np.isfinite(t) & (t > 0) for n, t in times.items()}
        traced = {n: measured[n] & pd.notna(variant[n]) for n in frames}
        fixed = float(np.quantile(times["train"][measured["train"]], FIXED_COST_QUANTILE))
        base = {n: baseline_ms(roof[n], fixed, "roofline") for n in frames}
        ratio = times["train"] / base["train"]
        paths = {n: kernel_paths(f["workspaces"][algo].to_numpy(dtype=float), "paths") for n, f in frames.items()}
        categories = sorted(set(variant["train"][traced["train"]]))
        kernel_names = sorted({k for s in kernel_sets["train"][traced["train"]] for k in s})
        X = {n: np.hstack([features[n], answer_inputs(frames[n], "all", algo)]) for n in frames}
        with_variant = {n: np.hstack([X[n], one_hot(variant[n], categories)]) for n in frames}
        with_kernels = {n: np.hstack([X[n], multi_hot(kernel_sets[n], kernel_names)]) for n in frames}
        untraced = {n: pd.isna(variant[n])[:, None].astype(float) for n in frames}
        inputs = {"answers": X,
                  "answers+variant_all": {n: np.hstack([with_variant[n], untraced[n]]) for n in frames},
                  "answers+kernels_all": {n: np.hstack([with_kernels[n], untraced[n]]) for n in frames},
                  "answers+launch_all": {n: np.hstack([with_kernels[n], untraced[n], np.log2(np.nan_to_num(
                      np.column_stack([frames[n]["launch"][q][algo].to_numpy(dtype=float) for q in LAUNCH]),
                      nan=0.0) + 1)]) for n in frames},
                  "answers_traced": X, "answers+variant": with_variant, "answers+kernels": with_kernels}
        predicted = {n: {} for n in SPLITS}
        for design, design_inputs in inputs.items():
            rows = measured["train"] if design in ("answers", *ALL_TRAIN) else traced["train"]
            fitted = fit_paths(design_inputs["train"], ratio, rows, paths["train"])
            for n in SPLITS:
                predicted[n][design] = predict_paths(fitted, design_inputs[n], paths[n]) * base[n]
        # One regressor per (kernel path, variant); any other test run takes answers+variant's time.
        groups = {(p, v): m & (variant["train"] == v) for p, m in paths["train"].items() for v in categories}
        fitted = {g: clone(regressor("paths")).fit(X["train"][traced["train"] & m], ratio[traced["train"] & m])
                  for g, m in groups.items() if (traced["train"] & m).sum() >= min_runs}
        classifier = HistGradientBoostingClassifier(max_iter=300, early_stopping=False, random_state=0).fit(
            X["train"][traced["train"]], variant["train"][traced["train"]].astype(str))
        guessed = {n: classifier.predict(X[n]).astype(object) for n in SPLITS}
        for n in SPLITS:
            for design, fallback, of_run in (("per_variant", "answers+variant", variant[n]),
                                             ("per_predicted_variant", "answers", guessed[n])):
                ms = predicted[n][fallback].copy()
                own = np.zeros(len(ms), dtype=bool)
                for (p, v), regr in fitted.items():
                    members = paths[n][p] & (of_run == v)
                    if members.any():
                        ms[members] = regr.predict(X[n][members]) * base[n][members]
                        own |= members
                predicted[n][design] = ms
                predicted[n][f"{design}_own"] = own
            predicted[n]["variant_guessed_right"] = guessed[n] == variant[n]
        print(f"{math} {algo}: {len(categories)} variants, {len(kernel_names)} kernel names, "
              f"{len(fitted)} per-variant regressors, {time.perf_counter() - started:.0f} s", flush=True)
        for n in SPLITS:
            keep = measured[n]
            ids = frames[n]["times"].index.to_numpy()[keep]
            unseen_kernel = np.array([isinstance(s, tuple) and any(k not in kernel_names for k in s)
                                      for s in kernel_sets[n]])
            for i, shape_id in zip(np.flatnonzero(keep), ids):
                row = {"split": n, "math": math, "algo": algo, "shape_id": shape_id,
                       "measured_ms": float(times[n][i]),
                       "variant": variant[n][i] if traced[n][i] else None,
                       "unseen_variant": bool(traced[n][i] and variant[n][i] not in categories),
                       "unseen_kernel": bool(traced[n][i] and unseen_kernel[i]),
                       "per_variant_own": bool(traced[n][i] and predicted[n]["per_variant_own"][i]),
                       "variant_guessed_right": bool(traced[n][i] and predicted[n]["variant_guessed_right"][i])}
                for design in DESIGNS:
                    value = predicted[n][design][i]
                    row[design] = (None if (design in TRACED_ONLY and not traced[n][i]) or not np.isfinite(value)
                                   else float(f"{value:.{DIGITS}g}"))
                runs_out.append(row)
        test = np.concatenate([variant[n][traced[n]] for n in SPLITS])
        counts.append({"math": math, "algo": algo, "train_runs": int(measured["train"].sum()),
                       "train_traced_runs": int(traced["train"].sum()),
                       "variants_train": len(categories), "kernel_names_train": len(kernel_names),
                       "variants_test": len(set(test)), "variants_all": len(set(categories) | set(test)),
                       "per_variant_regressors": len(fitted)})
    return runs_out, counts


def mape(measured: np.ndarray, predicted: np.ndarray) -> float:
    return round(float(np.mean(np.abs(predicted / measured - 1)) * 100), 2)


def summarise(runs: pd.DataFrame) -> list[dict]:
    """MAPE % per (split, math, algorithm, runs) of each design, from the per-run predictions:
    ``runs="all"`` every measured run (``answers`` only), ``runs="traced"`` the traced runs;
    with the share of traced runs whose variant (and kernel name) train never ran, and the
    share ``per_variant`` predicted with a regressor of their own variant."""
    out = []
    for (split, math, algo), g in runs.groupby(["split", "math", "algo"], sort=False):
        out.append({"split": split, "math": math, "algo": algo, "runs": "all", "n": len(g),
                    "mape_answers": mape(g["measured_ms"].to_numpy(float), g["answers"].to_numpy(float))})
        t = g[g["variant"].notna()]
        row = {"split": split, "math": math, "algo": algo, "runs": "traced", "n": len(t)}
        for design in DESIGNS:
            row[f"mape_{design}"] = mape(t["measured_ms"].to_numpy(float), t[design].to_numpy(float))
        row["unseen_variant_share"] = round(float(t["unseen_variant"].mean()), 4)
        row["unseen_kernel_share"] = round(float(t["unseen_kernel"].mean()), 4)
        row["per_variant_own_share"] = round(float(t["per_variant_own"].mean()), 4)
        row["variant_guessed_right_share"] = round(float(t["variant_guessed_right"].mean()), 4)
        out.append(row)
    return out


def by_variant(runs: pd.DataFrame, least: int = 20) -> list[dict]:
    """Test-set-II MAPE per (math, algorithm, variant) of the traced runs, for variants of at
    least ``least`` runs: where the error is, and what the variant oracle does to it."""
    t = runs[(runs["split"] == "Test-set-II") & runs["variant"].notna()]
    out = []
    for (math, algo, v), g in t.groupby(["math", "algo", "variant"], sort=False):
        if len(g) >= least:
            m = g["measured_ms"].to_numpy(float)
            out.append({"math": math, "algo": algo, "variant": v, "n": len(g),
                        "unseen": bool(g["unseen_variant"].all()),
                        **{f"mape_{d}": mape(m, g[d].to_numpy(float)) for d in DESIGNS}})
    return out


def reproduction(summary: list[dict], reference: Path) -> list[dict]:
    """``answers`` on every run against answer_inputs.py's ``all`` design of ``reference``."""
    if not reference.exists():
        return []
    ref = {(r["split"], r["math"], r["algo"]): r.get("mape_all") for r in json.loads(reference.read_text())["time_mape"]}
    return [{"split": r["split"], "math": r["math"], "algo": r["algo"], "answer_inputs": ref.get(
        (r["split"], r["math"], r["algo"])), "here": r["mape_answers"]} for r in summary if r["runs"] == "all"]


def table(summary: list[dict]) -> str:
    """Markdown: per algorithm and math mode, MAPE % on the traced test runs of ``answers``, of
    the two oracles fitted on every train run, of ``per_variant`` and of ``per_predicted_variant``."""
    rows = {(r["split"], r["math"], r["algo"]): r for r in summary if r["runs"] == "traced"}
    algos = list(dict.fromkeys(r["algo"] for r in summary))
    maths = list(dict.fromkeys(r["math"] for r in summary))
    head = "| algorithm | math | " + " | ".join(
        f"{s} answers / +variant / +kernels / per variant / per predicted variant"
        for s in ("Test-set-II", "Test-set-I")) + " |"
    shown = ("answers", "answers+variant_all", "answers+kernels_all", "per_variant", "per_predicted_variant")
    lines = [head, "| --- | --- | ---: | ---: |"]
    for algo in algos:
        for math in maths:
            cells = []
            for s in ("Test-set-II", "Test-set-I"):
                r = rows.get((s, math, algo))
                cells.append("-" if r is None else " / ".join(
                    f"{r[f'mape_{d}']:.2f}" for d in shown))
            lines.append(f"| {algo} | {math} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--maths", default=None, help="comma-separated; default: the model's")
    parser.add_argument("--algos", default=None, help="comma-separated; default: cuDNN's the model times")
    parser.add_argument("--min-runs", type=int, default=50, help="train runs a per-variant regressor needs")
    parser.add_argument("--reference", type=Path, default=Path("benchmarks/results/h100-answer-inputs-paths.json"),
                        help="answer_inputs.py's results to compare the reproduction with")
    parser.add_argument("--out", type=Path, required=True, help="results JSON")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    model = load_model(args.gpu)
    dataset = DatasetDir(args.data_dir / args.gpu)
    table_ = read_measurements(dataset.measurements, columns=[
        *LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms", "workspace_bytes",
        "heuristic_rank", "trace_variant"])
    kernels = pd.read_parquet(dataset.traced_kernels, columns=["shape_id", "math", "algo", "kernel_name",
                                                               "duration_ns", *LAUNCH])
    runs, counts = [], []
    for math in (args.maths.split(",") if args.maths else model.maths):
        algos = [a for a in CUDNN if a in model.predictors[math].regressors]
        if args.algos:
            algos = [a for a in algos if a in args.algos.split(",")]
        r, c = oracle_runs(model, table_, kernels, math, algos, args.min_runs)
        runs += r
        counts += c
    frame = pd.DataFrame(runs)
    summary = summarise(frame)
    print(table(summary))
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(pd.DataFrame(counts).to_string())
    test2 = frame[frame["split"] == "Test-set-II"]
    result = {
        "gpu": args.gpu, "card_trained_at": model.card.get("trained_at"),
        "command": "OMP_NUM_THREADS=1 python benchmarks/kernel_oracle.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "designs": list(DESIGNS), "min_runs": args.min_runs, "subsampled": False,
        "seconds": round(time.perf_counter() - started),
        "summary": summary, "variants": counts, "by_variant_test2": by_variant(frame),
        "reproduction": reproduction(summary, args.reference),
        "test2_runs": {c: test2[c].tolist() for c in test2.columns},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
