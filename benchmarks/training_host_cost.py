"""Host time per training call of one convolution (forward and backward): PyTorch's module
against seer's, with each backward-data and backward-filter algorithm forced (GPU).

    python benchmarks/training_host_cost.py --math fma --out benchmarks/results/h200-training-host-cost.json

A training call is the module's forward on an input that needs its gradient, then the
backward of a fixed output gradient (dx, dw and the bias's). As in ``host_cost.py``, the
host's clock times ``--calls`` calls enqueued back to back, on small layers (batch 1) so the
GPU never holds the host back, and the median over ``--reps`` repetitions is reported in
microseconds. seer's ways: its forward (``IMPLICIT_PRECOMP_GEMM`` through a graph plan) with
PyTorch's gradients (what a swapped module costs before any backward pick), then each
backward algorithm in turn through cuDNN's legacy call, the other pass left to PyTorch, and
last both passes chosen (:data:`BOTH`).
What each costs beyond PyTorch's module is what seer's guard for eager training steps counts.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from seer.algorithms import algorithm_names
from seer.layers.shapes import ConvShape
from seer.schema import get_math_mode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_cost import host_us, write_report  # noqa: E402 - the same clock and report as the forward's benchmark

#: (label, layer): batch 1, so the GPU is never the bottleneck; a plain 3x3, a 1x1, a grouped
#: and a depthwise layer (where cuDNN's FFT and Winograd algorithms loop over the groups).
LAYERS = (
    ("3x3 1x64x28x28->64", ConvShape.square(1, 64, 28, 64, 3, padding=1)),
    ("1x1 1x256x14x14->64", ConvShape.square(1, 256, 14, 64, 1)),
    ("3x3 1x128x28x28 g32", ConvShape.square(1, 128, 28, 128, 3, padding=1, groups=32)),
    ("3x3 1x96x28x28 g96", ConvShape.square(1, 96, 28, 96, 3, padding=1, groups=96)),
)
FORWARD = "IMPLICIT_PRECOMP_GEMM"
#: The backward-data and backward-filter algorithms of the way with both passes chosen: each
#: pass's GEMM-like algorithm, which cuDNN runs on every layer kind.
BOTH = ("BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_1")


def training_call(torch, module, shape: ConvShape):
    """One forward and backward of ``module`` on a fixed input and output gradient."""
    x = torch.randn(shape.input_dims, device="cuda", requires_grad=True)
    grad_y = torch.randn(shape.output_dims, device="cuda")

    def call() -> None:
        module.weight.grad = module.bias.grad = x.grad = None
        module(x).backward(grad_y)

    return call


def ways(torch, shape: ConvShape, math: str) -> dict:
    """Callables of one training call: PyTorch's, seer's forward alone, and each backward algorithm."""
    from host_cost import _conv_module

    from seer.torch.convolution import force, seer_convolutions

    def seer_way(**backward):
        holder = torch.nn.Sequential(_conv_module(torch, shape).train())
        force(holder, FORWARD, math=math, **backward)
        return holder[0]

    out = {"nn.Conv module": _conv_module(torch, shape).train(), f"SeerConv {FORWARD}": seer_way()}
    for pass_, option in (("bwd_data", "dgrad"), ("bwd_filter", "wgrad")):
        for algo in algorithm_names("cudnn", pass_=pass_):
            out[f"SeerConv {FORWARD} + {algo}"] = seer_way(**{option: algo})
    # Both passes chosen: the step a training user runs once every layer has its backward picks.
    out[f"SeerConv {FORWARD} + dgrad {BOTH[0]} + wgrad {BOTH[1]}"] = seer_way(dgrad=BOTH[0], wgrad=BOTH[1])
    calls = {}
    for way, module in out.items():
        call = training_call(torch, module, shape)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()  # runners built; an algorithm cuDNN refuses falls back to PyTorch's gradient
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported as not run
            print(f"  {way}: {type(exc).__name__}: {exc}", flush=True)
            continue
        ran = [m.backward_algorithms for m in seer_convolutions(torch.nn.Sequential(module)).values()] \
            if way != "nn.Conv module" else []
        calls[way] = (call, ran[0] if ran else None)
    return calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--math", default="fma")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    torch.backends.cudnn.allow_tf32 = get_math_mode(args.math).tensor_cores
    results = []
    for label, shape in LAYERS:
        baseline = None
        for way, (call, ran) in ways(torch, shape, args.math).items():
            us = host_us(torch, call, args.calls, args.reps)
            baseline = baseline or us  # PyTorch's module comes first
            results.append({"layer": label, "groups": shape.groups, "way": way, "host_us": round(us, 2),
                            "beyond_pytorch_us": round(us - baseline, 2),
                            "backward_ran": list(ran) if ran else None})
            print(f"{label:22s} {way:60s} {us:8.1f} us {us - baseline:+8.1f} {ran or ''}", flush=True)
    write_report(torch, args, "python benchmarks/training_host_cost.py "
                 + " ".join(argv if argv is not None else sys.argv[1:]), results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
