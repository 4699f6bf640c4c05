"""seer's tree arrays: converted models predict exactly as scikit-learn's, damaged arrays are refused."""

from __future__ import annotations

import os

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from seer.predict.trees import TreeEnsemble, TreeError, from_decision_tree, from_hist_gradient_boosting


def _data(n=600, features=7, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, features))
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values take their learned side
    y = np.nan_to_num(X[:, 0]) * 3 + np.sin(np.nan_to_num(X[:, 1])) + rng.normal(scale=0.1, size=n)
    return X, y


def test_boosted_regressor_sums_are_identical_to_scikit_learns():
    X, y = _data()
    for loss in ("squared_error", "absolute_error"):
        model = HistGradientBoostingRegressor(loss=loss, max_iter=40, max_leaf_nodes=31, random_state=0).fit(X, y)
        trees = from_hist_gradient_boosting(model)
        X_new, _ = _data(seed=1)
        assert trees.n_trees == model.n_iter_ and trees.n_outputs == 1
        np.testing.assert_array_equal(trees.raw(X_new)[:, 0], model.predict(X_new))


@pytest.mark.parametrize("classes", [2, 4])
def test_boosted_classifier_raw_outputs_are_identical(classes):
    X, y = _data()
    labels = np.digitize(y, np.quantile(y, np.linspace(0, 1, classes + 1)[1:-1]))
    model = HistGradientBoostingClassifier(max_iter=25, random_state=0).fit(X, labels)
    trees = from_hist_gradient_boosting(model)
    X_new, _ = _data(seed=2)
    np.testing.assert_array_equal(trees.raw(X_new), model._raw_predict(X_new))
    assert trees.n_outputs == (1 if classes == 2 else classes)


def test_decision_trees_predict_as_scikit_learns_on_float32_rounded_inputs():
    X, y = _data()
    X = np.nan_to_num(X)
    regressor = DecisionTreeRegressor(max_leaf_nodes=40, random_state=0).fit(X, y)
    classifier = DecisionTreeClassifier(max_leaf_nodes=40, random_state=0).fit(X, np.round(y) % 3)
    X_new = np.nan_to_num(_data(seed=3)[0]) * 1.0001
    rounded = X_new.astype(np.float32).astype(np.float64)  # as the library compares them
    np.testing.assert_array_equal(from_decision_tree(regressor).raw(rounded)[:, 0], regressor.predict(X_new))
    index = from_decision_tree(classifier).raw(rounded)[:, 0].astype(int)
    np.testing.assert_array_equal(classifier.classes_[index], classifier.predict(X_new))


def test_no_rows_give_no_rows_and_wrong_widths_are_refused():
    X, y = _data()
    trees = from_hist_gradient_boosting(HistGradientBoostingRegressor(max_iter=5).fit(X, y))
    assert trees.raw(np.empty((0, X.shape[1]))).shape == (0, 1)
    with pytest.raises(ValueError, match="expected 7 features"):
        trees.raw(np.ones((3, 6)))


def _tiny() -> dict:
    """One tree: node 0 splits feature 1 at 0.5 into leaves 1 (value 10) and 2 (value 20)."""
    return dict(feature=np.array([1, 0, 0], np.int32), threshold=np.array([0.5, 0, 0]),
                left=np.array([1, -1, -1], np.int32), missing_left=np.array([True, False, False]),
                value=np.array([0.0, 10.0, 20.0]), roots=np.array([0], np.int32), output=np.array([0], np.int32),
                base=np.array([1.0]), n_features=2)


def test_a_hand_built_tree_walks_as_documented():
    trees = TreeEnsemble(**_tiny())
    X = np.array([[0.0, 0.4], [0.0, 0.5], [0.0, 0.6], [0.0, np.nan]])
    np.testing.assert_array_equal(trees.raw(X)[:, 0], [11.0, 11.0, 21.0, 11.0])


@pytest.mark.parametrize("change, words", [
    ({"left": np.array([0, -1, -1], np.int32)}, "before its parent"),  # a loop: 0 -> 0
    ({"left": np.array([2, -1, -1], np.int32)}, "outside its tree"),  # right child 3 does not exist
    ({"feature": np.array([2, 0, 0], np.int32)}, "feature the ensemble does not have"),
    ({"left": np.array([1, -2, -1], np.int32)}, "-1 at leaves"),
    ({"roots": np.array([1], np.int32)}, "roots must start at 0"),
    ({"output": np.array([1], np.int32)}, "column"),
    ({"threshold": np.array([0.5, 0, 0], np.float32)}, "float64"),
    ({"value": np.array([0.0, 1.0])}, "one per node"),
    ({"n_features": True}, "n_features"),
])
def test_damaged_arrays_are_refused_before_any_walk(change, words):
    with pytest.raises(TreeError, match=words):
        TreeEnsemble(**(_tiny() | change))


def test_a_child_index_at_the_int32_limit_is_refused_not_wrapped():
    with pytest.raises(TreeError, match="outside its tree"):
        TreeEnsemble(**(_tiny() | {"left": np.array([2**31 - 1, -1, -1], np.int32)}))


def test_output_bounds_are_the_least_and_greatest_sums_of_leaves():
    """base plus each tree's least (greatest) leaf, per output: here against every path summed."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    model = HistGradientBoostingRegressor(max_iter=6, max_leaf_nodes=5, random_state=0).fit(X, X[:, 0] + X[:, 1] ** 2)
    trees = from_hist_gradient_boosting(model)
    low, high = trees.output_bounds()
    leaf_values = [trees.value[start:end][trees.left[start:end] < 0]
                   for start, end in zip(trees.roots, [*trees.roots[1:], len(trees.left)])]
    least, greatest = trees.base[0], trees.base[0]
    for values in leaf_values:  # in tree order, as a walk adds them
        least, greatest = least + values.min(), greatest + values.max()
    assert (low[0], high[0]) == (least, greatest)
    walked = trees.raw(X)[:, 0]
    assert low[0] <= walked.min() and walked.max() <= high[0]


def test_trees_cannot_jump_into_another_tree():
    two = _tiny()
    two.update(feature=np.r_[two["feature"], two["feature"]], threshold=np.r_[two["threshold"], two["threshold"]],
               missing_left=np.r_[two["missing_left"], two["missing_left"]], value=np.r_[two["value"], two["value"]],
               left=np.array([4, -1, -1, 4, -1, -1], np.int32), roots=np.array([0, 3], np.int32),
               output=np.array([0, 0], np.int32))
    with pytest.raises(TreeError, match="outside its tree"):
        TreeEnsemble(**two)


def test_categorical_splits_are_refused():
    X, y = _data()
    X[:, 2] = np.abs(np.round(np.nan_to_num(X[:, 2]) * 3))
    model = HistGradientBoostingRegressor(max_iter=5, categorical_features=[2], random_state=0).fit(X, y + X[:, 2])
    with pytest.raises(TreeError, match="categorical"):
        from_hist_gradient_boosting(model)


def _boosted_classifier():
    X, y = _data(n=3000, features=9, seed=4)
    labels = np.digitize(y, np.quantile(y, [0.25, 0.5, 0.75]))
    return from_hist_gradient_boosting(HistGradientBoostingClassifier(max_iter=30, random_state=0).fit(X, labels))


def test_blocks_threads_and_row_order_change_no_bit():
    """Many rows are walked in blocks over threads; each row's output is still the one it gets
    alone, whatever the rows' order, the input array's memory order or writability."""
    from seer.predict import trees as module

    trees = _boosted_classifier()
    X, _ = _data(n=3 * module.BLOCK_ROWS + 7, features=9, seed=5)
    X[::97] = X[1]  # repeated rows, as layer lists have them
    alone = np.vstack([trees.raw(X[i:i + 1]) for i in range(len(X))])
    assert trees.raw(X).tobytes() == alone.tobytes()
    order = np.lexsort(X[:, trees.root_features()[:2]].T)  # sorted as seer predict walks them
    assert trees.raw(X[order]).tobytes() == alone[order].tobytes()
    read_only = X.copy()
    read_only.flags.writeable = False
    for variant in (np.asfortranarray(X), read_only, X[::-1][::-1], X.astype(np.float32).astype(np.float64)):
        expected = alone if variant.dtype == X.dtype and np.array_equal(variant, X, equal_nan=True) else \
            np.vstack([trees.raw(variant[i:i + 1]) for i in range(len(variant))])
        assert trees.raw(variant).tobytes() == expected.tobytes()


def _walk_in_child(arrays: dict, X: np.ndarray, queue) -> None:
    queue.put(TreeEnsemble(**arrays).raw(X))


def test_a_forked_process_walks_with_threads_of_its_own():
    import multiprocessing

    from seer.predict import trees as module

    trees = _boosted_classifier()
    X, _ = _data(n=2 * module.BLOCK_ROWS + 1, features=9, seed=6)
    expected = trees.raw(X)  # the parent's pool exists now; the child's copy of it has no threads
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_walk_in_child, args=({**trees.arrays(), "n_features": 9}, X, queue))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0 and got.tobytes() == expected.tobytes()


def test_the_llvm_loop_gives_numbas_bits(monkeypatch):
    """The loop llvmlite builds walks as numba's did, bit for bit, NaNs and blocks included."""
    from seer.predict import trees as module

    ensemble = _boosted_classifier()
    X, _ = _data(n=2 * module.BLOCK_ROWS + 5, features=9, seed=7)
    outputs = []
    for loop in (module._llvm_loop(), module._numba_loop()):
        monkeypatch.setattr(module, "_COMPILED", loop)
        outputs.append(ensemble.raw(X))
    assert np.isnan(X).any() and outputs[0].tobytes() == outputs[1].tobytes()


def test_the_loop_reads_arrays_given_in_any_memory_order():
    """The compiled loop walks raw memory: arrays that are views with strides walk as their copies."""
    arrays = {**_boosted_classifier().arrays()}
    strided = {name: np.repeat(values, 2)[::2] for name, values in arrays.items()}  # every other element
    assert not strided["threshold"].flags.c_contiguous
    X, _ = _data(n=50, features=9, seed=8)
    expected = TreeEnsemble(**arrays, n_features=9).raw(X)
    assert TreeEnsemble(**strided, n_features=9).raw(X).tobytes() == expected.tobytes()


def test_threads_follow_numba_num_threads_without_importing_numba(monkeypatch):
    from seer.predict import trees as module

    monkeypatch.setenv("NUMBA_NUM_THREADS", "3")
    assert module.thread_count() == 3
    monkeypatch.delenv("NUMBA_NUM_THREADS")
    assert module.thread_count() == len(os.sched_getaffinity(0))
