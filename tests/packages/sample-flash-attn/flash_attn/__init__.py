__version__ = "0.1.0"

import torch  # noqa: F401  (loads libc10/libtorch before the extension)

# As fa-shim's patched upstream does (vendored_patches/*/10-import-guard.patch): load the
# extension through the guard fa-shim puts into every wheel it builds, which names the torch the
# module was built for and the rebuild command when torch changed or the import fails. Built
# without fa-shim (the tests' stand-in for unpatched upstream) there is no guard: plain import.
try:
    from flash_attn._fa_shim_guard import load_extension
except ModuleNotFoundError as exc:
    if exc.name != "flash_attn._fa_shim_guard":
        raise
    import flash_attn_2_cuda
else:
    flash_attn_2_cuda = load_extension("flash_attn_2_cuda")

check_head_dim = flash_attn_2_cuda.check_head_dim
