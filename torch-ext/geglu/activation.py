# Placeholder: replaced by the activation work (Triton + dispatch + autograd).
def _todo(*args, **kwargs):
    raise NotImplementedError


gelu_and_mul = gelu_tanh_and_mul = gelu = gelu_tanh = geglu = geglu_backward = geglu_merged = _todo
