"""How much GPU time any choice of convolution algorithm could take off whole networks, beside seer's picks.

    python benchmarks/network_oracle.py --runs benchmarks/results/h200-network-oracle --gpu h200 \\
        --passes benchmarks/results/h200-network-wall-quiet/overall.csv --out benchmarks/results/h200-network-oracle

``RUNS/layers/NETWORK-bBATCH.csv`` are the networks' convolutions, one row per call, as
``seer network NETWORK --input Bx3x224x224 --layers-out FILE`` writes them; ``RUNS/GPU/`` is a
dataset root where ``seer collect --grid <those files> --algo all`` timed every forward
algorithm and PyTorch's two policies on each distinct layer (the collector's protocol: bursts
behind a spinning kernel, so GPU time) and ``seer parse`` built the tidy table.

Per network, batch and math mode it totals, over every call, the measured time of: PyTorch's
default and ``cudnn.benchmark``, seer's recommendation and its unguarded pick (the GPU's
shipped models), and the oracle, the fastest measured algorithm or PyTorch's choice on each
layer, once among every algorithm seer ranks and once among cuDNN's only (what stock PyTorch
can run); a pick that did not run counts PyTorch's time (``benchmarks/guard.py``'s reading).

With ``--passes`` (``seer profile-network``'s ``overall.csv``), each network's whole forward
pass in GPU time under PyTorch's better policy (``F``, its ``forward_ms``) bounds what the
convolutions can give: ``(F - C + C_oracle) / F``, ``C`` being that policy's convolution
total, is the least share of PyTorch's pass that a per-layer choice among these algorithms
reaches, if the rest of the pass stays as it is and each layer takes in the pass what it takes
alone. Beside it, ``seer / PyTorch``: the pass seer's eager policy ran, measured the same way.
Writes ``oracle.csv`` (one row per network, batch and math) and ``oracle.md``; ``--plot`` draws
the bound beside seer's pass per network.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from guard import measured_times, per_layer  # noqa: E402  (the guard benchmark's own reading of the runs)
from network_wall import bar_panels  # noqa: E402

from seer.algorithms import algorithm_names  # noqa: E402
from seer.dataset.build import read_measurements  # noqa: E402
from seer.layers.files import read_layers  # noqa: E402
from seer.layers.shapes import LAYER_COLUMNS  # noqa: E402
from seer.predict.persist import load_model  # noqa: E402
from seer.schema import DatasetDir  # noqa: E402

#: Per-layer time columns of guard.per_layer that this benchmark totals.
TOTALS = ("pytorch", "pytorch_benchmark", "seer", "seer_unguarded", "oracle")


def layer_calls(folder: Path) -> pd.DataFrame:
    """Every convolution call of every layer file in ``folder``: network, batch and the layer columns."""
    frames = []
    for path in sorted(folder.glob("*.csv")):
        network, _, batch = path.stem.rpartition("-b")
        if not network or not batch.isdigit():
            raise SystemExit(f"{path}: the name is not NETWORK-bBATCH.csv")
        calls = read_layers(path)[list(LAYER_COLUMNS)]
        frames.append(calls.assign(network=network))
    if not frames:
        raise SystemExit(f"{folder}: no layer files")
    return pd.concat(frames, ignore_index=True)


def network_totals(calls: pd.DataFrame, times: pd.DataFrame, math: str, algorithms: str) -> pd.DataFrame:
    """Per (network, batch): the summed time of each of :data:`TOTALS` over every call (``times``:
    one row per layer, its columns and guard.per_layer's), and how many calls have no measured
    PyTorch time (left out of every total)."""
    layers = calls.merge(times.reset_index(drop=True), on=list(LAYER_COLUMNS), how="left")
    rows = []
    for (network, batch), members in layers.groupby(["network", "batch"]):
        timed = members[members["pytorch"].notna()]
        rows.append({"network": network, "batch": int(batch), "math": math, "algorithms": algorithms,
                     "calls": len(members), "untimed_calls": len(members) - len(timed),
                     "left_pytorch_calls": int(timed["left_pytorch"].sum()),
                     **{f"{c}_ms": float(timed[c].sum()) for c in TOTALS}})
    return pd.DataFrame(rows)


def with_passes(totals: pd.DataFrame, passes: pd.DataFrame) -> pd.DataFrame:
    """Adds the pass bound: PyTorch's better policy's pass GPU time (``forward_ms``), its
    convolutions' share of it, and (F - C + C_oracle) / F; and seer's measured pass ratio."""
    ok = passes[passes["status"] == "ok"]
    gpu = ok.pivot_table(index=["network", "batch", "math"], columns="policy", values="forward_ms")
    out = totals.join(gpu, on=["network", "batch", "math"])
    better = (out["benchmark"] < out["heuristic"]).to_numpy()
    out["pytorch_pass_ms"] = out[["heuristic", "benchmark"]].min(axis=1)
    conv = out["pytorch_benchmark_ms"].where(better, out["pytorch_ms"])
    out["conv_share"] = conv / out["pytorch_pass_ms"]
    out["oracle_pass_bound"] = (out["pytorch_pass_ms"] - conv + out["oracle_ms"]) / out["pytorch_pass_ms"]
    out["seer_pass_ratio"] = out["seer"] / out["pytorch_pass_ms"] if "seer" in out else float("nan")
    return out.drop(columns=[c for c in ("heuristic", "benchmark", "seer", "seer-graph") if c in out])


def markdown(table: pd.DataFrame, command: str) -> str:
    """Per (batch, math, algorithms): a row per network, and the median over networks."""
    parts = [f"`{command}`", ""]
    has_pass = "oracle_pass_bound" in table
    for (batch, math, algorithms), rows in table.groupby(["batch", "math", "algorithms"], sort=True):
        parts += [f"### batch {batch}, {math}, {'every algorithm' if algorithms == 'all' else 'cuDNN only'}", "",
                  "Convolution time summed over every call, as a ratio to the better of PyTorch's default and "
                  "`cudnn.benchmark` (GPU time, each layer alone)" + (
                      "; and the whole pass's GPU time: PyTorch's (ms), its convolutions' share, the oracle's "
                      "bound and seer's measured pass, as ratios to PyTorch's pass." if has_pass else "."), ""]
        head = "| network | calls | PyTorch conv ms | seer | seer unguarded | oracle |"
        if has_pass:
            head += " PyTorch pass ms | conv share | pass bound | seer pass |"
        parts += [head, "|" + "---|" * (head.count("|") - 1)]
        best = rows[["pytorch_ms", "pytorch_benchmark_ms"]].min(axis=1)
        ratios = rows.assign(seer_r=rows["seer_ms"] / best, unguarded_r=rows["seer_unguarded_ms"] / best,
                             oracle_r=rows["oracle_ms"] / best, best=best)
        for r in ratios.sort_values("network").itertuples():
            line = (f"| {r.network} | {r.calls - r.untimed_calls} of {r.calls} | {r.best:.3f} | {r.seer_r:.3f} | "
                    f"{r.unguarded_r:.3f} | {r.oracle_r:.3f} |")
            if has_pass:
                line += (f" {r.pytorch_pass_ms:.2f} | {r.conv_share:.2f} | {r.oracle_pass_bound:.3f} | "
                         f"{r.seer_pass_ratio:.3f} |")
            parts.append(line)
        median = f"| median | | | {ratios.seer_r.median():.3f} | {ratios.unguarded_r.median():.3f} | " \
                 f"{ratios.oracle_r.median():.3f} |"
        if has_pass:
            median += (f" | {ratios.conv_share.median():.2f} | {ratios.oracle_pass_bound.median():.3f} | "
                       f"{ratios.seer_pass_ratio.median():.3f} |")
        parts += [median, ""]
    return "\n".join(parts)


def plot(table: pd.DataFrame, path: Path) -> None:
    """One panel per (batch, math), every algorithm: per network, the oracle's bound on the pass
    and the pass seer's eager policy ran, as shares of PyTorch's pass in GPU time, beside the
    issue's 15% (:func:`network_wall.bar_panels`)."""
    bar_panels(table[table["algorithms"] == "all"],
               {"oracle's bound": "oracle_pass_bound", "seer's eager policy": "seer_pass_ratio"}, path,
               "pass GPU time / PyTorch's better policy", (0.5, 1.05),
               marks=((1.0, {}), (0.85, {"color": "grey", "ls": "--"})), legend="lower left")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder with layers/ and the GPU's dataset root")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--passes", type=Path, help="seer profile-network's overall.csv for the same networks")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, help="PNG of the pass bound beside seer's pass per network (needs --passes)")
    args = parser.parse_args(argv)
    calls = layer_calls(args.runs / "layers")
    model = load_model(args.gpu)
    table = read_measurements(DatasetDir(args.runs / args.gpu).measurements,
                              [*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms",
                               "heuristic_rank"], passes=("fwd",))
    policies = algorithm_names("pytorch", pass_="fwd")
    frames = []
    for math in model.maths:
        layers, wide, heuristic = measured_times(table, math, policies, split=None)
        for name, algorithms in (("all", None), ("cudnn", "cudnn")):
            times = per_layer(model, math, algorithms, layers, wide, heuristic, policies).join(layers)
            frames.append(network_totals(calls, times, math, name))
    result = pd.concat(frames, ignore_index=True)
    if args.passes is not None:
        result = with_passes(result, pd.read_csv(args.passes))
    args.out.mkdir(parents=True, exist_ok=True)
    result.to_csv(args.out / "oracle.csv", index=False, float_format="%.6g")
    command = "python benchmarks/network_oracle.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(result, command)
    if args.plot is not None and args.passes is not None:
        plot(result, args.plot)
    (args.out / "oracle.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
