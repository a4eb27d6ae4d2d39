"""What one forward costs, read from torch.profiler as the post reads it: the kernels it
launches, the dispatcher ops it makes on the host, and its time.

The post profiles with schedule(wait=1, warmup=1, active=3): five steps, the last three
recorded; the counts here are those three steps' totals divided by three. A second,
shorter run (active=1) records a single forward for the Chrome trace and the picture,
so the trace opens quickly in Perfetto and shows exactly one forward.

On a GPU the lane is the GPU's: every kernel, memcpy and memset of the forward. On CPU
there is no GPU lane; its stand-in is the forward's outermost compute ops (the calls
that do the work: aten::linear, our _geglu_mlp, Inductor's generated C++ kernels),
without the allocation and view ops that compute nothing.
"""

import re
import statistics
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from torch.profiler import ProfilerActivity, profile, schedule

POST_SCHEDULE = dict(wait=1, warmup=1, active=3)
ONE_FORWARD_SCHEDULE = dict(wait=1, warmup=1, active=1)

# A dispatcher op is named namespace::op; record_function ranges (Dynamo's, Inductor's,
# ProfilerStep#) carry no namespace.
_DISPATCHER_OP = re.compile(r"^[A-Za-z_][\w.]*::\w")
# Inductor's C++ kernels, named by its kernel profile (mlp_ladder.compile_rung).
_INDUCTOR_CPU_KERNEL = re.compile(r"cpp_fused")
# Ops that allocate or re-view memory and compute nothing: no kernel on a GPU, so not in
# the CPU lane either.
_NO_COMPUTE_OPS = frozenset(
    f"aten::{name}"
    for name in (
        "empty", "empty_strided", "empty_like", "new_empty", "view", "reshape", "_reshape_alias", "_unsafe_view",
        "as_strided", "t", "transpose", "permute", "expand", "slice", "narrow", "select", "split",
        "chunk", "unsqueeze", "squeeze", "alias", "detach", "resolve_conj", "resolve_neg", "lift_fresh",
    )
)  # fmt: skip


@dataclass
class LaneEvent:
    """One box of the lane: a kernel (GPU) or outermost compute op (CPU), in us from the
    forward's first box."""

    name: str
    start_us: float
    duration_us: float


@dataclass
class ForwardProfile:
    """One forward of a rung, as torch.profiler saw it."""

    lane: str  # "cuda" or "cpu"
    kernels: list  # [{name, launches, time_us}] per forward, first launch order
    kernels_per_forward: float
    memory_ops_per_forward: float  # GPU memsets / memcpys beside the kernels
    kernel_time_us: float  # GPU time (CPU: the lane's ops' time) per forward
    ops: dict  # dispatcher ops per forward: {"total", "aten", "ours", "other"}
    forward_us: float  # median wall time of one forward, outside the profiler
    one_forward: list = field(default_factory=list)  # [LaneEvent] of the traced forward
    trace: Optional[str] = None  # path of its Chrome trace

    def summary(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "one_forward"}
        out["one_forward"] = [e.__dict__ for e in self.one_forward]
        return out


def is_dispatcher_op(event) -> bool:
    return event.device_type.name == "CPU" and _DISPATCHER_OP.match(event.name) is not None


def _has_dispatcher_ancestor(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if is_dispatcher_op(parent):
            return True
        parent = parent.cpu_parent
    return False


def is_gpu_kernel(event) -> bool:
    """A kernel on the GPU lane: not the profiler's step annotation (ProfilerStep#, drawn
    on the GPU track too) nor a memset / memcpy (counted apart: cuBLAS clears a workspace
    before some GEMMs)."""
    return not event.name.startswith("ProfilerStep") and not is_memory_op(event)


def is_memory_op(event) -> bool:
    return event.name.startswith(("Memset", "Memcpy"))


def lane_events(events, device: str) -> list:
    """The lane's events in start order: GPU activities on CUDA; on CPU the outermost
    compute ops and Inductor's C++ kernels."""
    if device == "cuda":
        chosen = [e for e in events if e.device_type.name == "CUDA" and is_gpu_kernel(e)]
    else:
        chosen = [
            e
            for e in events
            if (is_dispatcher_op(e) and e.name not in _NO_COMPUTE_OPS and not _has_dispatcher_ancestor(e))
            or (e.device_type.name == "CPU" and _INDUCTOR_CPU_KERNEL.search(e.name))
        ]
    return sorted(chosen, key=lambda e: e.time_range.start)


def op_counts(events, our_namespaces) -> dict:
    """Dispatcher ops (nested ones too) by namespace: aten, the package's, other."""
    counts = {"total": 0, "aten": 0, "ours": 0, "other": 0}
    for e in events:
        if not is_dispatcher_op(e):
            continue
        namespace = e.name.split("::", 1)[0]
        counts["total"] += 1
        counts["aten" if namespace == "aten" else "ours" if namespace in our_namespaces else "other"] += 1
    return counts


def _duration_us(event) -> float:
    return event.time_range.end - event.time_range.start


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _profiled_steps(forward, x, device: str, steps: dict, on_trace_ready=None):
    """The events of `steps`' active steps: one forward (synchronized) per step."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, schedule=schedule(**steps), on_trace_ready=on_trace_ready) as prof:
        for _ in range(sum(steps.values())):
            forward(x)
            _synchronize(device)  # the step's kernels finish inside the step
            prof.step()
    return prof.events()


def wall_time_us(forward, x, device: str, reps: int) -> float:
    """Median wall time of one forward (launch to finish), after a warm-up; CUDA events
    on a GPU, the host clock on CPU."""
    for _ in range(3):
        forward(x)
    _synchronize(device)
    samples = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            forward(x)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            forward(x)
            samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def profile_forward(
    forward: Callable,
    x: torch.Tensor,
    device: str,
    our_namespaces=frozenset(),
    trace_path: Optional[Path] = None,
    reps: int = 20,
    warmup: int = 3,
) -> ForwardProfile:
    """Warm `forward` up (compiles and autotuning stay out of the trace), profile it under
    the post's schedule, trace one forward, and time it."""
    for _ in range(warmup):
        forward(x)
    _synchronize(device)

    active = POST_SCHEDULE["active"]
    events = _profiled_steps(forward, x, device, POST_SCHEDULE)
    per_name = OrderedDict()
    for e in lane_events(events, device):
        entry = per_name.setdefault(e.name, {"name": e.name, "launches": 0, "time_us": 0.0})
        entry["launches"] += 1
        entry["time_us"] += _duration_us(e)
    kernels = [
        {"name": k["name"], "launches": k["launches"] / active, "time_us": k["time_us"] / active}
        for k in per_name.values()
    ]
    ops = {k: v / active for k, v in op_counts(events, our_namespaces).items()}

    def export(prof):
        if trace_path is not None:
            prof.export_chrome_trace(str(trace_path))

    one = lane_events(_profiled_steps(forward, x, device, ONE_FORWARD_SCHEDULE, export), device)
    origin = one[0].time_range.start if one else 0.0
    one_forward = [LaneEvent(e.name, e.time_range.start - origin, _duration_us(e)) for e in one]

    return ForwardProfile(
        lane=device,
        kernels=kernels,
        kernels_per_forward=sum(k["launches"] for k in kernels),
        memory_ops_per_forward=sum(1 for e in events if e.device_type.name == "CUDA" and is_memory_op(e)) / active,
        kernel_time_us=sum(k["time_us"] for k in kernels),
        ops=ops,
        forward_us=wall_time_us(forward, x, device, reps),
        one_forward=one_forward,
        trace=None if trace_path is None else str(trace_path),
    )
