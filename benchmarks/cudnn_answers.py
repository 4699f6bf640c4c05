"""How much sharper the predictions get where a GPU answers what the CPU models guess.

    python benchmarks/cudnn_answers.py --gpu h100 --out benchmarks/results/h100-cudnn-answers
    python benchmarks/cudnn_answers.py --gpu h100 --split test1 --out ...   # Test-set-I
    python benchmarks/cudnn_answers.py --gpu h200 --pass bwd_filter --out ...   # a backward pass

Before anything runs, cuDNN tells (in microseconds, from descriptors alone) whether each of
its algorithms takes a layer and how much workspace it asks for, which settles the kernel
path inside the algorithm. On a CPU seer's first stage predicts these answers; on a GPU host
(``seer predict --cudnn-answers``) cuDNN gives them
(:func:`seer.predict.predictors.with_cudnn_answers`). This script scores three ways on the
held-out layers of Test-set-II (real networks, square and of every kind), per math mode:
the shape alone (``guessed``), cuDNN's answer to whether each algorithm runs (``runs``, what
seer uses), and that with its workspace answers too (``workspace``: the kernel path and
size): each algorithm's MAPE on its measured runs, over the runs every way predicts, and
the pick's top-1 rate and mean regret among every algorithm and among cuDNN's. A backward
pass's models take the workspace answers as the path where a GPU gives them
(:data:`seer.predict.predictors.PATH_ANSWER_PASSES`); the forward's do not. Where the
model has times learnt from cuDNN's answers (``seer train --answers-only``), a fourth way,
``learnt``, is what ``seer predict --cudnn-answers`` gives with them: cuDNN's runs answer and
those times for its algorithms; ``learnt_single`` is the same with one regressor per kernel
path only, without the kernel-variant mixtures the model keeps for some algorithms
(:class:`seer.predict.predictors.VariantTimes`). Per math mode and kind, a row ``cuDNN's
pooled`` scores every run of cuDNN's algorithms together. cuDNN's answers here
are the ones the collector recorded for those runs (the workspace it asked for where the
run went ahead; refused or over the cap where it did not), the same calls the device path
makes. Writes ``cudnn-answers.json`` and ``cudnn-answers.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd

from seer.algorithms import PASSES, algorithm_names, pass_of
from seer.dataset.views import algorithm_rows, layers_of, values_by_algorithm
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict import predictors
from seer.predict.persist import load_model
from seer.predict.uncertainty import interval_kind
from seer.schema import DatasetDir

HELD_OUT = "test2"
TARGET_MAPE = 6.0
WAYS = ("guessed", "runs", "workspace", "learnt_single", "learnt")
#: The row that pools every cuDNN algorithm's runs.
POOLED = "cuDNN's pooled"


def held_out(table: pd.DataFrame, math: str, split: str = HELD_OUT,
             pass_: str = "fwd") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Layers, measured times per algorithm and cuDNN's recorded answers (workspace bytes;
    NaN where it refused the algorithm or the workspace exceeded the cap) of a held-out split,
    for the runs of one pass."""
    rows = algorithm_rows(table[(pass_of(table["algo"]) == pass_).to_numpy()], math, split)
    times = values_by_algorithm(rows, "time_ms")
    cudnn = rows[rows["algo"].isin(algorithm_names("cudnn", pass_=pass_))]
    workspaces = values_by_algorithm(cudnn, "workspace_bytes").reindex(times.index)
    return layers_of(rows, times.index), times, workspaces


def scores(model, math: str, layers: pd.DataFrame, times: pd.DataFrame,
           workspaces: pd.DataFrame | None, pass_: str = "fwd") -> dict[str, np.ndarray]:
    """Predicted times (layers x algorithms of ``times``) and the picks among all and among cuDNN's."""
    frame = layers.reset_index(drop=True)
    out = {}
    answers = None if workspaces is None else workspaces.reset_index(drop=True)
    predicted = model.predict(frame, math, workspaces=answers)
    wide = predicted.pivot_table(index="layer", columns="algo", values="predicted_ms")
    out["times"] = wide.reindex(index=range(len(frame)), columns=times.columns).to_numpy()
    for name, algorithms in (("all", None), ("cudnn", algorithm_names("cudnn", pass_=pass_))):
        picks = model.pick(frame, math, algorithms=algorithms, workspaces=answers)
        out[f"pick_{name}"] = picks["best_algo"].astype(object).where(picks["best_algo"].notna(), None).to_numpy()
    return out


def pick_quality(picks: np.ndarray, times: pd.DataFrame, columns: list[str]) -> tuple[float, float]:
    """Top-1 rate and mean regret (%) of ``picks`` against the fastest measured of ``columns``."""
    measured = times[columns].to_numpy()
    fastest = np.nanmin(measured, axis=1)
    index = {a: k for k, a in enumerate(columns)}
    got = np.array([measured[i, index[a]] if a in index else np.nan for i, a in enumerate(picks)])
    got = np.where(np.isfinite(got), got, np.nanmax(measured, axis=1))  # a pick that did not run: the slowest
    return float(np.mean(got <= fastest)), float(np.mean(got / fastest - 1) * 100)


def evaluate(model, table: pd.DataFrame, math: str, split: str = HELD_OUT, pass_: str = "fwd") -> list[dict]:
    layers, times, workspaces = held_out(table, math, split, pass_)
    kinds = interval_kind(layers.reset_index(drop=True))
    shape_only = replace(model, answer_times={})
    score = partial(scores, math=math, layers=layers, times=times, pass_=pass_)
    got = {"guessed": score(shape_only, workspaces=None)}
    with mock.patch.object(predictors, "PATH_ANSWER_PASSES", ()):  # whether each runs, for every pass
        got["runs"] = score(shape_only, workspaces=workspaces)
    with mock.patch.object(predictors, "PATH_ANSWER_PASSES", PASSES):  # and the path, for every pass
        got["workspace"] = score(shape_only, workspaces=workspaces)
    # Without learnt times the last two ways are what the pass takes by default (the second for the
    # forward, the third for a backward pass); without mixtures the last two are one.
    single = replace(model, answer_times={m: replace(a, variants={}) for m, a in model.answer_times.items()})
    got["learnt_single"] = score(single, workspaces=workspaces)
    got["learnt"] = score(model, workspaces=workspaces)
    rows = []
    measured = times.to_numpy()
    cudnn = [a for a in times.columns if a in algorithm_names("cudnn", pass_=pass_)]
    for kind in ["all", *sorted(set(kinds))]:
        members = np.ones(len(layers), bool) if kind == "all" else kinds == kind
        errors = {way: [] for way in WAYS}
        for j, algo in enumerate(times.columns):
            every = members & np.isfinite(measured[:, j])
            for way in WAYS:
                every &= np.isfinite(got[way]["times"][:, j])
            if every.sum() < 10:
                continue
            row = {"math": math, "kind": kind, "algo": algo, "runs": int(every.sum())}
            for way in WAYS:
                error = np.abs(got[way]["times"][every, j] / measured[every, j] - 1) * 100
                if algo in cudnn:
                    errors[way].append(error)
                row[f"mape_{way}"] = round(float(error.mean()), 2)
                row[f"median_ape_{way}"] = round(float(np.median(error)), 2)
                row[f"support_right_{way}"] = round(float(np.mean(
                    np.isfinite(got[way]["times"][members, j]) == np.isfinite(measured[members, j]))), 4)
            rows.append(row)
        if errors["learnt"]:
            pooled = {way: np.concatenate(e) for way, e in errors.items()}
            rows.append({"math": math, "kind": kind, "algo": POOLED, "runs": len(pooled["learnt"]),
                         **{f"mape_{w}": round(float(e.mean()), 2) for w, e in pooled.items()},
                         **{f"median_ape_{w}": round(float(np.median(e)), 2) for w, e in pooled.items()}})
        for name, columns in (("all", list(times.columns)), ("cudnn", cudnn)):
            row = {"math": math, "kind": kind, "algo": f"pick among {name}", "runs": int(members.sum())}
            for way in WAYS:
                top1, regret = pick_quality(got[way][f"pick_{name}"][members], times[members], columns)
                row[f"top1_{way}"], row[f"regret_pct_{way}"] = round(top1, 4), round(regret, 3)
            rows.append(row)
    return rows


def markdown(frame: pd.DataFrame, header: str) -> str:
    algos = frame[~frame["algo"].str.startswith("pick")]
    lines = [header, "", "Per algorithm, MAPE % on its measured runs (median APE in brackets), and how often "
             "whether it runs is right:", "",
             "| math | kind | algorithm | runs | shape alone | + cuDNN's runs answer | + its workspace answers | "
             "+ times learnt from its answers, one regressor per path | + and the guessed kernel variant's | "
             "runs right (shape alone) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in algos.to_dict("records"):
        cells = " | ".join(f"{r[f'mape_{w}']:.2f} ({r[f'median_ape_{w}']:.2f})" for w in WAYS)
        right = "" if r["algo"] == POOLED else f"{r['support_right_guessed']:.3f}"
        lines.append(f"| {r['math']} | {r['kind']} | {r['algo']} | {r['runs']} | {cells} | {right} |")
    lines += ["", "The pick: top-1 rate / mean regret %:", "",
              "| math | kind | pick | layers | shape alone | + cuDNN's runs answer | + its workspace answers | "
              "+ times learnt, one regressor per path | + and the guessed kernel variant's |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in frame[frame["algo"].str.startswith("pick")].to_dict("records"):
        cells = " | ".join(f"{r[f'top1_{w}']:.3f} / {r[f'regret_pct_{w}']:.2f}" for w in WAYS)
        lines.append(f"| {r['math']} | {r['kind']} | {r['algo']} | {r['runs']} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--split", default=HELD_OUT, choices=("test2", "test1"),
                        help="the held-out split: test2 (Test-set-II, real networks; default) or test1")
    parser.add_argument("--pass", dest="pass_", default="fwd", choices=PASSES, help="the convolution pass (default fwd)")
    parser.add_argument("--out", type=Path, required=True, help="folder for cudnn-answers.json and .md")
    args = parser.parse_args(argv)
    model = load_model(args.gpu, models_dir=args.models_dir, cudnn_answers=True, pass_=args.pass_)
    table = pd.read_parquet(DatasetDir(args.data_dir / args.gpu).measurements,
                            columns=[*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms",
                                     "workspace_bytes"])
    rows = [row for math in model.maths for row in evaluate(model, table, math, args.split, args.pass_)]
    frame = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    name = {"test2": "Held-out networks (Test-set-II", "test1": "Held-out layers (Test-set-I"}[args.split]
    header = (f"{name}, {args.gpu}{'' if args.pass_ == 'fwd' else ', ' + args.pass_}): predictions from the shape alone, with cuDNN's own "
              f"answer to whether each algorithm runs, with its workspace answers too (the kernel path and size) "
              f"fed to the shape-only models, and with the times learnt from its answers, one regressor per kernel "
              f"path and then with the kernel-variant mixtures the model keeps (what `seer predict "
              f"--cudnn-answers` uses where the model has them); "
              f"`python benchmarks/cudnn_answers.py --gpu {args.gpu} --split {args.split}"
              f"{'' if args.pass_ == 'fwd' else ' --pass ' + args.pass_} --out {args.out}`.")
    text = markdown(frame, header)
    (args.out / "cudnn-answers.md").write_text(text)
    (args.out / "cudnn-answers.json").write_text(json.dumps(
        {"gpu": args.gpu, "pass": args.pass_, "split": args.split, "target_mape": TARGET_MAPE,
         "card_trained_at": model.card.get("trained_at"),
         "answer_files": {k: v for k, v in model.card["model_files"].items() if k.startswith("answers-")},
         "variant_mixtures": {m: sorted(a.variants) for m, a in model.answer_times.items()},
         "rows": frame.astype(object).where(frame.notna(), None).to_dict(orient="records")}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
