"""Which engine of cuDNN's graph API realises each legacy algorithm, forward and backward
(GPU; the summary on any machine).

    python benchmarks/cudnn_engines.py --layers networks --sample 12 --out results/h200-cudnn-engines-networks.csv
    python benchmarks/cudnn_engines.py --pass bwd_data,bwd_filter --layers networks --out results/...-bwd.csv
    python benchmarks/cudnn_engines.py --summary results/h200-cudnn-engines-*.csv > results/cudnn-engines.md

For each layer, math mode and pass, every legacy algorithm (``cudnnConvolutionForward``,
``...BackwardData``, ``...BackwardFilter``) that runs is traced with CUPTI (its kernels'
names) and timed as the collector times; then every plan the graph API offers (cuDNN's
heuristic ranking in modes A and FALLBACK, and every engine with its default knobs) is
built, checked against PyTorch's float64 result, traced and timed the same way. A plan
*realises* an algorithm where it launches the same kernels (same names, same counts). One
row per (layer, math, pass, source, algorithm or plan), written after every layer; a rerun
skips the layers already in the table.

``--summary`` says per legacy algorithm and math mode which engines have plans that launch
its kernels, on how many layers (where :attr:`seer.algorithms.Algorithm.engines` come from);
then applies seer's rule (cuDNN's first ranked plan among the algorithm's engines, else the
first of them with default knobs) to the recorded plans: on how many layers the plan it
chooses launches the legacy call's kernels, and its burst-timed time against the legacy
call's.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from layer_sample import every_3d_and_sampled_2d
from seer.algorithms import algorithm_names, get_algorithm
from seer.layers.shapes import LAYER_COLUMNS, ConvShape, describe
from seer.schema import get_math_mode

WORKSPACE_CAP = 4 << 30
MAX_ENGINES = 64


def _kernel_key(kernels) -> str:
    counts = Counter(k.name for k in kernels)
    return " | ".join(f"{n}x{name}" for name, n in sorted(counts.items()))


#: The tensor each pass computes; the other two are its inputs.
COMPUTED = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}


def measure_layer(shape, math, pass_, torch, timer, tracer, handles):
    import cudnn

    from seer.gpu import cudnn as legacy
    from seer.gpu.cudnn_graph import GraphConvolution, GraphNotSupported, engine_of, operation_graph

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    dims = {"x": shape.input_dims, "w": shape.filter_dims, "y": shape.output_dims}
    given = {name: torch.randn(d, device=dev, generator=g) for name, d in dims.items()}
    computed = COMPUTED[pass_]
    geometry = (list(shape.spatial_stride), list(shape.spatial_padding), list(shape.spatial_dilation))
    wanted = [pass_ == "bwd_data", pass_ == "bwd_filter", False]
    if pass_ == "fwd":
        ref = torch.ops.aten.convolution(given["x"].double(), given["w"].double(), None, *geometry, False,
                                         [0] * len(geometry[0]), shape.groups)
    else:
        grads = torch.ops.aten.convolution_backward(given["y"].double(), given["x"].double(), given["w"].double(),
                                                    None, *geometry, False, [0] * len(geometry[0]), shape.groups,
                                                    wanted)
        ref = grads[0] if pass_ == "bwd_data" else grads[1]
    out = torch.empty(dims[computed], device=dev)
    pointers = {name: t.data_ptr() for name, t in given.items()} | {computed: out.data_ptr()}
    rows = []
    base = dict(shape.as_dict(), math=math, **{"pass": pass_})

    def check_and_time(run):
        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        err = float(torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref))
        kernels = tracer.trace(run)
        est = timer.estimate_ms(run)
        times, _, host_us = timer.measure(run, est)
        return err, _kernel_key(kernels), float(pd.Series(times).median()), host_us

    # legacy algorithms
    handle = handles["legacy"]
    with legacy.ConvolutionProblem(handle, shape, math) as problem:
        for name in algorithm_names("cudnn", pass_=pass_):
            algo = get_algorithm(name)
            row = dict(base, source="legacy", name=name)
            try:
                ws = (problem.workspace_size(algo.enum) if pass_ == "fwd"
                      else problem.backward_workspace_size(pass_, algo.enum))
                if ws > WORKSPACE_CAP:
                    row.update(status="workspace_too_large", workspace=ws)
                    rows.append(row)
                    continue
                buf = torch.empty(max(ws, 1), dtype=torch.uint8, device=dev)
                if pass_ == "fwd":
                    run = (lambda e=algo.enum, ws=ws, b=buf: problem.forward(
                        e, pointers["x"], pointers["w"], pointers["y"], b.data_ptr(), ws))
                else:
                    known = pointers["w"] if pass_ == "bwd_data" else pointers["x"]
                    run = (lambda e=algo.enum, ws=ws, b=buf, k=known: problem.backward(
                        pass_, e, k, pointers["y"], pointers[computed], b.data_ptr(), ws))
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
                lambda c=conv, b=buf: c.run(pointers["x"], pointers["w"], pointers["y"], b.data_ptr()))
            rows.append(dict(row, status="ok", workspace=conv.workspace_bytes, rel_error=err, kernels=kernels,
                             ms=ms, host_us=host_us))
        except Exception:  # noqa: BLE001
            rows.append(dict(row, status="error", note=traceback.format_exc()[-400:]))

    engine_count = MAX_ENGINES
    try:
        graph, uids = operation_graph(fe, shape, math, pass_=pass_)
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        for i in range(graph.get_execution_plan_count()):
            name = graph.get_plan_name_at_index(i)
            row = dict(base, source="heuristic", rank=i, name=name, engine=engine_of(name))
            try:
                graph.build_plan_at_index(i)
            except Exception as exc:  # noqa: BLE001
                rows.append(dict(row, status="not_supported", note=str(exc)[-200:]))
                continue
            run_plan(row, GraphConvolution(fe, shape, graph, uids, i))
        engine_count = graph.get_engine_count()
    except Exception:  # noqa: BLE001
        rows.append(dict(base, source="heuristic", name="ranking", status="error", note=traceback.format_exc()[-400:]))
    for e in range(min(engine_count, MAX_ENGINES)):
        row = dict(base, source="engine", name=f"eng{e}", engine=e)
        try:
            conv = GraphConvolution.engine(fe, shape, math, e, pass_=pass_)
        except GraphNotSupported:
            continue
        except Exception:  # noqa: BLE001
            rows.append(dict(row, status="error", note=traceback.format_exc()[-400:]))
            continue
        run_plan(dict(row, name=conv.name), conv)
    return rows


LAYER_KEY = ["batch", "in_ch", "in_d", "in_h", "in_w", "out_ch", "kernel_d", "kernel_h", "kernel_w", "stride_d",
             "stride_h", "stride_w", "pad_d", "pad_h", "pad_w", "dilation_d", "dilation_h", "dilation_w", "groups"]


def _with_pass(table: pd.DataFrame) -> pd.DataFrame:
    """The table with its engine numeric and a pass on every row (the first records, of the
    forward only, have no pass column)."""
    passes = table["pass"].fillna("fwd") if "pass" in table else "fwd"
    return table.assign(engine=pd.to_numeric(table.get("engine"), errors="coerce"), **{"pass": passes})


def realised(table: pd.DataFrame) -> pd.DataFrame:
    """Per legacy run that worked: the plan seer's rule chooses among the recorded ones, whether
    it launches the same kernels, and its time over the legacy call's (NaN: no plan)."""
    table = _with_pass(table)
    groups = {key: rows for key, rows in table.groupby([*LAYER_KEY, "math", "pass"], sort=False)}
    out = []
    legacy = table[(table["source"] == "legacy") & (table["status"] == "ok")]
    for run in legacy.rename(columns={"pass": "pass_"}).itertuples(index=False):
        algo = get_algorithm(run.name)
        if algo.engines is None:
            continue
        engines = algo.engines.of(ConvShape(**{c: getattr(run, c) for c in LAYER_KEY}), run.math)
        rows = groups[(*(getattr(run, c) for c in LAYER_KEY), run.math, run.pass_)]
        ranked = rows[(rows["source"] == "heuristic") & rows["engine"].isin(engines)
                      & (rows["status"] != "not_supported")].sort_values("rank")
        chosen = ranked.iloc[0] if len(ranked) else None
        if chosen is None:
            defaults = rows[(rows["source"] == "engine") & rows["engine"].isin(engines) & (rows["status"] == "ok")]
            order = {e: i for i, e in enumerate(engines)}
            defaults = defaults.assign(order=defaults["engine"].map(order)).sort_values("order")
            chosen = defaults.iloc[0] if len(defaults) else None
        out.append({"pass": run.pass_, "algo": run.name, "math": run.math, "groups": run.groups,
                    "dims": 3 if run.in_d > 1 else 2,
                    "plan": None if chosen is None else chosen["name"],
                    "same_kernels": chosen is not None and chosen["kernels"] == run.kernels,
                    "time_ratio": np.nan if chosen is None or chosen["status"] != "ok" else chosen["ms"] / run.ms})
    return pd.DataFrame(out)


def same_kernel_engines(table: pd.DataFrame) -> pd.DataFrame:
    """Per legacy algorithm and math mode: on how many layers it ran, and per engine on how many
    of those some recorded plan of that engine launched the legacy call's very kernels: where
    an algorithm's :class:`seer.algorithms.GraphEngines` come from."""
    table = _with_pass(table)
    ok = table[table["status"] == "ok"]
    plans = ok[ok["source"] != "legacy"]
    legacy = ok[ok["source"] == "legacy"]
    key = [*LAYER_KEY, "math", "pass", "kernels"]
    matched = legacy.merge(plans[[*key, "engine"]].dropna(subset=["engine"]), on=key, how="left",
                           suffixes=("", "_plan"))
    matched = matched.drop_duplicates([*LAYER_KEY, "math", "pass", "name", "engine_plan"])
    layers = legacy.groupby(["pass", "name", "math"]).size().rename("layers")
    counts = (matched.dropna(subset=["engine_plan"]).groupby(["pass", "name", "math", "engine_plan"]).size()
              .rename("same").reset_index())
    return counts.merge(layers.reset_index(), on=["pass", "name", "math"], how="right")


def summary(paths) -> str:
    table = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    lines = ["| pass | algorithm | math | legacy runs | engines whose plans launch its kernels (layers) |",
             "|---|---|---|---|---|"]
    for (pass_, name, math), rows in same_kernel_engines(table).groupby(["pass", "name", "math"], sort=False):
        found = rows.dropna(subset=["engine_plan"]).sort_values("same", ascending=False)
        engines = ", ".join(f"{int(r.engine_plan)} ({int(r.same)})" for r in found.itertuples()) or "none"
        lines.append(f"| {pass_} | {name} | {math} | {int(rows['layers'].iloc[0])} | {engines} |")
    runs = realised(table)
    if runs.empty:
        return "\n".join(lines) + "\n"
    lines.append("")
    grouped = runs.groupby(["algo", "math"]).agg(layers=("same_kernels", "size"), same=("same_kernels", "sum"),
                                                 ratio=("time_ratio", "median"), worst=("time_ratio", "max"))
    lines += ["| algorithm | math | legacy runs | plan launches the same kernels | time / legacy, median | worst |",
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
    parser.add_argument("--pass", dest="passes", default="fwd", help="fwd, bwd_data, bwd_filter: comma-separated")
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
    done = _with_pass(pd.read_csv(args.out)) if args.out.exists() else pd.DataFrame(
        columns=[*LAYER_COLUMNS, "math", "pass"])
    seen = {(tuple(r[c] for c in LAYER_COLUMNS), r["math"], r["pass"]) for r in done.to_dict("records")}
    passes = [p for p in args.passes.split(",") if p]
    unknown = sorted(set(passes) - set(COMPUTED))
    if unknown:
        parser.error(f"--pass: {', '.join(unknown)} is not one of {', '.join(COMPUTED)}")
    handles = {"legacy": legacy.Handle(0), "graph": cudnn.create_handle()}
    timer = BurstTimer()
    with KernelTracer() as tracer:
        for shape in shapes:
            for math, pass_ in itertools.product(args.math.split(","), passes):
                math = get_math_mode(math).name
                if (tuple(shape.as_dict()[c] for c in LAYER_COLUMNS), math, pass_) in seen:
                    continue
                if time.monotonic() - started > args.budget_s:
                    print("budget spent", flush=True)
                    return 0
                t0 = time.monotonic()
                try:
                    rows = measure_layer(shape, math, pass_, torch, timer, tracer, handles)
                except Exception:  # noqa: BLE001 - recorded, next layer
                    rows = [dict(shape.as_dict(), math=math, source="layer", status="error",
                                 note=traceback.format_exc()[-600:], **{"pass": pass_})]
                done = pd.concat([done, pd.DataFrame(rows)], ignore_index=True)
                tmp = args.out.with_suffix(".tmp")
                done.to_csv(tmp, index=False)
                tmp.replace(args.out)
                ok = [r for r in rows if r.get("status") == "ok"]
                print(f"{describe(shape.as_dict())} {math} {pass_}: {len(ok)} ok of {len(rows)} "
                      f"({time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
