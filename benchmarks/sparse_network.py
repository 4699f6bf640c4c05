"""Whole networks with seer's sparse kernel where it is picked, against PyTorch alone (GPU).

    python benchmarks/sparse_network.py --networks densenet121 densenet169 densenet201 resnet101 resnet152 \
        --batch 1 --levels relu,0.9,0.95,0.99 --math fma --gpu h200 --out benchmarks/results/h200-sparse-network

The cuSNN seed's whole-network table: per network, batch and level, the forward pass as a user
runs it (plain wall time of back-to-back eager passes, median over windows that alternate the
two policies) and its energy per pass (NVML's counter over a window of passes,
:class:`seer.gpu.energy.EnergyMeter`), under

- ``pytorch``: the model as it is (cuDNN through PyTorch);
- ``seer``: ``seer.torch.apply(model, gpu, math, input_shape, calibration=x)``: seer's picks, and
  seer's sparse kernel on the layers where it is surely faster at the share of zeros the
  calibration pass measured (``docs/sparse.md``, *In PyTorch*);
- with ``--graphs`` (the default), also both captured in CUDA graphs (``pytorch_graph``: the model
  as it is; ``seer_graph``: ``apply(..., cuda_graphs=True)``, whose guard leaves out host time),
  timed as back-to-back replays, wall time, in the same alternating windows.

Trained weights cannot be downloaded here, so the models have random weights and inputs. At level
``relu`` the network is left as it is: its ReLUs leave about half of each input zero. At a level
``s``, every convolution but the first gets an input with a share ``s`` of zeros: a forward
pre-hook keeps only the values above that input's ``s``-quantile, measured once on the calibration
input with the earlier layers already thinned (a fixed threshold, as a trained network's activations
give). Both policies run the same
hooks, so their cost is in both times. Writes ``results.csv`` and ``summary.md``.

    python benchmarks/sparse_network.py --merge RUN_DIR... --out benchmarks/results/h200-sparse-network

(CPU) joins the ``results.csv`` of runs made side by side (a (network, batch) per GPU) into one table,
and sets beside it the bound that the sparse kernels' per-layer times give: each network's convolution
GPU time (burst timing, ``data/GPU/sparse_measurements/sparse-seed.parquet``) with the best cuDNN
algorithm on every layer, and with the faster of it and the best sparse kernel, at each measured level.
"""

from __future__ import annotations

import argparse
import copy
import sys
import traceback
from pathlib import Path
from statistics import median

import pandas as pd
from sparse_seed import SEED_GRID, SEED_PATTERN, markdown_table, measured_frame


def _convolutions(model):
    import torch

    return [m for m in model.modules() if type(m) in (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)]


def sparsify(model, x, level: float) -> list:
    """Pre-hooks that give every convolution of ``model`` but the first an input with a share
    ``level`` of zeros: values at or below a threshold, the ``level``-quantile of that input in a
    pass on ``x`` whose earlier layers were already thinned (fixed from then on); their handles."""
    import torch

    thresholds: dict = {}

    def zero_below(module, args):
        x = args[0]
        if module not in thresholds:  # the calibration pass: this layer's threshold, from its input now
            values = x.detach().flatten().float()
            k = max(1, min(values.numel(), int(round(level * values.numel()))))
            thresholds[module] = values.kthvalue(k).values.item()
        return (x * (x > thresholds[module]),) + tuple(args[1:])

    handles = [m.register_forward_pre_hook(zero_below) for m in _convolutions(model)[1:]]
    with torch.no_grad():
        model(x)
    return handles


def window_medians(runs: dict, windows: int, passes: int) -> dict[str, float]:
    """Wall ms per call of each of ``runs`` (name: a no-argument call, a pass or a graph's
    replay), the median over ``windows`` windows of ``passes`` back-to-back calls that take turns."""
    import torch

    from seer.torch.convolution import window_ms

    samples: dict[str, list[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for run in runs.values():
            for _ in range(3):
                run()
        for _ in range(windows):
            for name, run in runs.items():
                samples[name].append(window_ms(run, passes))
    return {name: median(v) for name, v in samples.items()}


def _sparse_layers(model, x) -> int:
    """How many of ``model``'s seer convolutions ran a sparse kernel in a pass on ``x``."""
    import torch

    from seer.torch.convolution import seer_convolutions

    with torch.no_grad():
        model(x)
    return sum(1 for m in seer_convolutions(model).values() if (m.last_algorithm or "").startswith("SEER_SPARSE_"))


def graph_call_ms(run, calls: int = 20, replays: int = 10) -> float:
    """GPU ms per call of ``run``: ``calls`` back-to-back calls captured in a CUDA graph, its
    replays timed with events (no host time)."""
    import torch

    from seer.networks.profile_network import capture_graph

    graph, why = capture_graph(torch, lambda: [run() for _ in range(calls)])
    if graph is None:
        raise RuntimeError(why)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / (calls * replays)


def check_sparse_picks(model, x, math: str) -> list[dict]:
    """Each convolution of ``model`` (seer.torch-applied) that ran a sparse kernel in a pass on
    ``x``, on its own input of that pass: what the guard weighed (the sparse kernel's predicted ms
    and upper bound, the dense alternative's predicted ms and lower bound) against GPU ms per call
    (:func:`graph_call_ms`) of the sparse kernel, of the dense choice seer would make there (cuDNN's
    algorithm, or PyTorch's own convolution), and of PyTorch's own; with the input's share of zeros
    and how unevenly its non-zeros fall on pixels (the most non-zeros at one pixel over the mean,
    and that over what evenly spread ones give: ``crowding``, :func:`seer.layers.sparsity.pixel_crowding`),
    and the sparse kernel's GPU ms on an input of that share made as the collector makes it."""
    import cupy
    import torch

    from seer.layers.sparsity import input_crowding, sparse_input
    from seer.torch.convolution import force, seer_convolutions

    convs = seer_convolutions(model)
    inputs: dict = {}

    def keep_input(module, args, output) -> None:  # returns None: the output stays the module's
        inputs.setdefault(module, args[0].detach())

    handles = [m.register_forward_hook(keep_input) for m in convs.values()]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    rows = []
    for name, m in convs.items():
        if not (m.last_algorithm or "").startswith("SEER_SPARSE_"):
            continue
        inp, choice = inputs[m], m.seer_choice
        layer = next(layer for layer, pick in choice.picks.items() if pick)
        guess = choice.guesses[layer]
        dense = choice.dense.algorithm(layer)
        with torch.no_grad():
            sparse = force(torch.nn.Sequential(m.to_conv()), m.last_algorithm, math=math)
            plain = m.to_conv()
            timed = {"sparse": graph_call_ms(lambda: sparse(inp)), "pytorch": graph_call_ms(lambda: plain(inp))}
            if dense is None:
                timed["dense"] = timed["pytorch"]
            else:
                chosen = force(torch.nn.Sequential(m.to_conv()), dense, math=math)
                timed["dense"] = graph_call_ms(lambda: chosen(inp))
            # The sparse kernel on an input of the same share of zeros made as the collector makes it.
            made = torch.from_dlpack(sparse_input(tuple(inp.shape), choice.sparsity, "relu", xp=cupy))
            timed["collector_input"] = graph_call_ms(lambda: sparse(made))
        nonzero = (inp != 0).sum(dim=1).float()
        per_channel = (inp != 0).sum(dim=(0, *range(2, inp.dim()))).float()
        rows.append({"module": name, **{k: getattr(layer, k) for k in ("batch", "in_ch", "in_h", "in_w", "out_ch",
                                                                        "kernel_h", "stride_h", "pad_h", "groups")},
                     "sparsity": round(float((inp == 0).float().mean()), 5),
                     "pixel_imbalance": round(float(nonzero.max() / nonzero.mean().clamp(min=1e-9)), 2),
                     "channel_imbalance": round(float(per_channel.max() / per_channel.mean().clamp(min=1e-9)), 2),
                     "crowding": round(input_crowding(cupy.from_dlpack(inp)), 2),
                     "sparse": m.last_algorithm, "dense": dense or "PYTORCH",
                     "predicted_sparse_ms": round(guess.pick_ms, 5), "predicted_sparse_high": round(guess.pick_high, 5),
                     "predicted_dense_ms": round(guess.pytorch_ms, 5), "predicted_dense_low": round(guess.pytorch_low, 5),
                     "sparse_ms": round(timed["sparse"], 5), "dense_ms": round(timed["dense"], 5),
                     "pytorch_ms": round(timed["pytorch"], 5),
                     "sparse_on_collector_input_ms": round(timed["collector_input"], 5)})
    return rows


def layer_bound(networks: list[str], batches: list[int], levels: list[float], gpu: str,
                data_dir: Path = Path("data")) -> pd.DataFrame:
    """Per network, batch and level: its convolutions' summed GPU ms with the best cuDNN algorithm on
    each (measured per layer on the ``sparse-seed`` grid, on ReLU-like zeros), and with the faster
    of that and the best sparse kernel at the level; how many of its convolutions the sparse kernel wins. A network's
    repeated layer counts each time it runs."""
    from seer.dataset.build import read_sparse_measurements
    from seer.layers.known_networks import network_layers

    table = read_sparse_measurements(data_dir / gpu / "sparse_measurements")
    per_level, _ = measured_frame(table[(table["math"] == "fma") & (table["grid"] == SEED_GRID)
                                        & (table["sparsity_pattern"] == SEED_PATTERN)])
    per_level = per_level.set_index(["dense_shape_id", "sparsity"])
    rows = []
    for network in networks:
        for batch in batches:
            ids = [layer.shape.shape_id for layer in network_layers(network, batch)]
            for level in levels:
                best = per_level.xs(level, level="sparsity").reindex(ids)
                both = best[["best_cudnn_ms", "best_sparse_ms"]].min(axis=1)
                rows.append({"network": network, "batch": batch, "level": level, "convolutions": len(ids),
                             "timed": int(best["best_cudnn_ms"].notna().sum()),
                             "cudnn_ms": round(best["best_cudnn_ms"].sum(), 4),
                             "with_sparse_ms": round(both.sum(), 4),
                             "sparse_wins": int((best["best_sparse_ms"] < best["best_cudnn_ms"]).sum()),
                             "ratio": round(both.sum() / best["best_cudnn_ms"].sum(), 4)})
    return pd.DataFrame(rows)


def merge(runs: list[Path], out: Path, gpu: str, data_dir: Path, argv: list[str],
          levels: list[str] | None = None) -> int:
    """``--merge``: the runs' tables as one (their rows at ``levels`` only, where given), with
    their ``picks.csv``, and the per-layer bound beside them (module docstring)."""
    frame = pd.concat([pd.read_csv(run / "results.csv", dtype={"level": str}) for run in runs], ignore_index=True)
    picks = [pd.read_csv(run / "picks.csv", dtype={"level": str}) for run in runs if (run / "picks.csv").exists()]
    if levels is not None:
        frame = frame[frame["level"].isin(levels)]
        picks = [p[p["level"].isin(levels)] for p in picks]
    frame = frame.sort_values(["network", "batch", "level"], key=lambda c: c.map(
        lambda v: -1.0 if v == "relu" else float(v)) if c.name == "level" else c, kind="stable")
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "results.csv", index=False)
    levels = sorted({float(v) for v in frame["level"] if v != "relu"})
    bound = layer_bound(sorted(set(frame["network"])), sorted(set(frame["batch"])), levels, gpu, data_dir)
    bound.to_csv(out / "layer-bound.csv", index=False)
    if picks:
        picks = pd.concat(picks, ignore_index=True)
        if "crowding" not in picks:  # runs from before the check recorded it: from its two parts
            from seer.layers.sparsity import even_crowding

            even = [even_crowding(b * h * w, c, 1 - s) for b, h, w, c, s in
                    zip(picks["batch"], picks["in_h"], picks["in_w"], picks["in_ch"], picks["sparsity"])]
            picks.insert(picks.columns.get_loc("channel_imbalance") + 1, "crowding",
                         (picks["pixel_imbalance"] / even).round(2))
        picks.to_csv(out / "picks.csv", index=False)
    lines = [f"# Whole networks with seer's sparse kernel ({gpu})", "",
             f"`python benchmarks/sparse_network.py {' '.join(argv)}`, joining the runs' `results.csv`; each run's "
             "command and machine are in the folder's README.", "",
             "## As a user runs them: wall ms and energy per forward pass, eager and (`_graph`, where timed) "
             "captured in CUDA graphs", "", *markdown_table(frame), "",
             "## The bound from per-layer times: convolution GPU ms, best cuDNN algorithm on every layer against "
             "the faster of it and the best sparse kernel", "", *markdown_table(bound), ""]
    (out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=["densenet121", "densenet169", "densenet201", "resnet101",
                                                          "resnet152"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--levels", help="levels to run (default relu,0.9,0.95,0.99); with --merge, the rows to keep "
                                         "(default all)")
    parser.add_argument("--math", default="fma")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--windows", type=int, default=7)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True,
                        help="also time both policies captured in CUDA graphs (seer's picks made for graphs)")
    parser.add_argument("--check-picks", action="store_true",
                        help="with --graphs, time each convolution that runs a sparse kernel on its own input, "
                             "beside the dense choice and PyTorch's (picks.csv)")
    parser.add_argument("--energy-s", type=float, default=1.0, help="seconds of passes per energy reading (0: none)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RUN_DIR",
                        help="join these runs' results.csv into --out, with the per-layer bound (CPU)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"),
                        help="datasets root whose sparse measurements give --merge's per-layer bound")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out, args.gpu, args.data_dir, argv if argv is not None else sys.argv[1:],
                     None if args.levels is None else args.levels.split(","))
    args.levels = args.levels or "relu,0.9,0.95,0.99"

    import torch

    import seer.torch
    from seer.networks.profile_network import capture_graph
    from seer.schema import get_math_mode
    from seer.torch.layers import build_model

    torch.backends.cudnn.allow_tf32 = get_math_mode(args.math).tensor_cores
    torch.backends.cuda.matmul.allow_tf32 = get_math_mode(args.math).tensor_cores
    meter = None
    if args.energy_s > 0:
        from seer.gpu.energy import EnergyMeter

        meter = EnergyMeter()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, checks = [], []
    for network in args.networks:
        for batch in args.batch:
            for level in args.levels.split(","):
                torch.manual_seed(0)
                base = build_model(network, device="cuda").eval()
                x = torch.randn(batch, 3, args.size, args.size, device="cuda")
                if level != "relu":
                    sparsify(base, x, float(level))
                picked = copy.deepcopy(base)  # the hooks are copied with the model
                seer.torch.apply(picked, gpu=args.gpu, math=args.math, input_shape=tuple(x.shape), calibration=x)
                runs = {"pytorch": lambda m=base: m(x), "seer": lambda m=picked: m(x)}
                sparse = {"seer": _sparse_layers(picked, x)}
                if args.graphs:  # seer's picks for a captured model (no host time in the guard), both captured
                    graphed = copy.deepcopy(base)
                    seer.torch.apply(graphed, gpu=args.gpu, math=args.math, input_shape=tuple(x.shape),
                                     calibration=x, cuda_graphs=True)
                    sparse["seer_graph"] = _sparse_layers(graphed, x)
                    for name, model in (("pytorch_graph", base), ("seer_graph", graphed)):
                        with torch.no_grad():
                            graph, why = capture_graph(torch, lambda m=model: m(x))
                        if graph is None:
                            raise RuntimeError(f"{network} (batch {batch}, {level}), {name}: {why}")
                        runs[name] = graph.replay
                    if args.check_picks:
                        try:
                            checks += [{"network": network, "batch": batch, "level": level, **r}
                                       for r in check_sparse_picks(graphed, x, args.math)]
                        except Exception:  # noqa: BLE001 - the check is a side measurement: the row goes on
                            traceback.print_exc()
                        if checks:
                            pd.DataFrame(checks).to_csv(args.out / "picks.csv", index=False)
                times = window_medians(runs, args.windows, args.passes)
                row = {"network": network, "batch": batch, "level": level, "convolutions": len(_convolutions(base)),
                       "sparse_layers": sparse["seer"], "pytorch_ms": round(times["pytorch"], 4),
                       "seer_ms": round(times["seer"], 4), "seer_over_pytorch": round(times["seer"] / times["pytorch"], 4)}
                if args.graphs:
                    row.update({"sparse_layers_graph": sparse["seer_graph"],
                                "pytorch_graph_ms": round(times["pytorch_graph"], 4),
                                "seer_graph_ms": round(times["seer_graph"], 4),
                                "seer_over_pytorch_graph": round(times["seer_graph"] / times["pytorch_graph"], 4)})
                if meter is not None:
                    for name, run in runs.items():
                        with torch.no_grad():
                            reading = meter.measure(run, times[name], args.energy_s)
                        row[f"{name}_mj"] = round(reading.energy_mj, 3)
                        row[f"{name}_w"] = round(reading.power_w, 1)
                rows.append(row)
                print(row, flush=True)
                pd.DataFrame(rows).to_csv(args.out / "results.csv", index=False)  # kept as it grows
    frame = pd.DataFrame(rows)
    device = torch.cuda.get_device_name()
    lines = [f"# Whole networks with seer's sparse kernel, {device}", "",
             f"`python benchmarks/sparse_network.py {' '.join(argv if argv is not None else sys.argv[1:])}`; random "
             "weights and inputs; wall time per forward pass, eager and as CUDA-graph replays (`_graph`; median over "
             "windows), and energy per pass.", "",
             "| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
