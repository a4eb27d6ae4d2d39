"""Synthetic variants and branch states for the offline tests of the release logic.

Variants are made of small but real package files (an `__init__.py` with `__all__`,
functions, `layers.py`, and a stand-in native module carrying op schema strings the
way a compiled one does), so the API description is computed exactly as for a build.
Both the Python and the native ops include a public op and an internal (`_`) one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The repository root, for `tools` (pytest puts only the test folders on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.publish import content_digest
from tools.release_api import describe_api
from tools.release_plan import BranchState, LocalVariant, RemoteVariant

KERNEL = "geglu"
REPO_ID = "org/geglu"
COMMIT_A = "a" * 40
COMMIT_B = "b" * 40
CPU = "torch213-cxx11-cpu-x86_64-linux"
CPU_212 = "torch212-cxx11-cpu-x86_64-linux"
CU130 = "torch213-cxx11-cu130-x86_64-linux"
NOARCH = "torch-cuda"

INIT = '''"""geglu (test double)."""
from . import layers
from .activation import geglu, gelu, gelu_and_mul
__all__ = ["geglu", "gelu", "gelu_and_mul", "layers"]
'''
ACTIVATION = '''import torch

from ._ops import add_op_namespace_prefix


def _impl(*args, **kwargs):
    raise NotImplementedError


def geglu(gate, up, approximate="tanh"):
    return _impl(gate, up, approximate)


def gelu(out, x):
    return _impl(out, x)


gelu_and_mul = gelu


def define(name, schema, impl, mutates_args=()):
    return torch.library.custom_op(add_op_namespace_prefix(name), impl, mutates_args=mutates_args, schema=schema)


# A public op defined in Python (its name has no leading `_`), and an internal one.
define("geglu_triton", "(Tensor gate, Tensor up, str approximate) -> Tensor", _impl)
define("_geglu_triton_backward", "(Tensor grad, Tensor gate, Tensor up, str approximate) -> (Tensor, Tensor)", _impl)
'''
LAYERS = '''import torch.nn as nn

from .activation import geglu


class GeGLUMLP(nn.Module):
    can_torch_compile = True
    gate_proj: nn.Linear

    def forward(self, x):
        return geglu(x, x)


class GeluTanh(nn.Module):
    has_backward = False

    def forward(self, x):
        return x


class _Helper(nn.Module):
    def forward(self, x):
        return x
'''
# Two public native ops and an internal (`_`-prefixed) one.
NATIVE = (
    b"\x7fELF junk\x00gelu_and_mul(Tensor! out, Tensor input) -> ()\x00"
    b"geglu(Tensor gate, Tensor up, str approximate) -> Tensor\x00more junk\x00"
    b"_linear_epilogue(Tensor x, Tensor? bias, str approximate) -> Tensor\x00"
)


def variant_files(name: str, uid: str = "abc1234", **replace: bytes | str | None) -> dict[str, bytes]:
    """The files of one variant; `replace` overrides (None deletes) a file by relpath,
    with `.` in keywords written as `__` (`layers__py` -> `layers.py`)."""
    backend = "cpu" if "-cpu-" in name else "cuda"
    ops_id = f"_geglu_{backend if name != NOARCH else 'triton'}_{uid}"
    files: dict[str, bytes] = {
        "__init__.py": INIT.encode(),
        "activation.py": ACTIVATION.encode(),
        "layers.py": LAYERS.encode(),
        "_ops.py": f"import torch\nops = torch.ops.{ops_id}\n".encode(),
        "geglu/__init__.py": b"from .. import *\n",
    }
    if name != NOARCH:
        files[f"{ops_id}.abi3.so"] = NATIVE
    for key, value in replace.items():
        rel = key.replace("__", ".") if key.endswith("__py") or key.endswith("__so") else key
        if value is None:
            files.pop(rel, None)
        else:
            files[rel] = value.encode() if isinstance(value, str) else value
    return files


def metadata(name: str, *, uid: str = "abc1234", version: int = 1, kernel: str = KERNEL, commit: str | None = COMMIT_A,
             dirty: bool = False, archs: list[str] | None = None) -> dict:
    backend = "cpu" if "-cpu-" in name else "cuda"
    ops_id = f"_geglu_{backend if name != NOARCH else 'triton'}_{uid}"
    meta = {
        "name": kernel,
        "id": ops_id,
        "version": version,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": backend},
        "provenance": {"kernel-builder": {"version": "test"}},
    }
    if backend == "cuda" and name != NOARCH:
        meta["backend"]["archs"] = archs or ["8.0", "9.0a"]
    if commit is not None:
        meta["provenance"]["kernel"] = {"commit": commit, "dirty": dirty}
    return meta


def local_variant(name: str, files: dict[str, bytes] | None = None, meta: dict | None = None,
                  problems: list[str] | None = None, **meta_kw) -> LocalVariant:
    uid = meta_kw.get("uid", "abc1234")
    files = variant_files(name, uid) if files is None else files
    meta = metadata(name, **meta_kw) if meta is None else meta
    digests = {rel: content_digest(data) for rel, data in files.items()}
    digests["metadata.json"] = content_digest(json.dumps(meta, sort_keys=True).encode())
    api = describe_api({r: b for r, b in files.items() if "/" not in r and r.endswith((".py", ".so"))})
    return LocalVariant(name, digests, meta, api, list(problems or []))


def remote_of(lv: LocalVariant) -> RemoteVariant:
    """The branch holding exactly what `lv` is (as after publishing it)."""
    return RemoteVariant(lv.name, dict(lv.files), dict(lv.metadata), lv.api)


def branch(*variants: RemoteVariant, card: str | None = None) -> BranchState:
    return BranchState(
        repo_exists=True,
        branch_exists=True,
        head="1" * 40,
        variants={v.name: v for v in variants},
        versions=[1],
        card_digest=card,
    )
