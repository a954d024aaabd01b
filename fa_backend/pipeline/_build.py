"""The build, cache-free: a plan in, a verified wheel out. prepare (build.ninja written, nothing
compiled), the upstream build, repack, verify; what stands around the compilers comes in as
Wrappers, from fleet/, which wraps this build with its caches. Every step asks the plan's flavour
(flavours/_interface) what differs between flavours, never which it is."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from ..core import _failures, _log
from ..core._errors import FaShimError
from ..core._version import __version__
from ..flavours._interface import Plan, Tools
from ..resources import GUARD
from ..resources.runtime_guard import PROVENANCE
from ..toolchain import _compile_commands, _jobs, _preflight
from ..wheel import _metadata
from ..wheel._wheelfile import WheelWriter
from . import _compile_plan, _progress, _reproducible, _stats, _upstream
from ._compile_plan import BARE, Prepared, Wrappers
from ._provenance import provenance


def prepare(plan: Plan, scratch: Path, tools: Tools, wrappers: Wrappers) -> Prepared:
    """Lay out and patch the sources, let torch write build.ninja (nothing compiled), check it;
    then the wrappers learn the compile commands and say which sources they serve."""
    log_dir = plan.settings.resolved_cache_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"flash-attn-{plan.version}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    shutil.rmtree(scratch / "src", ignore_errors=True)  # a prepare into a used directory
    source = plan.flavour.lay_out(plan, tools, scratch / "src")
    _reproducible.settle_times(scratch / "src")
    code, output, report = _upstream.run_setup(
        plan, tools, source, scratch / "dist", "prepare", log, wrappers
    )
    if code != 0:
        raise _upstream.failure(code, report, log, output)
    if not report.get("ninja_files"):
        raise FaShimError(
            "upstream setup.py declared no compiled extension (a py3-none-any "
            "build would not import).",
            fix=f"read the log: {log}",
        )
    ninja_file = Path(report["ninja_files"][-1])
    commands = _compile_commands.read(ninja_file)
    _compile_commands.verify_abi(commands, plan.torch.abi, ninja_file)
    if plan.tag.abi == "abi3":
        _compile_commands.verify_limited_api(commands, plan.tag.interpreter, ninja_file)
    if plan.stable_abi:
        _compile_commands.verify_stable_target(commands, plan.stable_abi, ninja_file)
    plan.flavour.check(plan, tools, commands)
    # the launcher's records, where the upstream run keeps them (Prepared.stats_file)
    _preflight.check(commands, ninja_file.parent, stats=_stats.stats_file(source.parent))
    sources = _progress.build_sources(commands)
    units = _compile_plan.make(
        plan, tools, sources, _jobs.available_cores(), _jobs.available_memory()
    )
    _compile_plan.apply(ninja_file, units)
    tools = dataclasses.replace(tools, jobs=units.jobs)
    cached = wrappers.units(tools, source, commands) if wrappers.units else frozenset()
    return Prepared(source, tools, ninja_file, commands, report, log, units, cached, wrappers)


def run_upstream_build(plan: Plan, prep: Prepared) -> Path:
    """Run upstream's bdist_wheel, again with a lowered compile plan after an out-of-memory kill
    (ninja keeps the objects already compiled); upstream's wheel, in the scratch."""
    dist = prep.source.parent / "dist"
    units = prep.compile_plan or _compile_plan.CompilePlan.jobs_only(prep.tools.jobs)
    started = time.monotonic()
    while True:
        code, output, report = _upstream.run_setup(
            plan, prep.tools, prep.source, dist, "wheel", prep.log, prep.wrappers, units
        )
        if code == 0:
            break
        lowered = units.lowered() if _upstream.killed_for_memory(output) else None
        if lowered is None:
            raise _upstream.failure(code, report, prep.log, output)
        done = len(_stats.compiled(prep.stats_file))
        _log.warn(_compile_plan.retry_message(units, lowered, done))
        units = lowered
    stats = _stats.compiled(prep.stats_file)
    _log.info(
        f"upstream build: {time.monotonic() - started:.0f} s, of which "
        f"{_stats.compile_span(stats):.0f} s compiling {len(stats)} translation units"
    )
    _compile_commands.verify_abi(
        _compile_commands.read(prep.ninja_file), plan.torch.abi, prep.ninja_file
    )
    built = sorted(dist.glob("*.whl"))
    if len(built) != 1:
        raise FaShimError(
            f"upstream bdist_wheel produced {len(built)} wheels in {dist}.",
            fix=f"read the log: {prep.log}",
        )
    return built[0]


# upstream's .dist-info files that travel into ours; the rest (METADATA, WHEEL, RECORD) we write
_KEPT_DIST_INFO = ("licenses/", "LICENSE", "AUTHORS")


def repack(plan: Plan, upstream_wheel: Path, target: Path, prov: dict) -> Path:
    """Upstream's files, streamed (never read whole), with our .dist-info (METADATA, tags,
    provenance, RECORD) and the runtime guard."""
    writer = WheelWriter(target, plan.dist_info)
    names = plan.names
    has_module = False
    with zipfile.ZipFile(upstream_wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            member = functools.partial(zf.open, info)  # streamed while upstream's wheel is open
            top = info.filename.split("/", 1)[0]
            if top.endswith(".dist-info"):
                rest = info.filename.split("/", 1)[1]
                if rest.startswith(_KEPT_DIST_INFO) or rest == "top_level.txt":
                    writer.add_stream(f"{plan.dist_info}/{rest}", member, info.file_size)
                continue
            has_module |= info.filename.startswith(names.module_path + ".") and (
                info.filename.endswith(".so")
            )
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            writer.add_stream(info.filename, member, info.file_size, mode)
        if not has_module:
            raise FaShimError(
                f"the upstream wheel contains no compiled {names.module_path}*.so; it "
                f"would fail with \"No module named '{names.module}'\".",
                fix="read the build log; was FLASH_ATTENTION_SKIP_CUDA_BUILD set?",
            )
        writer.add(names.guard_path, GUARD.read_bytes())
        for name, text in (
            ("METADATA", plan.metadata),
            ("WHEEL", _metadata.wheel_file(plan.tag, f"fa-shim {__version__}")),
            (PROVENANCE, json.dumps(prov, indent=2, sort_keys=True) + "\n"),
        ):
            writer.add(f"{plan.dist_info}/{name}", text.encode())
        return writer.write()  # while upstream's wheel is open: its members stream from it


def fresh_wheel(
    plan: Plan,
    tools: Tools,
    where: Path,
    out: Path,
    wrappers: Wrappers = BARE,
    how: dict | None = None,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Prepare in `where`, compile, repack into `out` and check (`check`, else verify): a
    wheel that fails is never returned; `how` receives what describes this run rather than the
    wheel (the cache entry's record)."""
    with _failures.doing(f"preparing the sources in {where}"):
        prep = prepare(plan, where, tools, wrappers)
    with _progress.watching(plan, prep), _failures.doing(f"building in {prep.source}"):
        upstream_wheel = run_upstream_build(plan, prep)  # the estimate, then progress
    started = time.monotonic()
    target = out / plan.wheel_name
    in_wheel, this_run = _reproducible.split(provenance(plan, prep), plan.flavour)
    with _failures.doing(f"repacking the wheel into {target}"):
        wheel = repack(plan, upstream_wheel, target, in_wheel)
    if how is not None:
        how.update(this_run, compiled_in=str(where), **_reproducible.circumstances())
    _log.info(f"repacked as {wheel.name} ({time.monotonic() - started:.1f} s)")
    (check or (lambda w: verify(plan, w)))(wheel)
    return wheel


def verify(plan: Plan, wheel: Path) -> None:
    from ..verify import _verify  # not on a hit whose bytes passed before (verify_once)

    started = time.monotonic()
    report = _verify.verify_wheel(wheel, plan.torch)
    report.raise_for_failures()
    _log.info(
        f"verified {wheel.name} against torch {plan.torch.version}: {report.summary()} "
        f"({time.monotonic() - started:.1f} s)"
    )
