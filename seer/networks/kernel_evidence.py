"""Which cuDNN algorithms could have launched a given set of kernels: proof that a forced algorithm ran.

cuDNN shares kernels between algorithms (a depthwise layer runs one grouped direct kernel
under GEMM, IMPLICIT_GEMM and IMPLICIT_PRECOMP_GEMM alike), so a kernel name does not
always name one algorithm. The evidence is what a GPU's dataset recorded: every kernel
that each algorithm launched there (``traced_kernels/``, CUPTI-demangled names).
A kernel seen in the dataset allows the algorithms that launched it; a kernel never seen
allows the algorithms that launched its family (the kernel rules of
:mod:`seer.algorithms`), and a family never seen allows any. The candidates of a call
are the algorithms every one of its kernels allows; PyTorch's own kernels around the call
(:data:`FRAMEWORK_KERNELS`) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from seer.algorithms import canonical_kernel_name, classify_kernel
from seer.dataset.tables import read_parts
from seer.schema import DatasetDir

#: Verdicts of :meth:`KernelEvidence.verify`, in the ``verified`` column of profiles.
VERDICTS = {
    "verified": "the kernels that ran are ones the forced algorithm launches",
    "mismatch": "a kernel that ran is never launched by the forced algorithm",
    "unknown_kernels": "no kernel that ran was ever seen in the dataset, nor its family",
    "no_kernels": "no kernel was traced",
}
#: Kernels of the framework around a convolution, not of a cuDNN algorithm: PyTorch's own
#: (``at::native``: the padding of a ``padding_mode``, the bias, copies). They are left out.
FRAMEWORK_KERNELS = re.compile(r"\bat::native::")


@dataclass(frozen=True)
class KernelEvidence:
    """Algorithms that launched each kernel name and each kernel family on one GPU."""

    by_name: dict[str, frozenset[str]]
    by_family: dict[str, frozenset[str]]

    @classmethod
    def from_traces(cls, traced: pd.DataFrame) -> "KernelEvidence":
        """From a frame with ``algo`` and ``kernel_name`` (a dataset's traced kernels)."""
        names = traced["kernel_name"].map(canonical_kernel_name)
        by_name = traced.groupby(names)["algo"].agg(frozenset).to_dict()
        families = names.map(lambda n: classify_kernel(n).family)
        by_family = traced.groupby(families)["algo"].agg(frozenset).to_dict()
        return cls(by_name, by_family)

    @classmethod
    def from_dataset(cls, dataset_dir: Path) -> "KernelEvidence":
        return cls.from_traces(read_parts(DatasetDir(dataset_dir).traced_kernels, columns=["algo", "kernel_name"]))

    def allowed(self, kernel_name: str) -> frozenset[str] | None:
        """Algorithms that launch this kernel; None where nothing is known of it."""
        name = canonical_kernel_name(kernel_name)
        if name in self.by_name:
            return self.by_name[name]
        return self.by_family.get(classify_kernel(name).family)

    def candidates(self, kernel_names: Iterable[str]) -> frozenset[str] | None:
        """Algorithms that could have launched all these kernels (PyTorch's own left out);
        None if none of them is known."""
        return self._allowed_by_all(_cudnn_kernels(kernel_names))

    def _allowed_by_all(self, kernel_names: Iterable[str]) -> frozenset[str] | None:
        result = None
        for name in kernel_names:
            allowed = self.allowed(name)
            if allowed is not None:
                result = allowed if result is None else result & allowed
        return result

    def verify(self, kernel_names: Iterable[str], algorithm: str) -> tuple[str, frozenset[str] | None]:
        """Verdict (a key of :data:`VERDICTS`) for ``algorithm`` having launched these kernels,
        and the candidates."""
        names = _cudnn_kernels(kernel_names)
        if not names:
            return "no_kernels", None
        candidates = self._allowed_by_all(names)
        if candidates is None:
            return "unknown_kernels", None
        return ("verified" if algorithm in candidates else "mismatch"), candidates


def _cudnn_kernels(kernel_names: Iterable[str]) -> list[str]:
    """The names that are not PyTorch's own (:data:`FRAMEWORK_KERNELS`)."""
    return [name for name in kernel_names if not FRAMEWORK_KERNELS.search(name)]
