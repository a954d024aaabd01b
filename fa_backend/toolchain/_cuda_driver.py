"""The GPUs this process can see, asked of the CUDA driver (libcuda) directly: milliseconds,
where importing torch to ask the same driver costs seconds per hook."""

from __future__ import annotations

import ctypes
import functools

from ..core import _log

# CUdevice_attribute values from cuda.h (stable since CUDA 2.x)
_COMPUTE_CAPABILITY_MAJOR = 75
_COMPUTE_CAPABILITY_MINOR = 76


@functools.cache
def capabilities() -> tuple[tuple[int, int], ...]:
    """(major, minor) of every visible GPU, in device order; () without a driver or a GPU."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ()  # no NVIDIA driver: no GPU to build for
    status = cuda.cuInit(0)
    if status != 0:  # 100 = CUDA_ERROR_NO_DEVICE; anything else is worth a line in the log
        if status != 100:
            _log.info(f"the CUDA driver did not initialise (CUresult {status}); assuming no GPU")
        return ()
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ()
    caps = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if not (  # each call returns a CUresult, 0 for success
            cuda.cuDeviceGet(ctypes.byref(device), ordinal)
            or cuda.cuDeviceGetAttribute(ctypes.byref(major), _COMPUTE_CAPABILITY_MAJOR, device)
            or cuda.cuDeviceGetAttribute(ctypes.byref(minor), _COMPUTE_CAPABILITY_MINOR, device)
        ):
            caps.append((major.value, minor.value))
    return tuple(caps)
