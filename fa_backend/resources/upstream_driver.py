"""Runs upstream setup.py in a child interpreter, under fa-shim's rules; executed by path
(`python upstream_driver.py SPEC.json`), so it imports nothing from fa_backend. It forbids the
network to upstream's Python (exit 86; children are sealed by _seal), injects `-std=` and
`-D_GLIBCXX_USE_CXX11_ABI=` into every extension's flags (it wraps setuptools.setup), and
records the build.ninja files torch writes ("prepare" mode stops right after that). Torch-free
kernels compile without torch's and Python's include paths and torch-only defines, so that their
commands are the same under every torch and Python of one C++ ABI (compiler caches' keys)."""

import fnmatch
import importlib.util
import json
import os
import re
import runpy
import shlex
import socket
import sys

# defines torch's cpp_extension adds that only torch's, pybind11's and Python's headers read
TORCH_ONLY_DEFINES = (
    "-DTORCH_EXTENSION_NAME=",
    "-DTORCH_API_INCLUDE_EXTENSION_H",
    "-DPYBIND11_COMPILER_TYPE=",
    "-DPYBIND11_STDLIB=",
    "-DPYBIND11_BUILD_ABI=",
    "-DPy_LIMITED_API=",  # torch adds it to every source of a py_limited_api extension
)
BLOCKED_EXIT = 86  # the exit status of a build the network guard ended (fa-shim imports it)
SPEC: dict = {}  # the run's JSON spec, read by main()
REPORT = {"ninja_files": [], "extensions": [], "blocked": None}


def _write_report():
    with open(SPEC["report"], "w") as f:
        json.dump(REPORT, f, indent=1)


def _forbid(what):
    REPORT["blocked"] = str(what)
    _write_report()
    sys.stderr.write(
        f"\nfa-shim: upstream build code tried to reach the network ({what}).\n"
        "fa-shim: downloads during the build are forbidden, so no prebuilt binary can replace "
        "the one compiled against your torch.\n"
    )
    sys.stderr.flush()
    os._exit(BLOCKED_EXIT)  # cannot be swallowed by an `except Exception` in setup.py


def _audit(event, args):
    if event == "urllib.Request":
        if not str(args[0]).startswith("file:"):
            _forbid(args[0])
    elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        sock, address = args[0], args[-1]
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _forbid(f"{event.split('.')[1]} {address}")
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
        _forbid(f"{event.split('.')[1]} {args[0]}")


def _loopback_up():
    """In the network namespace _seal made, lo starts down: bring it up so that a local server
    (sccache's) still works; nothing outside the namespace is reachable through it."""
    import fcntl
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifreq = fcntl.ioctl(s, siocgifflags, struct.pack("16sH14x", b"lo", 0))
            flags = struct.unpack("16sH14x", ifreq)[1]
            fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))
    except OSError:
        pass  # no CAP_NET_ADMIN here: lo stays down, which seals even more


def _std_number(flag):
    match = re.fullmatch(r"-std=(?:c|gnu)\+\+(\d+)", flag)
    return int(match.group(1)) if match else None


def _tailor_sources(ext):
    """Drop the kernel sources a tailored build leaves out (patterns match the path's name)."""
    patterns = SPEC.get("exclude_sources") or []
    kept = [
        s
        for s in ext.sources
        if not any(fnmatch.fnmatch(os.path.basename(str(s)), p) for p in patterns)
    ]
    REPORT.setdefault("excluded_sources", []).extend(
        os.path.basename(str(s)) for s in ext.sources if s not in kept
    )
    # a source compiled as other files (FA2's parts, FA3's per-head-dim units) is compiled as
    # those; an empty list drops it (an FA3 aggregate whose every file the set leaves out)
    split = SPEC.get("split_sources") or {}
    expanded = []
    for source in kept:
        directory, name = os.path.split(str(source))
        parts = split.get(name)
        expanded += [source] if parts is None else [os.path.join(directory, p) for p in parts]
    ext.sources = expanded


# a compile edge as torch writes it: `build OBJ: RULE SRC` ($ escapes ninja's specials)
_EDGE = re.compile(
    r"^build (?:[^$:\n]|\$.)+: (?P<rule>\S+) (?P<src>(?:[^$ \n]|\$.)+\.(?:cu|cpp|cc|cxx|c))$"
)


def schedule_ninja(text, spec):
    """build.ninja's compile edges in the order fa-shim planned (ninja starts edges in file
    order: the slowest must not start last), by spec["unit_order"], else
    spec["heavy_sources_first"]; spec["pools"] and spec["unit_pools"] cap each memory class."""
    items: list = []  # plain lines; each compile edge with the indented lines that follow it
    in_pool = False  # a pool of an earlier pass, declared again below
    for line in text.split("\n"):
        indented = line.startswith((" ", "\t"))
        in_pool = line.startswith("pool ") or (in_pool and indented)
        if in_pool:
            continue
        if _EDGE.match(line):
            items.append([line])
        elif indented and items and isinstance(items[-1], list):
            items[-1].append(line)
        else:
            items.append(line)
    edges = [item for item in items if isinstance(item, list)]
    if not edges:
        return text
    order = {name: i for i, name in enumerate(spec.get("unit_order") or [])}
    first = spec.get("heavy_sources_first") or []
    pools = spec.get("pools") or {}
    unit_pools = {k: v for k, v in (spec.get("unit_pools") or {}).items() if v in pools}

    def name(edge):
        return os.path.basename(re.sub(r"\$(.)", r"\1", _EDGE.match(edge[0])["src"]))

    def weight(k):
        n = name(edges[k])
        pattern = next((i for i, p in enumerate(first) if fnmatch.fnmatch(n, p)), len(first))
        return (order.get(n, len(order)), pattern, k)

    placed = iter(sorted(range(len(edges)), key=weight))
    out, declared = [], False
    for item in items:
        if not isinstance(item, list):
            out.append(item)
            continue
        if not declared:  # ninja needs a pool declared before an edge names it
            for pool, depth in sorted(pools.items()):
                out += [f"pool {pool}", f"  depth = {depth}"]
            declared = True
        edge = edges[next(placed)]
        pool = unit_pools.get(name(edge))
        out += [edge[0], *(v for v in edge[1:] if not v.strip().startswith("pool ="))]
        out += [f"  pool = {pool}"] if pool else []
    return "\n".join(out)


def _inject(ext):
    """Append the ABI define last and set one -std (nvcc rejects two) in cxx and nvcc flags."""
    _tailor_sources(ext)
    args = ext.extra_compile_args
    if isinstance(args, dict):
        args = {key: list(value) for key, value in args.items()}
    else:  # a plain list applies to every compiler, as in torch's cpp_extension
        args = {"cxx": list(args or []), "nvcc": list(args or [])}
    injected = {}
    for key in ("cxx", "nvcc"):
        flags = args.get(key, [])
        stds = [n for n in map(_std_number, flags) if n]
        if not (key == "nvcc" and stds and SPEC.get("torch_free_kernels")):
            stds.append(int(SPEC["cxx_std"][3:]))  # torch's headers need torch's standard
        added = [
            *SPEC.get("defines", []),
            f"-std=c++{max(stds)}",
            f"-D_GLIBCXX_USE_CXX11_ABI={SPEC['abi']}",
        ]
        # prefix maps and -g0 for cxx (fa-shim's _reproducible) before the ABI define, which
        # must stay last; the maps name this build's directories: the provenance lists neither
        mapped = list((SPEC.get("prefix_flags") or {}).get(key, []))
        args[key] = [f for f in flags if _std_number(f) is None] + mapped + added
        injected[key] = added
    ext.extra_compile_args = args
    REPORT["extensions"].append(
        {"name": ext.name, "sources": len(ext.sources), "injected": injected}
    )


def torch_and_python_dirs(torch_dir, python_includes, venv_include, cuda_include):
    """The include directories a torch-free kernel must not be given: torch's package and
    Python's headers, and the venv's include directory (distutils adds it) unless it is the
    toolkit's (a conda environment holds both)."""
    dirs = [torch_dir, *python_includes]
    if not cuda_include or os.path.realpath(venv_include) != os.path.realpath(cuda_include):
        dirs.append(venv_include)
    return [os.path.realpath(d) for d in dirs if d]


def torch_free(flags, dirs):
    """nvcc flags (each one shell-quoted word, as torch writes them) without the include paths
    under `dirs` and torch's defines; the C++ ABI define stays, as every command needs it."""
    kept = []
    for quoted in flags or []:
        words = shlex.split(quoted)
        word = words[0] if len(words) == 1 else ""
        path = os.path.realpath(word[2:]) if word.startswith("-I") else None
        if word.startswith(TORCH_ONLY_DEFINES) or (
            path and any(path == d or path.startswith(d + os.sep) for d in dirs)
        ):
            continue
        kept.append(quoted)
    return kept


def _torch_free_kwargs(kwargs):
    import sysconfig

    import torch
    from torch.utils import cpp_extension

    paths = sysconfig.get_paths()
    cuda_home = getattr(cpp_extension, "CUDA_HOME", None)
    dirs = torch_and_python_dirs(
        os.path.dirname(torch.__file__),
        [paths.get("include"), paths.get("platinclude")],
        os.path.join(sys.exec_prefix, "include"),
        os.path.join(cuda_home, "include") if cuda_home else None,
    )
    for name in ("cuda_cflags", "cuda_post_cflags"):
        if kwargs.get(name) is not None:
            kwargs[name] = torch_free(kwargs[name], dirs)


class _Prepared(BaseException):
    """Raised in prepare mode once torch has written build.ninja."""


def _install_hooks():
    import setuptools
    from torch.utils import cpp_extension

    original_setup = setuptools.setup

    def wrap_ninja_writer():
        original_write = cpp_extension._write_ninja_file
        if getattr(original_write, "_fa_shim", False):
            return

        def write_ninja_file(*args, **kwargs):
            path = kwargs.get("path", args[0] if args else None)
            REPORT["ninja_files"].append(os.path.abspath(path))
            _write_report()
            if SPEC.get("torch_free_kernels"):  # torch passes its flags by keyword
                _torch_free_kwargs(kwargs)
            written = original_write(*args, **kwargs)
            with open(path) as f:
                text = f.read()
            if (scheduled := schedule_ninja(text, SPEC)) != text:
                with open(path, "w") as f:
                    f.write(scheduled)
            return written

        write_ninja_file._fa_shim = True
        cpp_extension._write_ninja_file = write_ninja_file

    def setup(*args, **kwargs):
        # setup_requires the flavour says fa-shim meets: setuptools would fetch them through
        # pip inside the seal (retries, then a failed build where no index answers offline)
        met = SPEC.get("setup_requires_met") or ()
        if isinstance(kwargs.get("setup_requires"), list):
            kwargs["setup_requires"] = [r for r in kwargs["setup_requires"] if r not in met]
        for ext in kwargs.get("ext_modules") or []:
            _inject(ext)
        # hopper/setup.py (FA3) replaces torch's ninja writer with its own at import time,
        # after this driver's: wrap whichever writer is in place when setup() runs
        wrap_ninja_writer()
        return original_setup(*args, **kwargs)

    setuptools.setup = setup
    wrap_ninja_writer()

    if SPEC["mode"] == "prepare":

        def stop(*_args, **_kwargs):
            raise _Prepared

        cpp_extension._run_ninja_build = stop


def main():
    # if the backend goes, end this whole session: ninja, the launchers and every compiler
    found = importlib.util.spec_from_file_location(
        "_fa_shim_process_session", os.path.join(os.path.dirname(__file__), "process_session.py")
    )
    session = importlib.util.module_from_spec(found)
    found.loader.exec_module(session)
    session.end_with_parent()
    with open(sys.argv[1]) as spec:
        SPEC.update(json.load(spec))
    if os.environ.get("_FA_SHIM_NETNS") == "1":
        _loopback_up()
    sys.addaudithook(_audit)
    sys.path.extend(p for p in SPEC.get("extra_sys_path", []) if p not in sys.path)
    os.chdir(SPEC["setup_dir"])
    sys.path.insert(0, SPEC["setup_dir"])
    _install_hooks()
    # stored, not deflated: fa-shim's repack compresses the module once, not a second time
    sys.argv = ["setup.py", "bdist_wheel", "--dist-dir", SPEC["dist_dir"], "--compression=stored"]
    try:
        runpy.run_path("setup.py", run_name="__main__")
    except _Prepared:
        pass
    _write_report()


if __name__ == "__main__":
    main()
