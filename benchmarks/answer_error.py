"""Where the times learnt from cuDNN's answers err, how far noise alone would, and what lowers it.

    OMP_NUM_THREADS=1 python benchmarks/answer_error.py --gpu h100 --out benchmarks/results/h100-answer-error

The answer models (``seer train --answers-only``, :mod:`seer.training.answers`) time GEMM and
IMPLICIT_GEMM within 6% MAPE on Test-set-II, but not FFT, FFT_TILING, WINOGRAD_NONFUSED, nor
IMPLICIT_PRECOMP_GEMM under default math. Per (math, algorithm) of ``--targets`` this script:

- breaks the error down (``where``): the MAPE and share of the summed error per layer kind,
  filter size, batch, measured time, traced kernel variant, kernels per call (CUPTI) and the
  share of the call its traced kernels leave idle; on Test-set-II with the answer times of the
  model in ``--models-dir`` (what ``seer predict --cudnn-answers`` gives), and on the validation
  split of the train layers (:func:`seer.training.answers.validation_rows`, the split that
  chooses designs) with the default design fitted on the rest;
- sets it beside noise (``noise``): the MAPE between the two sessions that timed Test-set-II
  (``benchmarks/repeatability.py``'s results, pooled over its two parts), and the runs' own
  relative interquartile range;
- scores designs (``tried``), each fitted on the train layers outside the validation split and
  scored there, then fitted on every train layer and scored on Test-set-II and Test-set-I:
  the four :data:`seer.training.answers.DESIGNS` (finer trees, the transform features), the
  median loss instead of the mean, and, on the traced runs, the time as the sum of per-role
  kernel predictions (transforms, the GEMM or product, layout and the rest, each a regressor of
  its traced duration, times a regressor of the call's time over its kernels' sum).

Writes ``answer-error.json`` and ``answer-error.md`` in ``--out``. Choices are made on the
validation split only; the test sets are scored, never tuned on.
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

from seer.dataset.build import read_measurements
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.persist import load_model
from seer.predict.predictors import ALL_RUNS, answer_inputs, answer_paths
from seer.predict.uncertainty import interval_kind
from seer.schema import DatasetDir
from seer.training.answers import DEFAULT_CANDIDATE, DESIGNS, design_inputs, validation_rows
from seer.training.estimators import default_candidates, finer_trees, mape
from seer.training.train import training_inputs

TARGETS = ("fma:FFT", "fma:FFT_TILING", "fma:WINOGRAD_NONFUSED", "default:IMPLICIT_PRECOMP_GEMM",
           "default:FFT", "default:FFT_TILING", "default:WINOGRAD_NONFUSED", "fma:IMPLICIT_PRECOMP_GEMM")
#: Groups of the breakdown: name -> (column, bins or None for the value itself).
GROUPS = {"kind": ("kind", None), "filter": ("filter", None), "batch": ("batch", [0, 1, 4, 16, 64, np.inf]),
          "measured ms": ("measured_ms", [0, 0.02, 0.05, 0.1, 0.3, 1, 3, np.inf]),
          "traced variant": ("variant", None), "kernels per call": ("trace_n_kernels", [0, 3, 5, 8, 20, np.inf]),
          "idle %": ("idle_pct", [-np.inf, 5, 20, 40, 100])}
#: A group's row is reported where it has at least this many runs.
LEAST_RUNS = 10
#: Kernel roles of the parts design (traced_kernels' kernel_role; layout kernels apart).
ROLES = ("transform", "compute", "layout and other")
HELD_OUT = {"test2": "Test-set-II", "test1": "Test-set-I"}


def frames(table: pd.DataFrame, model, math: str, split: str) -> dict:
    """One split's layers, per-algorithm frames and the inputs every design reads."""
    inputs = training_inputs(table, pd.DataFrame(), math, split)
    _, F, answers, transforms = design_inputs(model.predictors[math], inputs.shapes, inputs.workspaces)
    return {"inputs": inputs, "F": F, "answers": answers, "transforms": transforms,
            "with_transforms": np.hstack([answers, transforms])}


def run_frame(split_frames: dict, algo: str, predicted: np.ndarray, runs_meta: pd.DataFrame, math: str) -> pd.DataFrame:
    """Per run of ``algo``: its layer's groups, measured and ``predicted`` ms (NaN: not scored)."""
    inputs = split_frames["inputs"]
    measured = inputs.times[algo].to_numpy(dtype=float)
    keep = np.isfinite(measured) & (measured > 0) & np.isfinite(predicted)
    shapes = inputs.shapes
    filters = shapes["kernel_h"].astype(str) + "x" + shapes["kernel_w"].astype(str)
    out = pd.DataFrame({"shape_id": inputs.times.index[keep], "measured_ms": measured[keep],
                        "predicted_ms": predicted[keep],
                        "kind": np.asarray(interval_kind(shapes.reset_index(drop=True)))[keep],
                        "filter": filters.to_numpy()[keep], "batch": shapes["batch"].to_numpy()[keep]})
    meta = runs_meta[(runs_meta["math"] == math) & (runs_meta["algo"] == algo)]
    out = out.merge(meta[["shape_id", "trace_variant", "trace_n_kernels", "trace_time_ms", "time_ms_iqr"]],
                    on="shape_id", how="left").rename(columns={"trace_variant": "variant"})
    out["idle_pct"] = (1 - out["trace_time_ms"] / out["measured_ms"]) * 100
    out["ape"] = (out["predicted_ms"] / out["measured_ms"] - 1).abs() * 100
    return out


def breakdown(runs: pd.DataFrame) -> dict:
    """MAPE, median APE and share of the summed error (%) per group of :data:`GROUPS`."""
    out = {"runs": len(runs), "mape": round(float(runs["ape"].mean()), 2),
           "median_ape": round(float(runs["ape"].median()), 2),
           "mean_signed_pct": round(float((runs["predicted_ms"] / runs["measured_ms"] - 1).mean() * 100), 2)}
    top = runs["ape"].sort_values(ascending=False)
    out["top_5pct_runs_share_of_error"] = round(float(top.iloc[:len(top) // 20].sum() / top.sum() * 100), 1)
    for name, (column, bins) in GROUPS.items():
        key = runs[column] if bins is None else pd.cut(runs[column], bins).astype(str)
        g = runs.groupby(key.where(runs[column].notna(), "(untraced)"), observed=True)["ape"]
        rows = pd.DataFrame({"runs": g.size(), "mape": g.mean(), "share_of_error": g.sum() / runs["ape"].sum() * 100})
        out[name] = {str(k): {c: round(float(v), 2) if c != "runs" else int(v) for c, v in r.items()}
                     for k, r in rows[rows["runs"] >= LEAST_RUNS].iterrows()}
    return out


def candidate(model, math: str, algo: str, path: str, trees: str, loss: str = "mean"):
    """The regressor a design fits on one kernel path: the shape-only model's choice (as
    training takes it), finer or not, or the median loss's candidate."""
    name = model.card["maths"][math]["regressor"].get(algo, {}).get(path, DEFAULT_CANDIDATE)
    name = "boosted_trees_median" if loss == "median" else name
    chosen = default_candidates()[name]
    return finer_trees(chosen) if trees == "finer" else chosen


def fit_predict(model, math: str, algo: str, train: dict, rows: np.ndarray, targets: list[dict],
                trees: str, transforms: bool, loss: str = "mean") -> list[np.ndarray]:
    """A design fitted per kernel path on ``rows`` of ``train``; its predicted ms on each of ``targets``."""
    key = "with_transforms" if transforms else "answers"
    predictor = model.predictors[math]
    ms = train["inputs"].times[algo].to_numpy(dtype=float)
    ratio = ms / predictor.baseline_ms(train["F"], algo)
    runs = np.isfinite(ms) & (ms > 0) & np.isfinite(train["inputs"].workspaces[algo].to_numpy(dtype=float))
    two_paths = set(model.answer_times[math].regressors[algo]) != {ALL_RUNS}

    def paths(f: dict) -> dict:
        workspace = f["inputs"].workspaces[algo].to_numpy(dtype=float)
        return answer_paths(workspace) if two_paths else {ALL_RUNS: np.ones(len(workspace), dtype=bool)}

    fitted = {p: clone(candidate(model, math, algo, p, trees, loss)).fit(train[key][runs & r & rows],
                                                                          ratio[runs & r & rows])
              for p, r in paths(train).items()}
    out = []
    for f in targets:
        predicted = np.full(len(f["F"]), np.nan)
        for p, r in paths(f).items():
            if r.any():
                predicted[r] = fitted[p].predict(f[key][r]) * predictor.baseline_ms(f["F"][r], algo)
        out.append(predicted)
    return out


def kernel_parts(model, math: str, algo: str, train: dict, held: np.ndarray, kernels: pd.DataFrame) -> dict:
    """The sum-of-kernels design against the single regressor, on the validation split's traced
    runs (and on all of its runs, untraced ones too): each role's traced duration a regressor
    (finer trees of the chosen candidate) times a classifier's chance the role runs, the call's
    time over its kernels' sum a regressor of its own."""
    predictor = model.predictors[math]
    inputs = train["inputs"]
    X = train["answers"]
    ms = inputs.times[algo].to_numpy(dtype=float)
    runs = np.isfinite(ms) & (ms > 0) & np.isfinite(inputs.workspaces[algo].to_numpy(dtype=float))
    of = kernels[(kernels["math"] == math) & (kernels["algo"] == algo)].copy()
    of["part"] = np.where(of["kernel_variant"] == "layout", ROLES[2], np.where(
        of["kernel_role"].isin(ROLES[:2]), of["kernel_role"], ROLES[2]))
    parts = (of.groupby(["shape_id", "part"])["duration_ns"].sum().unstack("part")
             .reindex(index=inputs.times.index, columns=list(ROLES)) / 1e6)
    traced = runs & parts.notna().any(axis=1).to_numpy() & pd.notna(inputs.paths[algo]).to_numpy()
    parts = parts.fillna(0.0).to_numpy()
    base = predictor.baseline_ms(train["F"], algo)
    regressor = finer_trees(default_candidates()[DEFAULT_CANDIDATE])
    summed = np.zeros(len(ms))
    fit_rows = traced & ~held
    for j in range(len(ROLES)):
        has = fit_rows & (parts[:, j] > 0)
        if has.sum() < 50:
            continue
        duration = clone(regressor).fit(X[has], parts[has, j] / base[has]).predict(X) * base
        share = has.sum() / fit_rows.sum()
        chance = np.ones(len(ms)) if share > 0.98 else HistGradientBoostingClassifier(
            max_iter=200, random_state=0).fit(X[fit_rows], parts[fit_rows, j] > 0).predict_proba(X)[:, 1]
        summed += chance * duration
    kernel_sum = parts.sum(axis=1)
    over_sum = clone(regressor).fit(X[fit_rows], ms[fit_rows] / kernel_sum[fit_rows]).predict(X)
    by_parts = summed * over_sum
    single = clone(regressor).fit(X[runs & ~held], ms[runs & ~held] / base[runs & ~held]).predict(X) * base
    valid, valid_traced = runs & held, traced & held
    return {"traced_train_runs": int(fit_rows.sum()), "validation_traced_runs": int(valid_traced.sum()),
            "kernel_sum_vs_measured_mape": round(mape(ms[valid_traced], kernel_sum[valid_traced]), 2),
            "single_traced_mape": round(mape(ms[valid_traced], single[valid_traced]), 2),
            "parts_traced_mape": round(mape(ms[valid_traced], by_parts[valid_traced]), 2),
            "single_mape": round(mape(ms[valid], single[valid]), 2),
            "parts_mape": round(mape(ms[valid], by_parts[valid]), 2)}


def noise_floor(repeatability: Path, table: pd.DataFrame, targets: list[tuple[str, str]]) -> list[dict]:
    """Per target, the second session's MAPE against the first (pooled over Test-set-II's two
    parts, weighted by runs) and the Test-set-II runs' median relative IQR."""
    times = pd.DataFrame(json.loads(repeatability.read_text())["times"]) if repeatability.exists() else pd.DataFrame()
    out = []
    for math, algo in targets:
        row = {"math": math, "algo": algo}
        if not times.empty:
            t = times[(times["math"] == math) & (times["algo"] == algo)]
            row["session_runs"] = int(t["runs"].sum())
            row["session_mape"] = round(float((t["mape_pct"] * t["runs"]).sum() / t["runs"].sum()), 2)
            row["session_mape_per_part"] = {p: float(m) for p, m in zip(t["part"], t["mape_pct"])}
        runs = table[(table["split"] == "test2") & (table["math"] == math) & (table["algo"] == algo)
                     & (table["status"] == "ok")]
        row["median_relative_iqr_pct"] = round(float((runs["time_ms_iqr"] / runs["time_ms"]).median() * 100), 2)
        out.append(row)
    return out


def markdown(result: dict) -> str:
    lines = [f"# Where the answer-learnt times err ({result['gpu']})", "", f"`{result['command']}` "
             f"({result['seconds']} s); the answer model: `{result['models']}`.", "",
             "## Noise", "", "| math | algorithm | second session's MAPE vs the first | runs | median relative IQR % |",
             "|---|---|---:|---:|---:|"]
    for r in result["noise"]:
        lines.append(f"| {r['math']} | {r['algo']} | {r.get('session_mape', '-')} | {r.get('session_runs', '-')} | "
                     f"{r['median_relative_iqr_pct']} |")
    lines += ["", "## Designs tried (MAPE %: validation split of train / Test-set-II / Test-set-I)", ""]
    designs = list(dict.fromkeys(d for r in result["tried"] for d in r["designs"]))
    lines += ["| math | algorithm | " + " | ".join(designs) + " |", "|---|---|" + "---|" * len(designs)]
    for r in result["tried"]:
        cells = [" / ".join(f"{r['designs'][d][s]:.2f}" for s in ("validation", "test2", "test1"))
                 if d in r["designs"] else "-" for d in designs]
        lines.append(f"| {r['math']} | {r['algo']} | " + " | ".join(cells) + " |")
    parts = [r for r in result["tried"] if "kernel_parts" in r]
    if parts:
        lines += ["", "Sum of per-role kernel predictions against one regressor (validation split; finer trees):",
                  "", "| math | algorithm | traced runs | kernels' sum vs measured | single / parts (traced) | "
                  "single / parts (all) |", "|---|---|---:|---:|---|---|"]
        for r in parts:
            p = r["kernel_parts"]
            lines.append(f"| {r['math']} | {r['algo']} | {p['validation_traced_runs']} | "
                         f"{p['kernel_sum_vs_measured_mape']} | {p['single_traced_mape']} / {p['parts_traced_mape']} | "
                         f"{p['single_mape']} / {p['parts_mape']} |")
    lines += ["", "## Where", ""]
    for r in result["where"]:
        lines += [f"### {r['where']}, {r['math']} {r['algo']}: {r['runs']} runs, MAPE {r['mape']} (median "
                  f"{r['median_ape']}, mean signed {r['mean_signed_pct']}); the worst 5% of runs hold "
                  f"{r['top_5pct_runs_share_of_error']}% of the error", ""]
        for name in GROUPS:
            cells = ", ".join(f"{k}: {v['mape']} ({v['runs']}; {v['share_of_error']}%)" for k, v in r[name].items())
            lines.append(f"- {name}, MAPE (runs; share of error): {cells}")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--models-dir", type=Path, default=None, help="the answer model broken down on Test-set-II")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated math:algorithm")
    parser.add_argument("--parts", default="fma:FFT,fma:FFT_TILING,fma:WINOGRAD_NONFUSED",
                        help="targets of the sum-of-kernels design (empty: none)")
    parser.add_argument("--repeatability", type=Path, default=Path("benchmarks/results/h100-repeatability.json"))
    parser.add_argument("--out", type=Path, required=True, help="folder for answer-error.json and .md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    targets = [tuple(t.split(":")) for t in args.targets.split(",")]
    parts_of = {tuple(t.split(":")) for t in args.parts.split(",") if t}
    model = load_model(args.gpu, models_dir=args.models_dir, cudnn_answers=True)
    dataset = DatasetDir(args.data_dir / args.gpu)
    table = read_measurements(dataset.measurements, columns=[
        *LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms", "time_ms_iqr", "workspace_bytes",
        "trace_variant", "trace_n_kernels", "trace_time_ms"])
    kernels = pd.read_parquet(dataset.traced_kernels, columns=["shape_id", "math", "algo", "kernel_role",
                                                               "kernel_variant", "duration_ns"])
    meta = table[["shape_id", "math", "algo", "trace_variant", "trace_n_kernels", "trace_time_ms", "time_ms_iqr"]]
    where, tried = [], []
    for math in dict.fromkeys(m for m, _ in targets):
        split_frames = {s: frames(table, model, math, s) for s in ("train", *HELD_OUT)}
        train = split_frames["train"]
        held = validation_rows(len(train["F"]))
        answer_times = model.answer_times[math]
        for algo in (a for m, a in targets if m == math):
            # Test-set-II: the model's own answer times, as seer predict --cudnn-answers gives them.
            f = split_frames["test2"]
            sizes = answer_inputs(f["inputs"].workspaces[answer_times.algorithms].to_numpy(dtype=float))
            predicted = answer_times.ratios(algo, f["F"], sizes, f["transforms"]) * model.predictors[math].baseline_ms(
                f["F"], algo)
            where.append({"where": "Test-set-II, the model's answer times", "math": math, "algo": algo,
                          **breakdown(run_frame(f, algo, predicted, meta, math))})
            row = {"math": math, "algo": algo, "designs": {}}
            designs = [(f"{t}{' + transforms' if x else ''}", t, x, "mean") for t, x in DESIGNS]
            designs.append(("chosen, median loss", "chosen", False, "median"))
            for name, trees, transforms, loss in designs:
                on_valid, = fit_predict(model, math, algo, train, ~held, [train], trees, transforms, loss)
                if name == "chosen":
                    where.append({"where": "validation split of train, the default design", "math": math,
                                  "algo": algo, **breakdown(run_frame(train, algo, np.where(held, on_valid, np.nan),
                                                                      meta, math))})
                scores = {"validation": run_frame(train, algo, np.where(held, on_valid, np.nan), meta, math)}
                for s, predicted in zip(HELD_OUT, fit_predict(model, math, algo, train, np.ones(len(held), dtype=bool),
                                                              [split_frames[s] for s in HELD_OUT], trees, transforms,
                                                              loss)):
                    scores[s] = run_frame(split_frames[s], algo, predicted, meta, math)
                row["designs"][name] = {s: round(float(r["ape"].mean()), 2) for s, r in scores.items()}
                print(f"{math} {algo} {name}: {row['designs'][name]}", flush=True)
            if (math, algo) in parts_of:
                row["kernel_parts"] = kernel_parts(model, math, algo, train, held, kernels)
                print(f"{math} {algo} parts: {row['kernel_parts']}", flush=True)
            tried.append(row)
    result = {"gpu": args.gpu, "command": "OMP_NUM_THREADS=1 python benchmarks/answer_error.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "models": str(args.models_dir or "shipped"),
        "card_trained_at": model.card.get("trained_at"), "seconds": round(time.perf_counter() - started),
        "noise": noise_floor(args.repeatability, table, targets), "tried": tried, "where": where}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "answer-error.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (args.out / "answer-error.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
