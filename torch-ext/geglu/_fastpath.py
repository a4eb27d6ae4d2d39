"""When a Python custom op can be skipped, and what runs instead.

A call through a `torch.library.custom_op` costs about 60 us of host time (about twice
the Triton launcher it wraps; docs/DESIGN.md, "Host time"), which at decode sizes is
many times the kernel itself. The op is needed for torch.compile (it traces ops, not
Python), for autograd (the op carries it), and for fake/meta tensors and tensor
subclasses (the op's fake implementation serves them). Outside those, the public
functions call the implementation directly: the same code, without the dispatcher hops.
"""

import torch

# Tensor subclasses (FakeTensor, DTensor, functional tensors, ...) go through the op.
PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def all_plain(*tensors) -> bool:
    """No tensor subclass among the (possibly None) tensors. A loop, not all() over a
    generator: the layers' native route runs this on every call."""
    for t in tensors:
        if t is not None and type(t) not in PLAIN_TYPES:
            return False
    return True


def eager_call_ok(*tensors) -> bool:
    """True when no compile tracing, meta tensor or tensor subclass needs the registered op."""
    if torch.compiler.is_compiling() or not all_plain(*tensors):
        return False
    return not any(t is not None and t.device.type == "meta" for t in tensors)


def direct_call_ok(*tensors) -> bool:
    """True when neither autograd, compile tracing, meta tensors nor subclasses need the op."""
    if not eager_call_ok(*tensors):
        return False
    if torch.is_grad_enabled():
        return not any(t is not None and t.requires_grad for t in tensors)
    return True
