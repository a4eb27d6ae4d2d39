"""When a Python custom op can be skipped.

A call through a `torch.library.custom_op` costs about 60 us of host time (measured on
an H100: `ops.geglu_triton` 112 us per call against 52 us for the Triton launcher it
wraps, benchmarks/results/profile_triton_launch_h100.log), which at decode sizes is
many times the kernel itself. The op is needed for autograd, for torch.compile and for
fake/meta tensors; outside those, the public functions call its implementation directly.
"""

import torch


def direct_call_ok(*tensors) -> bool:
    """True when no autograd, compile tracing or meta tensor needs the registered op."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if t.device.type == "meta" or (grad and t.requires_grad):
            return False
    return True
