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
regression tree per variant (log grid size on the shape, batch included); B_max, which
SEER took from the occupancy calculator, is the median measured on the variant's runs;
variants with fewer than ``min_variant_runs`` training runs are pooled per algorithm
(cuDNN 9 on the H100 launches up to 46 main-kernel variants for one algorithm, SEER saw
two or three); utilisation is seer's achieved FLOP rate and DRAM bandwidth over their
peaks (nvprof's utilisation levels are gone). Which algorithms run on a shape is decided by
the same support decisions as seer's own model, so the two compare on time alone.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.model_selection import GridSearchCV
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.utils.validation import check_is_fitted

from seer.shapes import SEER_FIELDS

FFT_ALGOS = ("FFT", "FFT_TILING")
WINOGRAD_ALGOS = ("WINOGRAD", "WINOGRAD_NONFUSED")
FFT_WIDTH_BUCKETS = (16, 32, 64, 128, 256)
COMPUTE, MEMORY, UNDER = 0, 1, 2
#: Profile columns the fit needs besides the shape and the time.
PROFILE_COLUMNS = ("variant", "grid_blocks", "blocks_per_sm", "flops", "dram_read_bytes", "dram_write_bytes",
                   "sm_util", "dram_util")


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


def _shape_block(X: pd.DataFrame) -> dict[str, np.ndarray]:
    return {"N": X["batch"].to_numpy(float), "C": X["in_ch"].to_numpy(float), "W": X["in_width"].to_numpy(float),
            "K": X["out_ch"].to_numpy(float), "Q": X["out_width"].to_numpy(float),
            "R": X["kernel_width"].to_numpy(float), "S": X["stride"].to_numpy(float)}


def _variant_features(X: pd.DataFrame) -> np.ndarray:
    s = _shape_block(X)
    return np.column_stack([s["C"], s["W"], s["K"], s["Q"], s["R"], s["S"]])


def _grid_features(X: pd.DataFrame) -> np.ndarray:
    # SEER's grid formulas use N*Q^2 and K; with batch varying, the tree needs N too.
    s = _shape_block(X)
    return np.column_stack([_variant_features(X), s["N"], s["N"] * s["Q"] ** 2])


def _dram_features(X: pd.DataFrame, blocks: np.ndarray, winograd: bool) -> np.ndarray:
    s = _shape_block(X)
    base = _variant_features(X)
    if winograd:
        return base
    return np.column_stack([base, blocks, s["R"] ** 2 * s["C"], s["R"] ** 2 * s["C"] * s["K"],
                            s["Q"] ** 2 * s["C"] * s["R"] ** 2])


class SeerAlgorithmModel(BaseEstimator):
    """SEER's chain for one algorithm (see the module docstring).

    Parameters
    ----------
    algo : str
        cuDNN algorithm name; decides the FLOP form (GEMM or Winograd) or the FFT formula.
    sm_count : int, default=132
        SMs of the GPU, for B_max = resident blocks per SM x SMs.
    min_variant_runs : int, default=20
        Variants with fewer training runs are pooled as ``"other"``.
    """

    def __init__(self, algo: str = "IMPLICIT_GEMM", sm_count: int = 132, min_variant_runs: int = 20) -> None:
        self.algo = algo
        self.sm_count = sm_count
        self.min_variant_runs = min_variant_runs

    def fit(self, X: pd.DataFrame, y) -> "SeerAlgorithmModel":
        """``X``: shape columns plus, except for FFT algorithms, :data:`PROFILE_COLUMNS`; ``y``: ms."""
        y = np.asarray(y, dtype=float)
        if self.algo in FFT_ALGOS:
            return self._fit_fft(X, y)
        variants = X["variant"].astype(str).to_numpy()
        counts = pd.Series(variants).value_counts()
        keep = set(counts[counts >= self.min_variant_runs].index)
        variants = np.where(np.isin(variants, list(keep)), variants, "other")
        self.variants_ = sorted(set(variants))
        self.variant_tree_ = _fit_tree(True, _variant_features(X), variants) if len(self.variants_) > 1 else None
        self.parts_ = {v: self._fit_variant(X[variants == v], y[variants == v]) for v in self.variants_}
        return self

    def _fit_fft(self, X: pd.DataFrame, y: np.ndarray) -> "SeerAlgorithmModel":
        s = _shape_block(X)
        design = self._fft_design(s)
        bucket = self._fft_bucket(s["W"])
        self.fft_coefficients_ = {}
        for b in np.unique(bucket[bucket >= 0]):
            rows = bucket == b
            if rows.sum() >= design.shape[1]:
                self.fft_coefficients_[int(b)] = relative_least_squares(design[rows], y[rows])
        return self

    def _fft_design(self, s: dict) -> np.ndarray:
        design = np.column_stack([s["C"], s["C"] * s["K"], s["K"], np.ones_like(s["C"])])
        if self.algo == "FFT_TILING":
            design = design * (np.ceil(s["Q"] / np.maximum(32 - s["R"] + 1, 1)) ** 2)[:, None]
        return design

    @staticmethod
    def _fft_bucket(width: np.ndarray) -> np.ndarray:
        bucket = np.searchsorted(np.array(FFT_WIDTH_BUCKETS), width, side="left")
        return np.where(bucket < len(FFT_WIDTH_BUCKETS), bucket, -1)

    def _fit_variant(self, X: pd.DataFrame, y: np.ndarray) -> dict:
        s = _shape_block(X)
        winograd = self.algo in WINOGRAD_ALGOS
        blocks = X["grid_blocks"].to_numpy(float)
        b_max = float(np.median(X["blocks_per_sm"])) * self.sm_count
        flop_blk = X["flops"].to_numpy(float) / blocks
        read_blk = X["dram_read_bytes"].to_numpy(float) / blocks
        write_blk = X["dram_write_bytes"].to_numpy(float) / blocks
        read_scale = s["C"] if winograd else s["R"] ** 2 * s["C"]
        flop_term = np.ceil(s["C"] / 8) if winograd else s["R"] ** 2 * s["C"]
        labels = np.where(X["sm_util"] >= 0.8, COMPUTE, np.where(X["dram_util"] >= 0.8, MEMORY, UNDER))
        positive = flop_blk > 0
        part = {
            "b_max": b_max,
            "grid_tree": _fit_tree(False, _grid_features(X), np.log(blocks)),
            "flop_coefficients": relative_least_squares(np.column_stack([flop_term, np.ones_like(flop_term)])[positive],
                                                        flop_blk[positive]) if positive.sum() >= 2 else np.zeros(2),
            "read_tree": _fit_tree(False, _dram_features(X, blocks, winograd), read_blk / read_scale),
            "write_tree": _fit_tree(False, _dram_features(X, blocks, winograd), write_blk),
            "class_tree": (_fit_tree(True, np.column_stack([_variant_features(X), blocks]), labels)
                           if len(set(labels)) > 1 else int(labels[0])),
            "time_coefficients": {},
        }
        waves = np.ceil(blocks / b_max)
        for label in (COMPUTE, MEMORY, UNDER):
            rows = labels == label
            if rows.sum() < 4:
                # MATLAB keeps its starting coefficients (all ones) for a class without runs,
                # which turns bytes into milliseconds; here the class's form is fitted on all
                # of the variant's runs instead.
                rows = np.ones(len(labels), dtype=bool)
            design = self._time_design(label, waves[rows], b_max, blocks[rows], flop_blk[rows], read_blk[rows],
                                       write_blk[rows])
            part["time_coefficients"][label] = relative_least_squares(design, y[rows])
        return part

    @staticmethod
    def _time_design(label: int, waves, b_max, blocks, flop_blk, read_blk, write_blk) -> np.ndarray:
        if label == COMPUTE:
            return np.column_stack([waves * b_max * flop_blk, waves])
        if label == MEMORY:
            return np.column_stack([blocks * (read_blk + write_blk), np.ones_like(blocks)])
        return np.column_stack([blocks * read_blk, blocks * write_blk, waves * b_max * flop_blk, np.ones_like(blocks)])

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted time (ms) per shape; NaN where SEER's model has no answer (FFT beyond
        width 256 or a width bucket without training runs)."""
        X = X[list(SEER_FIELDS)].reset_index(drop=True)
        if self.algo in FFT_ALGOS:
            check_is_fitted(self, "fft_coefficients_")
            s = _shape_block(X)
            design, bucket = self._fft_design(s), self._fft_bucket(s["W"])
            out = np.full(len(X), np.nan)
            for b, coefficients in self.fft_coefficients_.items():
                rows = bucket == b
                out[rows] = design[rows] @ coefficients
            return out
        check_is_fitted(self, "parts_")
        variants = (self.variant_tree_.predict(_variant_features(X)) if self.variant_tree_ is not None
                    else np.full(len(X), self.variants_[0], dtype=object))
        out = np.full(len(X), np.nan)
        for variant, part in self.parts_.items():
            rows = variants == variant
            if rows.any():
                out[rows] = self._predict_variant(X[rows], part)
        return out

    def _predict_variant(self, X: pd.DataFrame, part: dict) -> np.ndarray:
        s = _shape_block(X)
        winograd = self.algo in WINOGRAD_ALGOS
        blocks = np.maximum(np.round(np.exp(part["grid_tree"].predict(_grid_features(X)))), 1)
        b_max = part["b_max"]
        waves = np.ceil(blocks / b_max)
        flop_term = np.ceil(s["C"] / 8) if winograd else s["R"] ** 2 * s["C"]
        flop_blk = np.column_stack([flop_term, np.ones_like(flop_term)]) @ part["flop_coefficients"]
        read_scale = s["C"] if winograd else s["R"] ** 2 * s["C"]
        features = _dram_features(X, blocks, winograd)
        read_blk = part["read_tree"].predict(features) * read_scale
        write_blk = part["write_tree"].predict(features)
        tree = part["class_tree"]
        labels = (tree.predict(np.column_stack([_variant_features(X), blocks])) if not isinstance(tree, int)
                  else np.full(len(X), tree))
        out = np.empty(len(X))
        for label, coefficients in part["time_coefficients"].items():
            rows = labels == label
            if rows.any():
                design = self._time_design(label, waves[rows], b_max, blocks[rows], flop_blk[rows], read_blk[rows],
                                           write_blk[rows])
                out[rows] = design @ coefficients
        return out


class SeerFamily(BaseEstimator):
    """SEER's model for every algorithm of one math mode.

    ``fit(runs)`` takes the train split's rows of the measurements table for one math mode:
    FFT algorithms fit on every successful run, the others on the profiled ones.

    Parameters
    ----------
    sm_count : int, default=132
    min_variant_runs : int, default=20

    Attributes
    ----------
    algorithms_ : list of str
        Algorithms with a fitted model.
    models_ : dict of str to SeerAlgorithmModel
    """

    def __init__(self, sm_count: int = 132, min_variant_runs: int = 20) -> None:
        self.sm_count = sm_count
        self.min_variant_runs = min_variant_runs

    def fit(self, runs: pd.DataFrame, y=None) -> "SeerFamily":
        self.models_ = {}
        ok = runs[runs["status"] == "ok"]
        for algo, rows in ok.groupby("algo", sort=False):
            if algo not in FFT_ALGOS:
                rows = rows[rows["profile_status"] == "ok"].dropna(subset=list(PROFILE_COLUMNS))
                rows = rows[(rows["grid_blocks"] > 0) & (rows["blocks_per_sm"] > 0)]
            if len(rows) < 10:
                continue
            model = SeerAlgorithmModel(str(algo), self.sm_count, self.min_variant_runs)
            with warnings.catch_warnings():
                # Rare classes have fewer members than folds; the CV then simply has fewer of them.
                warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
                self.models_[str(algo)] = model.fit(rows, rows["time_ms"])
        self.algorithms_ = list(self.models_)
        return self

    def predict_times(self, X: pd.DataFrame, algorithms) -> np.ndarray:
        """Times (ms) per shape for ``algorithms`` in that order; NaN where SEER has no model
        or no answer. A linear form can go negative far from its data; a time cannot, so
        predictions are floored at 1 microsecond."""
        check_is_fitted(self, "models_")
        out = np.full((len(X), len(algorithms)), np.nan)
        for j, algo in enumerate(algorithms):
            if algo in self.models_:
                out[:, j] = self.models_[algo].predict(X)
        return np.where(np.isfinite(out), np.maximum(out, 1e-3), np.nan)
