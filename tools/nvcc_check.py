"""Compile check of the CUDA backend, no GPU needed, plus a ptxas resource report.

    python tools/nvcc_check.py                  # every capability in build.toml, 2 jobs
    python tools/nvcc_check.py --cap 9.0a -j 1  # one capability
    python tools/nvcc_check.py --fail-on-spill  # also exit 1 if any kernel spills

For each `backend = "cuda"` kernel section of build.toml: compiles every `.cu` to an
object (`-c`) once per capability of its `cuda-capabilities`, plus `-Xptxas -v`, and
every host source of the module (torch binding, the section's `.cpp`, the builder's
glibc shim) once with the host compiler. Extra sections (the Hopper GEMM engine) are
compiled with the builder's own nvcc command for them (build.cuda_object_command). Nothing is linked. Prints, per capability,
the registers, spill stores/loads and stack frame of every kernel; exits 1 on any
compile error.

The flags are the builder's own: tools/build.py's compile_module runs with
cpp_extension.load replaced by a recorder, and the recorded arguments are turned
into compiler command lines the way cpp_extension's ninja file does (defines such as
-DCUDA_KERNEL and -DPy_LIMITED_API, -UTORCH_API_INCLUDE_EXTENSION_H, the C++
standard, COMMON_NVCC_FLAGS, -fPIC), with TORCH_EXTENSION_NAME=nvcc_check.

Works with a CPU build of torch: its wheel ships the c10/cuda headers, and the
toolkit nvcc belongs to supplies the CUDA ones. One generated header is missing from
the CPU wheel (c10/cuda/impl/cuda_cmake_macros.h, which only defines a Windows export
macro): it is then skipped with -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools import build as builder  # noqa: E402

EXTENSION_NAME = "nvcc_check"


def cuda_home(nvcc: str) -> Path:
    """The toolkit root: $CUDA_HOME / $CUDA_PATH, else what nvcc reports as TOP
    (nvcc may be a wrapper script outside the toolkit, as /usr/local/bin/nvcc is here)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "include" / "cuda_runtime.h").is_file():
            return Path(home)
    out = subprocess.run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True)
    m = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.M)
    if m and (Path(m.group(1)) / "include" / "cuda_runtime.h").is_file():
        return Path(m.group(1)).resolve()
    raise SystemExit(f"nvcc_check: cannot find the CUDA toolkit of {nvcc} (set CUDA_HOME)")


class _Recorded(Exception):
    pass


def builder_load_arguments(cfg, kernel, work: Path, capabilities: list[str]) -> dict:
    """The keyword arguments tools/build.py passes to cpp_extension.load for `kernel`
    (sources, extra_cflags, extra_cuda_cflags, extra_include_paths, ...); compiles nothing."""
    from torch.utils import cpp_extension

    recorded: dict = {}

    def record(**kwargs):
        recorded.update(kwargs)
        raise _Recorded

    real_load = cpp_extension.load
    cpp_extension.load = record
    try:
        builder.compile_module(cfg, kernel, EXTENSION_NAME, work, capabilities, verbose=False)
    except _Recorded:
        pass
    finally:
        cpp_extension.load = real_load
    if not recorded:
        raise SystemExit("nvcc_check: tools/build.py compile_module no longer calls cpp_extension.load")
    return recorded


@dataclass
class Commands:
    nvcc: list[str]  # flags for a .cu, without sources, gencode and output
    cxx: list[str]  # flags for a host source
    cu_sources: list[str]
    host_sources: list[str]


def compile_commands(load: dict, home: Path) -> Commands:
    """cpp_extension's ninja flags (_write_ninja_file_to_build_library, Linux, CUDA) for
    the recorded load() arguments. include_paths("cuda") needs a CUDA torch; the toolkit
    include dir is added from nvcc's own toolkit instead."""
    from torch.utils import cpp_extension

    system_includes = cpp_extension.include_paths() + [str(home / "include")]
    py_include = sysconfig.get_path("include", scheme="posix_prefix")
    if py_include:
        system_includes.append(py_include)
    common = [f"-DTORCH_EXTENSION_NAME={load['name']}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    common += [f"-I{os.path.abspath(p)}" for p in load.get("extra_include_paths", [])]
    for p in system_includes:
        common += ["-isystem", p]
    if not (Path(system_includes[0]) / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").is_file():
        common.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")  # CPU wheel, see the module docstring
    cxx = common + ["-fPIC", "-std=c++20"] + list(load.get("extra_cflags", []))
    extra_cuda = [f for f in load.get("extra_cuda_cflags", []) if not f.startswith(("-gencode", "--generate-code"))]
    nvcc = common + list(cpp_extension.COMMON_NVCC_FLAGS) + ["--compiler-options", "-fPIC"] + extra_cuda
    if not any(f.startswith("-std=") for f in nvcc):
        nvcc.append("-std=c++20")
    if os.environ.get("CC"):
        nvcc = ["-ccbin", os.environ["CC"]] + nvcc
    nvcc += ["-Xptxas", "-v"]
    sources = list(load["sources"])
    return Commands(
        nvcc=nvcc,
        cxx=cxx,
        cu_sources=[s for s in sources if s.endswith(".cu")],
        host_sources=[s for s in sources if not s.endswith(".cu")],
    )


# --------------------------------------------------------------------------- ptxas report


@dataclass
class KernelUsage:
    name: str
    arch: str
    registers: int = -1
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0


def demangle(names: list[str]) -> dict[str, str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def short_name(demangled: str) -> str:
    """`void ns::(anonymous namespace)::k<float, ns::Op<true>, 4>(args)` -> `k<float, Op<true>, 4>`."""
    s = re.sub(r"\(anonymous namespace\)::", "", demangled)
    s = re.sub(r"\b\w+::", "", s)
    s = re.sub(r"^void ", "", s)
    depth = 0
    for i, c in enumerate(s):  # cut the parameter list: the first '(' outside <...>
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return s[:i]
    return s


def parse_ptxas(text: str) -> list[KernelUsage]:
    """ptxas -v output: 'Compiling entry function 'X' for 'sm_90a'', then
    'N bytes stack frame, S bytes spill stores, L bytes spill loads', 'Used R registers'."""
    usages: list[KernelUsage] = []
    current: KernelUsage | None = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line)
        if m:
            current = KernelUsage(name=m.group(1), arch=m.group(2))
            usages.append(current)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current.registers = int(m.group(1))
    names = demangle([u.name for u in usages])
    for u in usages:
        u.name = short_name(names[u.name])
    return usages


# --------------------------------------------------------------------------- jobs


@dataclass
class Job:
    label: str
    cmd: list[str]
    capability: str | None = None  # None: host-compiled source
    returncode: int = 0
    output: str = ""
    seconds: float = 0.0
    usages: list[KernelUsage] = field(default_factory=list)


def run_job(job: Job) -> Job:
    t = time.time()
    res = subprocess.run(job.cmd, capture_output=True, text=True, cwd=REPO)
    job.seconds = time.time() - t
    job.returncode = res.returncode
    job.output = res.stdout + res.stderr
    if job.capability is not None:
        job.usages = parse_ptxas(job.output)
    print(f"[nvcc_check] {'ok  ' if res.returncode == 0 else 'FAIL'} {job.label} ({job.seconds:.0f}s)", flush=True)
    return job


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel compiler processes (default 2, CI's cores)")
    ap.add_argument("--cap", action="append", default=None, help="only this capability (repeatable), e.g. 9.0a")
    ap.add_argument("--fail-on-spill", action="store_true", help="exit 1 if any kernel spills registers")
    ap.add_argument("--no-host", action="store_true", help="skip the host-compiled .cpp sources")
    args = ap.parse_args(argv)

    nvcc = builder.nvcc_path()
    if nvcc is None:
        print("[nvcc_check] ERROR: nvcc not found (set CUDA_HOME or put nvcc on PATH)", file=sys.stderr)
        return 1
    home = cuda_home(nvcc)
    cfg = builder.read_config(REPO)
    sections = [k for k in cfg.kernels if k.backend == "cuda"]
    if not sections:
        print("[nvcc_check] no cuda kernel section in build.toml")
        return 0
    cxx = os.environ.get("CXX") or "c++"

    with tempfile.TemporaryDirectory(prefix="nvcc_check_") as tmp:
        tmp_path = Path(tmp)
        jobs: list[Job] = []
        for kernel in sections:
            caps = builder.supported_capabilities(nvcc, kernel.cuda_capabilities)
            dropped = sorted(set(kernel.cuda_capabilities) - set(caps))
            if dropped:
                print(f"[nvcc_check] nvcc cannot target {dropped}; checking {caps}")
            if args.cap:
                caps = [c for c in caps if c in args.cap]
            work = tmp_path / kernel.name
            if kernel is not sections[0]:  # an extra section: the builder's own nvcc command per .cu
                for cap in caps:
                    for src in (s for s in kernel.src if s.endswith(".cu")):
                        obj = work / f"{Path(src).stem}.{cap}.o"
                        work.mkdir(parents=True, exist_ok=True)
                        cmd = [*builder.cuda_object_command(kernel, src, obj, [cap]), "-Xptxas", "-v"]
                        jobs.append(Job(label=f"{src} sm_{cap.replace('.', '')}", cmd=cmd, capability=cap))
                continue
            cmds = compile_commands(builder_load_arguments(cfg, kernel, work, caps), home)
            for cap in caps:
                for src in cmds.cu_sources:
                    rel = os.path.relpath(src, REPO)
                    obj = work / f"{Path(src).stem}.{cap}.o"
                    cmd = [nvcc, "-c", src, "-o", str(obj), *cmds.nvcc, *builder.gencode_flags([cap])]
                    jobs.append(Job(label=f"{rel} sm_{cap.replace('.', '')}", cmd=cmd, capability=cap))
            if not args.no_host:
                for src in cmds.host_sources:
                    rel = os.path.relpath(src, REPO)
                    obj = work / f"{Path(src).stem}.host.o"
                    jobs.append(Job(label=f"{rel} (host)", cmd=[cxx, "-c", src, "-o", str(obj), *cmds.cxx]))

        if args.cap:
            known = {c for k in sections for c in builder.supported_capabilities(nvcc, k.cuda_capabilities)}
            unknown = sorted(set(args.cap) - known)
            if unknown:
                print(f"[nvcc_check] ERROR: {unknown} not among the capabilities of build.toml: {sorted(known)}")
                return 1
        print(f"[nvcc_check] {len(jobs)} compile jobs, {args.jobs} at a time; nvcc {nvcc}, CUDA {home}", flush=True)
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            done = list(pool.map(run_job, jobs))

    failed = [j for j in done if j.returncode != 0]
    for j in failed:
        print(f"\n===== FAILED: {j.label}\n$ {' '.join(j.cmd)}\n{j.output.strip()}", file=sys.stderr)

    spilling = []
    for j in done:
        if j.capability is None or not j.usages:
            continue
        print(f"\n== {j.label}: {len(j.usages)} kernels")
        width = max(len(u.name) for u in j.usages)
        print(f"{'kernel':<{width}}  {'regs':>4}  {'spill st':>8}  {'spill ld':>8}  {'stack':>5}")
        for u in sorted(j.usages, key=lambda u: u.name):
            flag = "  <- spills" if u.spill_stores or u.spill_loads else ""
            print(f"{u.name:<{width}}  {u.registers:>4}  {u.spill_stores:>8}  {u.spill_loads:>8}  {u.stack:>5}{flag}")
            if flag:
                spilling.append(f"{u.name} ({u.arch})")

    print()
    n_kernels = sum(len(j.usages) for j in done)
    print(f"[nvcc_check] {len(done) - len(failed)}/{len(done)} compiles ok, {n_kernels} kernel reports, "
          f"{len(spilling)} spilling, {time.time() - t0:.0f}s")
    if failed:
        print(f"[nvcc_check] ERROR: {len(failed)} compile(s) failed: {', '.join(j.label for j in failed)}",
              file=sys.stderr)
        return 1
    if spilling and args.fail_on_spill:
        print(f"[nvcc_check] ERROR: spills in {', '.join(spilling)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
