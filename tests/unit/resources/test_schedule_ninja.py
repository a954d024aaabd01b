"""What the upstream driver does to the build.ninja torch writes (resources/upstream_driver.
schedule_ninja): the compile edges in the planned order, the memory classes' pools declared and
named on their edges, everything else (rules, the link line's object order) as torch wrote it;
a second pass changes nothing. ninja itself reads the result (tests/integration/
test_oom_heavy_retry.py builds through it)."""

from __future__ import annotations

from fa_backend.resources.upstream_driver import schedule_ninja

TORCH_WROTE = """\
ninja_required_version = 1.3
cxx = c++

rule compile
  command = $cxx -c $in -o $out
  depfile = $out.d

build /b/flash_api.o: compile /s/flash_api.cpp
build /b/a$ b.o: compile /s/a$ b.cu
build /b/heavy.o: compile /s/heavy.cu
build /b/light.o: compile /s/light.cu
  extra = 1

build /b/m.so: link /b/flash_api.o /b/a$ b.o /b/heavy.o /b/light.o
"""


def edges(text):
    return [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("build ")]


def test_the_plan_orders_the_compile_edges_and_pools_the_heavy_ones():
    spec = {
        "unit_order": ["heavy.cu", "a b.cu", "light.cu", "flash_api.cpp"],
        "pools": {"fa_shim_mem_22g": 1},
        "unit_pools": {"heavy.cu": "fa_shim_mem_22g"},
    }
    out = schedule_ninja(TORCH_WROTE, spec)
    assert edges(out) == [
        "compile /s/heavy.cu",
        "compile /s/a$ b.cu",
        "compile /s/light.cu",
        "compile /s/flash_api.cpp",
        "link /b/flash_api.o /b/a$ b.o /b/heavy.o /b/light.o",  # upstream's object order
    ]
    assert "pool fa_shim_mem_22g\n  depth = 1\nbuild /b/heavy.o" in out
    assert "build /b/heavy.o: compile /s/heavy.cu\n  pool = fa_shim_mem_22g\n" in out
    assert "build /b/light.o: compile /s/light.cu\n  extra = 1\n" in out  # its variables follow
    assert out.count("pool = ") == 1
    assert schedule_ninja(out, spec) == out  # torch rewrites the file; a second pass is a no-op


def test_without_a_plan_the_flavours_patterns_order_them():
    out = schedule_ninja(TORCH_WROTE, {"heavy_sources_first": ["heavy*", "light*"]})
    assert edges(out)[:4] == [
        "compile /s/heavy.cu",
        "compile /s/light.cu",
        "compile /s/flash_api.cpp",
        "compile /s/a$ b.cu",
    ]
    assert "pool" not in out
    assert schedule_ninja(TORCH_WROTE, {}) == TORCH_WROTE
