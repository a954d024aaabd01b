// The sample's "kernel": only what makes the C++ string ABI matter. TORCH_CHECK with a message
// calls c10::detail::torchCheckFail(..., const std::string&), and c10::Error is constructed from a
// std::string: both are exported by libc10 under torch's _GLIBCXX_USE_CXX11_ABI only.
// The module is written against the CPython API, not pybind11 (upstream's choice): pybind11's
// headers cost about 8 s of every compile, and the test suite builds this sample many times.
#include <Python.h>
#include <c10/util/Exception.h>

#include <string>

namespace {

int64_t checked_head_dim(int64_t head_dim) {
  const std::string what = "head_dim must be a positive multiple of 8, got ";
  TORCH_CHECK(head_dim > 0 && head_dim % 8 == 0, what + std::to_string(head_dim));
  return head_dim;
}

PyObject* check_head_dim(PyObject*, PyObject* arg) {
  const long head_dim = PyLong_AsLong(arg);
  if (head_dim == -1 && PyErr_Occurred()) return nullptr;
  try {
    return PyLong_FromLong(checked_head_dim(head_dim));
  } catch (const c10::Error& e) {  // as pybind11 does: the message, as a RuntimeError
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* cxx11_abi(PyObject*, PyObject*) {
  return PyUnicode_FromString(std::to_string(_GLIBCXX_USE_CXX11_ABI).c_str());
}

PyMethodDef methods[] = {
    {"check_head_dim", check_head_dim, METH_O, "Raise c10::Error for an invalid head dim"},
    {"cxx11_abi", cxx11_abi, METH_NOARGS,
     "The _GLIBCXX_USE_CXX11_ABI this module was compiled with"},
    {nullptr, nullptr, 0, nullptr},
};

#define FA_SHIM_STR(x) #x
#define FA_SHIM_NAME(x) FA_SHIM_STR(x)
PyModuleDef module = {PyModuleDef_HEAD_INIT, FA_SHIM_NAME(TORCH_EXTENSION_NAME), nullptr, -1,
                      methods};

}  // namespace

#define FA_SHIM_INIT2(x) PyInit_##x
#define FA_SHIM_INIT(x) FA_SHIM_INIT2(x)
PyMODINIT_FUNC FA_SHIM_INIT(TORCH_EXTENSION_NAME)() { return PyModule_Create(&module); }
