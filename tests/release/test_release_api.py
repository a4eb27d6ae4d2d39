"""Reading a variant's public API statically (tools/release_api.py) and comparing two."""

import ast

import pytest
from release_fakes import COMMIT_B, CPU, KERNEL, NATIVE, NOARCH, REPO_ID, branch, local_variant, remote_of, variant_files

from tools.release_api import (
    _param_changes,
    _params,
    compare_ops,
    compare_python_api,
    describe_api,
    is_public_op,
    native_ops,
    signature_text,
)
from tools.release_plan import plan_release


def api_of(files):
    return describe_api({r: b for r, b in files.items() if "/" not in r and r.endswith((".py", ".so"))})


def params(src: str) -> list[dict]:
    fn = ast.parse(src).body[0]
    return _params(fn.args)


def test_describes_all_signatures_layers_and_ops():
    api = api_of(variant_files(CPU))
    assert api["errors"] == []
    assert api["all"] == ["geglu", "gelu", "gelu_and_mul", "layers"]
    assert api["entries"]["geglu"]["text"] == "(gate, up, approximate='tanh')"
    # `gelu_and_mul = gelu` resolves through the alias.
    assert api["entries"]["gelu_and_mul"]["text"] == "(out, x)"
    assert api["entries"]["layers"] == {"kind": "module", "module": "layers"}
    assert set(api["layers"]) == {"GeGLUMLP", "GeluTanh"}  # _Helper is private
    assert api["layers"]["GeGLUMLP"]["text"] == "(x)" and api["layers"]["GeGLUMLP"]["can_torch_compile"] is True
    assert api["layers"]["GeluTanh"]["has_backward"] is False
    # Internal (`_`) ops are described too, for information; the gate skips them.
    assert api["ops"] == {
        "geglu": "geglu(Tensor gate, Tensor up, str approximate) -> Tensor",
        "gelu_and_mul": "gelu_and_mul(Tensor! out, Tensor input) -> ()",
        "_linear_epilogue": "_linear_epilogue(Tensor x, Tensor? bias, str approximate) -> Tensor",
        "geglu_triton": "geglu_triton(Tensor gate, Tensor up, str approximate) -> Tensor",
        "_geglu_triton_backward": "_geglu_triton_backward(Tensor grad, Tensor gate, Tensor up, str approximate) -> (Tensor, Tensor)",
    }


def test_noarch_variant_has_only_python_ops():
    assert set(api_of(variant_files(NOARCH))["ops"]) == {"geglu_triton", "_geglu_triton_backward"}


def test_custom_op_decorator_schemas():
    act = (
        "import torch\nfrom ._ops import add_op_namespace_prefix\n\n"
        "@torch.library.custom_op(add_op_namespace_prefix('scale'), mutates_args=())\n"
        "def scale(x: torch.Tensor, s: float) -> torch.Tensor:\n    return x * s\n\n"
        "@torch.library.custom_op(add_op_namespace_prefix('shift'), mutates_args=(), schema='(Tensor x) -> Tensor')\n"
        "def shift(x):\n    return x\n"
    )
    api = api_of(variant_files(NOARCH, **{"activation.py": variant_files(NOARCH)["activation.py"].decode() + act}))
    assert api["ops"]["scale"] == "scale(Tensor x, float s) -> Tensor"
    assert api["ops"]["shift"] == "shift(Tensor x) -> Tensor"


def test_native_op_strings_are_found_in_a_binary():
    blob = b"\x00\x01ELF\x00foo(Tensor(a!) out, Tensor x) -> ()\x00not a schema\x00bar.overload(int n) -> (Tensor, Tensor)\x00"
    assert native_ops(blob) == {
        "foo": "foo(Tensor(a!) out, Tensor x) -> ()",
        "bar.overload": "bar.overload(int n) -> (Tensor, Tensor)",
    }


@pytest.mark.parametrize(
    "edit, error",
    [
        ({"__init__.py": "__all__ = make()\n"}, "no literal __all__"),
        ({"__init__.py": "from .activation import geglu\n__all__ = ['geglu']\n"}, "`layers` is not in __all__"),
        ({"__init__.py": None}, "no __init__.py"),
        ({"layers.py": "class (:\n"}, "layers.py: cannot parse"),
    ],
)
def test_unreadable_apis_are_reported(edit, error):
    assert any(error in e for e in api_of(variant_files(CPU, **edit))["errors"])


def test_signature_text_round_trips_every_kind():
    src = "def f(a, /, b, c=1, *args, d, e=None, **kw): pass"
    assert signature_text(params(src)) == "(a, /, b, c=1, *args, d, e=None, **kw)"
    assert signature_text(params("def f(a, *, b=2): pass")) == "(a, *, b=2)"


@pytest.mark.parametrize(
    "old, new, breaks, adds",
    [
        ("def f(a, b=1): pass", "def f(a, b=1): pass", 0, 0),
        ("def f(a, b=1): pass", "def f(a, b=1, c=2): pass", 0, 1),
        ("def f(a, b=1): pass", "def f(a, b=1, *, c=2): pass", 0, 1),
        ("def f(a, b=1): pass", "def f(a, b): pass", 1, 0),
        ("def f(a, b=1): pass", "def f(a, b=2): pass", 1, 0),
        ("def f(a, b=1): pass", "def f(a): pass", 1, 0),
        ("def f(a, b=1): pass", "def f(x, b=1): pass", 1, 0),
        ("def f(a, b=1): pass", "def f(a, b=1, c): pass".replace(", c)", ", *, c)"), 1, 0),
        ("def f(a, b): pass", "def f(a, b=1): pass", 0, 0),  # a default relaxes
        ("def f(a, *, k=1): pass", "def f(a, k=1): pass", 0, 0),  # keyword-only -> either
        ("def f(a, *, k=1): pass", "def f(a): pass", 1, 0),
        ("def f(*args, **kw): pass", "def f(a): pass", 3, 0),
        ("def f(a, k=1): pass", "def f(*args, **kw): pass", 0, 0),  # still accepted
        ("def f(a, /): pass", "def f(*args): pass", 0, 0),
        ("def f(a, b): pass", "def f(*args): pass", 2, 0),  # keyword callers break
    ],
)
def test_parameter_compatibility(old, new, breaks, adds):
    b, a = _param_changes("f", params(old), params(new))
    assert (len(b), len(a)) == (breaks, adds), (b, a)


def test_compare_reports_removals_changes_and_additions():
    old = api_of(variant_files(CPU))
    init = variant_files(CPU)["__init__.py"].decode().replace('"gelu", ', '"gelu2", ')
    init = init.replace("gelu_and_mul\n", "gelu_and_mul\ngelu2 = gelu\n")
    new = api_of(variant_files(CPU, **{"__init__.py": init}))
    breaks, adds = compare_python_api(old, new)
    assert breaks == ["`gelu` removed from __all__"]
    assert adds == ["`gelu2` added to __all__"]
    assert compare_ops(old, new) == []
    assert compare_python_api(old, old) == ([], [])


def test_ops_defined_through_a_helper_or_class_take_the_schema_torch_infers():
    linear = (
        "from typing import Optional, Tuple\nimport torch\nfrom torch import Tensor\n"
        "from ._ops import add_op_namespace_prefix, ops\n\n"
        "def _define(name, impl, fake=None):\n"
        "    if not hasattr(ops, name):\n"
        "        op = torch.library.custom_op(add_op_namespace_prefix(name), impl, mutates_args=())\n"
        "    return getattr(ops, name).default\n\n"
        "def _lin_impl(x: Tensor, b: Optional[Tensor], s: float = 1.0, mode: str = 'tanh') -> Tuple[Tensor, Tensor]:\n"
        "    return x, x\n\n"
        "def _scale_impl(out: Tensor, x: 'Tensor', n: int) -> None:\n"
        "    pass\n\n"
        "_lin = _define('lin', _lin_impl)\n"
        "torch.library.register_fake(add_op_namespace_prefix('not_a_definition'), _lin_impl)\n"
        "_scale = torch.library.custom_op(add_op_namespace_prefix('scale'), _scale_impl, mutates_args=('out',))\n"
        # a class whose constructor defines the op (linear.py's _Op); `self` is not an argument
        "class _Op:\n"
        "    def __init__(self, name, impl, fake=None):\n"
        "        if not hasattr(ops, name):\n"
        "            torch.library.custom_op(add_op_namespace_prefix(name), impl, mutates_args=())\n\n"
        "def _pair_impl(x: Tensor, n: int) -> tuple[Tensor, Tensor]:\n"
        "    return x, x\n\n"
        "_pair = _Op('pair', _pair_impl)\n"
    )
    ops = api_of(variant_files(NOARCH, **{"linear.py": linear}))["ops"]
    assert ops["lin"] == 'lin(Tensor x, Tensor? b, float s=1.0, str mode="tanh") -> (Tensor, Tensor)'
    assert ops["scale"] == "scale(Tensor(a0!) out, Tensor x, SymInt n) -> ()"
    assert ops["pair"] == "pair(Tensor x, SymInt n) -> (Tensor, Tensor)"
    assert "not_a_definition" not in ops



# --------------------------------------------------------------------------- the gate policy

SO = "_geglu_cpu_abc1234.abi3.so"


def _edit(rel: str, old: str | bytes, new: str | bytes) -> dict:
    data = variant_files(CPU)[rel]
    old, new = (x.encode() if isinstance(x, str) else x for x in (old, new))
    assert old in data, (rel, old)
    return {rel: data.replace(old, new)}


def gate(old: dict, new: dict) -> list[str]:
    """The breaks tools/release_plan.py refuses within a version branch."""
    return compare_python_api(old, new)[0] + compare_ops(old, new)


def test_public_op_names():
    assert is_public_op("gelu_and_mul") and is_public_op("geglu_backward") and is_public_op("geglu.out")
    assert not is_public_op("_linear_epilogue") and not is_public_op("_geglu_mlp") and not is_public_op("_geglu_triton.default")


INTERNAL = b"_linear_epilogue(Tensor x, Tensor? bias, str approximate) -> Tensor\x00"
PY_INTERNAL = '"(Tensor grad, Tensor gate, Tensor up, str approximate) -> (Tensor, Tensor)"'


@pytest.mark.parametrize(
    "edit",
    [
        _edit(SO, INTERNAL, b""),  # native internal op removed
        _edit(SO, INTERNAL, INTERNAL.replace(b"Tensor? bias, ", b"")),  # its schema changed
        _edit(SO, b"_linear_epilogue(", b"_linear_epilogue_v2("),  # renamed
        _edit("activation.py", PY_INTERNAL, '"(Tensor grad, Tensor gate) -> Tensor"'),  # Python internal op changed
        _edit("activation.py", "define(\"_geglu_triton_backward\"", "(\"_geglu_triton_backward\""),  # removed
    ],
    ids=["native-removed", "native-changed", "native-renamed", "python-changed", "python-removed"],
)
def test_internal_op_changes_pass_the_gate(edit):
    old, new = api_of(variant_files(CPU)), api_of(variant_files(CPU, **edit))
    assert new["errors"] == [] and new["ops"] != old["ops"]
    assert gate(old, new) == []
    # ... and so does the whole release decision.
    p = plan_release({CPU: local_variant(CPU, variant_files(CPU, **edit), commit=COMMIT_B)},
                     branch(remote_of(local_variant(CPU))), repo_id=REPO_ID, kernel_name=KERNEL, version=1)
    assert p.ok, p.render()


@pytest.mark.parametrize(
    "edit, expect",
    [
        (_edit(SO, b"geglu(Tensor gate, Tensor up, str approximate) -> Tensor\x00", b""), "op `geglu` removed"),
        (_edit(SO, b"gelu_and_mul(Tensor! out, Tensor input)", b"gelu_and_mul(Tensor! out, Tensor input, float s)"),
         "op schema changed: `gelu_and_mul("),
        (_edit(SO, b"geglu(", b"_geglu("), "op `geglu` removed"),  # made internal = removed from the promise
        (_edit("activation.py", '"(Tensor gate, Tensor up, str approximate) -> Tensor"', '"(Tensor gate, Tensor up) -> Tensor"'),
         "op schema changed: `geglu_triton("),  # a public op defined in Python
        ({"__init__.py": variant_files(CPU)["__init__.py"].replace(b'"gelu", ', b"")}, "`gelu` removed from __all__"),
        (_edit("activation.py", "def gelu(out, x)", "def gelu(out, x, scale)"), "new required parameter `scale`"),
        (_edit("activation.py", 'approximate="tanh"', 'approximate="none"'), "default of `approximate` changed"),
        (_edit("layers.py", "class GeluTanh(nn.Module)", "class _GeluTanh(nn.Module)"), "layer `GeluTanh` removed"),
        (_edit("layers.py", "def forward(self, x):\n        return geglu", "def forward(self, y):\n        return geglu"),
         "layer `GeGLUMLP.forward(x)` -> `(y)`: parameter `x` renamed"),
        (_edit("layers.py", "can_torch_compile = True", "can_torch_compile = False"), "can_torch_compile changed from True to False"),
    ],
    ids=["op-removed", "op-changed", "op-made-internal", "python-op-changed", "function-removed", "function-changed",
         "default-changed", "layer-removed", "layer-forward-changed", "layer-flag-changed"],
)
def test_public_api_changes_fail_the_gate(edit, expect):
    old, new = api_of(variant_files(CPU)), api_of(variant_files(CPU, **edit))
    breaks = gate(old, new)
    assert any(expect in b for b in breaks), breaks
    p = plan_release({CPU: local_variant(CPU, variant_files(CPU, **edit), commit=COMMIT_B)},
                     branch(remote_of(local_variant(CPU))), repo_id=REPO_ID, kernel_name=KERNEL, version=1)
    assert {r.code for r in p.refusals} == {"api-break"} and any(expect in r.message for r in p.refusals), p.render()
