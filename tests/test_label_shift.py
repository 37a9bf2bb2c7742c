"""Label-shift adaptation: EM, BBSE, RLLS against hand computations and peers."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_calib import TemperatureScaling
from sklearn_calib.label_shift import (
    LabelShiftAdapter,
    estimated_target_calibration_error,
    label_shift_report,
)
from sklearn_calib.utils._testing import expected_failed_checks

from .conftest import load_shared


def _draw(rng, n, priors, k=3, signal=2.0):
    y = rng.choice(k, size=n, p=priors)
    return signal * np.eye(k)[y] + rng.normal(size=(n, k)), y


def _source_target(seed=0, k=3, target=(0.7, 0.2, 0.1), n=3000):
    rng = np.random.default_rng(seed)
    X_s, y_s = _draw(rng, n, np.full(k, 1 / k), k)
    X_t, y_t = _draw(rng, n, np.asarray(target), k)
    return X_s, y_s, X_t, y_t


# scikit-learn's estimator checks, with the calibrators' expected-failure table
# (the adapter is a logit calibrator: one column per class), and the checks
# whose labels miss some of the columns' classes: the adapter refuses a class
# the source never saw (its prior ratio is not identifiable).
_ABSENT_REASON = (
    "feeds integer labels 0..m-1 with more than m logit columns, so some "
    "columns' classes have no source sample: their target/source prior ratio "
    "is not identifiable and fit raises"
)
_ABSENT_CHECKS = [
    "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit",
    "check_sample_weight_equivalence_on_dense_data",
    "check_dtype_object",
    "check_pipeline_consistency",
    "check_estimators_pickle",
    "check_non_transformer_estimators_n_iter",
    "check_transformer_data_not_an_array",
    "check_transformer_general",
    "check_transformer_preserve_dtypes",
    "check_transformer_n_iter",
]


def _adapter_expected_failures(estimator):
    table = dict(expected_failed_checks(estimator))
    table["check_classifiers_train"] = (
        "a temperature-scaled adapter keeps the argmax of the check's blobs, "
        "read as logits (accuracy 0.11)"
    )
    table.update(dict.fromkeys(_ABSENT_CHECKS, _ABSENT_REASON))
    return table


# The checks' random features, read as logits, carry no ranking of the labels:
# the temperature clamped at its bound, with its warning, is the documented
# behaviour there (asserted in tests/scaling/test_temperature.py).
@pytest.mark.filterwarnings("ignore:The NLL keeps decreasing as T:UserWarning")
@parametrize_with_checks(
    [LabelShiftAdapter(TemperatureScaling(device="cpu"))],
    expected_failed_checks=_adapter_expected_failures,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_em_by_hand_on_a_three_class_toy():
    # Calibrated source probabilities are given directly: an identity-like
    # calibrator (temperature 1) on log-probabilities returns them unchanged
    # up to the fitted temperature, so compute the EM by hand on the
    # calibrator's own output.
    rng = np.random.default_rng(1)
    X_s, y_s, X_t, _ = _source_target(1, n=600)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), tol=1e-13)
    adapter.fit(X_s, y_s).adapt(X_t)
    p = adapter.calibrator_.predict_proba(X_t)
    pi_s = np.bincount(y_s, minlength=3) / len(y_s)
    pi = pi_s.copy()
    for _ in range(100_000):
        q = p * (pi / pi_s)
        q /= q.sum(axis=1, keepdims=True)
        new = q.mean(axis=0)
        if np.abs(new - pi).max() <= 1e-13:
            pi = new
            break
        pi = new
    np.testing.assert_allclose(adapter.priors_, pi, atol=1e-11)
    np.testing.assert_allclose(adapter.weights_, pi / pi_s, atol=1e-10)
    # The adapted probabilities are the reweighted ones, renormalised.
    expected = p * adapter.weights_
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(adapter.predict_proba(X_t), expected, atol=1e-12)
    assert adapter.convergence_["converged"]
    del rng


def test_two_em_iterations_by_hand():
    # Two exact iterations of the update on a 3-row, 3-class toy.
    p = np.array([[0.7, 0.2, 0.1], [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]])
    pi_s = np.array([0.5, 0.3, 0.2])
    from sklearn_calib.label_shift import _em_priors

    def blocks():
        yield p, np.ones(3)

    pi1, n_iter, converged, _, _ = _em_priors(blocks, pi_s, max_iter=1, tol=0.0)
    np.testing.assert_allclose(pi1, p.mean(axis=0))
    assert n_iter == 1 and not converged
    pi2, *_ = _em_priors(blocks, pi_s, max_iter=2, tol=0.0)
    w = pi1 / pi_s
    q = p * w / (p * w).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(pi2, q.mean(axis=0))


@pytest.mark.parametrize("method", ["em", "bbse-hard", "bbse-soft", "rlls"])
def test_methods_recover_the_target_priors(method):
    target = np.array([0.7, 0.2, 0.1])
    X_s, y_s, X_t, y_t = _source_target(2, target=target, n=4000)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), method=method)
    adapter.fit(X_s, y_s).adapt(X_t)
    empirical = np.bincount(y_t, minlength=3) / len(y_t)
    np.testing.assert_allclose(adapter.priors_, empirical, atol=0.03)
    assert adapter.priors_.sum() == pytest.approx(1.0)
    report = label_shift_report(adapter, X_t, y_t)
    assert report["adapted"]["nll"] < report["unadapted"]["nll"]


def test_rlls_at_no_shift_reports_convergence():
    # With a strong penalty the optimum is theta = 0 (weights 1), where the
    # objective has a kink: L-BFGS-B stopped there with success=False, so
    # convergence_ said "not converged" at the exact optimum.
    X_s, y_s, X_t, _ = _source_target(20, n=600)
    adapter = LabelShiftAdapter(
        TemperatureScaling(device="cpu"), method="rlls", rlls_alpha=10.0
    )
    adapter.fit(X_s, y_s).adapt(X_t)
    assert adapter.convergence_["converged"]
    np.testing.assert_allclose(adapter.weights_, 1.0)
    np.testing.assert_allclose(adapter.priors_, adapter.source_priors_)


def test_bbse_hard_by_hand():
    X_s, y_s, X_t, _ = _source_target(3)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), method="bbse-hard")
    adapter.fit(X_s, y_s).adapt(X_t)
    pred_s = adapter.calibrator_.predict(X_s)
    pred_t = adapter.calibrator_.predict(X_t)
    confusion = np.zeros((3, 3))
    np.add.at(confusion, (pred_s, y_s), 1.0 / len(y_s))
    mu = np.bincount(pred_t, minlength=3) / len(pred_t)
    w = np.clip(np.linalg.solve(confusion, mu), 0, None)
    pi_s = np.bincount(y_s, minlength=3) / len(y_s)
    priors = w * pi_s / (w * pi_s).sum()
    np.testing.assert_allclose(adapter.confusion_matrix_, confusion, atol=1e-15)
    np.testing.assert_allclose(adapter.priors_, priors, atol=1e-12)


def test_quapy_emq_agrees():
    quapy_aggregative = pytest.importorskip("quapy.method.aggregative")
    X_s, y_s, X_t, _ = _source_target(4)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), tol=1e-12)
    adapter.fit(X_s, y_s).adapt(X_t)
    p = adapter.calibrator_.predict_proba(X_t)
    with warnings.catch_warnings():
        # QuaPy's loop may stop at its own iteration cap; its tolerance is
        # set tight so that the two stopping rules agree to 1e-9.
        warnings.simplefilter("ignore", UserWarning)
        priors, _ = quapy_aggregative.EMQ.EM(adapter.source_priors_, p, epsilon=1e-14)
    np.testing.assert_allclose(adapter.priors_, priors, atol=1e-8)


def test_abstention_em_and_bbse_agree():
    label_shift = pytest.importorskip("abstention.label_shift")
    X_s, y_s, X_t, _ = _source_target(5)
    for method, peer in [
        (
            "em",
            label_shift.EMImbalanceAdapter(
                estimate_priors_from_valid_labels=True,
                tolerance=1e-12,
                max_iterations=10_000,
            ),
        ),
        ("bbse-soft", label_shift.BBSEImbalanceAdapter(soft=True)),
        ("bbse-hard", label_shift.BBSEImbalanceAdapter(soft=False)),
    ]:
        adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), method=method)
        adapter.set_params(tol=1e-12).fit(X_s, y_s).adapt(X_t)
        p_s = adapter.calibrator_.predict_proba(X_s)
        p_t = adapter.calibrator_.predict_proba(X_t)
        func = peer(
            valid_labels=np.eye(3)[y_s],
            tofit_initial_posterior_probs=p_t,
            valid_posterior_probs=p_s,
        )
        adapted = func(p_t)
        np.testing.assert_allclose(adapter.predict_proba(X_t), adapted, atol=1e-6)


def test_chunked_target_matches_in_memory(tmp_path):
    dask_array = pytest.importorskip("dask.array")
    X_s, y_s, X_t, _ = _source_target(6, n=5000)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), tol=1e-12)
    adapter.fit(X_s, y_s)
    in_memory = adapter.adapt(X_t).priors_.copy()
    path = tmp_path / "target.npy"
    np.save(path, X_t)
    memmap = np.load(path, mmap_mode="r")
    for target in (
        dask_array.from_array(X_t, chunks=(777, 3)),
        memmap,
        [X_t[i : i + 999] for i in range(0, len(X_t), 999)],
    ):
        chunked = adapter.adapt(target).priors_
        np.testing.assert_allclose(chunked, in_memory, rtol=0, atol=1e-10)


def test_list_of_weighted_chunks_matches_in_memory():
    # The documented (X, sample_weight) chunks, given as a list or a tuple:
    # np.ndim of the first (ragged) tuple failed inside numpy.
    X_s, y_s, X_t, _ = _source_target(18, n=2000)
    weights = np.random.default_rng(18).integers(0, 3, len(X_t)).astype(float)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), tol=1e-12)
    adapter.fit(X_s, y_s)
    in_memory = adapter.adapt(X_t, sample_weight=weights).priors_.copy()
    chunks = [(X_t[i : i + 600], weights[i : i + 600]) for i in range(0, 2000, 600)]
    for target in (chunks, tuple(chunks)):
        chunked = adapter.adapt(target).priors_
        np.testing.assert_allclose(chunked, in_memory, rtol=0, atol=1e-10)
    # A list of rows (tuples of numbers) is one in-memory target.
    rows = [tuple(row) for row in X_t]
    np.testing.assert_allclose(
        adapter.adapt(rows).priors_, adapter.adapt(X_t).priors_, rtol=1e-12
    )


def test_weighted_chunk_of_zero_weights_matches_in_memory():
    # A chunk may weigh every row 0 (the in-memory target with those weights
    # adapts); it was refused with "sample_weight is zero for every sample".
    X_s, y_s, X_t, _ = _source_target(19, n=600)
    weights = np.r_[np.zeros(300), np.ones(300)]
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), tol=1e-12)
    adapter.fit(X_s, y_s)
    in_memory = adapter.adapt(X_t, sample_weight=weights).priors_.copy()
    chunks = [(X_t[:300], weights[:300]), (X_t[300:], weights[300:])]
    chunked = adapter.adapt(chunks).priors_
    np.testing.assert_allclose(chunked, in_memory, rtol=0, atol=1e-10)
    # every chunk weighing 0 leaves nothing to adapt to
    with pytest.raises(ValueError, match="zero for every target row"):
        adapter.adapt([(X_t[:300], weights[:300])])


def test_zero_weight_row_of_a_class_absent_from_the_target():
    # The target never shows class 2 (masked), except one row of weight 0
    # that can only be class 2. EM gave that class prior 0 after one step,
    # the row's norm 0 / 0 then made every prior NaN for max_iter iterations
    # (numpy RuntimeWarnings, a ConvergenceWarning, NaN priors_, and
    # predict_proba refusing "overflowed" logits).
    X_s, y_s, X_t, _ = _source_target(23, n=600)
    X_t[:, 2] = -np.inf
    masked_row = np.array([[-np.inf, -np.inf, 0.0]])
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), max_iter=200)
    adapter.fit(X_s, y_s)
    expected = adapter.adapt(X_t).priors_.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adapter.adapt(np.r_[X_t, masked_row], sample_weight=np.r_[np.ones(600), 0])
    assert adapter.convergence_["converged"]
    np.testing.assert_allclose(adapter.priors_, expected, rtol=0, atol=1e-15)
    assert adapter.priors_[2] == 0.0
    np.testing.assert_array_equal(adapter.predict_proba(masked_row), [[0, 0, 1]])


def test_open_chunks_target(tmp_path):
    from sklearn_calib.chunked import open_chunks

    X_s, y_s, X_t, _ = _source_target(7, n=2000)
    for i in range(0, 2000, 500):
        np.savez(tmp_path / f"part_{i:05d}.npz", logits=X_t[i : i + 500])
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), tol=1e-12)
    adapter.fit(X_s, y_s)
    in_memory = adapter.adapt(X_t).priors_.copy()
    chunked = adapter.adapt(open_chunks(tmp_path, y_key=None)).priors_
    np.testing.assert_allclose(chunked, in_memory, rtol=0, atol=1e-10)


def test_one_shot_generator_is_refused():
    X_s, y_s, X_t, _ = _source_target(8, n=300)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu")).fit(X_s, y_s)
    with pytest.raises(TypeError, match="one-shot"):
        adapter.adapt(x for x in [X_t])


def test_iterable_of_scalars_is_refused_by_name():
    # a re-iterable whose items are numbers (a set, a dict's keys) failed in
    # the empty-chunk check with IndexError: tuple index out of range
    X_s, y_s, _, _ = _source_target(8, n=300)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu")).fit(X_s, y_s)
    for target in ({1.0}, {1.0: 2.0}):
        with pytest.raises(ValueError, match="2D array"):
            adapter.adapt(target)


def test_sample_weight_scale_and_repeats():
    X_s, y_s, X_t, _ = _source_target(9, n=800)
    rng = np.random.default_rng(9)
    counts_s = rng.integers(1, 3, len(y_s))
    counts_t = rng.integers(0, 3, len(X_t))
    base = LabelShiftAdapter(TemperatureScaling(device="cpu"), tol=1e-12)
    weighted = base.fit(X_s, y_s, sample_weight=counts_s).adapt(X_t, counts_t)
    priors = weighted.priors_.copy()
    base.fit(X_s, y_s, sample_weight=counts_s * 1e3).adapt(X_t, counts_t * 1e-3)
    np.testing.assert_allclose(base.priors_, priors, atol=1e-10)
    base.fit(np.repeat(X_s, counts_s, 0), np.repeat(y_s, counts_s))
    base.adapt(np.repeat(X_t, counts_t, 0))
    np.testing.assert_allclose(base.priors_, priors, atol=1e-8)


def test_string_labels_masked_logits_and_pipeline():
    X_s, y_s, X_t, y_t = _source_target(10, n=1500)
    names = np.array(["cat", "dog", "eel"])
    X_t = X_t.copy()
    X_t[::7, 2] = -np.inf  # the eel is ruled out for some rows
    pipe = make_pipeline(
        FunctionTransformer(lambda x: x, feature_names_out="one-to-one"),
        LabelShiftAdapter(TemperatureScaling(device="cpu")),
    )
    pipe.fit(X_s, names[y_s])
    adapter = pipe[-1].adapt(X_t)
    proba = pipe.predict_proba(X_t)
    assert np.all(proba[::7, 2] == 0.0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(pipe.predict(X_t)) <= set(names)
    assert adapter.priors_[0] > 0.5


def test_calibrator_that_is_not_a_library_calibrator_is_refused_in_fit():
    # The adapter reweights the calibrator's transform; an estimator with
    # fit and predict_proba only passed fit and adapt, then predict_proba
    # failed with an AttributeError ('transform').
    from sklearn.linear_model import LogisticRegression

    X_s, y_s, _, _ = _source_target(19, n=300)
    with pytest.raises(ValueError, match="calibrator"):
        LabelShiftAdapter(LogisticRegression()).fit(X_s, y_s)


def test_absent_source_class_is_an_error():
    X_s, y_s, _, _ = _source_target(11, n=600)
    keep = y_s != 2
    with pytest.raises(ValueError, match="no source sample"):
        LabelShiftAdapter(TemperatureScaling(device="cpu"), classes=[0, 1, 2]).fit(
            X_s[keep], y_s[keep]
        )


def test_singular_confusion_is_an_error():
    rng = np.random.default_rng(12)
    y = rng.integers(0, 3, 600)
    X = 2.0 * np.eye(3)[y] + rng.normal(size=(600, 3))
    # class 2 is never the argmax (and temperature scaling keeps the argmax)
    X[:, 2] = np.minimum(X[:, 2], X[:, :2].max(axis=1) - 0.1)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), method="bbse-hard")
    adapter.fit(X, y)
    with pytest.raises(ValueError, match="singular"):
        adapter.adapt(X)


def test_max_iter_warns_and_reports():
    X_s, y_s, X_t, _ = _source_target(13, n=500)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"), max_iter=2)
    adapter.fit(X_s, y_s)
    with pytest.warns(ConvergenceWarning, match="EM did not converge"):
        adapter.adapt(X_t)
    assert adapter.convergence_["n_iter"] == 2
    assert not adapter.convergence_["converged"]


def test_bootstrap_interval_covers_the_truth_over_repeats():
    # Over repeated target draws, the 90 % interval of the dominant class
    # covers the true prior in most draws (the source is held fixed).
    truth = np.array([0.6, 0.3, 0.1])
    rng = np.random.default_rng(14)
    X_s, y_s = _draw(rng, 3000, np.full(3, 1 / 3))
    adapter = LabelShiftAdapter(
        TemperatureScaling(device="cpu"),
        n_bootstrap=100,
        confidence_level=0.9,
        random_state=0,
        tol=1e-6,
    ).fit(X_s, y_s)
    covered = []
    for _ in range(20):
        X_t, _ = _draw(rng, 500, truth)
        adapter.adapt(X_t)
        low, high = adapter.priors_interval_
        covered.append(low[0] <= truth[0] <= high[0])
        assert np.all(low <= adapter.priors_ + 1e-12)
        assert np.all(adapter.priors_ <= high + 1e-12)
    assert np.mean(covered) >= 0.7


@pytest.mark.parametrize("method", ["em", "rlls"])
def test_bootstrap_skips_replicates_of_zero_weight(method):
    # One target row weighs 1, nine weigh 0: a replicate that misses that row
    # has no target. EM ran max_iter NaN iterations and RLLS returned the
    # source priors as a draw (widening the interval), with a RuntimeWarning.
    # Every other replicate holds that row alone, so gives the point estimate.
    X_s, y_s, X_t, _ = _source_target(16, n=600)
    weights = np.zeros(10)
    weights[0] = 1.0
    adapter = LabelShiftAdapter(
        TemperatureScaling(device="cpu"),
        method=method,
        n_bootstrap=40,
        random_state=0,
    ).fit(X_s, y_s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adapter.adapt(X_t[:10], sample_weight=weights)
    expected = np.broadcast_to(adapter.priors_, (2, 3))
    np.testing.assert_allclose(adapter.priors_interval_, expected, atol=1e-6)


def test_estimated_target_ece_tracks_the_labelled_one():
    rng = np.random.default_rng(15)
    truth = np.array([0.8, 0.15, 0.05])
    X_s, y_s = _draw(rng, 4000, np.full(3, 1 / 3))
    X_h, y_h = _draw(rng, 4000, np.full(3, 1 / 3))
    X_t, y_t = _draw(rng, 20000, truth)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu")).fit(X_s, y_s)
    adapter.adapt(X_t)
    estimate = estimated_target_calibration_error(adapter, X_h, y_h)
    actual = label_shift_report(adapter, X_t, y_t)["adapted"]["ece"]
    assert estimate == pytest.approx(actual, abs=0.02)


def test_estimated_target_ece_with_classes_out_of_sorted_order():
    # classes lists the columns' labels in column order, which need not be
    # sorted: the estimate is that of the same data with integer labels.
    rng = np.random.default_rng(17)
    X_s, y_s = _draw(rng, 3000, np.full(3, 1 / 3))
    X_h, y_h = _draw(rng, 2000, np.full(3, 1 / 3))
    X_t, _ = _draw(rng, 3000, np.array([0.7, 0.2, 0.1]))
    names = np.array(["c", "a", "b"])
    by_code = LabelShiftAdapter(TemperatureScaling(device="cpu")).fit(X_s, y_s)
    by_name = LabelShiftAdapter(TemperatureScaling(device="cpu"), classes=names)
    by_name.fit(X_s, names[y_s])
    by_code.adapt(X_t)
    by_name.adapt(X_t)
    np.testing.assert_allclose(by_name.priors_, by_code.priors_, rtol=1e-12)
    expected = estimated_target_calibration_error(by_code, X_h, y_h)
    got = estimated_target_calibration_error(by_name, X_h, names[y_h])
    assert got == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="y_source contains labels that are not"):
        estimated_target_calibration_error(by_name, X_h, np.full(2000, "d"))
    with pytest.raises(ValueError, match="y_source must be 1-D"):
        estimated_target_calibration_error(by_name, X_h, names[y_h][:, None])


def test_real_shifted_cifar10():
    data = load_shared("kundajelab_cifar10_vgg_labelshift")
    adapter = LabelShiftAdapter().fit(data["logits_val"], data["y_val"])
    adapter.adapt(data["logits_test"])
    empirical = np.bincount(data["y_test"], minlength=10) / len(data["y_test"])
    # 97 % "cat" in the shifted test set: EM on BCTS finds it.
    assert np.abs(adapter.priors_ - empirical).max() < 0.03
    report = label_shift_report(adapter, data["logits_test"], data["y_test"])
    assert report["adapted"]["accuracy"] > report["unadapted"]["accuracy"] + 0.1
    assert report["adapted"]["nll"] < report["unadapted"]["nll"]


def test_report_refuses_labels_of_another_length():
    # The accuracy compared arrays of different lengths: numpy's broadcasting
    # error instead of a message about y_target.
    X_s, y_s, X_t, y_t = _source_target(21, n=300)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu")).fit(X_s, y_s)
    adapter.adapt(X_t)
    with pytest.raises(ValueError, match="X_target"):
        label_shift_report(adapter, X_t, y_t[:10])


def test_single_score_column():
    rng = np.random.default_rng(16)
    y_s = rng.integers(0, 2, 2000)
    s_s = 2.0 * (2 * y_s - 1) + rng.normal(size=2000)
    y_t = (rng.random(2000) < 0.1).astype(int)
    s_t = 2.0 * (2 * y_t - 1) + rng.normal(size=2000)
    adapter = LabelShiftAdapter(TemperatureScaling(device="cpu"))
    adapter.fit(s_s[:, None], y_s).adapt(s_t[:, None])
    assert adapter.priors_[1] == pytest.approx(y_t.mean(), abs=0.03)
    report = label_shift_report(adapter, s_t[:, None], y_t)
    assert report["adapted"]["nll"] < report["unadapted"]["nll"]
    assert adapter.predict_proba(s_t[:, None]).shape == (2000, 2)
