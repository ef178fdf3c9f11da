"""fast_nvcc's own errors: each becomes one line, ``fast_nvcc: error: ...``, and exit code 2."""


class FastNvccError(Exception):
    """A problem with fast_nvcc's own options or set-up, not with the compile."""
