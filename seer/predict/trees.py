"""Decision-tree ensembles as seer's own arrays, and the compiled loop that evaluates them.

Every tree seer predicts with, boosted or single, is stored in one :class:`TreeEnsemble`:
plain arrays, documented below, that a model file holds as they are. Reading them needs
numpy alone and builds no object of any other library, so a model loads whatever
scikit-learn version is installed, or none. Evaluation walks the trees in a compiled loop
(built by llvmlite, numba's compiler, at first use; numba's where that fails), since every
layer walks every tree and no numpy expression does that at compiled speed: tree by tree
over blocks of :data:`BLOCK_ROWS` samples (a tree and a block's rows stay in cache), the
blocks spread over ``NUMBA_NUM_THREADS`` threads, the caller's among them (by default one per
CPU; :func:`thread_count`), each running the loop without Python's lock. The samples are
walked in the order given: a caller with many gives them sorted by the features the trees
split on first (:meth:`TreeEnsemble.root_features`; ``seer predict`` does, through
:meth:`seer.predict.predictors.AlgorithmPredictor.walk_order`), so that neighbours take much
the same paths and the processor guesses one walk's branches from the last. Each sample's
output is the same whatever the order.

Layout (``n`` nodes of all trees, ``t`` trees):

``feature`` (int32, n)
    The feature an internal node splits on.
``threshold`` (float64, n)
    A sample goes to the left child if its feature is ``<= threshold``, to the right one
    if it is ``>``; a missing (NaN) value goes where ``missing_left`` says.
``left`` (int32, n)
    The left child's index; the right child is ``left + 1``. ``-1`` marks a leaf. Every
    child comes after its parent, inside its own tree, so a walk always ends.
``missing_left`` (bool, n)
``value`` (float64, n)
    What a leaf adds to its tree's output (0 for internal nodes).
``roots`` (int32, t)
    The first node of each tree; a tree's nodes are contiguous and the trees follow one
    another, so ``roots[0] == 0``.
``output`` (int32, t)
    The output column each tree adds to (boosted classifiers grow one tree per class).
``base`` (float64, outputs)
    Every output's starting value (a boosted model's baseline prediction).

The raw prediction is ``base`` plus, tree after tree in order, each tree's leaf value,
the same additions in the same order as scikit-learn's, so a converted model gives the
same numbers.

:func:`from_hist_gradient_boosting` and :func:`from_decision_tree` convert fitted
scikit-learn models; the first reads the trees of ``HistGradientBoosting*``, which that
library keeps in private attributes, so it checks their fields and names the version it
cannot read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

#: Fields of the arrays, their dtypes and lengths ("nodes", "trees" or "outputs").
ARRAYS: dict[str, tuple[type, str]] = {
    "feature": (np.int32, "nodes"), "threshold": (np.float64, "nodes"), "left": (np.int32, "nodes"),
    "missing_left": (np.bool_, "nodes"), "value": (np.float64, "nodes"), "roots": (np.int32, "trees"),
    "output": (np.int32, "trees"), "base": (np.float64, "outputs"),
}
#: Bits of the packed node word the compiled loop reads (see ``_pack``).
_FEATURE_BITS, _CHILD_SHIFT = 16, 17
#: Samples every tree walks before the next tree does (see the module docstring), and the
#: work one thread takes at a time. Smaller blocks re-read every tree more often; larger ones
#: leave the cache. On the 2-core machine's 10,000-layer benchmark 256, 512 and 1,024 took the
#: same time, 10% less than the 156 of the loop before.
BLOCK_ROWS = 512


class TreeError(ValueError):
    """Arrays that do not form valid trees (a damaged or hand-made model file)."""


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Trees over ``n_features`` inputs adding up to ``len(base)`` outputs (see the module docstring)."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    missing_left: np.ndarray
    value: np.ndarray
    roots: np.ndarray
    output: np.ndarray
    base: np.ndarray
    n_features: int

    def __post_init__(self) -> None:
        self._check()
        # What the loop reads, in C order whatever the caller's arrays are: it walks raw memory.
        object.__setattr__(self, "_loop_arrays", (
            _pack(self.feature, self.left, self.missing_left), *(np.ascontiguousarray(getattr(self, name))
                                                                 for name in ("threshold", "value", "roots", "output"))))

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    @property
    def n_outputs(self) -> int:
        return len(self.base)

    def _check(self) -> None:
        if isinstance(self.n_features, bool) or not isinstance(self.n_features, int) \
                or not 0 < self.n_features < 2**_FEATURE_BITS:
            raise TreeError(f"n_features must be an integer in 1..{2**_FEATURE_BITS - 1}, got {self.n_features!r}")
        lengths = {"nodes": len(self.feature) if isinstance(self.feature, np.ndarray) else -1,
                   "trees": len(self.roots) if isinstance(self.roots, np.ndarray) else -1,
                   "outputs": len(self.base) if isinstance(self.base, np.ndarray) else -1}
        for name, (dtype, length) in ARRAYS.items():
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != 1:
                raise TreeError(f"{name} must be a 1-D {np.dtype(dtype).name} array")
            if len(array) != lengths[length]:
                raise TreeError(f"{name} has {len(array)} entries, expected one per {length[:-1]} ({lengths[length]})")
        n, trees = lengths["nodes"], lengths["trees"]
        if trees == 0 or n == 0 or lengths["outputs"] == 0:
            raise TreeError("an ensemble needs at least one tree, one node and one output")
        if self.roots[0] != 0 or np.any(np.diff(self.roots) <= 0) or self.roots[-1] >= n:
            raise TreeError("roots must start at 0 and increase, each tree holding at least one node")
        if np.any((self.output < 0) | (self.output >= lengths["outputs"])):
            raise TreeError("output names a column the ensemble does not have")
        # Each node's tree ends where the next tree starts: a child must lie after its
        # parent and before that end, so that every walk moves forward and stops.
        # Each test runs over every node, masked, rather than over the internal nodes picked
        # out: a model's 35 ensembles load in half the time (picking copies every array).
        ends = np.append(self.roots[1:], n)[self._tree_of_nodes()]
        internal = self.left >= 0
        if np.any(~internal & (self.left != -1)):
            raise TreeError("left must be -1 at leaves and a node index elsewhere")
        # ends - 1, not left + 1: left may be the largest int32
        if np.any(internal & ((self.left <= np.arange(n)) | (self.left >= ends - 1))):
            raise TreeError("a child lies outside its tree or before its parent")
        if np.any(internal & ((self.feature < 0) | (self.feature >= self.n_features))):
            raise TreeError("a split names a feature the ensemble does not have")

    def _tree_of_nodes(self) -> np.ndarray:
        """The index of each node's tree (``roots`` start and order the trees): each tree's index
        repeated over its nodes, a tenth of the time of a search per node."""
        return np.repeat(np.arange(len(self.roots)), np.diff(np.append(self.roots, len(self.left))))

    def root_features(self) -> np.ndarray:
        """The feature each tree splits on first, in tree order (a tree of one leaf splits nothing
        and is left out)."""
        return self.feature[self.roots[self.left[self.roots] >= 0]]

    def output_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The least and greatest value each output can take: ``base`` plus, per tree, its
        least or greatest leaf (without evaluating anything)."""
        leaves = self.left < 0
        # Per tree (its nodes are contiguous, from its root), the least and greatest of its
        # leaves, internal nodes left out as infinities: exact, as a minimum is.
        low = np.minimum.reduceat(np.where(leaves, self.value, np.inf), self.roots)
        high = np.maximum.reduceat(np.where(leaves, self.value, -np.inf), self.roots)
        low_out, high_out = self.base.copy(), self.base.copy()
        with np.errstate(over="ignore", invalid="ignore"):  # huge leaves: the bound is infinite
            np.add.at(low_out, self.output, low)
            np.add.at(high_out, self.output, high)
        return low_out, high_out

    def raw(self, X: np.ndarray) -> np.ndarray:
        """The raw outputs, shape (n_samples, n_outputs): ``base`` plus the leaf values reached."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"expected {self.n_features} features, got an array of shape {X.shape}")
        # Read-only, whatever the caller's array is: numba compiles a read-only array apart, and
        # one compiled loop then serves every caller (a frame's values are read-only).
        X = X.view()
        X.flags.writeable = False
        out = np.empty((len(X), self.n_outputs))
        out[:] = self.base
        if len(X):
            _walk(X, self._loop_arrays, out)
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays of the module docstring, by name."""
        return {name: getattr(self, name) for name in ARRAYS}


def _pack(feature: np.ndarray, left: np.ndarray, missing_left: np.ndarray) -> np.ndarray:
    """One int64 word per node for the loop: child index, missing direction, feature; -1 at leaves."""
    packed = ((left.astype(np.int64) << _CHILD_SHIFT) | (missing_left.astype(np.int64) << _FEATURE_BITS)
              | feature.astype(np.int64))
    return np.where(left < 0, np.int64(-1), packed)


def _walk(X: np.ndarray, trees: tuple, out: np.ndarray) -> None:
    """Every tree over every row of ``X``, block by block: this thread and the
    pool's each take the next block left until none is (one hand-over per thread and call,
    not one per block)."""
    evaluate = _evaluate()
    n = len(X)
    starts = iter(range(0, n, BLOCK_ROWS))  # shared: taking the next start is one step under Python's lock

    def walk_blocks() -> None:
        for start in starts:
            evaluate(X, *trees, out, start, min(n, start + BLOCK_ROWS))

    pool, workers = _threads() if n > BLOCK_ROWS else (None, 0)
    helpers = [pool.submit(walk_blocks) for _ in range(workers)]
    try:
        walk_blocks()
    finally:
        for helper in helpers:
            if not helper.cancel():  # one that has not started finds no block left: no need to wait for it
                helper.result()  # raises a helper's exception here


_COMPILED = None
_POOL: tuple[int, object, int] | None = None  # (the process that made it, the pool, its threads)
#: Which loop walks the trees: "llvm" (built with llvmlite at first use), "numba" (the same
#: loop compiled by numba), or "auto" (llvm, else numba). Both give the same bits.
LOOP_ENV = "SEER_TREE_LOOP"


def thread_count() -> int:
    """Threads that walk blocks: ``NUMBA_NUM_THREADS`` where set, else the CPUs this process may
    use (numba's own default), read without importing numba."""
    value = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def _threads() -> tuple[object, int]:
    """The pool of threads that walk blocks beside the caller's, and how many it has
    (:func:`thread_count` less one; no pool for none). A process forked from one with a pool
    makes its own (the parent's threads are not its)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        helpers = thread_count() - 1
        _POOL = (os.getpid(), ThreadPoolExecutor(helpers, thread_name_prefix="seer-trees") if helpers else None,
                 helpers)
    return _POOL[1], _POOL[2]


def _evaluate():
    """The compiled loop, built at first use (see :data:`LOOP_ENV`)."""
    global _COMPILED
    if _COMPILED is None:
        choice = os.environ.get(LOOP_ENV, "auto")
        loop = None
        if choice != "numba":
            try:
                loop = _llvm_loop()
            except Exception:  # noqa: BLE001 - no llvmlite, or one that cannot build it: numba's
                if choice == "llvm":
                    raise
        _COMPILED = loop or _numba_loop()
    return _COMPILED


def _numba_loop():
    """The loop compiled by numba (cached on disk). Loading it costs 0.3 s: numba's whole CPU
    target, whose BLAS check imports scipy.linalg."""
    import numba

    def evaluate(X, packed, threshold, value, roots, output, out, start, stop):
        # Tree by tree over the block's samples: one tree's nodes stay in cache.
        for t in range(roots.shape[0]):
            root, column = roots[t], output[t]
            for i in range(start, stop):
                k = root
                word = packed[k]
                while word >= 0:
                    x = X[i, word & 0xFFFF]
                    child = word >> 17
                    if x <= threshold[k]:
                        k = child
                    elif x > threshold[k]:
                        k = child + 1
                    elif (word >> 16) & 1:
                        k = child
                    else:
                        k = child + 1
                    word = packed[k]
                out[i, column] += value[k]

    options = dict(nogil=True)  # threads walk blocks side by side (_walk)
    try:
        return numba.njit(cache=True, **options)(evaluate)
    except RuntimeError:  # no writable cache location: compile in this process only
        return numba.njit(**options)(evaluate)


#: :func:`_numba_loop`'s loop in LLVM's language, for llvmlite (numba's own compiler). Built
#: with it, the loop is ready in 0.05 s, where numba's cached one takes 0.4 s to load, and it
#: walks about 15% faster (the 10,000-layer benchmark's trees, one thread). The arithmetic is
#: the same: the same comparisons, and each leaf value added to ``out`` in tree order.
_LOOP_IR = """
define void @walk(ptr noalias %X, i64 %nf, ptr noalias %packed, ptr noalias %thr,
                  ptr noalias %val, ptr noalias %roots, ptr noalias %outcol, i64 %nt, ptr noalias %out,
                  i64 %no, i64 %start, i64 %stop) {
entry:
  %empty = icmp sge i64 %start, %stop
  %notrees = icmp sle i64 %nt, 0
  %skip = or i1 %empty, %notrees
  br i1 %skip, label %done, label %tree
tree:                                           ; t: the tree
  %t = phi i64 [0, %entry], [%t1, %tree_end]
  %rp = getelementptr i32, ptr %roots, i64 %t
  %r32 = load i32, ptr %rp
  %root = sext i32 %r32 to i64
  %cp = getelementptr i32, ptr %outcol, i64 %t
  %c32 = load i32, ptr %cp
  %col = sext i32 %c32 to i64
  %rwp = getelementptr i64, ptr %packed, i64 %root
  %rootword = load i64, ptr %rwp
  br label %row
row:                                            ; i: the row
  %i = phi i64 [%start, %tree], [%i1, %leaf]
  %xoff = mul i64 %i, %nf
  %xrow = getelementptr double, ptr %X, i64 %xoff
  br label %check
check:                                          ; k: the node, word: packed[k]
  %k = phi i64 [%root, %row], [%knext, %advance]
  %word = phi i64 [%rootword, %row], [%wnext, %advance]
  %isleaf = icmp slt i64 %word, 0
  br i1 %isleaf, label %leaf, label %node
node:
  %f = and i64 %word, 65535
  %xp = getelementptr double, ptr %xrow, i64 %f
  %x = load double, ptr %xp
  %tp = getelementptr double, ptr %thr, i64 %k
  %th = load double, ptr %tp
  %child = ashr i64 %word, 17
  %childr = add i64 %child, 1
  %le = fcmp ole double %x, %th
  br i1 %le, label %goleft, label %notle
notle:
  %gt = fcmp ogt double %x, %th
  br i1 %gt, label %goright, label %missing
missing:                                        ; NaN: the side the missing bit names
  %mb = and i64 %word, 65536
  %ml = icmp ne i64 %mb, 0
  br i1 %ml, label %goleft, label %goright
goleft:
  br label %advance
goright:
  br label %advance
advance:
  %knext = phi i64 [%child, %goleft], [%childr, %goright]
  %wp = getelementptr i64, ptr %packed, i64 %knext
  %wnext = load i64, ptr %wp
  br label %check
leaf:
  %vp = getelementptr double, ptr %val, i64 %k
  %v = load double, ptr %vp
  %orow = mul i64 %i, %no
  %oidx = add i64 %orow, %col
  %op = getelementptr double, ptr %out, i64 %oidx
  %o = load double, ptr %op
  %s = fadd double %o, %v
  store double %s, ptr %op
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %stop
  br i1 %more, label %row, label %tree_end
tree_end:
  %t1 = add i64 %t, 1
  %moret = icmp slt i64 %t1, %nt
  br i1 %moret, label %tree, label %done
done:
  ret void
}
"""
_LLVM_KEEP: list = []  # the engine that holds the machine code lives as long as the process


def _llvm_loop():
    """:data:`_LOOP_IR` compiled for this CPU by llvmlite, called through ctypes (which lets
    go of Python's lock during the call, so blocks walk side by side). Its arguments are the
    numba loop's; the arrays are the ones :meth:`TreeEnsemble.raw` makes and checks (C order,
    their dtypes), so every index stays inside them."""
    import ctypes

    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(_LOOP_IR)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _LLVM_KEEP.append((module, engine))
    pointer, integer = ctypes.c_void_p, ctypes.c_int64
    walk = ctypes.CFUNCTYPE(None, pointer, integer, pointer, pointer, pointer, pointer, pointer, integer,
                            pointer, integer, integer, integer)(engine.get_function_address("walk"))

    def evaluate(X, packed, threshold, value, roots, output, out, start, stop):
        walk(X.ctypes.data, X.shape[1], packed.ctypes.data, threshold.ctypes.data,
             value.ctypes.data, roots.ctypes.data, output.ctypes.data, len(roots), out.ctypes.data, out.shape[1],
             start, stop)

    return evaluate


# -- from scikit-learn --------------------------------------------------------------------
#: Node fields of scikit-learn's boosted trees that the conversion reads.
_HGB_NODE_FIELDS = ("value", "feature_idx", "num_threshold", "missing_go_to_left", "left", "right", "is_leaf")


def _renumber(children: list[tuple[int, int]]) -> list[int]:
    """Node order in which each node's two children are adjacent: breadth first from the root."""
    order, position = [0], 0
    while position < len(order):
        left, right = children[order[position]]
        position += 1
        if left >= 0:
            order += [left, right]
    return order


def _build(trees: list[dict], outputs: list[int], base: np.ndarray, n_features: int) -> TreeEnsemble:
    """An ensemble from per-tree arrays (children_left/right, feature, threshold, missing_left, value)."""
    parts = {name: [] for name in ("feature", "threshold", "left", "missing_left", "value")}
    roots, offset = [], 0
    for tree in trees:
        left, right = tree["children_left"], tree["children_right"]
        order = _renumber(list(zip(left.tolist(), right.tolist())))
        new_index = np.empty(len(left), dtype=np.int64)
        new_index[order] = np.arange(len(order)) + offset
        order = np.asarray(order)
        leaf = left[order] < 0
        parts["left"].append(np.where(leaf, -1, new_index[np.where(leaf, 0, left[order])]))
        parts["feature"].append(np.where(leaf, 0, tree["feature"][order]))
        parts["threshold"].append(np.where(leaf, 0.0, tree["threshold"][order]))
        parts["missing_left"].append(np.where(leaf, False, tree["missing_left"][order]))
        parts["value"].append(np.where(leaf, tree["value"][order], 0.0))
        roots.append(offset)
        offset += len(order)
    arrays = {name: np.concatenate(values).astype(ARRAYS[name][0]) for name, values in parts.items()}
    return TreeEnsemble(**arrays, roots=np.asarray(roots, dtype=np.int32), output=np.asarray(outputs, dtype=np.int32),
                        base=np.asarray(base, dtype=np.float64).ravel(), n_features=int(n_features))


def from_hist_gradient_boosting(model) -> TreeEnsemble:
    """The trees of a fitted ``HistGradientBoostingRegressor`` or ``...Classifier``.

    One output per tree of a boosting round (one for regression and binary
    classification, one per class otherwise). Categorical splits are refused.
    """
    import sklearn

    rounds = getattr(model, "_predictors", None)
    baseline = getattr(model, "_baseline_prediction", None)
    if rounds is None or baseline is None or not rounds or not all(
            hasattr(tree, "nodes") and set(_HGB_NODE_FIELDS) <= set(tree.nodes.dtype.names or ())
            for trees in rounds for tree in trees):
        raise TreeError(f"scikit-learn {sklearn.__version__} stores boosted trees in a way seer cannot read "
                        f"(it reads the node fields {', '.join(_HGB_NODE_FIELDS)})")
    trees, outputs = [], []
    for trees_of_round in rounds:
        for column, tree in enumerate(trees_of_round):
            nodes = tree.nodes
            if "is_categorical" in nodes.dtype.names and nodes["is_categorical"].any():
                raise TreeError("categorical splits are not supported")
            leaf = nodes["is_leaf"].astype(bool)
            trees.append({"children_left": np.where(leaf, -1, nodes["left"].astype(np.int64)),
                          "children_right": np.where(leaf, -1, nodes["right"].astype(np.int64)),
                          "feature": nodes["feature_idx"], "threshold": nodes["num_threshold"],
                          "missing_left": nodes["missing_go_to_left"].astype(bool), "value": nodes["value"]})
            outputs.append(column)
    return _build(trees, outputs, np.asarray(baseline), model.n_features_in_)


def from_decision_tree(model, leaf_values: np.ndarray | None = None) -> TreeEnsemble:
    """A fitted ``DecisionTreeRegressor`` (its predictions) or ``DecisionTreeClassifier``.

    For a classifier the one output is the index in ``classes_`` of the class predicted
    at each leaf (the first of the most probable, as ``predict`` picks); ``leaf_values``
    overrides the leaf values.
    """
    tree = model.tree_
    values = tree.value[:, 0, :]
    if leaf_values is None:
        leaf_values = values.argmax(axis=1).astype(float) if hasattr(model, "classes_") else values[:, 0]
    missing = getattr(tree, "missing_go_to_left", None)
    arrays = {"children_left": tree.children_left.astype(np.int64), "children_right": tree.children_right.astype(np.int64),
              "feature": tree.feature, "threshold": tree.threshold,
              "missing_left": (np.ones(tree.node_count, dtype=bool) if missing is None else missing.astype(bool)),
              "value": np.asarray(leaf_values, dtype=float)}
    return _build([arrays], [0], np.zeros(1), model.n_features_in_)
