"""fa-shim's own version: the newest released version in CHANGELOG.md (a unit test keeps the two
equal). The provenance records it; the wheel-cache fingerprint covers this file with the rest."""

__version__ = "0.5.0"
