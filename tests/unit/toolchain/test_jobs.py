"""Compile parallelism: jobs and nvcc threads from cores and available memory."""

from __future__ import annotations

import pytest

from fa_backend.settings._settings import Settings
from fa_backend.toolchain import _jobs
from fa_backend.toolchain._jobs import GIB, plan_jobs


def test_one_arch_uses_jobs_not_threads():
    # threads cannot help with one architecture; cores and memory both allow 16 jobs
    assert plan_jobs(16, 200 * GIB, 1) == (16, 1)


def test_memory_bounds_jobs():
    # 2 cores, 22 GB (this dev box): 6 GB per job leaves room for both cores
    assert plan_jobs(2, 22 * GIB, 1) == (2, 1)
    # 64 cores but 32 GB: five 6-GB jobs, not upstream's cores/2 = 32
    assert plan_jobs(64, 32 * GIB, 1) == (5, 1)


def test_never_below_one_job():
    assert plan_jobs(8, 1 * GIB, 1) == (1, 1)
    assert plan_jobs(0, 0, 0) == (1, 1)


def test_threads_win_when_memory_bound_with_several_archs():
    # 16 cores, 32 GB, 4 archs: 5 single-thread jobs keep 5 compilers busy; 4 jobs x 3 threads
    # (8 GB each) and 3 x 4 (9 GB each) keep 12 busy: the tie goes to more jobs
    assert plan_jobs(16, 32 * GIB, 4) == (4, 3)


def test_jobs_preferred_on_a_tie():
    # enough memory for everything: 16 jobs x 1 thread and 4 x 4 both fill 16 cores
    assert plan_jobs(16, 500 * GIB, 4) == (16, 1)


def test_few_sources_use_threads():
    # a tailored set of 4 kernel files on 16 cores: 4 jobs, each compiling its 4 archs at once
    assert plan_jobs(16, 500 * GIB, 4, n_sources=4) == (4, 4)


def test_threads_never_exceed_archs_unless_asked():
    jobs, threads = plan_jobs(64, 500 * GIB, 2, n_sources=1)
    assert (jobs, threads) == (1, 2)


def test_settings_override():
    assert plan_jobs(16, 500 * GIB, 4, max_jobs_setting=3, nvcc_threads_setting=8) == (3, 8)
    # only threads given: jobs fill the rest (16 cores / 2 per job), memory allows 8 x 7 GB
    assert plan_jobs(16, 500 * GIB, 4, nvcc_threads_setting=2) == (8, 2)
    # only jobs given: threads fill the cores if memory allows (4 jobs x 4 archs x ... )
    assert plan_jobs(16, 500 * GIB, 4, max_jobs_setting=4) == (4, 4)
    # ... and fall back to one thread when it would not fit
    assert plan_jobs(16, 20 * GIB, 4, max_jobs_setting=3) == (3, 1)


@pytest.mark.parametrize("cores", [1, 2, 3, 8, 13, 64])
@pytest.mark.parametrize("gib", [2, 7, 24, 100, 1000])
@pytest.mark.parametrize("archs", [1, 2, 4])
def test_plan_respects_its_budget(cores, gib, archs):
    jobs, threads = plan_jobs(cores, gib * GIB, archs)
    assert 1 <= threads <= archs
    per_job = min(threads, archs)
    assert jobs * per_job <= max(cores, per_job)
    if jobs > 1:  # the floor of one job may exceed memory; more than one never does
        assert jobs * _jobs.job_bytes(per_job) <= gib * GIB


def test_machine_probes_are_sane():
    assert _jobs.available_cores() >= 1
    assert 0 < _jobs.available_memory() < 2**60


def test_settings_are_taken_as_given_and_the_line_says_so():
    s = Settings(max_jobs=3, nvcc_threads=2)
    assert plan_jobs(2, 64 * GIB, 2, s.max_jobs, s.nvcc_threads) == (3, 2)
    line = _jobs.describe(3, 2, 2, 64 * GIB, 2)
    assert "3 compile job(s) x 2 nvcc thread(s)" in line
    # a flavour's cut is said in the same line: one job count, never two
    cut = _jobs.describe(5, 1, 16, 120 * GIB, 1, "not 16: a unit needs 22 GiB")
    assert cut.startswith("5 compile job(s) x 1 nvcc thread(s)") and "not 16" in cut


# ------------------------------------------------------------ the cgroup's memory limit (files)


def _cgroup(root, files: dict[str, str]):
    """A directory laid out like /sys/fs/cgroup, holding these files (kernel-style: newline)."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


def test_cgroup_v2_limit_minus_usage(tmp_path):
    root = _cgroup(tmp_path, {"memory.max": str(16 * GIB), "memory.current": str(10 * GIB)})
    assert _jobs.cgroup_memory_left(root) == 6 * GIB


def test_cgroup_v2_max_is_no_limit(tmp_path):
    root = _cgroup(tmp_path, {"memory.max": "max", "memory.current": str(3 * GIB)})
    assert _jobs.cgroup_memory_left(root) is None


def test_cgroup_v1_limit_and_its_no_limit_value(tmp_path):
    v1 = {"memory/memory.limit_in_bytes": str(8 * GIB), "memory/memory.usage_in_bytes": str(GIB)}
    assert _jobs.cgroup_memory_left(_cgroup(tmp_path / "a", v1)) == 7 * GIB
    unlimited = {**v1, "memory/memory.limit_in_bytes": "9223372036854771712"}  # v1's "none"
    assert _jobs.cgroup_memory_left(_cgroup(tmp_path / "b", unlimited)) is None


def test_cgroup_usage_over_the_limit_leaves_nothing(tmp_path):
    root = _cgroup(tmp_path, {"memory.max": str(4 * GIB), "memory.current": str(5 * GIB)})
    assert _jobs.cgroup_memory_left(root) == 0


def test_no_cgroup_files_no_limit(tmp_path):
    assert _jobs.cgroup_memory_left(tmp_path) is None
    half = _cgroup(tmp_path / "half", {"memory.max": str(4 * GIB)})  # usage unreadable
    assert _jobs.cgroup_memory_left(half) is None


def test_a_slurm_jobs_limit_below_the_mount_is_found(tmp_path):
    """cgroup v2 as slurmd lays it out: the job's --mem on job_<id>, the step's task below it,
    nothing at the mount's top (outside a cgroup namespace the top is the node's)."""
    job = "system.slice/slurmstepd.scope/job_42"
    root = _cgroup(
        tmp_path / "cg",
        {
            f"{job}/memory.max": str(32 * GIB),
            f"{job}/memory.current": str(2 * GIB),
            f"{job}/step_0/user/task_0/memory.max": "max",
            f"{job}/step_0/user/task_0/memory.current": str(GIB),
        },
    )
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::/{job}/step_0/user/task_0\n")
    dirs = _jobs.cgroup_dirs(root, proc)
    assert dirs[0] == root / job / "step_0/user/task_0" and dirs[-1] == root
    assert _jobs.cgroup_memory_left(dirs) == 30 * GIB
    assert _jobs.cgroup_memory_left(root) is None  # the top alone: what fa-shim read before


def test_the_tightest_limit_of_the_chain_counts_and_v1_is_read_under_memory(tmp_path):
    root = _cgroup(
        tmp_path / "cg",
        {
            "memory/a/memory.limit_in_bytes": str(8 * GIB),
            "memory/a/memory.usage_in_bytes": str(GIB),
            "memory/a/b/memory.limit_in_bytes": str(64 * GIB),  # looser than its parent
            "memory/a/b/memory.usage_in_bytes": str(GIB),
        },
    )
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu,cpuacct:/a/b\n4:memory:/a/b\n0::/\n")
    dirs = _jobs.cgroup_dirs(root, proc)
    assert dirs[:3] == [root / "memory/a/b", root / "memory/a", root / "memory"]
    assert _jobs.cgroup_memory_left(dirs) == 7 * GIB


def test_an_unreadable_proc_file_falls_back_to_the_mounts_top(tmp_path):
    assert _jobs.cgroup_dirs(tmp_path, tmp_path / "missing") == [tmp_path, tmp_path / "memory"]
