"""Usage errors that name the problem (issue 25, item 13).

Each case used to end in exit status 0 with nothing computed, in a message
about something else, or in a dependency's warnings before ours.
"""

import pickle

import numpy as np
import pytest

from sklearn_calib import TemperatureScaling

from .conftest import assert_usage_error, call, run_cli


def test_more_folds_than_samples_is_a_usage_error(capsys, tmp_path, logits_y):
    logits, y = logits_y
    np.savez(tmp_path / "one.npz", logits=logits, y=y)
    line = assert_usage_error(
        capsys,
        ["report", tmp_path / "one.npz", "--cv", "500", "--methods", "temp"],
        "--cv 500",
        f"({len(y)})",
    )
    assert "at most --cv 300" in line
    # As many folds as samples is leave-one-out: allowed.
    status, out, err = call(
        capsys,
        "report",
        tmp_path / "one.npz",
        "--cv",
        str(len(y)),
        "--methods",
        "temp",
        "--format",
        "json",
    )
    assert status == 0, err
    assert "failed" not in out


@pytest.mark.parametrize("spec", ["", " ", ",", " , "])
def test_methods_naming_nothing_are_refused(capsys, npz_two_splits, spec):
    assert_usage_error(
        capsys, ["report", npz_two_splits, "--methods", spec], "names no method"
    )


def test_csv_with_only_a_header(capsys, tmp_path):
    (tmp_path / "h.csv").write_text("a,b,c,label\n")
    line = assert_usage_error(capsys, ["report", tmp_path / "h.csv"], "no data rows")
    assert "not numeric" not in line


def csv_rows(logits, y):
    return [
        ",".join(f"{v:.6f}" for v in r) + f",{c}"
        for r, c in zip(logits, y, strict=True)
    ]


def test_csv_without_a_header(capsys, tmp_path, logits_y):
    logits, y = logits_y
    rows = csv_rows(logits, y)
    (tmp_path / "n.csv").write_text("\n".join(rows) + "\n")
    for command in (
        ["report"],
        ["fit", "--method", "temp", "-o", tmp_path / "t.skops", "--logits"],
    ):
        line = assert_usage_error(
            capsys, [*command, tmp_path / "n.csv"], "needs a header row"
        )
        assert f"{logits[0, 0]:.6f}" in line
        assert "no labels" not in line
    assert not (tmp_path / "t.skops").exists()


def test_csv_of_logits_named_by_class_reads(capsys, tmp_path, logits_y):
    # Column names that are class indices (as apply writes them) are a
    # header, not data.
    logits, y = logits_y
    rows = csv_rows(logits, y)
    (tmp_path / "c.csv").write_text("0,1,2,3,label\n" + "\n".join(rows) + "\n")
    status, _, err = call(
        capsys, "fit", "--method", "temp", "--logits", tmp_path / "c.csv",
        "-o", tmp_path / "t.skops",
    )  # fmt: skip
    assert status == 0, err


def test_csv_without_a_label_column_says_where_labels_go(capsys, tmp_path):
    (tmp_path / "s.csv").write_text("0,1,2\n0.5,0.1,0.2\n0.2,0.9,0.1\n")
    assert_usage_error(
        capsys, ["report", tmp_path / "s.csv"], "no labels", "header row"
    )


@pytest.mark.parametrize(
    ("command", "split"),
    [
        (["fit", "--method", "temp", "-o", "{out}.skops"], "val"),
        (["apply", "{model}", "-o", "{out}.npy"], "test"),
    ],
)
def test_fit_and_apply_on_a_folder_of_two_splits(
    capsys, tmp_path, logits_y, command, split
):
    logits, y = logits_y
    folder = tmp_path / "chunks"
    for part, rows in (("val", slice(0, 200)), ("test", slice(200, None))):
        (folder / part).mkdir(parents=True)
        np.savez(folder / part / "c0.npz", logits=logits[rows], y=y[rows])
    model = tmp_path / "m.skops"
    np.savez(tmp_path / "fit.npz", logits=logits, y=y)
    status, _, err = call(
        capsys, "fit", "--method", "temp", "--logits", tmp_path / "fit.npz", "-o", model
    )
    assert status == 0, err
    args = [a.format(out=tmp_path / "out", model=model) for a in command]
    line = assert_usage_error(
        capsys, [*args, "--logits", folder], "val/ and test/", str(folder / split)
    )
    assert "found: nothing" not in line
    # The folder it names is read.
    status, _, err = call(capsys, *args, "--logits", folder / split)
    assert status == 0, err


class Opaque:
    """A Python object that ``torch.load(weights_only=True)`` refuses."""


def _refused_pt_files(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "plain.pt").write_bytes(
        pickle.dumps({"logits": np.zeros((4, 3))}, protocol=4)
    )
    torch.save({"logits": torch.zeros(4, 3), "obj": Opaque()}, tmp_path / "obj.pt")
    torch.save({"logits": np.zeros((4, 3))}, tmp_path / "numpy.pt")
    return {
        "plain.pt": "not written by torch.save",
        "obj.pt": "Opaque",
        "numpy.pt": "torch.from_numpy",
    }


def test_refused_pt_files_name_what_was_refused(capsys, tmp_path):
    for name, fragment in _refused_pt_files(tmp_path).items():
        line = assert_usage_error(
            capsys, ["report", tmp_path / name], "weights_only=True", fragment
        )
        assert "\x1b" not in line  # no terminal escape codes from torch
        assert len(line) < 400


def test_refused_pt_pickle_prints_one_line_and_no_torch_warning(tmp_path):
    # torch warns about the pickle protocol of a plain pickle before refusing
    # it; run as a user would, stderr holds our line only.
    _refused_pt_files(tmp_path)
    result = run_cli("fit", "--method", "temp", "--logits", tmp_path / "plain.pt",
                     "-o", tmp_path / "t.skops")  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "not written by torch.save" in lines[0]
    assert "Warning" not in result.stderr


def _argparse_error(capsys, args):
    """Run ``cli.main`` on arguments that argparse refuses; its one line."""
    with pytest.raises(SystemExit) as exit_info:
        call(capsys, *args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("device", ["nonsense", "CUDA", "gpu", "cuda:x", ""])
def test_misspelt_device_is_refused_by_every_command(
    capsys, tmp_path, logits_y, device
):
    # apply with a calibrator that predicts in numpy never looked at --device
    # and wrote its probabilities with exit status 0; report recorded the
    # device as the failure of every method, with exit status 0.
    skops_io = pytest.importorskip("skops.io")
    logits, y = logits_y
    skops_io.dump(
        TemperatureScaling(device="cpu").fit(logits, y), tmp_path / "ts.skops"
    )
    np.savez(tmp_path / "one.npz", logits=logits, y=y)
    commands = [
        ["apply", tmp_path / "ts.skops", "--logits", tmp_path / "one.npz"]
        + ["-o", tmp_path / "p.npy"],
        ["fit", "--method", "temp", "--logits", tmp_path / "one.npz"]
        + ["-o", tmp_path / "c.skops"],
        ["report", tmp_path / "one.npz", "--methods", "temp"],
    ]
    for args in commands:
        line = _argparse_error(capsys, [*args, "--device", device])
        assert "argument --device" in line and f"device={device!r}" in line
    assert not (tmp_path / "p.npy").exists()
    assert not (tmp_path / "c.skops").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**32), "x"])
def test_seed_numpy_refuses_is_a_usage_error(capsys, npz_two_splits, seed):
    # A seed outside numpy's 32 bits failed every method's row, then ended
    # the report with numpy's "Seed must be between 0 and 2**32 - 1", which
    # did not say which option.
    line = _argparse_error(
        capsys, ["report", npz_two_splits, "--methods", "temp", "--seed", seed]
    )
    assert "argument --seed" in line and repr(seed)[1:-1] in line


def test_largest_seed_numpy_takes_is_accepted(capsys, npz_two_splits):
    status, out, err = call(
        capsys,
        "report",
        npz_two_splits,
        "--methods",
        "temp",
        "--format",
        "json",
        "--seed",
        str(2**32 - 1),
    )
    assert status == 0, err
    assert "failed" not in out
