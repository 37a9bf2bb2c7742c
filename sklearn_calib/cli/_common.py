"""What every part of the command line shares: exit codes and the error type."""

EXIT_OK = 0
EXIT_USAGE = 2


class CommandError(Exception):
    """Bad usage or input: reported as one line on stderr, exit status 2."""


def first_line(message):
    """The first line of an exception or warning message, stripped."""
    text = str(message).strip()
    return text.splitlines()[0] if text else ""


def describe_size(n_bytes):
    """``1234567`` -> ``'1.2 MB'``: a byte count as people read it."""
    value = float(n_bytes)
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if value < 1000 or unit == "PB":
            break
        value /= 1000
    return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
