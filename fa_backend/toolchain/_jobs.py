"""How many compile jobs (ninja -j / MAX_JOBS) and nvcc threads (NVCC_THREADS) to run. Memory,
not cores, kills flash-attn builds (one nvcc job, one kernel, one arch: 4-6 GB measured), and
upstream's default ignores container limits: `plan_jobs` sizes both from *available* memory."""

from __future__ import annotations

import math
import os
from pathlib import Path

GIB = 1024**3
JOB_BYTES_ONE_ARCH = 6 * GIB  # top of the measured 4-6 GB: an OOM costs more than a slower build
JOB_BYTES_PER_EXTRA_ARCH = 1 * GIB  # 6 + 3 = 9 GB at 4 concurrent archs, upstream's figure
CGROUP = Path("/sys/fs/cgroup")


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def job_bytes(concurrent_archs: int) -> int:
    """Peak memory of one nvcc job compiling `concurrent_archs` architectures at once."""
    return JOB_BYTES_ONE_ARCH + JOB_BYTES_PER_EXTRA_ARCH * (max(1, concurrent_archs) - 1)


def plan_jobs(
    cores: int,
    available_bytes: int,
    n_archs: int,
    max_jobs_setting: int | None = None,
    nvcc_threads_setting: int | None = None,
    n_sources: int | None = None,
) -> tuple[int, int]:
    """(jobs, nvcc threads) that keep the most compilers (min(threads, n_archs) per job, one per
    core) busy within memory; on a tie more jobs, which overlap nvcc's serial host steps.
    Settings are taken as given; n_sources caps jobs (threads pay off for small kernel sets)."""
    cores, n_archs = max(1, cores), max(1, n_archs)
    if max_jobs_setting and nvcc_threads_setting:
        return max_jobs_setting, nvcc_threads_setting
    source_cap = max(1, n_sources) if n_sources else math.inf
    options = [nvcc_threads_setting] if nvcc_threads_setting else range(1, min(n_archs, cores) + 1)
    plans: list[tuple[tuple[int, int], int, int]] = []  # (key, jobs, threads)
    for threads in options:
        per_job = min(threads, n_archs)
        if max_jobs_setting:
            jobs = max_jobs_setting
            if jobs * job_bytes(per_job) > available_bytes and per_job != 1:
                continue  # does not fit
        else:
            by_cores = cores // per_job
            by_memory = available_bytes // job_bytes(per_job)
            jobs = int(max(1, min(by_cores, by_memory, source_cap)))
        plans.append(((min(jobs * per_job, cores), jobs), jobs, threads))  # busy, then jobs
    _, jobs, threads = max(plans, key=lambda plan: plan[0])  # the first of equals
    return jobs, threads


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cgroup_dirs(root: Path = CGROUP, proc: Path = Path("/proc/self/cgroup")) -> list[Path]:
    """This process's cgroup directories (v2's `0::/path`, else v1's memory controller), its own
    first, then each parent up to the mount: a Slurm job's limit sits below the mount's top."""
    found: list[Path] = []
    for line in (_read(proc) or "").splitlines():
        _id, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":
            base = root
        elif "memory" in controllers.split(","):
            base = root / "memory"
        else:
            continue
        here = base / path.strip("/")
        found += [here, *(p for p in here.parents if p.is_relative_to(base))]
    return list(dict.fromkeys(found)) or [root, root / "memory"]


def available_cores(root: Path = CGROUP) -> int:
    """Cores this process may use: its CPU affinity, capped by its cgroups' tightest v2 quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    for directory in cgroup_dirs(root):
        quota = _read(directory / "cpu.max")  # "max 100000" or "200000 100000"
        if quota and not quota.startswith("max"):
            limit, period = (int(x) for x in quota.split()[:2])
            cores = min(cores, max(1, limit // period))
    return max(1, cores)


def available_memory() -> int:
    """Memory a build can still take: MemAvailable (else POSIX's free pages), capped by what
    the cgroups leave (in a container or a Slurm job the host's free memory is not ours)."""
    meminfo = _read("/proc/meminfo") or ""
    line = next((x for x in meminfo.splitlines() if x.startswith("MemAvailable:")), None)
    if line:
        available = int(line.split()[1]) * 1024
    else:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    left = cgroup_memory_left(cgroup_dirs())
    return available if left is None else min(available, left)


def cgroup_memory_left(directories: Path | list[Path] = CGROUP) -> int | None:
    """What the tightest memory limit of these cgroups (v2's or v1's files) leaves after their
    usage, or None without a limit. A single directory is a mount's top (v1's under memory/)."""
    if isinstance(directories, Path):
        directories = [directories, directories / "memory"]
    lefts = []
    for directory in directories:
        for limit_file, usage_file in (
            ("memory.max", "memory.current"),
            ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        ):
            limit, usage = _read(directory / limit_file), _read(directory / usage_file)
            if limit and usage and limit.isdigit() and usage.isdigit() and int(limit) < 2**60:
                lefts.append(max(0, int(limit) - int(usage)))
    return min(lefts, default=None)


def describe(
    jobs: int, threads: int, cores: int, memory: int, n_archs: int, cut: str | None = None
) -> str:
    """The build's one line on its compile jobs, with why they are fewer than planned."""
    return (
        f"{jobs} compile job(s) x {threads} nvcc thread(s) ({cores} cores, "
        f"{gib(memory)} available, {n_archs} architecture(s)"
        + (f"; {cut}" if cut else "")
        + "; override with -C max-jobs / -C nvcc-threads)"
    )
