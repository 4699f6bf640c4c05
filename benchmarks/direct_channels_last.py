"""seer's direct kernel on channels-last tensors against its NC[D]HW twin and PyTorch's own
convolution, in GPU time, on the grouped and depthwise layers of whole networks (GPU).

    python benchmarks/direct_channels_last.py benchmarks/results/h200-network-oracle/layers/*.csv \\
        --out benchmarks/results/h200-direct-channels-last

Each distinct layer with groups (from the layer files ``seer network NAME --layers-out`` writes,
one row per call) is timed in bursts behind a spinning kernel (:class:`seer.gpu.timing.BurstTimer`,
so GPU time without the host's; an unsteady measurement is not taken again, as the collector
does: ``spread`` says how unsteady) by:

- ``pytorch_nchw`` and ``pytorch_nhwc``: ``F.conv2d``/``conv3d`` as PyTorch runs it (default
  mode, strict FP32), on contiguous and on channels-last tensors;
- ``seer_nchw``: ``SEER_DIRECT`` on NC[D]HW tensors, the kernel seer's dataset times;
- ``seer_nhwc_p1`` ... ``p8``: the channels-last direct kernel with each number of output columns
  per thread (:data:`seer.hardware.kernel_plans.DIRECT_TILES`); ``planned`` marks the plan's.

Every output of seer's kernels is checked against the float64 reference first. Writes
``runs.csv`` (one row per layer and way) and ``summary.md``: per network and batch, the calls'
total under each way, and how far the plan's choice of columns is from the best one.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

import pandas as pd

from seer.layers.files import frame_shapes, read_layers
from seer.layers.shapes import ConvShape


def _network_of(path: Path) -> tuple[str, str]:
    """(network, batch) from a file named NETWORK-bBATCH.csv."""
    network, _, batch = path.stem.rpartition("-b")
    return network, batch


def grouped_calls(paths: list[Path]) -> pd.DataFrame:
    """The layers with groups of each file: network, batch, layer (its text), shape, calls."""
    calls = []
    for path in paths:
        network, batch = _network_of(path)
        frame = read_layers(path)
        for shape in frame_shapes(frame[frame["groups"] > 1]):
            calls.append({"network": network, "batch": batch, "layer": str(shape), "shape": shape, "calls": 1})
    return pd.DataFrame(calls).groupby(["network", "batch", "layer"], sort=False, as_index=False).agg(
        shape=("shape", "first"), calls=("calls", "sum"))


def time_layer(shape: ConvShape, timer, budget_ms: float) -> list[dict]:
    """One row per way of running ``shape`` (see the module's docstring)."""
    import cupy as cp
    import torch
    import torch.nn.functional as F

    from seer.gpu import kernels
    from seer.gpu.reference import ShapeTensors
    from seer.hardware.kernel_plans import DIRECT_TILES, plan
    from seer.schema import get_math_mode

    tolerance = get_math_mode("fma").tolerance / 50
    conv = {4: F.conv2d, 5: F.conv3d}[len(shape.input_dims)]
    args = (shape.spatial_stride, shape.spatial_padding, shape.spatial_dilation, shape.groups)
    rows = []

    def timed(way: str, forward, **fields) -> None:
        times, _, _ = timer.measure(forward, timer.estimate_ms(forward), budget_ms=budget_ms)
        rows.append({"way": way, "ms": float(statistics.median(times)),
                     "spread": float((times.max() - times.min()) / statistics.median(times)), **fields})

    for layout in ("nchw", "nhwc"):
        tensors = ShapeTensors(shape, seed=3, layout=layout)
        ways = {"seer_nchw": None} if layout == "nchw" else {f"seer_nhwc_{tile}": tile for tile in DIRECT_TILES}
        planned = plan("SEER_DIRECT", shape, sms=cp.cuda.Device().attributes["MultiProcessorCount"], layout=layout)
        for way, tile in ways.items():
            forward, used = kernels.forward("SEER_DIRECT", shape, tensors.x, tensors.w, tensors.y, tile=tile,
                                            layout=layout)
            tensors.poison_output()
            forward()
            error = tensors.relative_error()
            if not error <= tolerance:
                raise AssertionError(f"{way} on {shape}: relative error {error:.3g}")
            timed(way, forward, kernel=used.kernel, planned=used.kernel == planned.kernel, error=error)
        order = shape.layout_order(layout)
        back = [order.index(axis) for axis in range(len(order))]  # the NC[D]HW view of the packed arrays
        x = torch.as_tensor(tensors.x, device="cuda").permute(back)
        w = torch.as_tensor(tensors.w, device="cuda").permute(back)
        timed(f"pytorch_{layout}", lambda: conv(x, w, None, *args), kernel="", planned=False, error=float("nan"))
        del tensors
    return rows


def summarize(runs: pd.DataFrame, calls: pd.DataFrame) -> str:
    """Markdown: per network and batch, the total over its grouped calls under each way."""
    per_layer = runs.pivot_table(index="layer", columns="way", values="ms")
    planned = runs[runs["planned"] & runs["way"].str.startswith("seer_nhwc")].set_index("layer")["ms"]
    tiles = [c for c in per_layer.columns if c.startswith("seer_nhwc_")]
    per_layer["seer_nhwc_planned"] = planned
    per_layer["seer_nhwc_best"] = per_layer[tiles].min(axis=1)
    ways = ["pytorch_nchw", "pytorch_nhwc", "seer_nchw", "seer_nhwc_planned", "seer_nhwc_best"]
    lines = ["| network | batch | grouped calls | " + " | ".join(f"{w} (ms)" for w in ways)
             + " | seer_nhwc_planned / pytorch_nhwc | seer_nhwc_planned / seer_nchw |",
             "|---" * (len(ways) + 5) + "|"]
    for (network, batch), group in calls.groupby(["network", "batch"], sort=False):
        totals = {w: float((per_layer.loc[group["layer"], w].to_numpy() * group["calls"].to_numpy()).sum())
                  for w in ways}
        lines.append(f"| {network} | {batch} | {int(group['calls'].sum())} | "
                     + " | ".join(f"{totals[w]:.3f}" for w in ways)
                     + f" | {totals['seer_nhwc_planned'] / totals['pytorch_nhwc']:.3f}"
                     f" | {totals['seer_nhwc_planned'] / totals['seer_nchw']:.3f} |")
    regret = per_layer["seer_nhwc_planned"] / per_layer["seer_nhwc_best"]
    lines += ["", f"Layers: {len(per_layer)}. The plan's columns per thread against the best of "
              f"{', '.join(t.removeprefix('seer_nhwc_') for t in tiles)} per layer: median {regret.median():.3f}, "
              f"90th percentile {regret.quantile(0.9):.3f}, worst {regret.max():.3f}; the plan's choice was the best "
              f"on {int((regret <= 1.0).sum())} layers."]
    ratio = per_layer["seer_nhwc_planned"] / per_layer["pytorch_nhwc"]
    lines.append(f"seer_nhwc_planned / pytorch_nhwc per layer: median {ratio.median():.3f}, "
                 f"range {ratio.min():.3f} to {ratio.max():.3f}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="+", type=Path, help="layer files NETWORK-bBATCH.csv")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-ms", type=float, default=10.0)
    args = parser.parse_args(argv)

    import cupy as cp
    import torch

    from seer.gpu.timing import BurstTimer

    torch.backends.cudnn.allow_tf32 = False  # strict FP32, as seer's kernels compute
    torch.backends.cudnn.benchmark = False
    calls = grouped_calls(args.layers)
    args.out.mkdir(parents=True, exist_ok=True)
    done = args.out / "runs.csv"
    runs = pd.read_csv(done) if done.exists() else pd.DataFrame(columns=["layer"])
    timer = BurstTimer()
    distinct = list(dict.fromkeys(calls["shape"]))
    for number, shape in enumerate(distinct, 1):
        if str(shape) in set(runs["layer"]):
            continue
        rows = pd.DataFrame(time_layer(shape, timer, args.budget_ms)).assign(layer=str(shape))
        runs = pd.concat([runs, rows], ignore_index=True) if len(runs) else rows
        runs.to_csv(done.with_suffix(".tmp"), index=False)
        done.with_suffix(".tmp").replace(done)  # finished layers survive a crash, and are skipped again
        cp.get_default_memory_pool().free_all_blocks()
        best = rows.set_index("way")["ms"]
        print(f"{number}/{len(distinct)} {shape}: pytorch_nhwc {best['pytorch_nhwc']:.4f} ms, seer_nchw "
              f"{best['seer_nchw']:.4f}, planned nhwc {float(rows[rows['planned']]['ms'].iloc[0]):.4f}", flush=True)
    runs["planned"] = runs["planned"].astype(bool)
    header = (f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
              f"CuPy {cp.__version__}, Python {platform.python_version()}; strict FP32.\n"
              f"`python benchmarks/direct_channels_last.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n\n")
    (args.out / "summary.md").write_text(header + summarize(runs, calls))
    print((args.out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
