"""How a build's compile units run: the time model of a set of sources on a machine (and the ETA),
the order build.ninja starts them in, and the ninja pools that keep their peak memory in bounds."""
