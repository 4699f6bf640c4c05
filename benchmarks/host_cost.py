"""Host time per convolution call: PyTorch's ``F.conv2d`` against seer's ways of running a
chosen algorithm (GPU).

    python benchmarks/host_cost.py --out benchmarks/results/h100-host-cost.json

The host's clock times ``--calls`` calls enqueued back to back, and the device is synchronized
only after: a launch queue holds over a thousand launches, so the host never waits for the
GPU and the time is what the host spends per call (Python, PyTorch's dispatcher, cuDNN's own
host work, the launch). The median over ``--reps`` repetitions is reported in microseconds,
per layer and way.

The host time of one more kernel launch is measured on a grouped layer, on which cuDNN's
IMPLICIT_GEMM launches a kernel per group (the slope of host time against the groups), and
what the legacy call (GEMM) costs beyond PyTorch's module on a grouped layer of ResNeXt-50.

    python benchmarks/host_cost.py --layers densenet121-b32.csv --out benchmarks/results/h200-layer-host-cost.json

times every algorithm (``--algos``) forced on each distinct layer of a layer file (a network's,
from ``seer network NAME --layers-out``) against PyTorch's module on the same input, beside what
the guard counts for it (``extra_host_ms``): the per-call costs, layer by layer, that
``seer.torch.apply`` weighs.

    python benchmarks/host_cost.py --sparse --out benchmarks/results/h200-sparse-host-cost.json

times instead what seer's sparse kernel (``SEER_SPARSE_GATHER``, through CuPy) costs the host
beyond PyTorch's module, on inputs with 99% zeros: the figure of the guard's
``GUARD_SPARSE_HOST_MS``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

from seer.algorithms import get_algorithm
from seer.layers.shapes import ConvShape
from seer.schema import get_math_mode

#: (label, layer, bias): the 1x1 layer of the issue, a 3x3 layer and a depthwise one, with a
#: bias, and the depthwise one without, as networks that normalize after it have it. PyTorch
#: adds a bias in a kernel of its own after cuDNN's, but inside its own depthwise kernel.
LAYERS = (
    ("1x1 32x256x56x56->64", ConvShape.square(32, 256, 56, 64, 1), True),
    ("3x3 32x64x56x56->64", ConvShape.square(32, 64, 56, 64, 3, padding=1), True),
    ("3x3 depthwise 32x96x56x56 g96", ConvShape.square(32, 96, 56, 96, 3, padding=1, groups=96), True),
    ("3x3 depthwise 32x96x56x56 g96, no bias", ConvShape.square(32, 96, 56, 96, 3, padding=1, groups=96), False),
)


#: Groups of the 3x3 layer 32x120x28x28 -> 120 on which the cost of a launch is measured.
LAUNCH_GROUPS = (5, 30)
#: A layer that PyTorch runs in one launch and seer's GEMM through the legacy call: ResNeXt-50's
#: first grouped layer at batch 1 (at batch 32, PyTorch's engine launches a kernel per group).
LEGACY_LAYER = ("3x3 1x128x56x56 g32", ConvShape.square(1, 128, 56, 128, 3, padding=1, groups=32))


def host_us(torch, call, calls: int, reps: int) -> float:
    """Median host microseconds per call of ``calls`` calls enqueued back to back."""
    import statistics

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - started) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def write_report(torch, args, command: str, **fields) -> None:
    """The machine, the run's settings (``args``: math, calls, reps), ``command`` and ``fields``,
    as JSON at ``args.out`` where one is given."""
    if not args.out:
        return
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "python": platform.python_version(), "math": args.math, "calls": args.calls, "reps": args.reps,
           "command": command, **fields}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


def _conv_module(torch, shape: ConvShape, bias: bool = True):
    """PyTorch's own module of ``shape`` on the GPU."""
    conv_type = {2: torch.nn.Conv2d, 3: torch.nn.Conv3d}[len(shape.input_dims) - 2]
    return conv_type(shape.in_ch, shape.out_ch, shape.filter_dims[2:], stride=shape.spatial_stride,
                     padding=shape.spatial_padding, dilation=shape.spatial_dilation, groups=shape.groups,
                     bias=bias).cuda().eval()


def _forced(torch, shape: ConvShape, algorithm: str, math: str, x, bias: bool = True):
    """A SeerConv module of ``shape`` forced to ``algorithm``, its runner built on ``x``, and
    the path that runs it."""
    from seer.torch.convolution import force

    holder = torch.nn.Sequential(_conv_module(torch, shape, bias))
    force(holder, algorithm, math=math)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        holder(x)  # runner built
    return holder[0], next(iter(holder[0].paths.values()), "PyTorch's fallback")


def ways(torch, shape: ConvShape, algorithm: str, math: str, bias: bool = True) -> dict:
    """Callables of one convolution, each a way seer or PyTorch can run it."""
    import torch.nn.functional as F

    from seer.gpu import cudnn

    fn = {2: F.conv2d, 3: F.conv3d}[len(shape.input_dims) - 2]
    x = torch.randn(shape.input_dims, device="cuda")
    conv = _conv_module(torch, shape, bias)
    w, b = conv.weight.detach(), None if conv.bias is None else conv.bias.detach()
    out = {"F.conv": lambda: fn(x, w, b, shape.spatial_stride, shape.spatial_padding, shape.spatial_dilation,
                                 shape.groups),
           "nn.Conv module": lambda: conv(x)}
    for name in (algorithm, "SEER_IMPLICIT_GEMM"):
        module, path = _forced(torch, shape, name, math, x, bias)
        out[f"SeerConv {name} ({path})"] = lambda m=module: m(x)
    # The bare calls underneath, with no output allocation or bias.
    handle = cudnn.Handle(torch.cuda.current_stream().cuda_stream)
    problem = cudnn.ConvolutionProblem(handle, shape, math)
    enum = get_algorithm(algorithm).enum
    size = problem.workspace_size(enum)
    y = torch.empty(shape.output_dims, device="cuda")
    space = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")
    out[f"bare legacy cudnnConvolutionForward {algorithm}"] = lambda: problem.forward(
        enum, x.data_ptr(), w.data_ptr(), y.data_ptr(), space.data_ptr(), size)
    out.update(_graph_ways(torch, shape, x, w, math))
    return out


def _graph_ways(torch, shape: ConvShape, x, w, math: str) -> dict:
    """The bare graph-API plan of cuDNN's first heuristic choice, called with pointers."""
    from seer.errors import EnvironmentProblem

    try:
        import cudnn

        from seer.gpu.cudnn_graph import GraphConvolution
    except (ImportError, EnvironmentProblem):
        return {}
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    conv = GraphConvolution.ranked(handle, shape, math)
    y = torch.empty(shape.output_dims, device="cuda")
    ws = torch.empty(max(conv.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    xp, wp, yp, wsp = x.data_ptr(), w.data_ptr(), y.data_ptr(), ws.data_ptr()
    return {f"bare graph plan {conv.name}": lambda: conv.run(xp, wp, yp, wsp)}


def _forced_us(torch, shape: ConvShape, algorithm: str, math: str, calls: int, reps: int) -> tuple[float, str]:
    """Host microseconds per call of a SeerConv module forced to ``algorithm``, and its path."""
    x = torch.randn(shape.input_dims, device="cuda")
    module, path = _forced(torch, shape, algorithm, math, x)
    return host_us(torch, lambda: module(x), calls, reps), path


def launch_cost(torch, math: str, calls: int, reps: int) -> tuple[list[dict], float, float]:
    """The rows, the host microseconds per kernel launch (the slope of IMPLICIT_GEMM, a launch per
    group, on the layers of :data:`LAUNCH_GROUPS`) and what GEMM's legacy call costs beyond
    PyTorch's module on :data:`LEGACY_LAYER`."""
    rows = []
    for groups in LAUNCH_GROUPS:
        shape = ConvShape.square(32, 120, 28, 120, 3, padding=1, groups=groups)
        us, path = _forced_us(torch, shape, "IMPLICIT_GEMM", math, calls, reps)
        rows.append({"layer": f"3x3 32x120x28x28 g{groups}", "way": f"SeerConv IMPLICIT_GEMM ({path})",
                     "host_us": round(us, 2), "launches": get_algorithm("IMPLICIT_GEMM").launches.of(shape, math)})
    per_launch = (rows[1]["host_us"] - rows[0]["host_us"]) / (rows[1]["launches"] - rows[0]["launches"])
    label, shape = LEGACY_LAYER
    x = torch.randn(shape.input_dims, device="cuda")
    conv = _conv_module(torch, shape)
    module_us = host_us(torch, lambda: conv(x), calls, reps)
    gemm_us, path = _forced_us(torch, shape, "GEMM", math, calls, reps)
    rows += [{"layer": label, "way": "nn.Conv module", "host_us": round(module_us, 2)},
             {"layer": label, "way": f"SeerConv GEMM ({path})", "host_us": round(gemm_us, 2)}]
    for row in rows:
        print(f"{row['layer']:32s} {row['way']:55s} {row['host_us']:8.1f} us {row.get('launches', '')}", flush=True)
    return rows, per_launch, gemm_us - module_us


#: Layers on which the sparse kernel's host time is measured (batch 1, as the sparse experiments).
SPARSE_LAYERS = (
    ("3x3 1x512x28x28->512", ConvShape.square(1, 512, 28, 512, 3, padding=1)),
    ("1x1 1x1024x14x14->256", ConvShape.square(1, 1024, 14, 256, 1)),
    ("3x3 s2 1x256x56x56->256", ConvShape.square(1, 256, 56, 256, 3, stride=2, padding=1)),
)


def sparse_cost(torch, math: str, calls: int, reps: int, sparsity: float = 0.99) -> tuple[list[dict], float]:
    """The rows (PyTorch's module and the forced sparse kernel per layer of :data:`SPARSE_LAYERS`,
    on an input with ``sparsity`` zeros) and the median host microseconds the kernel costs beyond
    PyTorch's module."""
    import statistics

    rows, extra = [], []
    for label, shape in SPARSE_LAYERS:
        x = torch.randn(shape.input_dims, device="cuda")
        x[torch.rand_like(x) < sparsity] = 0
        conv = _conv_module(torch, shape)
        module_us = host_us(torch, lambda: conv(x), calls, reps)
        holder = torch.nn.Sequential(conv)
        from seer.torch.convolution import force

        force(holder, "SEER_SPARSE_GATHER", math=math)
        holder(x)  # its runner built and its kernels compiled
        sparse_us = host_us(torch, lambda: holder(x), calls, reps)
        extra.append(sparse_us - module_us)
        for way, us in (("nn.Conv module", module_us), ("SeerConv SEER_SPARSE_GATHER (cupy)", sparse_us)):
            rows.append({"layer": label, "way": way, "host_us": round(us, 2)})
            print(f"{label:32s} {way:55s} {us:8.1f} us", flush=True)
    return rows, statistics.median(extra)


#: The algorithms ``--layers`` forces by default: every forward algorithm seer.torch can run.
LAYER_ALGOS = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "FFT", "FFT_TILING", "WINOGRAD",
               "WINOGRAD_NONFUSED", "SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK")


def layer_costs(torch, layers, algos, math: str, calls: int, reps: int, bias: bool = True,
                channels_last: bool = False) -> list[dict]:
    """Per distinct layer of ``layers`` (ConvShapes): PyTorch's module (with a ``bias`` or
    not), and each of ``algos`` forced on it (those that run it), in host microseconds per
    call, with the extra host time the guard counts for the algorithm there (``model_extra_us``).
    With ``channels_last`` the input is channels-last and the weight as the module makes it
    (NCHW; a depthwise one is both), as ConvNeXt's blocks hand their convolutions."""
    from seer.gpu.cudnn import CudnnError
    from seer.torch.convolution import extra_host_ms
    from seer.torch.layers import CHANNELS_LAST

    rows = []
    for number, shape in enumerate(dict.fromkeys(layers)):
        x = torch.randn(shape.input_dims, device="cuda")
        if channels_last:
            x = x.contiguous(memory_format=CHANNELS_LAST[x.dim() - 2])
        conv = _conv_module(torch, shape, bias)
        module_us = host_us(torch, lambda: conv(x), calls, reps)
        label = str(shape)
        rows.append({"layer": label, "way": "nn.Conv module", "host_us": round(module_us, 2)})
        for algo in algos:
            try:
                module, path = _forced(torch, shape, algo, math, x, bias)
            except (CudnnError, RuntimeError) as exc:
                rows.append({"layer": label, "way": algo, "error": str(exc)[:200]})
                continue
            if not module.paths:  # PyTorch's fallback: the algorithm cannot run the layer
                continue
            us = host_us(torch, lambda: module(x), calls, reps)
            rows.append({"layer": label, "way": algo, "path": path, "host_us": round(us, 2),
                         "extra_us": round(us - module_us, 2), "fallbacks": sorted(module.fallbacks),
                         "model_extra_us": round(1e3 * extra_host_ms(algo, shape, math), 2)})
        torch.cuda.empty_cache()
        print(f"layer {number + 1}: {label}: module {module_us:.1f} us; "
              + ", ".join(f"{r['way']} {r['extra_us']:+.1f}" for r in rows if r["layer"] == label and "extra_us" in r),
              flush=True)
    return rows


def summarize_layers(rows: list[dict]) -> dict:
    """Per algorithm: layers run, median and 90th percentile of the measured extra host us, and
    the median the guard counts."""
    import statistics

    out = {}
    for algo in dict.fromkeys(r["way"] for r in rows if "extra_us" in r):
        extra = sorted(r["extra_us"] for r in rows if r["way"] == algo and "extra_us" in r)
        model = [r["model_extra_us"] for r in rows if r["way"] == algo and "extra_us" in r]
        out[algo] = {"layers": len(extra), "extra_us_median": round(statistics.median(extra), 2),
                     "extra_us_p90": round(extra[int(0.9 * (len(extra) - 1))], 2),
                     "model_extra_us_median": round(statistics.median(model), 2)}
    modules = [r["host_us"] for r in rows if r["way"] == "nn.Conv module"]
    out["nn.Conv module"] = {"layers": len(modules), "host_us_median": round(statistics.median(modules), 2)}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="IMPLICIT_PRECOMP_GEMM")
    parser.add_argument("--math", default="fma")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--sparse", action="store_true",
                        help="time seer's sparse kernel against PyTorch's module instead (SPARSE_LAYERS)")
    parser.add_argument("--layers", type=Path, help="time every algorithm on each distinct layer of this layer file")
    parser.add_argument("--algos", default=",".join(LAYER_ALGOS), help="with --layers: the algorithms to force")
    parser.add_argument("--channels-last", action="store_true",
                        help="with --layers: channels-last inputs (the weights as the modules make them)")
    parser.add_argument("--no-bias", action="store_true",
                        help="with --layers: modules without a bias (as networks that normalize after them)")
    args = parser.parse_args(argv)

    import torch

    torch.backends.cudnn.allow_tf32 = get_math_mode(args.math).tensor_cores
    command = "python benchmarks/host_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.sparse:
        with torch.no_grad():
            rows, extra = sparse_cost(torch, args.math, args.calls, args.reps)
        print(f"seer's sparse kernel beyond PyTorch's module: {extra:.1f} us per call")
        write_report(torch, args, command, sparsity=0.99, results=rows, sparse_extra_us=round(extra, 2))
        return 0
    if args.layers:
        from seer.layers.files import read_layers

        shapes = [ConvShape.from_mapping(r) for r in read_layers(args.layers).to_dict("records")]
        with torch.no_grad():
            rows = layer_costs(torch, shapes, args.algos.split(","), args.math, args.calls, args.reps,
                               bias=not args.no_bias, channels_last=args.channels_last)
        summary = summarize_layers(rows)
        for algo, figures in summary.items():
            print(f"{algo:28s} {figures}")
        write_report(torch, args, command, layers_file=args.layers.name, bias=not args.no_bias,
                     channels_last=args.channels_last, summary=summary, results=rows)
        return 0
    results = []
    with torch.no_grad():
        for label, shape, bias in LAYERS:
            baseline = None
            for way, call in ways(torch, shape, args.algorithm, args.math, bias).items():
                us = host_us(torch, call, args.calls, args.reps)
                baseline = baseline or us  # F.conv comes first
                results.append({"layer": label, "way": way, "host_us": round(us, 2),
                                "vs_F_conv": round(us / baseline, 3)})
                print(f"{label:32s} {way:55s} {us:8.1f} us {us / baseline:6.2f}x", flush=True)
        launch_rows, per_launch, legacy_extra = launch_cost(torch, args.math, args.calls, args.reps)
    print(f"host time per kernel launch: {per_launch:.2f} us; the legacy call beyond PyTorch's: {legacy_extra:.1f} us")
    from seer.gpu.cudnn_graph import frontend_version

    write_report(torch, args, command, cudnn_frontend=frontend_version(), algorithm=args.algorithm, results=results,
                 launches=launch_rows, per_launch_us=round(per_launch, 2), legacy_extra_us=round(legacy_extra, 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
