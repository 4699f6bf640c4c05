"""How well a layer's time on one GPU is predicted from other GPUs: a first measure for the
issue on every GPU.

    python benchmarks/cross_gpu.py --out benchmarks/results/cross-gpu

The times are of the same policy on every GPU: the algorithm ``cudnn.benchmark`` chose,
under strict FP32 (no TF32), fp32 NCHW, for 3x3 convolutions of stride 1 and padding 1 (the
only layers the public data has):

- four public GPUs from NeuSight's training data (``data/external/neusight-conv/``,
  MIT licence, its SOURCE.md): Tesla V100 PCIe 32GB, T4, P100 PCIe 16GB, P4; PyTorch 2.1,
  cuDNN 8.9.2; one call between CUDA events, mean of the 5 fastest of 25, which overstates
  kernels shorter than a few tens of microseconds (``timing`` = ``single-call``);
- seer's H100 and H200 (``data/h100``, ``data/h200``): ``PYTORCH_BENCHMARK`` under ``fma`` on the
  layers of that form; PyTorch 2.11, cuDNN 9.19; the collector's bursts (``timing`` = ``burst``).

Leaving each GPU out in turn, two predictions of its times:

- **peak scaling**: a layer's time on another GPU times the ratio of their FP32 peaks, for
  the layers both measured (public GPUs only: seer's H100 layers are others);
- **roofline scaling**: the same, times the ratio of the layer's roofline floors on the two
  GPUs (FP32 peak or DRAM bandwidth, whichever binds);
- **best constant ratio**: a layer's time on another GPU times the one ratio that gives the
  least MAPE on the left-out GPU's own layers (an oracle: it reads the times it predicts, so
  no scaling by one figure per GPU pair can do better);
- **pair model**: boosted trees learning how a layer's time moves from one GPU to another
  (log2 of the ratio beyond the roofline floors' ratio, from both GPUs' features), fitted on
  the pairs of the other public GPUs, then applied to each other GPU's measured times;
- **spec model**: boosted trees over seer's shape features computed with each GPU's spec
  (roofline floors, waves, tiles) and the spec itself (SMs, clock, FP32 peak, DRAM
  bandwidth, L2, shared memory per SM), learning log2(time / roofline floor) from the
  other GPUs' layers; beside it, the same model fitted on 4/5 of the left-out GPU's own layers
  and judged on the rest (5-fold): what the features tell of a GPU's times when that GPU is
  known, the floor for one left out.

MAPE per left-out GPU. Nothing here is a product model: it says what such a model may reach.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import KFold

from seer.hardware.gpus import get_gpu_spec
from seer.predict.predictors import cross_gpu_inputs
from seer.schema import DatasetDir
from seer.training.cross_gpu import PUBLIC_FILES

#: NeuSight's files and seer's spec of each board.
PUBLIC = PUBLIC_FILES
#: seer's own measured GPUs.
SEER_GPUS = ("h100", "h200")


def public_times(folder: Path) -> pd.DataFrame:
    """NeuSight's rows as layers (batch, in_ch, out_ch, in_h = in_w, 3x3, stride 1, padding 1) and ms."""
    frames = []
    for name, gpu in PUBLIC.items():
        raw = pd.read_csv(folder / name)
        raw = raw[(raw["Kernel_Szie"] == 3) & (raw["Stride"] == 1) & (raw["Padding"] == 1)]
        frames.append(pd.DataFrame({
            "gpu": gpu, "batch": raw["B"], "in_ch": raw["Input_Channel"], "out_ch": raw["Output_Channel"],
            "in_h": raw["Input_Size"], "in_w": raw["Input_Size"], "time_ms": raw["Latency"],
            "source": "neusight", "timing": "single-call"}))
    return pd.concat(frames, ignore_index=True)


def seer_times(data_dir: Path, gpu: str = "h100") -> pd.DataFrame:
    """seer's ``PYTORCH_BENCHMARK`` runs under fma on 2D square 3x3 layers of stride 1 and padding 1."""
    table = pd.read_parquet(DatasetDir(data_dir / gpu).measurements, columns=[
        "algo", "math", "status", "dims", "batch", "in_ch", "out_ch", "groups", "in_h", "in_w", "kernel_h",
        "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "time_ms"])
    rows = table[(table["algo"] == "PYTORCH_BENCHMARK") & (table["math"] == "fma") & (table["status"] == "ok")
                 & (table["dims"] == 2) & (table["groups"] == 1) & (table["in_h"] == table["in_w"])
                 & (table["kernel_h"] == 3) & (table["kernel_w"] == 3) & (table["stride_h"] == 1)
                 & (table["stride_w"] == 1) & (table["pad_h"] == 1) & (table["pad_w"] == 1)
                 & (table["dilation_h"] == 1) & (table["dilation_w"] == 1)]
    return pd.DataFrame({"gpu": gpu, "batch": rows["batch"], "in_ch": rows["in_ch"], "out_ch": rows["out_ch"],
                         "in_h": rows["in_h"], "in_w": rows["in_w"], "time_ms": rows["time_ms"],
                         "source": "seer", "timing": "burst"}).reset_index(drop=True)


def features(times: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: seer's shape features under its GPU's spec and the spec's fields; and log2 of the
    roofline floor in seconds (what the target is relative to)."""
    blocks, floors = [], []
    for gpu, rows in times.groupby("gpu", sort=False):
        X, floor = cross_gpu_inputs(rows.assign(kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)[[
            "batch", "in_ch", "out_ch", "in_h", "in_w", "kernel_h", "kernel_w", "pad_h", "pad_w"]], get_gpu_spec(gpu))
        blocks.append(pd.DataFrame(X, index=rows.index))
        floors.append(pd.Series(floor, index=rows.index))
    return pd.concat(blocks).loc[times.index].to_numpy(), pd.concat(floors).loc[times.index].to_numpy()


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return round(float(np.mean(np.abs(predicted / measured - 1)) * 100), 2)


def _regressor() -> HistGradientBoostingRegressor:
    return HistGradientBoostingRegressor(max_iter=400, learning_rate=0.05, max_leaf_nodes=31, random_state=0)


def best_constant_mape(source_ms: np.ndarray, target_ms: np.ndarray) -> float:
    """The least MAPE of ``source_ms`` times one constant against ``target_ms``: the constant is
    searched over the quantiles of the layers' ratios (the MAPE is convex in it)."""
    candidates = np.quantile(target_ms / source_ms, np.linspace(0.005, 0.995, 397))
    return min(mape(source_ms * c, target_ms) for c in candidates)


def within_gpu_mape(X: np.ndarray, y: np.ndarray, floor: np.ndarray, measured: np.ndarray) -> float:
    """The spec model's 5-fold MAPE on one GPU's own layers (rows of ``X`` all that GPU's)."""
    predicted = np.empty(len(y))
    for train, test in KFold(5, shuffle=True, random_state=0).split(X):
        predicted[test] = _regressor().fit(X[train], y[train]).predict(X[test])
    return mape(2.0 ** (predicted + floor) * 1e3, measured)


def evaluate(times: pd.DataFrame) -> list[dict]:
    X, floor = features(times)
    y = np.log2(times["time_ms"].to_numpy() / 1e3) - floor
    rows = []
    key = ["batch", "in_ch", "out_ch", "in_h"]
    for held in pd.unique(times["gpu"]):
        test = (times["gpu"] == held).to_numpy()
        model = _regressor().fit(X[~test], y[~test])
        predicted = 2.0 ** (model.predict(X[test]) + floor[test]) * 1e3
        measured = times.loc[test, "time_ms"].to_numpy()
        row = {"left_out": held, "layers": int(test.sum()), "timing": times.loc[test, "timing"].iloc[0],
               "spec_model_mape": mape(predicted, measured),
               "spec_model_median_ape": round(float(np.median(np.abs(predicted / measured - 1)) * 100), 2),
               "within_gpu_5fold_mape": within_gpu_mape(X[test], y[test], floor[test], measured)}
        target = get_gpu_spec(held)
        scaling, roofline, constant = {}, {}, {}
        with_floor = times.assign(floor=floor)
        for other in pd.unique(times["gpu"]):
            if other == held:
                continue
            both = with_floor[with_floor["gpu"] == held].merge(with_floor[with_floor["gpu"] == other], on=key,
                                                               suffixes=("", "_other"))
            if len(both) < 100:
                continue
            ratio = get_gpu_spec(other).peak_fp32_tflops / target.peak_fp32_tflops
            scaling[other] = mape(both["time_ms_other"].to_numpy() * ratio, both["time_ms"].to_numpy())
            # The layer's roofline floor on each GPU (FP32 peak or DRAM bandwidth, whichever binds).
            floors = 2.0 ** (both["floor"].to_numpy() - both["floor_other"].to_numpy())
            roofline[other] = mape(both["time_ms_other"].to_numpy() * floors, both["time_ms"].to_numpy())
            constant[other] = best_constant_mape(both["time_ms_other"].to_numpy(), both["time_ms"].to_numpy())
        row["peak_scaling_mape_by_source_gpu"] = scaling
        row["roofline_scaling_mape_by_source_gpu"] = roofline
        row["best_constant_mape_by_source_gpu"] = constant
        row["pair_model_mape_by_source_gpu"] = pair_model(times, X, floor, held) if scaling else {}
        rows.append(row)
    return rows


def _pairs(times: pd.DataFrame, X: np.ndarray, floor: np.ndarray, sources, targets) -> pd.DataFrame:
    """Every layer measured on a source GPU and on a target GPU: both rows' positions."""
    key = ["batch", "in_ch", "out_ch", "in_h"]
    indexed = times[key + ["gpu"]].assign(position=np.arange(len(times)))
    out = []
    for source in sources:
        for target in targets:
            if source == target:
                continue
            both = indexed[indexed["gpu"] == target].merge(indexed[indexed["gpu"] == source], on=key,
                                                           suffixes=("", "_source"))
            out.append(both[["position", "position_source"]])
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["position", "position_source"])


def pair_model(times: pd.DataFrame, X: np.ndarray, floor: np.ndarray, held: str) -> dict[str, float]:
    """A model of how a layer's time moves from one GPU to another: boosted trees over the
    target GPU's features and the source's, learning log2(target / source time) beyond the
    ratio of their roofline floors, from the pairs of GPUs without ``held``; then ``held``'s
    times predicted from each other GPU's measured ones. MAPE per source GPU."""
    gpus = list(pd.unique(times.loc[times["source"] == "neusight", "gpu"]))  # the public GPUs, with common layers
    others = [g for g in gpus if g != held]
    train = _pairs(times, X, floor, others, others)
    t, s = train["position"].to_numpy(), train["position_source"].to_numpy()
    seconds = times["time_ms"].to_numpy() / 1e3

    def inputs(t, s):
        return np.hstack([X[t], X[s] - X[t]])

    target = np.log2(seconds[t] / seconds[s]) - (floor[t] - floor[s])
    model = _regressor().fit(inputs(t, s), target)
    out = {}
    for source in others:
        test = _pairs(times, X, floor, [source], [held])
        if len(test) < 100:  # seer's GPUs measured other layers than the public ones
            continue
        t, s = test["position"].to_numpy(), test["position_source"].to_numpy()
        predicted = seconds[s] * 2.0 ** (model.predict(inputs(t, s)) + floor[t] - floor[s])
        out[source] = mape(predicted, seconds[t])
    return out


def markdown(rows: list[dict], header: str) -> str:
    lines = [header, "", "| left-out GPU | layers | timing | spec model MAPE % (median) | spec model, 5-fold on the "
             "GPU's own layers | FP32-peak scaling MAPE % from each other GPU | roofline scaling, same | best constant "
             "ratio, same | pair model, same |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [", ".join(f"{g} {v:.1f}" for g, v in r[k].items()) or "(no common layers)"
                 for k in ("peak_scaling_mape_by_source_gpu", "roofline_scaling_mape_by_source_gpu",
                           "best_constant_mape_by_source_gpu", "pair_model_mape_by_source_gpu")]
        lines.append(f"| {r['left_out']} | {r['layers']} | {r['timing']} | {r['spec_model_mape']:.1f} "
                     f"({r['spec_model_median_ape']:.1f}) | {r['within_gpu_5fold_mape']:.1f} | {cells[0]} | {cells[1]} "
                     f"| {cells[2]} | {cells[3]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--public", type=Path, default=Path("data/external/neusight-conv"))
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    times = pd.concat([public_times(args.public), *(seer_times(args.data_dir, gpu) for gpu in SEER_GPUS)],
                      ignore_index=True)
    rows = evaluate(times)
    header = (f"Cross-GPU prediction, leaving each GPU out (3x3 convolutions, stride 1, padding 1, fp32, strict FP32, "
              f"the time of cudnn.benchmark's choice); `python benchmarks/cross_gpu.py --out {args.out}`. Public "
              f"GPUs: NeuSight's data (single-call timing); {', '.join(SEER_GPUS)}: seer's (burst timing).")
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, header)
    (args.out / "cross-gpu.md").write_text(text)
    counts = times.groupby(["gpu", "source", "timing"]).size().reset_index(name="layers").to_dict(orient="records")
    (args.out / "cross-gpu.json").write_text(json.dumps({"data": counts, "rows": rows}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
