# A small stand-in for upstream flash-attn's setup.py, shaped like it where it matters to fa-shim:
# it imports torch at module level, has upstream's CachedWheelsCommand download path guarded by
# FLASH_ATTENTION_FORCE_BUILD, builds a torch extension named flash_attn_2_cuda through
# BuildExtension (ninja), and compiles C++ that passes std::string across torch's API.
# SAMPLE_DOWNLOAD_MARKER=path: write that file if the download path is entered.
# SAMPLE_ALWAYS_DOWNLOAD=1: try to download even under FORCE_BUILD (a "future upstream" path).
# SAMPLE_NETWORK_PROBE=...: try every way to the network first (see network_probe.py).
# SAMPLE_SETUP_REQUIRES="packaging psutil ninja": upstream FA2's setup_requires.
import os
import urllib.error
import urllib.request

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension
from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

FORCE_BUILD = os.getenv("FLASH_ATTENTION_FORCE_BUILD", "FALSE") == "TRUE"
SKIP_CUDA_BUILD = os.getenv("FLASH_ATTENTION_SKIP_CUDA_BUILD", "FALSE") == "TRUE"
if os.getenv("SAMPLE_NETWORK_PROBE"):
    import network_probe

    network_probe.run(os.environ["SAMPLE_NETWORK_PROBE"])

BASE_WHEEL_URL = "https://github.com/Dao-AILab/flash-attention/releases/download/{tag}/{name}"


class CachedWheelsCommand(_bdist_wheel):
    def run(self):
        if FORCE_BUILD and os.getenv("SAMPLE_ALWAYS_DOWNLOAD") != "1":
            return super().run()
        marker = os.getenv("SAMPLE_DOWNLOAD_MARKER")
        if marker:
            with open(marker, "w") as f:
                f.write("entered\n")
        url = BASE_WHEEL_URL.format(tag="v0.1.0", name="flash_attn-0.1.0-cp3-cp3-linux.whl")
        print("Guessing wheel URL: ", url)
        try:
            urllib.request.urlretrieve(url, "downloaded.whl")
            raise SystemExit("a prebuilt wheel was downloaded")
        except (urllib.error.HTTPError, urllib.error.URLError):
            print("Precompiled wheel not found. Building from source...")
            super().run()


ext_modules = []
if not SKIP_CUDA_BUILD and os.path.exists("csrc/sample_kernel.cu"):  # packed in by some tests
    ext_modules.append(
        CUDAExtension(
            name="flash_attn_2_cuda",
            sources=["csrc/flash_api.cpp", "csrc/sample_kernel.cu"],
            extra_compile_args={"cxx": ["-O1", "-std=c++17"], "nvcc": ["-O1"]},
        )
    )
elif not SKIP_CUDA_BUILD:
    ext_modules.append(
        CppExtension(
            name="flash_attn_2_cuda",
            sources=["csrc/flash_api.cpp"],
            extra_compile_args={"cxx": ["-O1", "-std=c++17"]},
        )
    )

setup(
    name="flash_attn",
    version="0.1.0",
    packages=find_packages(include=["flash_attn"]),
    ext_modules=ext_modules,
    cmdclass={"bdist_wheel": CachedWheelsCommand, "build_ext": BuildExtension}
    if ext_modules
    else {"bdist_wheel": CachedWheelsCommand},
    install_requires=["torch"],
    setup_requires=os.getenv("SAMPLE_SETUP_REQUIRES", "").split(),
)
