#include "flash_fwd_hdim128_bf16_sm90.cu"
#include "flash_fwd_hdim128_bf16_split_sm90.cu"
