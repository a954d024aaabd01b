"""What doctor predicts about a build here, asked of the build's own code: its requirement check
(`_requirements.check`), its plan and toolchain (`_build.plan`, `_build.toolchain`: the wheel,
kernel set, architectures and jobs), the estimate block (`_estimate.preview`) and the wheel
cache lookup under the build's fingerprint. Nothing is compiled or downloaded: the plan is made
offline, and without a local sdist the prediction says so and stops there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..core._errors import FaShimError, NotLocal
from ..flavours import _registry
from ..flavours._interface import Tools
from ..fleet import _wheel_cache
from ..pipeline import _build, _estimate
from ..toolchain import _jobs, _requirements
from ..verify._report import ERROR

HIT_SECONDS = "3-5 s"  # recorded cache hits (docs/benchmarks.md): the copy and its verify


@contextlib.contextmanager
def in_project(path: Path) -> Iterator[None]:
    """The build reads [tool.fa-shim] of the project it runs in (cwd)."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def requirements_section(report) -> None:
    """fa-shim's build requirements, checked exactly as a --no-build-isolation build does."""
    unmet = _requirements.unmet()
    if not unmet:
        names = ", ".join(str(r) for r in _requirements.requirements())
        report.add("requires", {"unmet": []}, f"all installed ({names})")
        return
    report.add("requires", {"unmet": unmet}, "MISSING: " + ", ".join(unmet))
    try:
        _requirements.check()
    except FaShimError as exc:  # the build's own message and fix (torch's constraints kept)
        report.problem("requires", ERROR, "a build would stop at once: " + exc.cause, exc.fix or "")


def _stop(report, data: dict, exc: FaShimError) -> None:
    """The build would stop here. Counted as an error unless the report already has one
    (each other section reports its own cause: no double count)."""
    data["stops"] = exc.cause
    report.add("build", data, f"a build would stop: {exc.cause}")
    if report.ok:
        report.problem("build", ERROR, "a build would stop: " + exc.cause, exc.fix or "")


def build_section(report, project: Path) -> None:
    """The wheel, kernel set, architectures, estimate and wheel-cache state of a build here."""
    data: dict = {}
    try:
        with in_project(project):
            plan = _build.plan({"offline": "true"})  # doctor never downloads
    except NotLocal as exc:  # doctor's own offline: a build stops only where the user's is
        with in_project(project):
            if _registry.load_settings({}).offline:
                _stop(report, data, exc)
                return
        data["downloads"] = exc.cause
        report.add(
            "build",
            data,
            "the sources are not on this machine: a build downloads them first",
            "(run doctor again afterwards for the estimate and the wheel-cache state)",
        )
        return
    except FaShimError as exc:
        _stop(report, data, exc)
        return
    data.update(wheel=plan.wheel_name, kernel_set=plan.kernel_set)
    try:
        tools = _build.toolchain(plan)
    except FaShimError as exc:
        _stop(report, data, exc)
        return
    lines = [plan.wheel_name]
    data["archs"] = list(tools.archs.targets) if tools.archs else None
    sources = plan.flavour.planned_sources(plan, tools)
    if sources is not None:
        preview = _estimate.preview(plan, tools, sources, _jobs.available_cores())
        data["estimate_s"] = round(preview.seconds) if preview.seconds is not None else None
        data["sources"] = len(sources)
        first, *rest = preview.lines  # what a build prints before compiling
        lines += [first.replace("about to compile", "would compile"), *(r.strip() for r in rest)]
    settings = plan.settings
    if not settings.wheel_cache:
        data["cache"] = "off"
        lines.append("wheel cache off (-C wheel-cache=false): every build compiles")
    else:
        root = settings.resolved_wheel_cache_dir
        key = _wheel_cache.key(_build.fingerprint(plan, tools))
        hit = _wheel_cache.lookup(root, key, plan.wheel_name)
        data.update(cache="hit" if hit else "miss", cache_key=key, cached=str(hit) if hit else None)
        lines.append(
            f"would be a wheel-cache hit: {hit} (~{HIT_SECONDS}, no compile)"
            if hit
            else f"not in the wheel cache {root} (fingerprint {key}): a build compiles"
        )
    if sources is None:
        lines.insert(
            1,
            f"kernel set {plan.flavour.kernel_set_name(plan)}; no estimate: fa-shim does not "
            f"know {plan.names.dist} {plan.flavour.upstream_version(plan)}'s kernel sources",
        )
    report.add("build", data, *lines)


def archs_to_compile(flavour, settings, torch, nvcc) -> tuple[list[str], str]:
    """The sm_XX a build would compile: the build's own choice (the flavour's archs)."""
    # the settings did not load (doctor then has empty ones): no version to map onto; a project
    # that loaded says something (FA3's pyproject its fa3-release, FA2's its flash-attn-version)
    if not settings.flash_attn_version and not settings.given:
        return [], "unknown: no flash-attn version configured"
    try:
        choice = flavour.archs(settings, torch, nvcc.path)
    except FaShimError as exc:
        return [], f"none: {exc.cause}"
    return list(choice.targets), str(choice.selection.source)


def build_tools(project: Path) -> tuple[Tools | None, str]:
    """The toolchain decisions a build here would make, by the build's own code (_build.plan
    and _build.toolchain: jobs sized with the number of kernel sources, tu-parts), or why no
    build could start. Offline: doctor never downloads the sdist."""
    try:
        with in_project(project):  # pip runs the backend there: its [tool.fa-shim] counts
            return _build.toolchain(_build.plan({"offline": "true"})), ""
    except NotLocal:
        return None, "the sources are not on this machine yet"
    except FaShimError as exc:
        return None, exc.cause.rstrip(".")
