"""FlashAttention-3 (flash-attn-3) from upstream's hopper/ tree and CUTLASS: the release
registry (vendored_patches/fa3/), the content-pinned trees, the DISABLE switches as sets."""
