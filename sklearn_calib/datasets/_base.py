"""Loaders for the real logit sets shipped inside the package."""

import textwrap
from importlib import resources

import numpy as np
from sklearn.utils import Bunch

from ..utils._compat import StrOptions, validate_params

DEFAULT_SET = "c100_densenetbc100_netcal"

# Reference figures: test accuracy, top-label ECE (15 equal-width bins, %) and
# NLL before and after temperature scaling fitted on the val part, and the
# fitted temperature. The NLL is the library's log_loss (probabilities clipped
# at float64 eps), so a reader reproduces it with the library; the tests check
# every figure against the data.
_SETS = {
    "c10_resnet50_cross_entropy_smart": {
        "title": "ResNet-50 on CIFAR-10, cross-entropy training (SMART benchmark)",
        "body": (
            "Logits of a ResNet-50 trained with cross-entropy on CIFAR-10, the "
            "setting of the SMART paper. The val part is 10% of the training set "
            "held out from training; the test part is the CIFAR-10 test set."
        ),
        "n_classes": 10,
        "reference": {
            "accuracy": 0.9505,
            "ece_percent": (4.35, 1.37),
            "temperature": 2.4975,
            "nll": (0.4121, 0.2038),
        },
        "published": (
            "The SMART authors report 15-bin ECE 4.34-4.35% uncalibrated, 1.38% "
            "after temperature scaling and 0.76-0.82% after SMART."
        ),
        "license": "MIT",
        "license_file": "LICENSE-MIT-calibench.txt",
        "source": (
            "Public benchmark repository of the SMART authors (calibench, "
            "tests/test_logits, commit b2adedb); tensors converted to numpy."
        ),
    },
    "c10_densenet40_guo": {
        "title": "DenseNet-40 on CIFAR-10 (Guo et al. 2017)",
        "body": (
            "Logits of the DenseNet-40 of Guo et al., 'On Calibration of Modern "
            "Neural Networks' (ICML 2017). The val part is 5000 images held out "
            "from training; the test part is the CIFAR-10 test set."
        ),
        "n_classes": 10,
        "reference": {
            "accuracy": 0.9242,
            "ece_percent": (5.50, 0.95),
            "temperature": 2.8826,
            # 0.4301 without clipping: a few test logits give true-class
            # probabilities below float64 eps.
            "nll": (0.4284, 0.2251),
        },
        "published": (
            "Guo et al. 2017, Table 1: ECE 5.50% uncalibrated, 0.95% after "
            "temperature scaling."
        ),
        "license": "MIT",
        "license_file": "LICENSE-MIT-NN_calibration.txt",
        "source": (
            "markus93/NN_calibration, logits/probs_densenet40_c10_logits.p "
            "(Copyright (c) 2018 Markus Kängsepp); converted to numpy."
        ),
    },
    "c100_densenetbc100_netcal": {
        "title": "DenseNet-BC-100 on CIFAR-100 (net:cal records)",
        "body": (
            "Log-probabilities of a DenseNet-BC-100 on the CIFAR-100 test set. "
            "The source stores softmax probabilities p, so the logits are log(p) "
            "(every row's largest logit is at most 0). The 10000 test images "
            "were split 50/50 with numpy.random.default_rng(0).permutation, the "
            "first half being the val part."
        ),
        "n_classes": 100,
        "reference": {
            "accuracy": 0.7580,
            "ece_percent": (13.99, 1.39),
            "temperature": 2.1178,
            "nll": (1.2263, 0.8756),
        },
        "published": None,
        "license": "Apache-2.0",
        "license_file": "LICENSE-Apache-2.0.txt",
        "source": (
            "net:cal calibration framework, examples/classification/records "
            "(Copyright (C) 2019-2023 Ruhr West University of Applied Sciences "
            "and e:fs TechHub GmbH); probabilities converted to log(p) and split."
        ),
    },
}


def _data_file(filename):
    return resources.files(__package__).joinpath("data", filename)


def _describe(name, meta, shapes):
    ref = meta["reference"]
    (n_val, n_classes), (n_test, _) = shapes
    lines = [
        meta["title"],
        "=" * len(meta["title"]),
        "",
        textwrap.fill(meta["body"], width=79),
        "",
        f"- name: {name}",
        f"- classes: {n_classes}; val / test samples: {n_val} / {n_test}",
        f"- test accuracy: {100 * ref['accuracy']:.2f}%",
        "- test ECE (15 equal-width bins): {:.2f}% raw, {:.2f}% after temperature "
        "scaling (T = {:.4f} fitted on val)".format(
            *ref["ece_percent"], ref["temperature"]
        ),
        "- test NLL: {:.4f} raw, {:.4f} after temperature scaling".format(*ref["nll"]),
    ]
    if meta["published"]:
        lines.append(f"- published: {meta['published']}")
    lines += [
        f"- source: {meta['source']}",
        f"- licence: {meta['license']} (full text in the bunch's license_text; "
        "see sklearn_calib/datasets/data/README.md for the attribution)",
    ]
    return "\n".join(lines) + "\n"


def list_logits():
    """Names of the real logit sets bundled with the package.

    Returns
    -------
    names : list of str
        Sorted names accepted by :func:`load_logits`.

    See Also
    --------
    load_logits : Load one of these sets.

    Examples
    --------
    >>> from sklearn_calib.datasets import list_logits
    >>> for name in list_logits():
    ...     print(name)
    c100_densenetbc100_netcal
    c10_densenet40_guo
    c10_resnet50_cross_entropy_smart
    """
    return sorted(_SETS)


@validate_params(
    {"name": [StrOptions(set(_SETS))]},
    prefer_skip_nested_validation=True,
)
def load_logits(name=DEFAULT_SET):
    """Load a bundled set of real validation and test logits.

    Each set is the output of a real trained network on real images: fit a
    calibrator on the ``val`` part and evaluate it on the ``test`` part. The
    files ship inside the package under the MIT or Apache-2.0 licence of their
    source; the licence text travels in the returned bunch.

    Parameters
    ----------
    name : str, default="c100_densenetbc100_netcal"
        One of :func:`list_logits`:

        - ``"c100_densenetbc100_netcal"``: DenseNet-BC-100 on CIFAR-100,
          100 classes, 5000 / 5000 samples, Apache-2.0.
        - ``"c10_resnet50_cross_entropy_smart"``: ResNet-50 on CIFAR-10,
          10 classes, 5000 / 10000 samples, MIT.
        - ``"c10_densenet40_guo"``: the DenseNet-40 of Guo et al. (2017) on
          CIFAR-10, 10 classes, 5000 / 10000 samples, MIT.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with the attributes:

        logits_val : ndarray of shape (n_val, n_classes), dtype float32
            Logits of the calibration (validation) part.
        y_val : ndarray of shape (n_val,), dtype int64
            Labels in ``range(n_classes)`` of the calibration part.
        logits_test : ndarray of shape (n_test, n_classes), dtype float32
            Logits of the evaluation (test) part.
        y_test : ndarray of shape (n_test,), dtype int64
            Labels of the evaluation part.
        name : str
            The set's name.
        DESCR : str
            Description: model, data, splits and reference figures (accuracy,
            ECE and NLL before and after temperature scaling).
        license : str
            SPDX identifier of the data's licence, ``"MIT"`` or
            ``"Apache-2.0"``.
        license_text : str
            Full text of that licence with the copyright notice.
        source : str
            Where the logits come from.

    See Also
    --------
    list_logits : Names of the bundled sets.

    Notes
    -----
    The arrays are read with ``numpy.load(..., allow_pickle=False)``. The
    attribution of every set is in ``sklearn_calib/datasets/data/README.md``.

    Examples
    --------
    >>> from sklearn_calib.datasets import load_logits
    >>> data = load_logits("c10_resnet50_cross_entropy_smart")
    >>> data.logits_val.shape, data.logits_test.shape
    ((5000, 10), (10000, 10))
    >>> data.license
    'MIT'
    >>> float((data.logits_test.argmax(axis=1) == data.y_test).mean())
    0.9505
    """
    meta = _SETS[name]
    with _data_file(f"{name}.npz").open("rb") as stream:
        with np.load(stream, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    license_text = _data_file(meta["license_file"]).read_text(encoding="utf-8")
    shapes = (arrays["logits_val"].shape, arrays["logits_test"].shape)
    return Bunch(
        logits_val=arrays["logits_val"],
        y_val=arrays["y_val"],
        logits_test=arrays["logits_test"],
        y_test=arrays["y_test"],
        name=name,
        DESCR=_describe(name, meta, shapes),
        license=meta["license"],
        license_text=license_text,
        source=meta["source"],
    )
