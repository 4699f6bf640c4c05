"""Where seer's sparse kernels beat cuDNN: time per layer and input sparsity (GPU).

    python benchmarks/sparse_breakeven.py --layers seer/data/networks/resnet50_800x1216.csv \\
        --sparsity 0,0.5,0.7,0.8,0.9,0.95,0.99 --pattern relu --math fma --out benchmarks/results/h100-sparse

For each layer of the file (the first ``--limit``), each sparsity and the pattern
(:mod:`seer.layers.sparsity`), on inputs of that sparsity: every cuDNN forward algorithm
that runs the layer, ``gather``, ``scatter`` and, on 1x1 stride-1 layers, ``pointwise``
(:mod:`seer.gpu.sparse_kernels`), each checked against float64 and timed as the collector
times (bursts behind a spinning kernel; finding the non-zeros is part of a sparse call).
Per layer, the break-even sparsity: the lowest at which a sparse kernel beats the fastest
cuDNN algorithm. With ``--energy S``, each successful run's energy per call too, read over
about S seconds of back-to-back calls (:mod:`seer.gpu.energy`, as ``seer collect --energy``).
Writes ``sparse-breakeven.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from seer.algorithms import algorithm_names
from seer.layers.files import read_layers
from seer.layers.shapes import ConvShape
from seer.layers.sparsity import PATTERNS, sparse_input, zero_fraction

#: Relative L2 error against float64 a run may have (the collector's, under fma).
TOLERANCE = 5e-3


def time_layer(shape: ConvShape, sparsity: float, pattern: str, math: str, timer, seed: int = 0,
               meter=None, energy_s: float = 0.0) -> dict:
    import cupy as cp

    from seer.gpu import cudnn, sparse_kernels
    from seer.gpu.reference import ShapeTensors
    from seer.gpu.worker import ItemFailed, prepare_run

    x = sparse_input(shape.input_dims, sparsity, pattern, seed=seed, xp=cp)
    tensors = ShapeTensors(shape, seed, x=x)
    runs: dict[str, float | str] = {}
    energy: dict[str, dict] = {}

    def timed(name: str, call) -> None:
        tensors.poison_output()
        call()
        cp.cuda.Device().synchronize()
        error = tensors.relative_error()
        if not error < TOLERANCE:
            runs[name] = f"wrong_result ({error:.2g})"
            return
        times, _, _ = timer.measure(call, timer.estimate_ms(call), budget_ms=5, min_reps=3)
        runs[name] = float(np.median(times))
        if meter is not None:
            energy[name] = meter.measure(call, runs[name], energy_s).as_row()

    with cudnn.Handle() as handle, cudnn.ConvolutionProblem(handle, shape, math) as problem:
        for algo in algorithm_names("cudnn"):
            try:
                call, workspace, _ = prepare_run(problem, tensors, algo, 8 << 30)
            except ItemFailed as exc:
                runs[algo] = exc.args[0]
                continue
            timed(algo, call)
            del workspace
    timed("SEER_SPARSE_GATHER", lambda: sparse_kernels.gather(shape, tensors.x, tensors.w, tensors.y))
    timed("SEER_SPARSE_SCATTER", lambda: sparse_kernels.scatter(shape, tensors.x, tensors.w, tensors.y))
    if sparse_kernels.pointwise_refusal(shape) is None:
        timed("SEER_SPARSE_POINTWISE", lambda: sparse_kernels.pointwise(shape, tensors.x, tensors.w, tensors.y))
    return {"sparsity_asked": sparsity, "sparsity": zero_fraction(x), "runs": runs} | (
        {"energy": energy} if meter is not None else {})


def breakeven(rows: list[dict]) -> float | None:
    """The lowest sparsity at which a sparse kernel is faster than every cuDNN algorithm."""
    for row in sorted(rows, key=lambda r: r["sparsity_asked"]):
        times = {k: v for k, v in row["runs"].items() if isinstance(v, float)}
        dense = [v for k, v in times.items() if not k.startswith("SEER_SPARSE")]
        sparse = [v for k, v in times.items() if k.startswith("SEER_SPARSE")]
        if dense and sparse and min(sparse) < min(dense):
            return row["sparsity_asked"]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", required=True)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--sparsity", default="0,0.5,0.7,0.8,0.9,0.95,0.99")
    parser.add_argument("--pattern", choices=PATTERNS, default="relu")
    parser.add_argument("--math", default="fma")
    parser.add_argument("--energy", type=float, default=0.0, metavar="S",
                        help="seconds of back-to-back calls per energy reading (default 0: none)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    from seer.gpu.timing import BurstTimer

    timer = BurstTimer()
    meter = None
    if args.energy > 0:
        from seer.gpu.energy import EnergyMeter

        meter = EnergyMeter()
    shapes = list(dict.fromkeys(ConvShape.from_mapping(row) for row in read_layers(args.layers).to_dict("records")))
    results = []
    args.out.mkdir(parents=True, exist_ok=True)
    for shape in shapes[:args.limit]:
        rows = [time_layer(shape, float(s), args.pattern, args.math, timer, meter=meter, energy_s=args.energy)
                for s in args.sparsity.split(",")]
        results.append({"layer": shape.as_dict(), "rows": rows, "breakeven": breakeven(rows)})
        print(shape, "break-even", results[-1]["breakeven"], flush=True)
        write(args, results)  # after every layer: a run cut short keeps what it measured
    return 0


def write(args: argparse.Namespace, results: list[dict]) -> None:
    (args.out / "sparse-breakeven.json").write_text(json.dumps({"command": " ".join(sys.argv), "pattern": args.pattern,
                                                                "math": args.math, "layers": results}, indent=1))
    lines = ["| layer | break-even sparsity |", "|---|---|"] + [
        f"| {ConvShape.from_mapping(r['layer'])} | {r['breakeven'] if r['breakeven'] is not None else 'none'} |"
        for r in results]
    (args.out / "sparse-breakeven.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
