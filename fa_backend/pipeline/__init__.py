"""One build, step by step: plan -> toolchain -> prepare -> compile -> repack -> verify ->
publish (_build), asking the plan's flavour for everything that differs between flavours."""
