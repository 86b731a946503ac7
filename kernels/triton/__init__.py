"""The portable Triton kernel (CUDA, ROCm, or the CPU interpreter): ``decode``."""
