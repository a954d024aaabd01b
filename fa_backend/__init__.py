"""fa-shim: a PEP 517 backend that builds the upstream flash-attn sdist against the installed torch.
The hooks below are the whole public interface; see README.md."""

from ._hooks import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_wheel,
)
from .core._version import __version__

__all__ = [
    "__version__",
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_wheel",
]
