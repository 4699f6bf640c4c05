"""Where a seer convolution call's host time goes, piece by piece (GPU).

    python benchmarks/host_cost_parts.py --out benchmarks/results/h200-host-cost-parts/after.json

Times, as ``host_cost.py`` does (bursts of ``CALLS`` calls enqueued back to back,
the device synchronized only after; the median of ``REPS`` bursts, in microseconds per call),
PyTorch's ``F.conv2d`` and module beside each step a seer module's fast path takes: the
module's call, its ``forward``, the runner's call, its launch, the bare launch underneath (a
graph-API plan's ``run``, or ``cuLaunchKernel`` of seer's kernel), and the PyTorch calls the
path makes (current device and stream, the output's allocation, the bias's addition), on
depthwise layers (with a bias and without) and a 1x1 layer.

    python benchmarks/host_cost_parts.py --summary benchmarks/results/h200-host-cost-parts

writes that folder's ``summary.md`` from its runs: the steps before and after (``parts-before``
and ``parts-after.json``), the issue's microbenchmark (``host-cost-calls20.json`` of
``host_cost.py --calls 20``) and the layers of networks (``layers-*.json`` of ``host_cost.py
--layers``), each seer call over PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import host_cost

from seer.layers.shapes import ConvShape

CALLS, REPS = 20, 15
#: (label, layer, bias)
LAYERS = (
    ("dw 32x96x56x56 g96 bias", ConvShape.square(32, 96, 56, 96, 3, padding=1, groups=96), True),
    ("dw 32x256x28x28 s2 g256 nobias", ConvShape.square(32, 256, 28, 256, 3, stride=2, padding=1, groups=256), False),
    ("dw 1x96x56x56 g96 nobias", ConvShape.square(1, 96, 56, 96, 3, padding=1, groups=96), False),
    ("1x1 32x256x56x56->64 nobias", ConvShape.square(32, 256, 56, 64, 1), False),
)
ALGORITHMS = ("IMPLICIT_PRECOMP_GEMM", "SEER_IMPLICIT_GEMM")


def host_us(torch, call) -> float:
    """:func:`host_cost.host_us` in bursts of ``CALLS``, the median of ``REPS``."""
    return round(host_cost.host_us(torch, call, CALLS, REPS), 2)


def layer_parts(torch, shape: ConvShape, has_bias: bool) -> dict:
    """Host microseconds per call of every piece, on one layer."""
    import torch.nn.functional as F

    from seer.torch import convolution as C

    x = torch.randn(shape.input_dims, device="cuda")
    conv = host_cost._conv_module(torch, shape, has_bias)
    w, b = conv.weight.detach(), None if conv.bias is None else conv.bias.detach()
    out = {"F.conv2d": host_us(torch, lambda: F.conv2d(x, w, b, shape.spatial_stride, shape.spatial_padding, 1,
                                                       shape.groups)),
           "nn.Conv2d": host_us(torch, lambda: conv(x))}
    empty = torch.nn.Identity()
    device = x.device
    out["empty module call"] = host_us(torch, lambda: empty(x))
    out["current_device"] = host_us(torch, lambda: torch.cuda.current_device())
    out["current_stream(dev).cuda_stream"] = host_us(torch, lambda: torch.cuda.current_stream(device).cuda_stream)
    out["current_stream(0).cuda_stream"] = host_us(torch, lambda: torch.cuda.current_stream(0).cuda_stream)
    out["current_stream().cuda_stream"] = host_us(torch, lambda: torch.cuda.current_stream().cuda_stream)
    out["is_current_stream_capturing"] = host_us(torch, lambda: torch.cuda.is_current_stream_capturing())
    out["is_grad_enabled"] = host_us(torch, lambda: torch.is_grad_enabled())
    out["input_kind"] = host_us(torch, lambda: C._input_kind(x, w))
    out["compiling"] = host_us(torch, lambda: C._compiling())
    strides = torch.empty(shape.output_dims, device="meta").stride()
    out["new_empty_strided"] = host_us(torch, lambda: x.new_empty_strided(shape.output_dims, strides))
    y = torch.empty(shape.output_dims, device="cuda")
    bias = torch.randn(1, shape.out_ch, 1, 1, device="cuda")
    out["y.add_(bias)"] = host_us(torch, lambda: y.add_(bias))
    for algo in ALGORITHMS:
        module, _ = host_cost._forced(torch, shape, algo, "fma", x, has_bias)  # its runner built on x
        if not module.paths:
            out[f"{algo} ran PyTorch"] = True
            continue
        runner = next(iter(module._fast.values()))[1]
        shaped = None if module.bias is None else runner.shaped(module.bias)
        out[f"{algo} module call"] = host_us(torch, lambda: module(x))
        out[f"{algo} module.forward"] = host_us(torch, lambda: module.forward(x))
        out[f"{algo} runner(x,w,b)"] = host_us(torch, lambda: runner(x, module.weight, shaped))
        y = x.new_empty_strided(runner.out_dims, runner.out_strides)
        out[f"{algo} runner.launch"] = host_us(torch, lambda: runner.launch(x, module.weight, y))
        pointers = x.data_ptr(), module.weight.data_ptr(), y.data_ptr()
        if runner.path == "graph":
            state, size = runner.state, runner.workspace_bytes
            space = state.workspace(torch.cuda.current_stream().cuda_stream, size) if size else 0
            out[f"{algo} bare plan.run"] = host_us(torch, lambda: runner._run(*pointers, space))
            out[f"{algo} workspace()"] = host_us(
                torch, lambda: state.workspace(torch.cuda.current_stream().cuda_stream, size))
            out[f"{algo} workspace bytes"] = size
        else:
            launch, stream = runner._launch, torch.cuda.current_stream().cuda_stream
            out[f"{algo} bare enqueue"] = host_us(torch, lambda: launch.enqueue(*pointers, stream))
    return out


#: (label in the summary, key of a parts file): the steps the summary shows.
SUMMARY_STEPS = (
    ("`F.conv2d`", "F.conv2d"),
    ("PyTorch's module", "nn.Conv2d"),
    ("seer module, graph plan (IMPLICIT_PRECOMP_GEMM)", "IMPLICIT_PRECOMP_GEMM module call"),
    ("its launch", "IMPLICIT_PRECOMP_GEMM runner.launch"),
    ("the bare plan's `run`", "IMPLICIT_PRECOMP_GEMM bare plan.run"),
    ("seer module, seer's kernel (SEER_IMPLICIT_GEMM)", "SEER_IMPLICIT_GEMM module call"),
    ("its launch", "SEER_IMPLICIT_GEMM runner.launch"),
    ("the bare `cuLaunchKernel`", "SEER_IMPLICIT_GEMM bare enqueue"),
    ("`torch.cuda.current_stream(device)`", "current_stream(dev).cuda_stream"),
    ("`torch.cuda.current_stream(index)`", "current_stream(0).cuda_stream"),
    ("the output's allocation", "new_empty_strided"),
    ("the bias's `add_`", "y.add_(bias)"),
    ("an empty module's call", "empty module call"),
)
#: The ways of ``host_cost.py``'s rows that the summary compares, by its column.
SUMMARY_WAYS = (("graph plan", "IMPLICIT_PRECOMP_GEMM"), ("seer's kernel", "SEER_IMPLICIT_GEMM"),
                ("seer's direct kernel", "SEER_DIRECT"))


def _is_depthwise(label: str) -> bool:
    """Whether ``str(ConvShape)`` names a depthwise layer (as many groups as input channels)."""
    match = re.match(r"\d+x(\d+)x.* g(\d+)$", label)
    return bool(match) and match.group(1) == match.group(2)


def summarize(folder: Path) -> str:
    """The folder's ``summary.md``: host microseconds per call, step by step before and after,
    and seer's module over PyTorch's on the microbenchmark's layers and on networks' layers."""
    runs = [json.loads((folder / f"parts-{when}.json").read_text())["rows"] for when in ("before", "after")
            if (folder / f"parts-{when}.json").exists()]  # a folder of one run has parts-after.json alone
    after = runs[-1]
    title = " / ".join(f"`parts-{when}.json`" for when in ("before", "after")[-len(runs):])
    lines = [f"## The steps ({title}), host us per call", "",
             "| step | " + " | ".join(row["layer"] for row in after) + " |", "|---" * (len(after) + 1) + "|"]
    for label, key in SUMMARY_STEPS:
        cells = [" / ".join("-" if key not in row else f"{row[key]:.1f}" for row in rows)
                 for rows in zip(*runs)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    micro = json.loads((folder / "host-cost-calls20.json").read_text())["results"]
    layer_runs = [json.loads(path.read_text()) for path in sorted(folder.glob("layers-*.json"))]
    timed = {r["way"] for run in layer_runs for r in run["results"]}
    ways = [(name, algo) for name, algo in SUMMARY_WAYS if algo in timed
            or any(r["way"].startswith(f"SeerConv {algo} ") for r in micro)]  # the ways the folder's runs timed
    lines += ["", "## The issue's microbenchmark (`host-cost-calls20.json`), seer's module over `F.conv2d`", "",
              "| layer | " + " | ".join(name for name, _ in ways) + " |",
              "|---" * (len(ways) + 1) + "|"]
    for layer in dict.fromkeys(r["layer"] for r in micro):
        ratio = {r["way"]: r["vs_F_conv"] for r in micro if r["layer"] == layer}
        cells = [next((f"{v:.2f}x" for way, v in ratio.items() if way.startswith(f"SeerConv {algo} ")), "-")
                 for _, algo in ways]
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    lines += ["", "## Networks' layers, each alone (`layers-*.json`), seer's module over PyTorch's: median, largest",
              "",
              "| layers | " + " | ".join(f"{name} ({algo})" for name, algo in ways) + " |",
              "|---" * (len(ways) + 1) + "|"]
    for run in layer_runs:
        module = {r["layer"]: r["host_us"] for r in run["results"] if r["way"] == "nn.Conv module"}
        bias = "with a bias" if run.get("bias", True) else "no bias"
        for depthwise in (False, True):
            ratios = {algo: [r["host_us"] / module[r["layer"]] for r in run["results"]
                             if r["way"] == algo and "host_us" in r and _is_depthwise(r["layer"]) == depthwise]
                      for _, algo in ways}
            count = max(len(v) for v in ratios.values())
            if not count:
                continue
            kind = "depthwise" if depthwise else "other"
            cells = [f"{statistics.median(v):.2f}x, {max(v):.2f}x" if v else "-" for v in ratios.values()]
            lines.append(f"| {run['layers_file']}, {count} {kind} ({bias}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the JSON file of a run (on a GPU)")
    parser.add_argument("--summary", type=Path, metavar="FOLDER", help="write FOLDER/summary.md from its runs instead")
    args = parser.parse_args(argv)
    if args.summary:
        (args.summary / "summary.md").write_text(summarize(args.summary))
        return 0
    if args.out is None:
        parser.error("give --out (a run) or --summary FOLDER")

    import torch

    rows = []
    with torch.no_grad():
        for label, shape, has_bias in LAYERS:
            parts = layer_parts(torch, shape, has_bias)
            print(label, json.dumps(parts, indent=1), flush=True)
            rows.append({"layer": label, **parts})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"torch": torch.__version__, "calls": CALLS, "reps": REPS, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
