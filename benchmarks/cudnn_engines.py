"""Which engine of cuDNN's graph API realises each legacy forward algorithm (GPU; the
summary on any machine).

    python benchmarks/cudnn_engines.py --layers networks --sample 12 --out results/h200-cudnn-engines-networks.csv
    python benchmarks/cudnn_engines.py --summary results/h200-cudnn-engines-*.csv > results/cudnn-engines.md

For each layer and math mode, every legacy algorithm (``cudnnConvolutionForward``) that
runs is traced with CUPTI (its kernels' names) and timed as the collector times; then every
plan the graph API offers (cuDNN's heuristic ranking in modes A and FALLBACK, and every
engine with its default knobs) is built, checked against PyTorch's float64 result, traced
and timed the same way. A plan *realises* an algorithm where it launches the same kernels
(same names, same counts). One row per (layer, math, source, algorithm or plan), written
after every layer; a rerun skips the layers already in the table.

``--summary`` applies seer's rule (:attr:`seer.algorithms.Algorithm.engines`: cuDNN's first
ranked plan among the algorithm's engines, else the first of them with default knobs) to the
recorded plans, and says per algorithm and math mode on how many layers the plan it
chooses launches the legacy call's kernels, and its burst-timed time against the legacy
call's.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from layer_sample import every_3d_and_sampled_2d
from seer.algorithms import algorithm_names, get_algorithm
from seer.layers.shapes import LAYER_COLUMNS, describe
from seer.schema import get_math_mode

WORKSPACE_CAP = 4 << 30
MAX_ENGINES = 64


def _kernel_key(kernels) -> str:
    counts = Counter(k.name for k in kernels)
    return " | ".join(f"{n}x{name}" for name, n in sorted(counts.items()))


def measure_layer(shape, math, torch, timer, tracer, handles):
    import cudnn

    from seer.gpu import cudnn as legacy
    from seer.gpu.cudnn_graph import GraphConvolution, GraphNotSupported, engine_of, operation_graph

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(shape.input_dims, device=dev, generator=g)
    w = torch.randn(shape.filter_dims, device=dev, generator=g)
    fn = {2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[len(shape.input_dims) - 2]
    ref = fn(x.double(), w.double(), None, shape.spatial_stride, shape.spatial_padding, shape.spatial_dilation,
             shape.groups)
    y = torch.empty(shape.output_dims, device=dev)
    rows = []

    def check_and_time(run):
        y.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        err = float(torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref))
        kernels = tracer.trace(run)
        est = timer.estimate_ms(run)
        times, _, host_us = timer.measure(run, est)
        return err, _kernel_key(kernels), float(pd.Series(times).median()), host_us

    # legacy algorithms
    handle = handles["legacy"]
    with legacy.ConvolutionProblem(handle, shape, math) as problem:
        for name in algorithm_names("cudnn"):
            algo = get_algorithm(name)
            row = dict(shape.as_dict(), math=math, source="legacy", name=name)
            try:
                ws = problem.workspace_size(algo.enum)
                if ws > WORKSPACE_CAP:
                    row.update(status="workspace_too_large", workspace=ws)
                    rows.append(row)
                    continue
                buf = torch.empty(max(ws, 1), dtype=torch.uint8, device=dev)
                run = (lambda e=algo.enum, ws=ws, b=buf: problem.forward(e, x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                                                       b.data_ptr(), ws))
                err, kernels, ms, host_us = check_and_time(run)
                row.update(status="ok", workspace=ws, rel_error=err, kernels=kernels, ms=ms, host_us=host_us)
            except legacy.CudnnError as exc:
                row.update(status=exc.category, note=str(exc)[:200])
            rows.append(row)

    # graph API plans: cuDNN's heuristic ranking, then every engine with its default knobs
    fe = handles["graph"]

    def run_plan(row, conv):
        if conv.workspace_bytes > WORKSPACE_CAP:
            rows.append(dict(row, status="workspace_too_large", workspace=conv.workspace_bytes))
            return
        buf = torch.empty(max(conv.workspace_bytes, 1), dtype=torch.uint8, device=dev)
        try:
            err, kernels, ms, host_us = check_and_time(
                lambda c=conv, b=buf: c.run(x.data_ptr(), w.data_ptr(), y.data_ptr(), b.data_ptr()))
            rows.append(dict(row, status="ok", workspace=conv.workspace_bytes, rel_error=err, kernels=kernels,
                             ms=ms, host_us=host_us))
        except Exception:  # noqa: BLE001
            rows.append(dict(row, status="error", note=traceback.format_exc()[-400:]))

    engine_count = MAX_ENGINES
    try:
        graph, uids = operation_graph(fe, shape, math)
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        for i in range(graph.get_execution_plan_count()):
            name = graph.get_plan_name_at_index(i)
            row = dict(shape.as_dict(), math=math, source="heuristic", rank=i, name=name, engine=engine_of(name))
            try:
                graph.build_plan_at_index(i)
            except Exception as exc:  # noqa: BLE001
                rows.append(dict(row, status="not_supported", note=str(exc)[-200:]))
                continue
            run_plan(row, GraphConvolution(fe, shape, graph, uids, i))
        engine_count = graph.get_engine_count()
    except Exception:  # noqa: BLE001
        rows.append(dict(shape.as_dict(), math=math, source="heuristic", name="ranking", status="error",
                         note=traceback.format_exc()[-400:]))
    for e in range(min(engine_count, MAX_ENGINES)):
        row = dict(shape.as_dict(), math=math, source="engine", name=f"eng{e}", engine=e)
        try:
            conv = GraphConvolution.engine(fe, shape, math, e)
        except GraphNotSupported:
            continue
        except Exception:  # noqa: BLE001
            rows.append(dict(row, status="error", note=traceback.format_exc()[-400:]))
            continue
        run_plan(dict(row, name=conv.name), conv)
    return rows


LAYER_KEY = ["batch", "in_ch", "in_d", "in_h", "in_w", "out_ch", "kernel_d", "kernel_h", "kernel_w", "stride_d",
             "stride_h", "stride_w", "pad_d", "pad_h", "pad_w", "dilation_d", "dilation_h", "dilation_w", "groups"]


def realised(table: pd.DataFrame) -> pd.DataFrame:
    """Per legacy run that worked: the plan seer's rule chooses among the recorded ones, whether
    it launches the same kernels, and its time over the legacy call's (NaN: no plan)."""
    table = table.assign(engine=pd.to_numeric(table.get("engine"), errors="coerce"))
    groups = {key: rows for key, rows in table.groupby([*LAYER_KEY, "math"], sort=False)}
    out = []
    for run in table[(table["source"] == "legacy") & (table["status"] == "ok")].itertuples(index=False):
        algo = get_algorithm(run.name)
        if algo.engines is None:
            continue
        engines = algo.engines.for_math(run.math)
        rows = groups[tuple(getattr(run, c) for c in [*LAYER_KEY, "math"])]
        ranked = rows[(rows["source"] == "heuristic") & rows["engine"].isin(engines)
                      & (rows["status"] != "not_supported")].sort_values("rank")
        chosen = ranked.iloc[0] if len(ranked) else None
        if chosen is None:
            defaults = rows[(rows["source"] == "engine") & rows["engine"].isin(engines) & (rows["status"] == "ok")]
            order = {e: i for i, e in enumerate(engines)}
            defaults = defaults.assign(order=defaults["engine"].map(order)).sort_values("order")
            chosen = defaults.iloc[0] if len(defaults) else None
        out.append({"algo": run.name, "math": run.math, "groups": run.groups, "dims": 3 if run.in_d > 1 else 2,
                    "plan": None if chosen is None else chosen["name"],
                    "same_kernels": chosen is not None and chosen["kernels"] == run.kernels,
                    "time_ratio": np.nan if chosen is None or chosen["status"] != "ok" else chosen["ms"] / run.ms})
    return pd.DataFrame(out)


def summary(paths) -> str:
    table = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    runs = realised(table)
    grouped = runs.groupby(["algo", "math"]).agg(layers=("same_kernels", "size"), same=("same_kernels", "sum"),
                                                 ratio=("time_ratio", "median"), worst=("time_ratio", "max"))
    lines = ["| algorithm | math | legacy runs | plan launches the same kernels | time / legacy, median | worst |",
             "|---|---|---|---|---|---|"]
    for (algo, math), r in grouped.iterrows():
        lines.append(f"| {algo} | {math} | {int(r.layers)} | {int(r.same)} | {r.ratio:.3f} | {r.worst:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="networks")
    parser.add_argument("--sample", type=int, default=24)
    parser.add_argument("--sample-3d", type=int, default=4, help="3D layers kept, after the 2D ones")
    parser.add_argument("--math", default="fma,default")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--budget-s", type=float, default=300)
    parser.add_argument("--summary", type=Path, nargs="+", help="recorded tables: print the summary, measure nothing")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(args.summary), end="")
        return 0
    if args.out is None:
        parser.error("--out is required to measure")

    import cudnn
    import torch

    from seer.gpu import cudnn as legacy
    from seer.gpu.timing import BurstTimer
    from seer.gpu.tracing import KernelTracer

    started = time.monotonic()
    shapes = every_3d_and_sampled_2d(args.layers, args.sample)
    shapes = [s for s in shapes if s.dims == 2] + [s for s in shapes if s.dims == 3][: args.sample_3d]
    done = pd.read_csv(args.out) if args.out.exists() else pd.DataFrame(columns=[*LAYER_COLUMNS, "math"])
    seen = {(tuple(r[c] for c in LAYER_COLUMNS), r["math"]) for r in done.to_dict("records")}
    handles = {"legacy": legacy.Handle(0), "graph": cudnn.create_handle()}
    timer = BurstTimer()
    with KernelTracer() as tracer:
        for shape in shapes:
            for math in args.math.split(","):
                math = get_math_mode(math).name
                if (tuple(shape.as_dict()[c] for c in LAYER_COLUMNS), math) in seen:
                    continue
                if time.monotonic() - started > args.budget_s:
                    print("budget spent", flush=True)
                    return 0
                t0 = time.monotonic()
                try:
                    rows = measure_layer(shape, math, torch, timer, tracer, handles)
                except Exception:  # noqa: BLE001 - recorded, next layer
                    rows = [dict(shape.as_dict(), math=math, source="layer", status="error",
                                 note=traceback.format_exc()[-600:])]
                done = pd.concat([done, pd.DataFrame(rows)], ignore_index=True)
                tmp = args.out.with_suffix(".tmp")
                done.to_csv(tmp, index=False)
                tmp.replace(args.out)
                ok = [r for r in rows if r.get("status") == "ok"]
                print(f"{describe(shape.as_dict())} {math}: {len(ok)} ok of {len(rows)} "
                      f"({time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
