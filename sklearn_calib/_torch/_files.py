"""Reading ``.pt`` files for the command line, without arbitrary objects."""

import torch


def load_weights_only(path):
    """The content of a ``.pt`` file, on the CPU, refusing arbitrary objects.

    ``torch.load(weights_only=True)`` unpickles tensors, numbers, strings and
    containers of them only; anything else raises (an ``UnpicklingError``).
    """
    return torch.load(path, map_location="cpu", weights_only=True)
