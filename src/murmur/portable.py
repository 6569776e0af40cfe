"""Portable numbers: torch's CPU kernels pinned so that a seed gives the same numbers
on any x86-64 machine (``run.portable``, ``murmur run --portable``).

On one machine and one thread a run is bit for bit reproducible, but two machines
differ: torch picks its vectorized kernels (``log_softmax``, the element-wise ops)
for the widest instruction set the CPU has, AVX2 or AVX-512, which round
differently in the last bits, and MKL's matrix products take a code path of the
CPU's own; the differences grow about tenfold every 5 to 8 steps. :func:`pin`
fixes every such choice:

- ``ATEN_CPU_CAPABILITY=avx2``: torch's AVX2 kernels, which x86-64 CPUs have had
  since 2013 (Intel) and 2015 (AMD), on an AVX-512 machine too;
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility mode, one
  code path on every CPU, Intel's and AMD's (its AVX2 mode falls back to MKL's own
  choice on AMD);
- oneDNN off (``torch.backends.mkldnn``): convolutions take torch's own kernels and
  MKL, as its JIT kernels block their sums by the CPU's caches
  (``ONEDNN_MAX_CPU_ISA=AVX2`` is set too, for whatever still reaches it);
- one thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``).

torch and MKL read these variables once, at their first computation; after that a
process keeps its kernels. So :func:`pin` must run before torch computes anything:
``murmur run --portable`` and ``murmur launch --portable`` pin first thing, a run of
``run.portable = true`` pins when it is planned, and every one of them checks that
the kernels in use are the pinned ones, refusing the run in one line otherwise
(a Python session that computed with torch before). ``MURMUR_PORTABLE=1`` in the
environment pins when ``murmur`` is imported, and makes every run of the command
line portable; the ranks ``murmur launch`` starts inherit it.

:func:`machine` is the ``"machine"`` entry of every ``summary.json``: the torch,
kernels, BLAS and threads a run computed with.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from murmur.errors import UsageError

if TYPE_CHECKING:
    from murmur.sections import RunConfig

ISA = "AVX2"
"""The instruction set of the pinned kernels, as ``torch.backends.cpu`` names it."""

SWITCH = "MURMUR_PORTABLE"
"""The environment variable that asks for portable numbers: ``1`` on, ``0`` or unset off."""

ENVIRONMENT: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": ISA.lower(),
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": ISA,
    "DNNL_MAX_CPU_ISA": ISA,
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    SWITCH: "1",
}
"""What a portable process has in its environment (and so the processes it starts)."""

SETTINGS = (*ENVIRONMENT, "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")
"""The variables that choose kernels, recorded in the summary as the process had them."""

HOW_TO_START = (
    f"pin before torch computes anything: murmur run --portable, {SWITCH}=1 in the "
    "environment with murmur imported first, or murmur.portable.pin() at the top of "
    "the script"
)

_BRANCHES = {0: "OFF", 1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3"}
_BRANCHES |= {7: "SSE4_1", 8: "SSE4_2", 9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}
"""MKL's code branches by the number ``mkl_cbwr_get(MKL_CBWR_BRANCH)`` gives."""
_MKL_CBWR_BRANCH = 1


class MachineSummary(TypedDict):
    """What a run computed with (``summary.json``'s ``"machine"`` entry)."""

    portable: bool
    """Whether the kernels were the pinned ones (:func:`pin`)."""
    torch: str
    cpu: str
    """The processor's model name, where the system says."""
    cpu_capability: str
    """The instruction set of torch's kernels in use: DEFAULT, AVX2, AVX512, ..."""
    blas: str
    """The BLAS torch was built with: mkl, open (OpenBLAS), ..."""
    mkl_cbwr: str | None
    """MKL's code branch in use: OFF (its own choice for the CPU), COMPATIBLE, ...;
    None where MKL cannot say or is not the BLAS."""
    onednn: bool
    """Whether torch may use oneDNN's kernels (convolutions)."""
    threads: int
    environment: dict[str, str]
    """The variables of :data:`SETTINGS` the process had set."""


def asked() -> bool:
    """Whether ``MURMUR_PORTABLE`` asks for portable numbers; UsageError for a value
    that is neither 1 nor 0."""
    value = os.environ.get(SWITCH, "").strip()
    if value not in ("", "0", "1"):
        raise UsageError(f"{SWITCH} must be 1 (portable numbers) or 0, not {value!r}")
    return value == "1"


def pin_environment() -> None:
    """Put :data:`ENVIRONMENT` into this process's environment (so into that of the
    processes it starts); it takes effect where torch has not computed yet."""
    os.environ.update(ENVIRONMENT)


def pin() -> None:
    """Pin this process's CPU kernels (:data:`ENVIRONMENT`, oneDNN off, one thread) and
    check that they are the ones in use; UsageError, in one line, on a CPU or torch
    that cannot have them, or when torch already computed with others here. A refused
    pin leaves the process as it was: its environment, threads and oneDNN."""
    import torch

    _check_platform()
    environment = {name: os.environ.get(name) for name in ENVIRONMENT}
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    _apply()
    try:
        check_pinned()
    except UsageError:
        for name, value in environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn
        raise


def pin_if_asked() -> None:
    """Pin, unchecked, when ``MURMUR_PORTABLE=1`` asks (``import murmur`` does this):
    torch's first computation then takes the pinned kernels, and a run checks them."""
    if os.environ.get(SWITCH, "").strip() == "1":
        _apply()


def _apply() -> None:
    pin_environment()
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False  # type: ignore[assignment]


def check_pinned() -> None:
    """UsageError unless the kernels in use are the pinned ones."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if capability != ISA:
        raise UsageError(
            f"portable numbers need torch's {ISA} kernels, but this process computes with "
            f"its {capability} kernels, chosen at its first computation; {HOW_TO_START}"
        )
    branch = mkl_branch()
    if branch not in (None, "COMPATIBLE"):
        raise UsageError(
            f"portable numbers need MKL_CBWR=COMPATIBLE, but MKL already computed with its "
            f"{branch} code branch in this process; {HOW_TO_START}"
        )
    if torch.get_num_threads() != 1 or torch.backends.mkldnn.enabled:
        raise UsageError(f"portable numbers need one torch thread and oneDNN off; {HOW_TO_START}")


def _check_platform() -> None:
    """UsageError where pinned kernels would not give an x86-64 machine's numbers."""
    import torch

    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise UsageError(
            f"portable numbers are those of x86-64 CPUs; this machine is {platform.machine()}"
        )
    if not torch.backends.mkl.is_available():
        raise UsageError(
            f"portable numbers need a torch built with MKL (as the x86-64 wheels of PyPI are); "
            f"this one uses {blas_name()}"
        )
    if "avx2" not in _cpu_flags():
        raise UsageError(f"portable numbers need a CPU with {ISA}; this one has none")


def enforce(run: RunConfig) -> None:
    """Pin for a run of ``run.portable = true`` (nothing otherwise); UsageError for what
    such a run cannot have: several threads, a compiled step, a GPU, kernels already
    chosen in this process."""
    if not run.portable:
        return
    if run.threads != 1:
        raise UsageError(f"run.portable computes on one thread; drop run.threads = {run.threads}")
    if run.compile is True:
        raise UsageError(
            "run.compile = true builds kernels for this machine's CPU and compiler; "
            'run.portable steps eagerly: set run.compile = "auto" or false'
        )
    if run.device != "cpu":
        raise UsageError("run.portable pins the CPU's kernels; use run.device = cpu")
    pin()


def machine() -> MachineSummary:
    """The torch, kernels, BLAS and threads this process computes with."""
    import torch

    branch = mkl_branch()
    capability = torch.backends.cpu.get_cpu_capability()
    onednn = bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)
    threads = torch.get_num_threads()
    return MachineSummary(
        portable=capability == ISA and branch == "COMPATIBLE" and not onednn and threads == 1,
        torch=torch.__version__,
        cpu=_cpu_name(),
        cpu_capability=capability,
        blas=blas_name(),
        mkl_cbwr=branch,
        onednn=onednn,
        threads=threads,
        environment={name: os.environ[name] for name in SETTINGS if name in os.environ},
    )


CAPABILITIES = ("DEFAULT", "AVX2", "AVX512")
"""torch's x86 kernel sets, narrowest first, as ``torch.backends.cpu`` names them."""

_NEEDS = {"AVX512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}, "AVX2": {"avx2", "fma"}}
"""The CPU flags torch asks of each kernel set before it takes it."""


def host_capability() -> str:
    """The widest of torch's kernel sets this CPU can run (:data:`CAPABILITIES`), what
    torch takes unless ``ATEN_CPU_CAPABILITY`` pins another; ``DEFAULT`` off x86."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "DEFAULT"
    flags = _cpu_flags()
    for capability in ("AVX512", "AVX2"):
        if _NEEDS[capability] <= flags:
            return capability
    return "DEFAULT"


def kernels_below_host() -> str | None:
    """Why this process's kernels are narrower than its CPU's (``ATEN_CPU_CAPABILITY``
    pinned below them, as portable numbers do), or None where they are the CPU's own.
    torch.compile builds its kernels for the CPU's widest set whatever torch's eager
    kernels are, and the two then need not compute the same step."""
    import torch

    host, used = host_capability(), torch.backends.cpu.get_cpu_capability()
    if used not in CAPABILITIES or CAPABILITIES.index(used) >= CAPABILITIES.index(host):
        return None
    pinned = os.environ.get("ATEN_CPU_CAPABILITY", "")
    how = f" (ATEN_CPU_CAPABILITY={pinned})" if pinned else ""
    return f"torch computes with its {used} kernels{how} on a CPU with {host}"


def blas_name() -> str:
    """The BLAS torch was built with, as its build settings say (``BLAS_INFO``)."""
    import torch

    for setting in torch.__config__.show().replace(",", " ").split():
        if setting.startswith("BLAS_INFO="):
            return setting.removeprefix("BLAS_INFO=")
    return "mkl" if torch.backends.mkl.is_available() else "unknown"


def mkl_branch() -> str | None:
    """MKL's code branch (``mkl_cbwr_get``), which it chooses at its first call, from
    ``MKL_CBWR``; None where torch's MKL does not say (or there is none)."""
    get = _mkl_cbwr_get()
    if get is None:
        return None
    number = get(_MKL_CBWR_BRANCH)
    return _BRANCHES.get(number, str(number))


def _mkl_cbwr_get() -> Callable[[int], int] | None:
    """MKL's ``mkl_cbwr_get``: in torch's own library, where MKL is linked in, or loaded
    into the process beside it."""
    import torch

    if not torch.backends.mkl.is_available():
        return None
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    for path, name in ((library, "mkl_serv_cbwr_get"), (None, "mkl_cbwr_get")):
        try:
            function = getattr(ctypes.CDLL(str(path) if path else None), name)
        except (OSError, AttributeError):
            continue
        function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
        return function
    return None


def _cpu_info() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return []


def _cpu_flags() -> set[str]:
    """The flags of the first processor of ``/proc/cpuinfo`` (x86's instruction sets)."""
    for line in _cpu_info():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return {"avx2"}  # no /proc (not Linux): torch's own check decides


def _cpu_name() -> str:
    for line in _cpu_info():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or platform.machine()
