"""Every input format, and input errors: exit status 2 and a one-line message."""

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling, cli

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
