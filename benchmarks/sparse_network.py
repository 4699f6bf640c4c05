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
  calibration pass measured (``docs/sparse.md``, *In PyTorch*).

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
from pathlib import Path
from statistics import median

import pandas as pd
from sparse_seed import measured_frame


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


def pass_times(models: dict, x, windows: int, passes: int) -> dict[str, float]:
    """Wall ms per eager pass of each model, the median over ``windows`` windows that take turns."""
    import time

    import torch

    samples: dict[str, list[float]] = {name: [] for name in models}
    with torch.no_grad():
        for model in models.values():
            for _ in range(3):
                model(x)
        torch.cuda.synchronize()
        for _ in range(windows):
            for name, model in models.items():
                started = time.perf_counter()
                for _ in range(passes):
                    model(x)
                torch.cuda.synchronize()
                samples[name].append((time.perf_counter() - started) / passes * 1e3)
    return {name: median(v) for name, v in samples.items()}


def layer_bound(networks: list[str], batches: list[int], levels: list[float], gpu: str,
                data_dir: Path = Path("data")) -> pd.DataFrame:
    """Per network, batch and level: its convolutions' summed GPU ms with the best cuDNN algorithm on
    each (measured per layer on the ``sparse-seed`` grid), and with the faster of that and the best
    sparse kernel at the level; how many of its convolutions the sparse kernel wins. A network's
    repeated layer counts each time it runs."""
    from seer.dataset.build import read_sparse_measurements
    from seer.layers.known_networks import network_layers

    table = read_sparse_measurements(data_dir / gpu / "sparse_measurements")
    per_level, _ = measured_frame(table[(table["math"] == "fma") & (table["grid"] == "sparse-seed")])
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


def _markdown(frame: pd.DataFrame) -> list[str]:
    return (["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
            + ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)])


def merge(runs: list[Path], out: Path, gpu: str, data_dir: Path, argv: list[str]) -> int:
    """``--merge``: the runs' tables as one, and the per-layer bound beside them (module docstring)."""
    frame = pd.concat([pd.read_csv(run / "results.csv") for run in runs], ignore_index=True)
    frame = frame.sort_values(["network", "batch", "level"], key=lambda c: c.map(
        lambda v: -1.0 if v == "relu" else float(v)) if c.name == "level" else c, kind="stable")
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "results.csv", index=False)
    levels = sorted({float(v) for v in frame["level"] if v != "relu"})
    bound = layer_bound(sorted(set(frame["network"])), sorted(set(frame["batch"])), levels, gpu, data_dir)
    bound.to_csv(out / "layer-bound.csv", index=False)
    lines = [f"# Whole networks with seer's sparse kernel ({gpu})", "",
             f"`python benchmarks/sparse_network.py {' '.join(argv)}`, joining the runs' `results.csv`; each run's "
             "command and machine are in the folder's README.", "",
             "## As a user runs them: eager wall ms and energy per forward pass", "", *_markdown(frame), "",
             "## The bound from per-layer times: convolution GPU ms, best cuDNN algorithm on every layer against "
             "the faster of it and the best sparse kernel", "", *_markdown(bound), ""]
    (out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=["densenet121", "densenet169", "densenet201", "resnet101",
                                                          "resnet152"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--levels", default="relu,0.9,0.95,0.99")
    parser.add_argument("--math", default="fma")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--windows", type=int, default=7)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--energy-s", type=float, default=1.0, help="seconds of passes per energy reading (0: none)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RUN_DIR",
                        help="join these runs' results.csv into --out, with the per-layer bound (CPU)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"),
                        help="datasets root whose sparse measurements give --merge's per-layer bound")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out, args.gpu, args.data_dir, argv if argv is not None else sys.argv[1:])

    import torch

    import seer.torch
    from seer.schema import get_math_mode
    from seer.torch.convolution import seer_convolutions
    from seer.torch.layers import build_model

    torch.backends.cudnn.allow_tf32 = get_math_mode(args.math).tensor_cores
    torch.backends.cuda.matmul.allow_tf32 = get_math_mode(args.math).tensor_cores
    meter = None
    if args.energy_s > 0:
        from seer.gpu.energy import EnergyMeter

        meter = EnergyMeter()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
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
                convs = seer_convolutions(picked)
                with torch.no_grad():
                    picked(x)
                sparse = sum(1 for m in convs.values() if (m.last_algorithm or "").startswith("SEER_SPARSE_"))
                times = pass_times({"pytorch": base, "seer": picked}, x, args.windows, args.passes)
                row = {"network": network, "batch": batch, "level": level, "convolutions": len(_convolutions(base)),
                       "sparse_layers": sparse, "pytorch_ms": round(times["pytorch"], 4),
                       "seer_ms": round(times["seer"], 4), "seer_over_pytorch": round(times["seer"] / times["pytorch"], 4)}
                if meter is not None:
                    for name, model in (("pytorch", base), ("seer", picked)):
                        with torch.no_grad():
                            reading = meter.measure(lambda m=model: m(x), times[name], args.energy_s)
                        row[f"{name}_mj"] = round(reading.energy_mj, 3)
                        row[f"{name}_w"] = round(reading.power_w, 1)
                rows.append(row)
                print(row, flush=True)
                pd.DataFrame(rows).to_csv(args.out / "results.csv", index=False)  # kept as it grows
    frame = pd.DataFrame(rows)
    device = torch.cuda.get_device_name()
    lines = [f"# Whole networks with seer's sparse kernel, {device}", "",
             f"`python benchmarks/sparse_network.py {' '.join(argv if argv is not None else sys.argv[1:])}`; random "
             "weights and inputs; eager wall time per forward pass (median over windows) and energy per pass.", "",
             "| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
