"""FlashAttention-2 (flash-attn) from the upstream sdist: the release registry
(vendored_patches/<version>/), the sdist, tailored kernel sets, kernel sources in parts."""
