"""Measure prediction speed on the CPU: N layers, every algorithm, from the shipped model.

    python benchmarks/predict_speed.py --gpu h100 --layers 10000 --report benchmarks/results/h100-predict-speed.json

The layers are a seeded sample of SEER's ranges (seer.grids.seer_grid). Loading the model
(the one file `seer predict` loads: seer's model of that math mode) is timed apart from
predicting; the prediction is the whole `seer predict` path (features, first stage,
support, time, ranks, extrapolation) for each math mode, best of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from seer import modeling
from seer.grids import seer_grid
from seer.predict import predict_layers, shapes_frame


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default=None)
    p.add_argument("--layers", type=int, default=10000)
    p.add_argument("--math", default="default,fma", help="comma-separated math modes")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    layers = shapes_frame(seer_grid(args.layers, seed=1))
    root = modeling.models_root()
    gpu = modeling.resolve_gpu(args.gpu, root)
    figures = {"gpu_model": gpu, "layers": len(layers), "cpu": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "python": platform.python_version(), "maths": {}}
    for math in args.math.split(","):
        started = time.perf_counter()
        models = modeling.load(root / gpu, maths=[math], families=["ours"])
        load_s = time.perf_counter() - started
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            predictions = predict_layers(models, layers, math)
            times.append(time.perf_counter() - started)
        figures["maths"][math] = {"rows": len(predictions), "load_seconds": round(load_s, 3),
                                  "predict_seconds_best": round(min(times), 3),
                                  "predict_seconds_all": [round(t, 3) for t in times],
                                  "layers_per_second": round(len(layers) / min(times))}
    print(json.dumps(figures, indent=2))
    if args.report:
        args.report.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())
