"""The distributions fa-shim builds, each a plug-in behind one interface: its sources, kernel
sets, toolchain needs, checks, names and advice. fa2 and fa3 are built in."""
