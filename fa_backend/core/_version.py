"""fa-shim's own version (the wheel-cache fingerprint and provenance record it)."""

__version__ = "0.1.0"
