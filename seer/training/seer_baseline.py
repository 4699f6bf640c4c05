"""SEER's model (Vamix/seer-performance-model, ``SEER_model/*.m``), reproduced as the baseline.

SEER predicts a kernel's time from the shape through a chain of fitted parts, trained on
profiled runs. Per algorithm, as its MATLAB code does:

1. a classification tree picks the kernel variant cuDNN launches, from
   ``[in_ch, in_width, out_ch, out_width, kernel_width, stride]`` (``ctree_kernel_algo*``);
2. per variant, a classification tree on those features plus the grid size labels the run
   compute-bound (FP32 utilisation >= 80%), else memory-bound (DRAM utilisation >= 80%),
   else under-utilised (``seer_train.m`` STEP0/1);
3. per variant, the static metric FP32 work per block is ``a*R^2*C + b`` (GEMM family) or
   ``a*ceil(C/8) + b`` (Winograd), fitted on relative error (``flop_func_*.m``); DRAM reads
   per block (as a ratio to ``R^2*C`` or ``C``) and writes per block come from regression
   trees on the shape, the grid size and ``R^2*C, R^2*C*K, Q^2*C*R^2`` (``fitrtree``);
4. the time, per class, is linear in fitted coefficients, fitted on relative error:
   compute ``T = w*(a*B*flop_blk + b)``, memory ``T = a*nb*(read_blk + write_blk) + b``,
   under-utilised ``T = a*nb*read_blk + d*nb*write_blk + b*w*B*flop_blk + c``, where ``nb``
   is the grid size, ``B`` = B_max (resident blocks per SM x SMs) and ``w = ceil(nb/B)``;
5. FFT and FFT_TILING have no metric model: ``T = a*C + b*C*K + c*K + d`` per input-width
   bucket (<=16, 32, 64, 128, 256), times ``ceil(Q/(32-R+1))^2`` tiles for FFT_TILING.

What differs, because SEER's constants belong to the Titan Xp and its cuDNN 7 kernels:
the grid size, which SEER computes from each variant's hard-coded tile, comes from a
regression tree per variant (log grid size on the shape, batch included); B_max comes,
as in SEER, from the occupancy calculator (:mod:`seer.hardware.occupancy`), applied to each
training run's launch configuration, and is the median over the variant's runs; variants
with fewer than ``min_variant_runs`` training runs are pooled per algorithm (cuDNN 9
launches many more main-kernel variants per algorithm than the two or three SEER saw);
utilisation is seer's achieved FLOP rate and DRAM bandwidth over their peaks (nvprof's
utilisation levels are gone). Which algorithms run on a shape is decided by the same
support decisions as seer's own model, so the two compare on time alone.

Fitting ends in :mod:`seer.predict.predictors` (``predictor_``), which holds SEER's prediction
steps and is what a model file stores.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.model_selection import GridSearchCV
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.utils.validation import check_is_fitted

from seer.hardware import occupancy
from seer.hardware.gpus import GPUSpec
from seer.predict.predictors import (COMPUTE, FFT_ALGOS, MEMORY, UNDER, WINOGRAD_ALGOS, SeerAlgorithmPredictor,
                                     SeerFamilyPredictor, SeerVariantPredictor, TreeClassifier, TreeRegressor,
                                     dram_features, fft_bucket, fft_design, grid_features, shape_block, time_design,
                                     variant_features)
from seer.predict.trees import from_decision_tree

#: Profile columns the fit needs besides the shape and the time.
PROFILE_COLUMNS = ("variant", "grid_blocks", "block_threads", "registers", "shared_mem_bytes", "flops",
                   "dram_read_bytes", "dram_write_bytes", "sm_util", "dram_util")


def relative_least_squares(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Coefficients minimising sum(((design @ c) - target) / target)^2, as MATLAB's
    ``nlinfit`` on SEER's models (linear in their coefficients) converges to."""
    coefficients, *_ = np.linalg.lstsq(design / target[:, None], np.ones(len(target)), rcond=None)
    return coefficients


def _fit_tree(classifier: bool, X: np.ndarray, y: np.ndarray):
    """SEER's trees: at most 64 splits, the minimum leaf size chosen by 5-fold CV.

    Only the refitted best tree is kept: the search itself need not be shipped.
    """
    n = len(X)
    base = (DecisionTreeClassifier if classifier else DecisionTreeRegressor)(max_leaf_nodes=65, random_state=0)
    leaves = [v for v in (1, 2, 5, 10, 20, 50) if v <= max(1, n // 4)]
    if n < 10 or len(leaves) < 2:
        return base.set_params(min_samples_leaf=1).fit(X, y)
    return GridSearchCV(base, {"min_samples_leaf": leaves}, cv=min(5, n // 2)).fit(X, y).best_estimator_


def _regressor(tree) -> TreeRegressor:
    return TreeRegressor(from_decision_tree(tree))


def _classifier(tree) -> TreeClassifier:
    return TreeClassifier(from_decision_tree(tree), [c.item() if hasattr(c, "item") else c for c in tree.classes_])


def blocks_per_sm(spec: GPUSpec, runs: pd.DataFrame) -> np.ndarray:
    """Resident blocks per SM of each run's main kernel, by the occupancy calculator."""
    return occupancy.blocks_per_sm(occupancy.occupancy_limits_array(
        spec, runs["block_threads"].to_numpy(), runs["registers"].to_numpy(), runs["shared_mem_bytes"].to_numpy()))


class SeerAlgorithmModel(BaseEstimator):
    """SEER's chain for one algorithm (see the module docstring).

    Parameters
    ----------
    algo : str
        cuDNN algorithm name; decides the FLOP form (GEMM or Winograd) or the FFT formula.
    gpu : GPUSpec
        The GPU, for B_max (resident blocks per SM x SMs).
    min_variant_runs : int, default=20
        Variants with fewer training runs are pooled as ``"other"``.
    """

    def __init__(self, algo: str = "IMPLICIT_GEMM", gpu: GPUSpec | None = None, min_variant_runs: int = 20) -> None:
        self.algo = algo
        self.gpu = gpu
        self.min_variant_runs = min_variant_runs

    def fit(self, X: pd.DataFrame, y) -> "SeerAlgorithmModel":
        """``X``: shape columns plus, except for FFT algorithms, :data:`PROFILE_COLUMNS`; ``y``: ms."""
        y = np.asarray(y, dtype=float)
        if self.algo in FFT_ALGOS:
            self.predictor_ = SeerAlgorithmPredictor(self.algo, fft_coefficients=self._fit_fft(X, y))
            return self
        if not isinstance(self.gpu, GPUSpec):
            raise ValueError(f"gpu must be a seer.hardware.gpus.GPUSpec, got {self.gpu!r}")
        variants = X["variant"].astype(str).to_numpy()
        counts = pd.Series(variants).value_counts()
        keep = set(counts[counts >= self.min_variant_runs].index)
        variants = np.where(np.isin(variants, list(keep)), variants, "other")
        names = sorted(set(variants))
        tree = _fit_tree(True, variant_features(X), variants) if len(names) > 1 else None
        self.predictor_ = SeerAlgorithmPredictor(
            self.algo, names, _classifier(tree) if tree is not None else None,
            {v: self._fit_variant(X[variants == v], y[variants == v]) for v in names})
        return self

    def _fit_fft(self, X: pd.DataFrame, y: np.ndarray) -> dict:
        s = shape_block(X)
        design = fft_design(s, self.algo)
        bucket = fft_bucket(s["W"])
        coefficients = {}
        for b in np.unique(bucket[bucket >= 0]):
            rows = bucket == b
            if rows.sum() >= design.shape[1]:
                coefficients[str(int(b))] = relative_least_squares(design[rows], y[rows])
        return coefficients

    def _fit_variant(self, X: pd.DataFrame, y: np.ndarray) -> SeerVariantPredictor:
        s = shape_block(X)
        winograd = self.algo in WINOGRAD_ALGOS
        blocks = X["grid_blocks"].to_numpy(float)
        # The median of the variant's runs, which may fall between two whole numbers.
        b_max = float(np.median(blocks_per_sm(self.gpu, X))) * self.gpu.sm_count
        flop_blk = X["flops"].to_numpy(float) / blocks
        read_blk = X["dram_read_bytes"].to_numpy(float) / blocks
        write_blk = X["dram_write_bytes"].to_numpy(float) / blocks
        read_scale = s["C"] if winograd else s["R"] ** 2 * s["C"]
        flop_term = np.ceil(s["C"] / 8) if winograd else s["R"] ** 2 * s["C"]
        labels = np.where(X["sm_util"] >= 0.8, COMPUTE, np.where(X["dram_util"] >= 0.8, MEMORY, UNDER))
        positive = flop_blk > 0
        class_tree = (_classifier(_fit_tree(True, np.column_stack([variant_features(X), blocks]), labels))
                      if len(set(labels)) > 1 else int(labels[0]))
        whole_waves = np.ceil(blocks / b_max)
        time_coefficients = {}
        for label in (COMPUTE, MEMORY, UNDER):
            rows = labels == label
            if rows.sum() < 4:
                # MATLAB keeps its starting coefficients (all ones) for a class without runs,
                # which turns bytes into milliseconds; here the class's form is fitted on all
                # of the variant's runs instead.
                rows = np.ones(len(labels), dtype=bool)
            design = time_design(label, whole_waves[rows], b_max, blocks[rows], flop_blk[rows], read_blk[rows],
                                 write_blk[rows])
            time_coefficients[str(label)] = relative_least_squares(design, y[rows])
        return SeerVariantPredictor(
            b_max=b_max,
            grid_tree=_regressor(_fit_tree(False, grid_features(X), np.log(blocks))),
            flop_coefficients=(relative_least_squares(np.column_stack([flop_term, np.ones_like(flop_term)])[positive],
                                                      flop_blk[positive]) if positive.sum() >= 2 else np.zeros(2)),
            read_tree=_regressor(_fit_tree(False, dram_features(X, blocks, winograd), read_blk / read_scale)),
            write_tree=_regressor(_fit_tree(False, dram_features(X, blocks, winograd), write_blk)),
            class_tree=class_tree, time_coefficients=time_coefficients)

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted time (ms) per shape; NaN where SEER's model has no answer."""
        check_is_fitted(self, "predictor_")
        return self.predictor_.predict(X)


class SeerFamily(BaseEstimator):
    """SEER's model for every algorithm of one math mode.

    ``fit(runs)`` takes the train split's rows of the measurements table for one math mode:
    FFT algorithms fit on every successful run, the others on the profiled ones.

    Parameters
    ----------
    gpu : GPUSpec
    min_variant_runs : int, default=20

    Attributes
    ----------
    algorithms_ : list of str
        Algorithms with a fitted model.
    predictor_ : SeerFamilyPredictor
    """

    def __init__(self, gpu: GPUSpec | None = None, min_variant_runs: int = 20) -> None:
        self.gpu = gpu
        self.min_variant_runs = min_variant_runs

    def fit(self, runs: pd.DataFrame, y=None) -> "SeerFamily":
        models = {}
        ok = runs[runs["status"] == "ok"]
        for algo, rows in ok.groupby("algo", sort=False):
            if algo not in FFT_ALGOS:
                rows = rows[rows["profile_status"] == "ok"].dropna(subset=list(PROFILE_COLUMNS))
                rows = rows[rows["grid_blocks"] > 0]
            if len(rows) < 10:
                continue
            model = SeerAlgorithmModel(str(algo), self.gpu, self.min_variant_runs)
            with warnings.catch_warnings():
                # Rare classes have fewer members than folds; the CV then simply has fewer of them.
                warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
                models[str(algo)] = model.fit(rows, rows["time_ms"]).predictor_
        self.algorithms_ = list(models)
        self.predictor_ = SeerFamilyPredictor(models)
        return self

    def predict_times(self, X: pd.DataFrame, algorithms) -> np.ndarray:
        """Times (ms) per shape for ``algorithms`` in that order (see
        :meth:`seer.predict.predictors.SeerFamilyPredictor.predict_times`)."""
        check_is_fitted(self, "predictor_")
        return self.predictor_.predict_times(X, algorithms)
