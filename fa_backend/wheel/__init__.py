"""Wheel files and their names: tags, versions, core metadata, a deterministic wheel writer,
and the sdist of fa-shim itself."""
