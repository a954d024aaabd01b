__version__ = "0.1.0"

import torch  # noqa: F401  (loads libc10/libtorch before the extension)
import flash_attn_2_cuda  # noqa: E402

check_head_dim = flash_attn_2_cuda.check_head_dim
