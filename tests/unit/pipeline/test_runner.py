"""The upstream build child's runner (fa_backend/pipeline/_upstream.py): the out-of-memory diagnosis
that drives the retry with fewer jobs, in the compiler's own words. The launcher's records on
real processes: tests/integration/test_launcher.py."""

from __future__ import annotations

from fa_backend.pipeline import _upstream


def test_oom_kills_are_recognised_in_compiler_words():
    assert _upstream.killed_for_memory("g++: fatal error: Killed signal terminated program cc1plus")
    assert _upstream.killed_for_memory("nvcc error   : 'cicc' died due to signal 9 (Kill signal)")
    assert _upstream.killed_for_memory("fa-shim: the compiler was killed by signal 9 (SIGKILL)")
    assert not _upstream.killed_for_memory("error: expected ';' before '}' token")


def test_oom_kills_reported_by_ninja_and_the_shell_and_other_signals_are_not():
    assert _upstream.killed_for_memory("[3/9] nvcc ...\nKilled\nninja: build stopped")  # the shell
    assert _upstream.killed_for_memory("FAILED: a.o\nsubcommand failed with exit status 137")
    assert not _upstream.killed_for_memory("the compiler was killed by signal 15 (SIGTERM)")
    assert not _upstream.killed_for_memory("Killed 3 processes before the build\n")  # not a line
