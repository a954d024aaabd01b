"""A third flavour, written against fa-shim's public flavour API alone (fa_backend.flavours.api)
(tests/integration/test_flavours.py): it builds the sample sdist as the distribution
`fa-shim-demo`. It is found through its `fa_shim.flavours` entry point
(fa_shim_demo_flavour-0.1.dist-info/entry_points.txt) once this directory is on the build's
import path, as any installed plug-in would be."""

from __future__ import annotations

import hashlib
import re
import tarfile
from pathlib import Path

from fa_backend.flavours.api import (
    FaShimError,
    Flavour,
    Names,
    Plan,
    Setting,
    Sizing,
    core_metadata,
    full_version,
    read_pkg_info,
    torch_requirement,
    wheel_tag,
)


class Demo(Flavour):
    names = Names("demo", "fa-shim-demo", "flash_attn", "flash_attn_2_cuda", abi3=False)
    own_settings = (  # declared here, known to fa-shim's settings once the plug-in is installed
        Setting("demo-sdist", None, "path", "The demo flavour: the sdist it builds as its own."),
    )

    def plan(self, settings, torch) -> Plan:
        sdist = settings.demo_sdist
        if not sdist or not sdist.is_file():
            raise FaShimError(
                "the demo flavour builds -C demo-sdist=FILE.", fix="pass -C demo-sdist=FILE."
            )
        pkg_info = read_pkg_info(sdist)
        info = re.sub(r"^Name: .*$", f"Name: {self.names.dist}", pkg_info, count=1, flags=re.M)
        upstream = next(line for line in info.splitlines() if line.startswith("Version:"))
        version = full_version(upstream.split(":", 1)[1].strip(), "demo." + torch.label)
        metadata = core_metadata(info, version, torch_requirement(torch.version))
        tag = wheel_tag(self.names)
        return Plan(settings, torch, self, sdist, (), version, tag, metadata)

    def sources(self, plan, with_origin):
        digest = hashlib.sha256(plan.source.read_bytes()).hexdigest()
        return {"sha256": digest, **({"file": plan.source.name} if with_origin else {})}

    def upstream_version(self, plan):
        return plan.version.split("+", 1)[0]

    def kernel_set(self, plan):
        return {"label": "sample"}

    def needs_nvcc(self, plan):
        return False  # the sample compiles C++ only against this CPU torch

    def archs(self, settings, torch, nvcc):
        raise AssertionError("no nvcc, no architectures")

    def sizing(self, plan, archs, cores, memory):
        return Sizing(jobs=min(2, cores), threads=1)

    def lay_out(self, plan, tools, dest: Path) -> Path:
        dest.mkdir(parents=True)
        with tarfile.open(plan.source) as tar:
            tar.extractall(dest, filter="data")
        (root,) = dest.iterdir()
        return root

    def check(self, plan, tools, commands):
        if not any(c.file.endswith("flash_api.cpp") for c in commands):
            raise FaShimError("the sample's flash_api.cpp is not compiled.", fix="report this.")

    def disk_needs(self, plan, tools):
        size = plan.source.stat().st_size
        return 50 * size, 10 * size


FLAVOUR = Demo()
