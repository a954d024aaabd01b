"""Tailored kernel sets: only the head dims, dtypes and passes a user needs (docs/kernel-sets.md).
The other kernel sources are excluded, and macros make the dispatch patch raise for them instead of
referencing a kernel nobody compiled; the wheel's local version label names the set."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .. import api
from ..api import Command, FaShimError
from . import _releases, _tu_parts

if TYPE_CHECKING:
    from ..api import Settings

_SWITCH_ALIASES = {"uneven-k": "uneven_k", "unevenk": "uneven_k", "softcapping": "softcap"}


@dataclasses.dataclass(frozen=True)
class Tailoring:
    head_dims: tuple[str, ...]  # compiled; all of the version's when not tailored
    dtypes: tuple[str, ...]
    backward: bool
    disabled: tuple[str, ...]
    exclude_sources: tuple[str, ...]  # fnmatch patterns on source basenames (driver SPEC)
    defines: tuple[str, ...]  # appended to cxx and nvcc flags (driver SPEC)
    label: str  # "" or ".hdim128.bf16.fwd": appended to the wheel's local version label

    @property
    def full(self) -> bool:
        return not self.label

    @property
    def kernel_set(self) -> str:
        """The set's name as the C++ side reports it in errors (fa_shim::kernel_set())."""
        return self.label[1:] or "full"

    def describe(self) -> dict:
        """For the wheel's provenance: what was compiled and how."""
        return {
            "kernel_set": self.kernel_set,
            "head_dims": [int(d) for d in self.head_dims],
            "dtypes": list(self.dtypes),
            "backward": self.backward,
            "disabled": list(self.disabled),
            "defines": list(self.defines),
            "exclude_sources": list(self.exclude_sources),
        }


FULL = Tailoring((), (), True, (), (), (), "")


def tailoring(settings: Settings, version: str) -> Tailoring:
    """The kernel set the settings ask for; FULL when they ask for nothing to be left out."""
    asked = settings.head_dims or settings.dtypes or settings.forward_only or settings.disable
    release = _releases.release(version)
    space, naming = release.kernels, release.naming
    if space is None:
        if asked:
            raise FaShimError(
                f"tailored kernel sets (head-dims, dtypes, forward-only, disable) are not "
                f"available for flash-attn {version}: fa-shim has no dispatch patch for it.",
                fix="build the full set (drop those settings) or use flash-attn "
                + " or ".join(_releases.tailorable())
                + ".",
            )
        return FULL
    # each chooser returns some of the known names for some asked, none for none: all of them
    head_dims = api.head_dims(settings.head_dims, space.head_dims) or space.head_dims
    dtypes = api.choose_values(settings.dtypes, space.dtypes, api.DTYPE_ALIASES, "dtypes", "bf16")
    dtypes = dtypes or space.dtypes
    disabled = api.choose_values(
        settings.disable, space.switches, _SWITCH_ALIASES, "disable", "dropout"
    )
    backward = not settings.forward_only

    exclude, defines, words = [], [], []
    for chosen, known, sources, word in (
        (head_dims, space.head_dims, naming.head_dim_sources, "hdim{}"),
        (dtypes, space.dtypes, naming.dtype_sources, "{}"),
    ):
        if len(chosen) < len(known):
            words += [word.format(v) for v in chosen]
            for v in known:
                if v not in chosen:
                    exclude.append(sources.format(v))
                    defines.append(f"-DFA_SHIM_NO_{word.format(v).upper()}")
    if not backward:
        words.append("fwd")
        exclude.append(naming.pass_sources.format(naming.backward))
        defines.append("-DFA_SHIM_NO_BACKWARD")
    if defines:  # switches dispatch through the patch only when some kernel is left out
        defines.insert(0, "-DFA_SHIM_TAILORED")
    for name in disabled:
        words.append("no" + name.replace("_", ""))
        defines.append(f"-DFLASHATTENTION_DISABLE_{name.upper()}")
    label = "." + ".".join(words) if words else ""
    return Tailoring(head_dims, dtypes, backward, disabled, tuple(exclude), tuple(defines), label)


def expected_kernels(t: Tailoring, version: str) -> set[str]:
    """The kernel sources a build of this set compiles (named as the release names them)."""
    release = _releases.release(version)
    space, naming = release.kernels, release.naming
    assert space is not None, version
    passes = [*naming.forward, *([naming.backward] if t.backward else [])]
    return {
        naming.kernel.format(pass_=p, head_dim=d, dtype=dt, causal=c)
        for p in passes
        for d in (t.head_dims or space.head_dims)
        for dt in (t.dtypes or space.dtypes)
        for c in naming.causal
    }


def check_sources(commands: list[Command], t: Tailoring, version: str) -> None:
    """The build compiles exactly the set's kernels: a missing one would be an undefined symbol
    at import, an extra one wasted minutes (or an upstream renaming the patterns no longer hit).
    A source split into parts (_tu_parts) counts as that source, and needs all of its parts."""
    files = [c.file.rsplit("/", 1)[-1] for c in commands if c.kind == "nvcc"]
    compiled = {_tu_parts.source_of(f) for f in files}
    expected = compiled if t.full else expected_kernels(t, version)
    missing, extra = sorted(expected - compiled), sorted(compiled - expected)
    incomplete = _tu_parts.check_complete(files)
    if missing or extra or incomplete:
        details = [f"missing: {m}" for m in missing] + [f"unexpected: {e}" for e in extra]
        details += [f"incomplete parts: {p}" for p in incomplete]
        raise FaShimError(
            f"the build of kernel set {t.kernel_set} does not compile exactly its "
            f"{len(expected)} kernel sources ({len(missing)} missing, {len(extra)} unexpected, "
            f"{len(incomplete)} split into incomplete parts).",
            details="\n".join(details[:30]),
            fix="report this: flash-attn's source list differs from what fa-shim's kernel-set "
            "patterns expect; build without head-dims/dtypes/forward-only (or with -C "
            "tu-parts=1) meanwhile.",
        )
