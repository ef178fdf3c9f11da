"""fast_nvcc: a drop-in nvcc that runs nvcc's own plan as a parallel dataflow graph."""

__version__ = "0.1.0"
