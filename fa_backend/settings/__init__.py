"""The one settings model: -C config settings over FA_SHIM_* variables over [tool.fa-shim],
validated with did-you-mean; the reference table is generated from it."""
