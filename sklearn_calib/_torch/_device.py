"""Device resolution and the numpy <-> tensor boundary."""

import warnings

import numpy as np
import torch


def resolve_device(device: str) -> torch.device:
    """Turn a validated device string into a ``torch.device``.

    ``"auto"`` picks CUDA when available. Asking for CUDA on a machine without
    it falls back to the CPU with a warning, so that a script written for a
    GPU machine still runs elsewhere.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            warnings.warn(
                f"device={device!r} was requested but CUDA is not available; "
                "falling back to the CPU.",
                UserWarning,
                stacklevel=3,
            )
            return torch.device("cpu")
        resolved = torch.device(device)
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r} names a CUDA device that does not exist; "
                f"{torch.cuda.device_count()} CUDA device(s) are visible."
            )
        return resolved
    return torch.device("cpu")


def to_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """numpy -> tensor on ``device``, without a copy where the CPU allows it."""
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:
        # torch warns on read-only memory; nothing here ever writes to it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.from_numpy(array)
    else:
        tensor = torch.from_numpy(array)
    return tensor.to(device)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """tensor (any device) -> numpy array owned by numpy."""
    return tensor.detach().cpu().numpy()
