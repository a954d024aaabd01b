// The sample's "kernel": only what makes the C++ string ABI matter. TORCH_CHECK with a message
// calls c10::detail::torchCheckFail(..., const std::string&), and c10::Error is constructed from a
// std::string: both are exported by libc10 under torch's _GLIBCXX_USE_CXX11_ABI only.
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <string>

namespace {

int64_t check_head_dim(int64_t head_dim) {
  const std::string what = "head_dim must be a positive multiple of 8, got ";
  TORCH_CHECK(head_dim > 0 && head_dim % 8 == 0, what + std::to_string(head_dim));
  return head_dim;
}

std::string cxx11_abi() { return std::to_string(_GLIBCXX_USE_CXX11_ABI); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("check_head_dim", &check_head_dim, "Raise c10::Error for an invalid head dim");
  m.def("cxx11_abi", &cxx11_abi, "The _GLIBCXX_USE_CXX11_ABI this module was compiled with");
}
