"""`python -m fa_backend COMMAND`: prepare, verify, doctor, settings, fingerprint, prebuild,
cache; doctor's findings come from the build's own code."""
