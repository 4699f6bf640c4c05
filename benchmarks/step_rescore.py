"""A measured training step's convolution time, predicted again with other models.

    python benchmarks/step_rescore.py benchmarks/results/h200-training-steps-layers-20261129 \
        --gpu h200 --network r3d_18 --models bwd_filter=/tmp/wgrad-models

`seer profile-network --training` records, per policy, each layer's three passes timed as the step
ran them and what the models of that day predicted (``step_layer_times``). This scores those
records with the shipped models and with each ``--models PASS=DIR`` in place of the shipped one of
its pass (a folder of ``seer train --models-dir``), so a model trained on more data can be judged
on whole networks already measured without a GPU. A layer that ran PyTorch's own choice is
predicted by the model of that policy, a layer that ran an algorithm by that algorithm's time.
Prints one table (markdown): per (network, input, math, policy, models), each pass's measured
total (calls x time), the prediction recorded at run time and the prediction now, and the step's
error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seer.algorithms import PASSES  # noqa: E402
from seer.layers.shapes import LAYER_COLUMNS  # noqa: E402
from seer.networks.profile_network import read_step_layers, step_conv_sums  # noqa: E402
from seer.predict.persist import load_model  # noqa: E402

#: The algorithm a step-layer record names when PyTorch's own choice ran
#: (``seer.torch.convolution.PYTORCH``, whose module needs torch to import).
PYTORCH_RAN = "pytorch"


def predicted_per_call(rows: pd.DataFrame, model, math: str) -> np.ndarray:
    """Per row (one pass of one layer), ``model``'s predicted time of one call of what ran."""
    layers = rows[[c for c in LAYER_COLUMNS if c in rows.columns]].reset_index(drop=True)
    table = model.predict(layers, math)
    pytorch = table.drop_duplicates("layer").set_index("layer")["pytorch_ms"].reindex(range(len(rows))).to_numpy()
    ran = pd.MultiIndex.from_arrays([np.arange(len(rows)), rows["algo"].to_numpy()])
    chosen = table.set_index(["layer", "algo"])["predicted_ms"].reindex(ran).to_numpy()
    return np.where(rows["algo"].to_numpy() == PYTORCH_RAN, pytorch, chosen)


def rescore(layers: pd.DataFrame, gpu: str, model_sets: dict[str, dict[str, Path]]) -> pd.DataFrame:
    """One row per (step, model set): each pass's measured total and the prediction recorded at run
    time (:func:`seer.networks.profile_network.step_conv_sums`), the prediction now, and the step's error."""
    models: dict[tuple[str, Path | None], object] = {}  # each (pass, folder) loaded once

    def model_of(pass_: str, folder: Path | None):
        if (pass_, folder) not in models:
            models[pass_, folder] = load_model(gpu, pass_=pass_, models_dir=folder)
        return models[pass_, folder]

    rows = []
    keys = ["network", "input", "math", "policy"]
    for key, step in layers.groupby(keys, sort=False):
        sums = step_conv_sums(step.to_dict("records"))
        for label, dirs in model_sets.items():
            row = dict(zip(keys, key), models=label)
            predicted_total = 0.0
            for pass_ in PASSES:
                part = step[step["pass"] == pass_].reset_index(drop=True)
                if part.empty:
                    continue
                now = predicted_per_call(part, model_of(pass_, dirs.get(pass_)), key[2])
                predicted = float((now * part["calls"].to_numpy(dtype=float)).sum())
                row[f"{pass_}_measured_ms"] = round(sums[f"{pass_}_conv_ms"], 3)
                at_run = sums[f"{pass_}_predicted_conv_ms"]
                row[f"{pass_}_at_run_ms"] = None if at_run is None else round(at_run, 3)
                row[f"{pass_}_predicted_ms"] = round(predicted, 3)
                predicted_total += predicted
            row["step_error_pct"] = round(100 * (predicted_total / sums["conv_ms"] - 1), 1)
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="a `seer profile-network --training --out` folder")
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--network", help="only this network (its name as recorded)")
    parser.add_argument("--policy", default="heuristic", help="only this policy's steps (default: heuristic)")
    parser.add_argument("--models", action="append", default=[], metavar="PASS=DIR",
                        help="score with the model of PASS in DIR too (repeatable; one set per PASS=DIR)")
    args = parser.parse_args(argv)
    layers = read_step_layers(args.out_dir)
    if layers.empty:
        print(f"{args.out_dir}: no step_layer_times records", file=sys.stderr)
        return 2
    if args.network:
        layers = layers[layers["network"] == args.network]
    if args.policy:
        layers = layers[layers["policy"] == args.policy]
    if layers.empty:
        print(f"{args.out_dir}: no steps of {args.network or 'any network'} under {args.policy}", file=sys.stderr)
        return 2
    sets: dict[str, dict[str, Path]] = {"shipped": {}}
    for spec in args.models:
        pass_, _, folder = spec.partition("=")
        if pass_ not in PASSES or not folder:
            print(f"--models {spec}: expected PASS=DIR with PASS one of {', '.join(PASSES)}", file=sys.stderr)
            return 2
        sets[spec] = {pass_: Path(folder)}
    table = rescore(layers, args.gpu, sets).fillna("")
    print("| " + " | ".join(table.columns) + " |\n|" + "---|" * len(table.columns))
    for row in table.itertuples(index=False):
        print("| " + " | ".join(map(str, row)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
