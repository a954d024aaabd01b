"""The machine a build runs on, decided once: torch (probed in a child), nvcc, the host compiler,
GPU architectures, compile jobs, the build requirements and the preflight probe."""
