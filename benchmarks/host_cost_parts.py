"""Where a seer convolution call's host time goes, piece by piece (GPU).

    python benchmarks/host_cost_parts.py --out benchmarks/results/h200-host-cost-parts/after.json

Times, as :mod:`benchmarks.host_cost` does (bursts of ``CALLS`` calls enqueued back to back,
the device synchronized only after; the median of ``REPS`` bursts, in microseconds per call),
PyTorch's ``F.conv2d`` and module beside each step a seer module's fast path takes: the
module's call, its ``forward``, the runner's call, its launch, the bare launch underneath (a
graph-API plan's ``run``, or ``cuLaunchKernel`` of seer's kernel), and the PyTorch calls the
path makes (current device and stream, the output's allocation, the bias's addition), on
depthwise layers (with a bias and without) and a 1x1 layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

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
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPS):
        started = time.perf_counter()
        for _ in range(CALLS):
            call()
        samples.append((time.perf_counter() - started) / CALLS * 1e6)
        torch.cuda.synchronize()
    return round(statistics.median(samples), 2)


def _forced(torch, conv, algorithm: str, x):
    from seer.torch.convolution import force

    holder = torch.nn.Sequential(conv)
    force(holder, algorithm, math="fma")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        holder(x)  # the runner built
    return holder[0]


def layer_parts(torch, shape: ConvShape, has_bias: bool) -> dict:
    """Host microseconds per call of every piece, on one layer."""
    import torch.nn.functional as F

    from seer.torch import convolution as C

    def conv_module():
        return torch.nn.Conv2d(shape.in_ch, shape.out_ch, shape.filter_dims[2:], stride=shape.spatial_stride,
                               padding=shape.spatial_padding, groups=shape.groups, bias=has_bias).cuda().eval()

    x = torch.randn(shape.input_dims, device="cuda")
    conv = conv_module()
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
        module = _forced(torch, conv_module(), algo, x)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

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
