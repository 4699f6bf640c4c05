"""Record every Conv2d call of torchvision's models, for tests/test_networks.py.

    python tests/data/capture_torchvision_convs.py > tests/data/torchvision-convs.json

The committed capture was made on the device machine, whose PyTorch and torchvision it
records (the CPU machines have no torchvision build).

Runs each model (random weights, no download) on a zero image of batch 2 at the widths
the test checks, and records per Conv2d call its module name, input and output shapes,
kernel size, stride, padding, dilation and groups. The test compares seer's network
tables with this capture, so it needs neither PyTorch nor torchvision.
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import datetime, timezone

import torch
import torchvision

BATCH = 2
#: Constructor arguments that make a model buildable without weights and without aux heads.
KWARGS = {
    "resnet50": {}, "resnet152": {}, "vgg16": {}, "vgg19": {}, "densenet121": {},
    "alexnet": {}, "resnet18": {}, "squeezenet1_1": {},
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
}
#: Input widths besides each model's default (None): odd sizes exercise the rounding rules.
CASES = [(name, None) for name in KWARGS] + [
    ("resnet50", 257), ("resnet18", 193), ("vgg16", 250), ("alexnet", 227),
    ("densenet121", 257), ("googlenet", 193), ("googlenet", 250),
    ("squeezenet1_1", 257), ("inception_v3", 341),
]
#: torchvision's default input width per model (299 for Inception-v3).
DEFAULT_WIDTH = {"inception_v3": 299}


def capture(name: str, width: int) -> list[dict]:
    model = getattr(torchvision.models, name)(weights=None, **KWARGS[name]).eval()
    calls: list[dict] = []

    def hook(module_name):
        def record(module, inputs, output):
            calls.append({"module": module_name, "input": list(inputs[0].shape), "output": list(output.shape),
                          "kernel": list(module.kernel_size), "stride": list(module.stride),
                          "padding": list(module.padding), "dilation": list(module.dilation), "groups": module.groups})
        return record

    for module_name, module in model.named_modules():
        if isinstance(module, torch.nn.Conv2d):
            module.register_forward_hook(hook(module_name))
    with torch.no_grad():
        model(torch.zeros(BATCH, 3, width, width))
    return calls


def main() -> int:
    cases = []
    for name, width in CASES:
        used = width or DEFAULT_WIDTH.get(name, 224)
        cases.append({"network": name, "width": width, "image_width": used, "batch": BATCH,
                      "convs": capture(name, used)})
    document = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                "python": platform.python_version(),
                "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": "python tests/data/capture_torchvision_convs.py", "cases": cases}
    # Compact, one conv call per line: small, and diffs show which call changed.
    text = json.dumps(document, separators=(",", ":")).replace('{"module"', '\n{"module"')
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
