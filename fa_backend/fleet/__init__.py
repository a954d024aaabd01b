"""Building once for many: the wheel cache keyed by fingerprint (locks across hosts), sccache on
shared storage with its stable source path, and prebuild for several environments."""
