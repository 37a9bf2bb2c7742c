"""Every input format, and input errors: exit status 2 and a one-line message."""

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling, cli
from sklearn_calib.utils._testing import make_logits

from .conftest import assert_usage_error, call, reference_proba, report_json


def write_inputs(tmp_path, fmt, logits, y):
    """Write logits (and labels) in one format; returns the extra CLI args."""
    if fmt == "npy":
        np.save(tmp_path / "l.npy", logits)
        np.save(tmp_path / "y.npy", y)
        return ["--logits", tmp_path / "l.npy", "--labels", tmp_path / "y.npy"]
    if fmt == "npz":
        np.savez(tmp_path / "l.npz", logits=logits, labels=y)
        return ["--logits", tmp_path / "l.npz"]
    if fmt in ("csv", "parquet"):
        import pandas as pd

        frame = pd.DataFrame(logits, columns=[f"z{k}" for k in range(logits.shape[1])])
        frame.insert(0, "label", y)
        if fmt == "csv":
            frame.to_csv(tmp_path / "l.csv", index=False)
        else:
            pytest.importorskip("pyarrow")
            frame.to_parquet(tmp_path / "l.parquet")
        return ["--logits", tmp_path / f"l.{fmt}"]
    if fmt == "csv_labels_file":
        import pandas as pd

        pd.DataFrame(logits).to_csv(tmp_path / "l.csv", index=False)
        pd.DataFrame({"y": y}).to_csv(tmp_path / "y.csv", index=False)
        return ["--logits", tmp_path / "l.csv", "--labels", tmp_path / "y.csv"]
    torch = pytest.importorskip("torch")
    if fmt == "pt_pair":
        torch.save((torch.from_numpy(logits), torch.from_numpy(y)), tmp_path / "l.pt")
    else:
        torch.save(
            {"logits": torch.from_numpy(logits), "y": torch.from_numpy(y)},
            tmp_path / "l.pt",
        )
    return ["--logits", tmp_path / "l.pt"]


@pytest.mark.parametrize(
    "fmt", ["npy", "npz", "csv", "csv_labels_file", "parquet", "pt_pair", "pt_dict"]
)
def test_fit_reads_every_format(capsys, tmp_path, logits_y, fmt):
    pytest.importorskip("skops")
    logits, y = logits_y
    args = write_inputs(tmp_path, fmt, logits, y)
    status, out, err = call(
        capsys,
        "fit",
        "--method",
        "TemperatureScaling",
        *args,
        "-o",
        tmp_path / "ts.skops",
    )
    assert status == 0, err
    fitted = cli.load_calibrator(tmp_path / "ts.skops")
    reference = TemperatureScaling(device="cpu").fit(logits, y)
    # CSV stores decimal text, so allow for the rounding of the logits.
    assert fitted.temperature_ == pytest.approx(reference.temperature_, rel=1e-7)


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".csv"])
def test_apply_writes_every_output_format(capsys, tmp_path, logits_y, suffix):
    pytest.importorskip("skops")
    import skops.io

    logits, y = logits_y
    names = np.array(["ant", "bee", "cat", "dog"])
    skops.io.dump(
        TemperatureScaling(device="cpu").fit(logits, names[y]), tmp_path / "ts.skops"
    )
    np.savez(tmp_path / "new.npz", logits_test=logits[:50])
    out_path = tmp_path / f"p{suffix}"
    status, out, err = call(
        capsys,
        "apply",
        tmp_path / "ts.skops",
        "--logits",
        tmp_path / "new.npz",
        "-o",
        out_path,
    )
    assert status == 0, err
    expected = reference_proba(logits, y, logits[:50])
    if suffix == ".npy":
        proba = np.load(out_path, allow_pickle=False)
    elif suffix == ".npz":
        with np.load(out_path, allow_pickle=False) as archive:
            proba = archive["proba"]
            assert archive["classes"].tolist() == names.tolist()
    else:
        import pandas as pd

        frame = pd.read_csv(out_path)
        assert list(frame.columns) == names.tolist()
        proba = frame.to_numpy()
    np.testing.assert_allclose(proba, expected, rtol=1e-6)


def test_csv_split_column_gives_two_splits(capsys, tmp_path, logits_y):
    import pandas as pd

    logits, y = logits_y
    frame = pd.DataFrame(logits, columns=list("abcd"))
    frame["y"] = y
    frame["split"] = np.where(np.arange(len(y)) < 200, "val", "test")
    frame.to_csv(tmp_path / "both.csv", index=False)
    report = report_json(
        capsys, tmp_path / "both.csv", "--methods", "TemperatureScaling"
    )
    assert (report["n_samples_val"], report["n_samples_test"]) == (200, 100)


def test_string_labels_in_csv(capsys, tmp_path, logits_y):
    import pandas as pd

    logits, y = logits_y
    names = np.array(["ant", "bee", "cat", "dog"])
    frame = pd.DataFrame(logits, columns=list("abcd"))
    frame["label"] = names[y]
    frame.to_csv(tmp_path / "s.csv", index=False)
    report = report_json(
        capsys, tmp_path / "s.csv", "--methods", "TemperatureScaling", "--cv", "2"
    )
    assert report["results"][1]["accuracy"] == pytest.approx(
        np.mean(logits.argmax(axis=1) == y)
    )


def test_missing_file(capsys, tmp_path):
    assert_usage_error(
        capsys,
        [
            "fit",
            "--method",
            "TemperatureScaling",
            "--logits",
            tmp_path / "absent.npy",
            "-o",
            tmp_path / "c.skops",
        ],
        "absent.npy: no such file",
    )


def test_unsupported_suffix(capsys, tmp_path):
    (tmp_path / "l.txt").write_text("1 2 3\n")
    assert_usage_error(
        capsys, ["report", tmp_path / "l.txt"], "unsupported file type '.txt'", ".npz"
    )


def test_wrong_keys(capsys, tmp_path, logits_y):
    logits, y = logits_y
    np.savez(tmp_path / "k.npz", scores=logits, targets=y)
    assert_usage_error(
        capsys,
        ["report", tmp_path / "k.npz"],
        "no logits found",
        "logits_val, y_val",
        "found: scores, targets",
    )


def test_val_without_labels(capsys, tmp_path, logits_y):
    logits, _ = logits_y
    np.savez(tmp_path / "k.npz", logits_val=logits)
    assert_usage_error(
        capsys, ["report", tmp_path / "k.npz"], "logits_val has no y_val"
    )


def test_mismatched_lengths(capsys, tmp_path, logits_y):
    logits, y = logits_y
    np.savez(tmp_path / "m.npz", logits_val=logits, y_val=y[:-1])
    assert_usage_error(
        capsys, ["report", tmp_path / "m.npz"], "300 rows of logits but 299 labels"
    )


def test_mismatched_labels_file(capsys, tmp_path, logits_y):
    logits, y = logits_y
    np.save(tmp_path / "l.npy", logits)
    np.save(tmp_path / "y.npy", y[:10])
    assert_usage_error(
        capsys,
        ["report", tmp_path / "l.npy", "--labels", tmp_path / "y.npy"],
        "300 rows of logits but 10 labels",
    )


def test_mismatched_widths(capsys, tmp_path, logits_y):
    logits, y = logits_y
    np.savez(
        tmp_path / "w.npz",
        logits_val=logits,
        y_val=y,
        logits_test=logits[:, :3],
        y_test=y,
    )
    assert_usage_error(
        capsys,
        ["report", tmp_path / "w.npz"],
        "logits_val has 4 columns but logits_test has 3",
    )


@pytest.mark.parametrize("value, word", [(np.nan, "NaN"), (np.inf, "infinity")])
def test_non_finite_logits(capsys, tmp_path, logits_y, value, word):
    logits, y = logits_y
    bad = logits.copy()
    bad[17, 2] = value
    np.save(tmp_path / "bad.npy", bad)
    np.save(tmp_path / "y.npy", y)
    assert_usage_error(
        capsys,
        ["report", tmp_path / "bad.npy", "--labels", tmp_path / "y.npy"],
        f"logits contain {word}",
        "row 17",
    )


def test_nan_in_csv(capsys, tmp_path):
    (tmp_path / "n.csv").write_text("a,b,label\n1.0,2.0,0\n,1.0,1\n0.5,0.1,0\n")
    assert_usage_error(
        capsys, ["report", tmp_path / "n.csv"], "logits contain NaN", "row 1"
    )


def test_nan_labels(capsys, tmp_path, logits_y):
    logits, y = logits_y
    labels = y.astype(float)
    labels[3] = np.nan
    np.savez(tmp_path / "n.npz", logits=logits, y=labels)
    assert_usage_error(capsys, ["report", tmp_path / "n.npz"], "labels contain NaN")


def test_object_arrays_are_never_unpickled(capsys, tmp_path):
    np.save(
        tmp_path / "o.npy", np.array([[1.0, None]], dtype=object), allow_pickle=True
    )
    assert_usage_error(
        capsys, ["report", tmp_path / "o.npy"], "object array", "never loaded"
    )
    np.savez(tmp_path / "o.npz", logits=np.array([[1.0, "a"]], dtype=object), y=[0])
    assert_usage_error(capsys, ["report", tmp_path / "o.npz"], "object array")


def test_pt_with_python_objects_is_refused(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    torch.save(
        {"logits": torch.zeros(3, 2), "model": TemperatureScaling()}, tmp_path / "o.pt"
    )
    assert_usage_error(capsys, ["report", tmp_path / "o.pt"], "weights_only=True")


def test_non_numeric_csv_column(capsys, tmp_path):
    (tmp_path / "s.csv").write_text("a,b,label\n1.0,x,0\n2.0,y,1\n")
    assert_usage_error(
        capsys, ["report", tmp_path / "s.csv"], "column 'b' is not numeric"
    )


def test_logits_need_two_dimensions(capsys, tmp_path):
    np.save(tmp_path / "l.npy", np.zeros((4, 2, 2)))
    np.save(tmp_path / "y.npy", np.zeros(4))
    assert_usage_error(
        capsys,
        ["report", tmp_path / "l.npy", "--labels", tmp_path / "y.npy"],
        "must be 2-D",
    )


def test_labels_given_twice(capsys, tmp_path, logits_y):
    logits, y = logits_y
    np.savez(tmp_path / "l.npz", logits=logits, y=y)
    np.save(tmp_path / "y.npy", y)
    assert_usage_error(
        capsys,
        ["report", tmp_path / "l.npz", "--labels", tmp_path / "y.npy"],
        "already holds labels",
    )


# --- names that could play the same part are refused, not guessed ----------------


@pytest.mark.parametrize(
    "columns", [("y", "label"), ("labels", "label"), ("Y", " label "), ("y", "LABELS")]
)
def test_two_label_columns_are_refused(capsys, tmp_path, logits_y, columns):
    import pandas as pd

    logits, y = logits_y
    frame = pd.DataFrame(logits, columns=list("abcd"))
    frame[columns[0]] = y
    frame[columns[1]] = 1 - y  # numeric: read as a logit column before
    frame.to_csv(tmp_path / "t.csv", index=False)
    named = f"{columns[0]!r}, {columns[1]!r}"
    assert_usage_error(
        capsys, ["report", tmp_path / "t.csv"], "ambiguous label column", named
    )
    # The same in a labels file.
    frame[list(columns)].to_csv(tmp_path / "y.csv", index=False)
    np.save(tmp_path / "l.npy", logits)
    assert_usage_error(
        capsys,
        ["report", tmp_path / "l.npy", "--labels", tmp_path / "y.csv"],
        "y.csv: ambiguous label column",
    )


def test_two_split_columns_are_refused(capsys, tmp_path):
    (tmp_path / "s.csv").write_text(
        "a,b,y,split,Split\n1,2,0,val,val\n2,1,1,test,test\n"
    )
    assert_usage_error(capsys, ["report", tmp_path / "s.csv"], "ambiguous split column")


@pytest.mark.parametrize(
    "keys, message",
    [
        (("logits", "y", "labels"), "ambiguous labels: the keys y, labels"),
        (("logits", "label", "y_val", "logits_val"), "both logits and logits_val"),
    ],
)
def test_ambiguous_keys_are_refused(capsys, tmp_path, logits_y, keys, message):
    logits, y = logits_y
    arrays = {k: (logits if k.startswith("logits") else y) for k in keys}
    np.savez(tmp_path / "k.npz", **arrays)
    assert_usage_error(capsys, ["report", tmp_path / "k.npz"], message)


def test_apply_refuses_two_sets_of_logits(tmp_path, logits_y):
    logits, _ = logits_y
    np.savez(tmp_path / "k.npz", logits=logits, logits_test=logits[:10])
    with pytest.raises(cli.CommandError, match="both logits and logits_test"):
        cli.read_logits_only(tmp_path / "k.npz")


# --- masked classes: -inf is a logit, +inf and NaN are not ----------------------


def masked(logits, fill=-np.inf):
    """The logits with a masked class appended as column 2."""
    return np.insert(logits, 2, fill, axis=1)


def test_minus_infinity_marks_a_masked_class(tmp_path, logits_y):
    logits, y = logits_y
    np.savez(tmp_path / "m.npz", logits=masked(logits), y=y)
    split = cli.read_splits(tmp_path / "m.npz")["val"]
    np.testing.assert_array_equal(split.logits, masked(logits))


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("plus_inf", ["logits contain infinity", "row 7", "only -inf is accepted"]),
        ("all_masked", ["1 rows have no finite logit", "first row 7"]),
    ],
)
def test_plus_infinity_and_fully_masked_rows_are_refused(
    capsys, tmp_path, logits_y, case, fragments
):
    logits, y = logits_y
    bad = masked(logits)
    if case == "plus_inf":
        bad[7, 0] = np.inf
    else:
        bad[7] = -np.inf
    np.savez(tmp_path / "m.npz", logits=bad, y=y)
    assert_usage_error(capsys, ["report", tmp_path / "m.npz"], *fragments)


def test_report_on_masked_logits_equals_the_report_without_the_column(
    capsys, tmp_path, logits_y
):
    """A column of -inf is probability 0: the baseline scores do not change.

    The class-wise ECE averages over classes, so it counts the masked one
    and differs; every other column must agree. Calibrators are compared too
    once they accept -inf (issue 11, section 2).
    """
    logits, y = logits_y
    y_masked = np.where(y >= 2, y + 1, y)  # labels of the widened columns
    # The baseline, and temperature scaling once calibrators accept -inf (its
    # solver may then take a different path: compare to solver precision).
    tolerance = {"Uncalibrated": 1e-9}
    try:
        TemperatureScaling(device="cpu").fit(masked(logits), y_masked)
        tolerance["TemperatureScaling"] = 1e-6
    except ValueError:
        pass  # calibrators refuse -inf: its row says why
    for name, values, labels in (
        ("plain", logits, y),
        ("masked", masked(logits), y_masked),
    ):
        np.savez(
            tmp_path / f"{name}.npz",
            logits_val=values[:200],
            y_val=labels[:200],
            logits_test=values[200:],
            y_test=labels[200:],
        )
    plain = report_json(capsys, tmp_path / "plain.npz", "--methods", "temp")
    with_mask = report_json(capsys, tmp_path / "masked.npz", "--methods", "temp")
    assert with_mask["n_classes"] == 5
    for a, b in zip(plain["results"], with_mask["results"], strict=True):
        if a["method"] not in tolerance:
            assert b["note"].startswith("failed: ") and "infinity" in b["note"]
            continue
        for key in ("ece", "adaptive_ece", "nll", "brier", "accuracy"):
            expected = pytest.approx(a[key], rel=tolerance[a["method"]], abs=1e-12)
            assert b[key] == expected, (a["method"], key)


def test_columns_named_after_classes_in_another_order(capsys, tmp_path, logits_y):
    # The header names each logit column's class, not in sorted order: read
    # in sorted order, every column would be fitted and scored as another
    # class than its name says (the Python API warns on such a frame).
    pytest.importorskip("skops")
    import pandas as pd

    logits, y = logits_y
    names = np.array(["dog", "ant", "cat", "bee"])
    frame = pd.DataFrame(logits, columns=names)
    frame["label"] = names[y]
    frame.to_csv(tmp_path / "s.csv", index=False)
    line = assert_usage_error(
        capsys,
        ["report", tmp_path / "s.csv", "--methods", "TemperatureScaling"],
        "named after the classes but in another order",
        "--classes dog,ant,cat,bee",
    )
    assert "column 0 is named 'dog'" in line
    out = tmp_path / "ts.skops"
    fit = ["fit", "--method", "TemperatureScaling", "--logits", tmp_path / "s.csv"]
    assert_usage_error(capsys, [*fit, "-o", out], "in another order")
    assert not out.exists()
    # Stated: fitted on the columns as named, equal to the Python API.
    status, _, err = call(capsys, *fit, "--classes", "dog,ant,cat,bee", "-o", out)
    assert status == 0, err
    fitted = cli.load_calibrator(out)
    reference = TemperatureScaling(device="cpu", classes=names).fit(logits, names[y])
    assert fitted.temperature_ == pytest.approx(reference.temperature_, rel=1e-7)
    # apply refuses a table whose columns are the calibrator's classes in
    # another order, and calibrates one in its order.
    frame[sorted(names)].to_csv(tmp_path / "sorted.csv", index=False)
    apply = ["apply", out, "--logits", tmp_path / "sorted.csv"]
    assert_usage_error(
        capsys, [*apply, "-o", tmp_path / "p.npy"], "calibrator's classes"
    )
    status, _, err = call(
        capsys, "apply", out, "--logits", tmp_path / "s.csv", "-o", tmp_path / "p.npy"
    )
    assert status == 0, err
    np.testing.assert_allclose(
        np.load(tmp_path / "p.npy"), reference.predict_proba(logits), rtol=1e-6
    )


def test_parquet_of_nullable_dtypes(capsys, tmp_path, logits_y):
    # pandas' nullable dtypes (Float64, Int64) gave an object array: the file
    # was refused as not numbers, and a missing value was not named as NaN.
    pytest.importorskip("pyarrow")
    pytest.importorskip("skops")
    import pandas as pd

    logits, y = logits_y
    frame = pd.DataFrame(logits, columns=list("abcd")).astype("Float64")
    frame["b"] = frame["b"].round().astype("Int64")
    frame["label"] = y
    frame.to_parquet(tmp_path / "n.parquet")
    out = tmp_path / "ts.skops"
    args = ["fit", "--method", "TemperatureScaling", "-o", out]
    status, _, err = call(capsys, *args, "--logits", tmp_path / "n.parquet")
    assert status == 0, err
    expected = logits.copy()
    expected[:, 1] = np.round(expected[:, 1])
    reference = TemperatureScaling(device="cpu").fit(expected, y)
    fitted = cli.load_calibrator(out)
    assert fitted.temperature_ == pytest.approx(reference.temperature_, rel=1e-7)
    frame.loc[5, "c"] = pd.NA
    frame.to_parquet(tmp_path / "na.parquet")
    assert_usage_error(
        capsys,
        [*args, "--overwrite", "--logits", tmp_path / "na.parquet"],
        "logits contain NaN",
        "row 5",
    )


def test_missing_string_label_in_parquet(capsys, tmp_path, logits_y):
    # A missing value of a string column is pd.NA, whose comparison has no
    # truth value: the message was pandas' "boolean value of NA is ambiguous".
    pytest.importorskip("pyarrow")
    import pandas as pd

    logits, y = logits_y
    frame = pd.DataFrame(logits, columns=list("abcd"))
    frame["label"] = pd.array(np.array(list("pqrs"))[y], dtype="string")
    frame.loc[4, "label"] = pd.NA
    frame.to_parquet(tmp_path / "s.parquet")
    assert_usage_error(
        capsys, ["report", tmp_path / "s.parquet"], "s.parquet [y]", "missing values"
    )
    frame[["label"]].to_parquet(tmp_path / "y.parquet")
    np.save(tmp_path / "l.npy", logits)
    assert_usage_error(
        capsys,
        ["report", tmp_path / "l.npy", "--labels", tmp_path / "y.parquet"],
        "missing values",
    )


# torch 2.15 warns, loading a sparse tensor with weights_only=True, that it
# checks the tensor's invariants (an O(nnz) scan); the file here holds sparse
# tensors on purpose, and read_pt passes torch's warnings on to the caller.
@pytest.mark.filterwarnings("ignore:Validating sparse tensor invariants:UserWarning")
def test_pt_dict_entries_other_than_the_arrays_are_not_read(capsys, tmp_path):
    # Like the members of an .npz, the entries of a .pt dict that the command
    # does not use are not read: an epoch number refused the whole file.
    torch = pytest.importorskip("torch")
    logits, y = make_logits(n_samples=60, n_classes=3, seed=0)
    torch.save(
        {
            "logits": torch.from_numpy(logits),
            "y": torch.from_numpy(y),
            "epoch": 12,
            "weights": torch.zeros(3, 3).to_sparse(),
        },
        tmp_path / "c.pt",
    )
    report = report_json(capsys, tmp_path / "c.pt", "--methods", "temp", "--cv", "2")
    assert report["n_samples_val"] == 60
    # An entry that is used and is no array is named, a sparse tensor too.
    torch.save({"logits": torch.from_numpy(logits), "y": 3}, tmp_path / "i.pt")
    assert_usage_error(capsys, ["report", tmp_path / "i.pt"], "'y' is a int")
    torch.save(
        {"logits": torch.from_numpy(logits).to_sparse(), "y": torch.from_numpy(y)},
        tmp_path / "s.pt",
    )
    assert_usage_error(
        capsys, ["report", tmp_path / "s.pt"], "s.pt: 'logits' cannot be read"
    )


def test_csv_with_an_unnamed_index_column(capsys, tmp_path, logits_y):
    # DataFrame.to_csv writes the row numbers first, under an empty header
    # cell, unless index=False: they were read as one more logit column, and
    # integer labels 0..3 then fitted five classes without a word.
    import pandas as pd

    logits, y = logits_y
    frame = pd.DataFrame(logits, columns=list("abcd"))
    frame["label"] = y
    frame.to_csv(tmp_path / "i.csv")
    assert_usage_error(
        capsys,
        ["report", tmp_path / "i.csv", "--methods", "temp"],
        "column 0 has no name",
        "index=False",
    )
    frame.to_csv(tmp_path / "n.csv", index=False)
    report = report_json(capsys, tmp_path / "n.csv", "--methods", "temp")
    assert report["n_classes"] == 4


def _weighted_file(tmp_path, fmt, logits, y, w):
    """One split (or two, ``*_split``) with sample weights, in format ``fmt``."""
    import pandas as pd

    if fmt == "npz":
        np.savez(tmp_path / "w.npz", logits=logits, y=y, sample_weight=w)
        return tmp_path / "w.npz"
    if fmt == "npz_split":
        n = len(y) // 2
        np.savez(
            tmp_path / "w.npz",
            logits_val=logits[:n],
            y_val=y[:n],
            sample_weight_val=w[:n],
            logits_test=logits[n:],
            y_test=y[n:],
        )
        return tmp_path / "w.npz"
    if fmt == "pt":
        torch = pytest.importorskip("torch")
        torch.save(
            {
                "logits": torch.from_numpy(logits),
                "y": torch.from_numpy(y),
                "sample_weight": torch.from_numpy(w),
            },
            tmp_path / "w.pt",
        )
        return tmp_path / "w.pt"
    frame = pd.DataFrame(logits, columns=[f"z{k}" for k in range(logits.shape[1])])
    frame["Sample_Weight"] = w
    frame["label"] = y
    if fmt == "csv_split":
        frame["split"] = np.where(np.arange(len(y)) < len(y) // 2, "val", "test")
    frame.to_csv(tmp_path / "w.csv", index=False)
    return tmp_path / "w.csv"


@pytest.mark.parametrize("fmt", ["npz", "npz_split", "pt", "csv", "csv_split"])
def test_fit_weighs_by_the_stored_sample_weight(capsys, tmp_path, logits_y, fmt):
    # A sample_weight array beside the logits weighs the fit of a folder of
    # chunks; in a file it was silently dropped (an .npz: the unweighted
    # temperature; a .csv: the weights read as one more logit column).
    pytest.importorskip("skops")
    logits, y = logits_y
    logits = np.round(logits, 6)  # what a CSV file holds
    w = np.random.default_rng(0).uniform(0.1, 3.0, len(y)).round(6)
    path = _weighted_file(tmp_path, fmt, logits, y, w)
    status, out, err = call(
        capsys, "fit", "--method", "temp", "--logits", path, "-o", tmp_path / "t.skops"
    )
    assert status == 0, err
    n = len(y) // 2 if fmt.endswith("split") else len(y)
    assert f"fitted on {n} samples x 4 logit columns" in out
    fitted = cli.load_calibrator(tmp_path / "t.skops")
    weighted = TemperatureScaling(device="cpu").fit(
        logits[:n], y[:n], sample_weight=w[:n]
    )
    plain = TemperatureScaling(device="cpu").fit(logits[:n], y[:n])
    assert fitted.temperature_ == pytest.approx(weighted.temperature_, rel=1e-9)
    assert abs(plain.temperature_ - weighted.temperature_) > 1e-3
    # report's metrics in memory are unweighted: it refuses such a file.
    assert_usage_error(capsys, ["report", path, "--methods", "temp"], "weights")


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"sample_weight_val": 1}, "name the weights sample_weight"),
        ({"sample_weight": 0}, "shape (120,)"),
        ({"sample_weight": 2}, "shape (300, 2)"),
    ],
)
def test_misplaced_sample_weights_are_refused(
    capsys, tmp_path, logits_y, arrays, message
):
    logits, y = logits_y
    ((key, kind),) = arrays.items()
    w = {0: np.ones(120), 1: np.ones(len(y)), 2: np.ones((len(y), 2))}[kind]
    np.savez(tmp_path / "w.npz", logits=logits, y=y, **{key: w})
    assert_usage_error(
        capsys,
        ["fit", "--method", "temp", "--logits", tmp_path / "w.npz"]
        + ["-o", tmp_path / "t.skops"],
        message,
    )
    assert not (tmp_path / "t.skops").exists()


@pytest.mark.parametrize("fmt", ["csv_weight", "csv_split", "npz_weight"])
def test_labels_file_with_weights_or_split_is_refused(capsys, tmp_path, fmt):
    # A --labels file's sample_weight or split was dropped without a word:
    # the fit was unweighted, or on every row instead of the val rows.
    import pandas as pd

    logits, y = make_logits(n_samples=60, n_classes=3, seed=0)
    np.save(tmp_path / "l.npy", logits)
    if fmt == "npz_weight":
        np.savez(tmp_path / "y.npz", y=y, sample_weight=np.ones(60))
        labels, name = tmp_path / "y.npz", "array 'sample_weight'"
    else:
        extra = {"csv_weight": ("Sample_Weight", 1.0), "csv_split": ("split", "val")}
        column, value = extra[fmt]
        pd.DataFrame({"label": y, column: value}).to_csv(
            tmp_path / "y.csv", index=False
        )
        labels, name = tmp_path / "y.csv", f"column {column!r}"
    for command in (
        ["fit", "--method", "temp", "-o", tmp_path / "t.skops", "--logits"],
        ["report", "--methods", "temp", "--cv", "2", "--logits"],
    ):
        assert_usage_error(
            capsys,
            [*command, tmp_path / "l.npy", "--labels", labels],
            name,
            "would not be read",
        )
    assert not (tmp_path / "t.skops").exists()
