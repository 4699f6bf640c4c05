"""Where an eager forward pass spends its host time, module by module: a network as PyTorch
runs it against the same network with seer's convolutions swapped in (GPU).

    python benchmarks/network_host_cost.py densenet121 --batch 32 --math fma --gpu h200 \
        --out benchmarks/results/h200-network-host-cost/densenet121-b32-fma.json
    python benchmarks/network_host_cost.py resnet50 --batch 1 --force FFT_TILING,GEMM --out ...

``benchmarks/host_cost.py`` times one module called again and again; this times passes of a
whole network, as a user's network calls its modules. The host's clock is read around each
pass (the GPU idle at its start and synchronized only after, so the host never waits for it:
a pass launches fewer kernels than the launch queue holds), and, in a second round of passes,
around every leaf module (a forward pre-hook and a forward hook), summed per pass by kind:
PyTorch's convolutions, seer's swapped ones by algorithm, each other module type, and the
rest (the model's own code between its modules). The models take turns pass by pass, so that
the host's drift falls on all alike, and carry the same hooks. Medians over ``--passes``.

The swapped model is ``seer.torch.apply``'s, with the per-layer guard only (no
``input_shape``: no weighing of the whole pass, no confirmation, so that its picks are there
to be timed); with ``--force``, one model per algorithm, that algorithm forced on every layer
that it runs. ``extra_us_per_swapped_call`` is the pass's host time beyond PyTorch's, per call
that ran a seer algorithm.

    python benchmarks/network_host_cost.py --summary benchmarks/results/h200-network-host-cost \
        --out benchmarks/results/h200-network-host-cost/summary.md

tabulates the forced runs per algorithm, beside the calls timed alone and what the guard counts.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path


def leaf_modules(model) -> dict:
    return {name: m for name, m in model.named_modules() if not any(True for _ in m.children())}


def module_kind(module) -> str:
    """A leaf module's kind: ``seer <ALGORITHM>`` for a seer convolution that ran its pick,
    ``conv`` for a convolution PyTorch ran, else the module's class name."""
    from seer.torch.convolution import PYTORCH, _SeerConv

    if isinstance(module, _SeerConv):
        algo = module.last_algorithm
        return "conv" if algo in (None, PYTORCH) else f"seer {algo}"
    if type(module).__name__.startswith("Conv"):
        return "conv"
    return type(module).__name__


def _hooks(model, spent: dict) -> list:
    """Hooks on every leaf module of ``model`` that add each call's host seconds to ``spent``."""
    started: dict[str, float] = {}

    def before(name):
        def hook(module, args):
            started[name] = time.perf_counter()
        return hook

    def after(name):
        def hook(module, args, output):
            spent[name] += time.perf_counter() - started[name]
        return hook

    leaves = leaf_modules(model)
    return ([m.register_forward_pre_hook(before(n)) for n, m in leaves.items()]
            + [m.register_forward_hook(after(n)) for n, m in leaves.items()])


def _pass_host_s(torch, model, x) -> float:
    """Host seconds to enqueue one pass of ``model``, the GPU idle at its start."""
    torch.cuda.synchronize()
    begin = time.perf_counter()
    model(x)
    seconds = time.perf_counter() - begin
    torch.cuda.synchronize()
    return seconds


def host_breakdown(torch, models: dict, x, passes: int) -> dict:
    """Per model (by label): the median host ms of a plain pass; of a pass with hooks; and, by
    kind of leaf module, calls per pass, ms per pass and us per call, with the rest."""
    plain, hooked = defaultdict(list), defaultdict(list)
    per_kind = {label: defaultdict(list) for label in models}
    spent = {label: defaultdict(float) for label in models}
    with torch.no_grad():
        for model in models.values():
            for _ in range(3):
                model(x)
        # After a call, each seer convolution knows what ran it.
        kinds = {label: {n: module_kind(m) for n, m in leaf_modules(model).items()} for label, model in models.items()}
        for _ in range(passes):
            for label, model in models.items():
                plain[label].append(_pass_host_s(torch, model, x))
        handles = [h for label, model in models.items() for h in _hooks(model, spent[label])]
        try:
            for _ in range(passes):
                for label, model in models.items():
                    spent[label].clear()
                    hooked[label].append(_pass_host_s(torch, model, x))
                    summed = defaultdict(float)
                    for name, seconds in spent[label].items():
                        summed[kinds[label][name]] += seconds
                    for kind in set(kinds[label].values()):
                        per_kind[label][kind].append(summed.get(kind, 0.0))
        finally:
            for handle in handles:
                handle.remove()
    out = {}
    for label in models:
        calls = defaultdict(int)
        for kind in kinds[label].values():
            calls[kind] += 1
        rows = {kind: {"modules": calls[kind], "host_ms": round(1e3 * statistics.median(v), 3),
                       "host_us_per_module": round(1e6 * statistics.median(v) / calls[kind], 2)}
                for kind, v in sorted(per_kind[label].items())}
        total = statistics.median(hooked[label])
        inside = sum(statistics.median(v) for v in per_kind[label].values())
        out[label] = {"pass_host_ms": round(1e3 * statistics.median(plain[label]), 3),
                      "hooked_pass_host_ms": round(1e3 * total, 3), "leaf_host_ms": round(1e3 * inside, 3),
                      "rest_host_ms": round(1e3 * (total - inside), 3), "kinds": rows}
    return out


#: A convolution PyTorch ran (a fallback of a forced model) that took this long on the host waited
#: on the GPU: that pass's host time is not the host's alone.
WAITED_US = 500.0


def summarize(folder: Path) -> str:
    """A markdown table, per forced algorithm, over the ``forced-*.json`` files in ``folder``: what
    a swapped call adds to a pass's host time in each network, the median, the swapped module's
    own host time per call against PyTorch's, the same alone (``layers-*.json`` of
    ``benchmarks/host_cost.py --layers``: the median over layers) and what the guard counts
    (:func:`seer.torch.convolution.extra_host_ms`, on a 3x3 layer)."""
    from seer.layers.shapes import ConvShape
    from seer.torch.convolution import extra_host_ms

    runs = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("forced-*.json"))}
    alone = {}
    for path in sorted(folder.glob("layers-*.json")):
        for algo, row in json.loads(path.read_text())["summary"].items():
            alone.setdefault(algo, []).append(row.get("extra_us_median"))
    algos = list(dict.fromkeys(label.removeprefix("forced ") for run in runs.values() for label in run["models"]
                               if label != "pytorch"))
    names = [run["network"] for run in runs.values()]
    layer = ConvShape.square(1, 64, 56, 64, 3, padding=1)
    lines = ["| algorithm | " + " | ".join(f"{n}: us more per call" for n in names)
             + " | median | its module, us per call (median) | PyTorch's, us per call | alone: us more (median) "
             "| guard counts, us |", "|---" * (len(names) + 6) + "|"]
    for algo in algos:
        extras, modules, pytorch = [], [], []
        for run in runs.values():
            r = run["models"].get(f"forced {algo}")
            conv = r["kinds"].get("conv") if r else None
            if r is None or r["extra_us_per_swapped_call"] is None or (conv and conv["host_us_per_module"] > WAITED_US):
                extras.append(None)
                continue
            extras.append(r["extra_us_per_swapped_call"])
            modules.append(r["kinds"][f"seer {algo}"]["host_us_per_module"])
            pytorch.append(run["models"]["pytorch"]["kinds"]["conv"]["host_us_per_module"])
        known = [e for e in extras if e is not None]
        cells = ["waited" if e is None else f"{e:.1f}" for e in extras]
        median = f"{statistics.median(known):.1f}" if known else "-"
        own = f"{statistics.median(modules):.1f}" if modules else "-"
        theirs = f"{statistics.median(pytorch):.1f}" if pytorch else "-"
        solo = [v for v in alone.get(algo, []) if v is not None]
        lines.append(f"| {algo} | " + " | ".join(cells) + f" | {median} | {own} | {theirs} | "
                     + (f"{statistics.median(solo):.1f}" if solo else "-")
                     + f" | {1e3 * extra_host_ms(algo, layer, 'fma'):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("network", nargs="?", help="a torchvision model name")
    parser.add_argument("--summary", type=Path, metavar="FOLDER",
                        help="instead: the table of the forced-*.json and layers-*.json files in FOLDER")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--math", default="fma")
    parser.add_argument("--gpu", default="h200", help="whose models pick")
    parser.add_argument("--algorithms", default="cudnn", help="what apply picks among (cudnn or all)")
    parser.add_argument("--force", help="instead of apply's picks, each of these algorithms (comma-separated) "
                                        "forced on every layer, each model against PyTorch's")
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.summary:
        text = summarize(args.summary)
        if args.out:
            args.out.write_text(text)
        else:
            print(text, end="")
        return 0
    if not args.network:
        parser.error("name a network (or --summary FOLDER)")

    import torch

    from seer.gpu.pytorch_policy import pytorch_flags
    from seer.torch import apply, force
    from seer.torch.layers import build_model

    command = "python benchmarks/network_host_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    model = build_model(args.network, device="cuda").eval()
    x = torch.randn(args.batch, 3, args.size, args.size, device="cuda")
    result = {"network": args.network, "batch": args.batch, "size": args.size, "math": args.math, "gpu": args.gpu,
              "algorithms": args.algorithms, "passes": args.passes, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "python": platform.python_version(), "command": command}
    with pytorch_flags(False, args.math), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy call's warning, fallbacks: the kinds say what ran
        models = {"pytorch": model}
        if args.force:
            for algo in args.force.split(","):
                models[f"forced {algo}"] = force(copy.deepcopy(model), algo, math=args.math)
        else:
            models["seer"] = apply(copy.deepcopy(model), gpu=args.gpu, math=args.math, algorithms=args.algorithms)
        result["models"] = host_breakdown(torch, models, x, args.passes)
    base = result["models"]["pytorch"]["pass_host_ms"]
    for label, r in result["models"].items():
        swapped = sum(row["modules"] for kind, row in r["kinds"].items() if kind.startswith("seer "))
        r["swapped_calls"] = swapped
        r["extra_us_per_swapped_call"] = round(1e3 * (r["pass_host_ms"] - base) / swapped, 2) if swapped else None
        print(f"{label}: pass {r['pass_host_ms']:.2f} ms (hooked {r['hooked_pass_host_ms']:.2f}; modules "
              f"{r['leaf_host_ms']:.2f}, rest {r['rest_host_ms']:.2f}); {swapped} swapped calls, "
              f"{r['extra_us_per_swapped_call']} us more each", flush=True)
        for kind, row in r["kinds"].items():
            print(f"  {kind:32s} {row['modules']:4d} modules {row['host_ms']:8.3f} ms "
                  f"{row['host_us_per_module']:8.2f} us each")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
