"""No crash on any CUDA GPU (issue 12): `get_kernel` loads every CUDA variant of the
release on every GPU its torch runs on.

`get_kernel(..., check_arch=True)` (the default, and all that `LayerRepository` offers)
raises when the GPU's capability is not covered by the variant's `metadata.json` archs
(kernels/archs.py: a plain `8.6` covers 8.6-8.x, `9.0a` only 9.0, `8.0+PTX` every
capability from 8.0 on). Here the archs are the ones tools/build.py writes for each
CUDA variant of the release matrix (build.toml's cuda-capabilities that the variant's
toolkit can target, tools/variants.py), and the check is kernels' own ArchValidator,
run with the GPU faked (torch.version.cuda, is_available, get_device_capability): the
same code path as a load on that GPU, on a CPU machine.

What runs on each GPU (docs/CUDA_ARCHS.md): SASS for 7.5, 8.0, 8.6, 8.9, 9.0a, 10.0 and
12.0 (each serving its major's later minors); the compute_80 PTX, JIT-compiled by the
driver, on the others (11.0, 13.x, ...). A V100 (7.0) is refused: no code for it, and
the CUDA 13 toolkits dropped it.
"""

import importlib
import json

import pytest
import torch

from conftest import REPO

# Capability -> an example GPU, every one a torch 2.12/2.13 CUDA build runs on.
SERVED = {
    (7, 5): "T4, RTX 20xx",
    (8, 0): "A100",
    (8, 6): "A10, RTX 30xx",
    (8, 7): "Jetson Orin",
    (8, 9): "L4, RTX 40xx",
    (9, 0): "H100, H200",
    (10, 0): "B200",
    (10, 3): "B300",
    (11, 0): "Jetson Thor",
    (12, 0): "RTX 50xx",
    (12, 1): "DGX Spark (GB10)",
    (13, 0): "a GPU newer than any toolkit here",
}
REFUSED = {(7, 0): "V100"}


def cuda_variants():
    from tools.build import read_config
    from tools.variants import load_versions, required_variants

    return [v for v in required_variants(read_config(REPO), load_versions()) if v.cuda is not None]


def variant_metadata(variant):
    """The metadata.json tools/build.py writes for this variant (backend archs: the
    sorted capabilities it compiles), parsed by the loader's own parser."""
    from kernels._rust import Metadata

    meta = {
        "name": "geglu",
        "id": "_geglu_cuda_0000000",
        "version": 1,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": "cuda", "archs": sorted(variant.capabilities)},
    }
    return Metadata.from_bytes(json.dumps(meta).encode())


@pytest.fixture
def fake_gpu(monkeypatch):
    """Makes this process look like a CUDA torch on a GPU of the given capability, as
    kernels' arch check sees it."""

    def fake(capability):
        monkeypatch.setattr(torch.version, "cuda", "13.0")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)

    return fake


def arch_check(variant, capability, fake_gpu):
    from kernels.validate import ArchValidator

    fake_gpu(capability)
    ArchValidator().validate_metadata(metadata=variant_metadata(variant), variant=variant.name)


def test_release_has_cuda_variants():
    names = {v.name for v in cuda_variants()}
    assert {"torch213-cxx11-cu126-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux"} <= names


@pytest.mark.parametrize("capability", sorted(SERVED), ids=lambda c: f"{c[0]}.{c[1]}")
def test_every_cuda_variant_loads_on_gpu(capability, fake_gpu):
    """The arch check passes on every GPU from 7.5 on, for every CUDA variant: also the
    cu126 ones, whose toolkit knows no Blackwell (they carry the compute_80 PTX)."""
    for variant in cuda_variants():
        arch_check(variant, capability, fake_gpu)


@pytest.mark.parametrize("capability", sorted(REFUSED), ids=lambda c: f"{c[0]}.{c[1]}")
def test_older_gpus_are_refused_with_kernels_message(capability, fake_gpu):
    """Below 7.5 there is no code: kernels refuses the load (a clear RuntimeError at
    get_kernel, never a crash at the first launch)."""
    for variant in cuda_variants():
        with pytest.raises(RuntimeError, match="not supported by the architectures of the build"):
            arch_check(variant, capability, fake_gpu)


def test_build_toml_declares_ptx_for_forward_compatibility():
    """The generic CUDA section carries one PTX entry, at the lowest arch with native
    bf16 (8.0): the code the driver JIT-compiles for any GPU without SASS here."""
    from tools.build import gencode_flags, read_config

    (section,) = [k for k in read_config(REPO).kernels if k.name == "geglu_cuda"]
    ptx = [c for c in section.cuda_capabilities if c.endswith("+PTX")]
    assert ptx == ["8.0+PTX"], section.cuda_capabilities
    assert "-gencode=arch=compute_80,code=compute_80" in gencode_flags(ptx)
    assert "7.5" in section.cuda_capabilities


@pytest.mark.parametrize("capability", sorted(SERVED) + sorted(REFUSED), ids=lambda c: f"{c[0]}.{c[1]}")
def test_triton_gemm_has_a_launch_row_for_every_gpu(capability, kernel):
    """The Python dispatch has an answer for every GPU: a Triton launch-table row (the
    Hopper engine only on 9.0, by its own capability check)."""
    configs = importlib.import_module(f"{kernel.__name__}.triton_kernels.gemm_configs")
    arch = configs.arch_key(capability)
    for m in (1, 64, 256, 4096):
        assert configs.lookup(arch, m) is not None


@pytest.mark.parametrize(
    "capability, swapped", [((7, 5), False), ((8, 0), True), ((12, 9), True), ((13, 0), False)], ids=str
)
def test_capability_range_restricts_the_layers(capability, swapped, fake_gpu, kernel):
    """docs/CUDA_ARCHS.md's recipe: a kernel mapping keyed by a CUDA capability range
    kernelizes the GPUs inside it and leaves the others with the original forward."""
    import example
    import kernels.layer.layer as layer_cache
    import kernels.layer.repos as repos
    from kernels import CUDAProperties, Device, Mode, kernelize, use_kernel_mapping

    cached_layers = dict(layer_cache._CACHED_LAYER)
    fake_gpu(capability)
    repos._find_capability.cache_clear()
    try:
        fast = Device(type="cuda", properties=CUDAProperties(min_capability=80, max_capability=129))
        with use_kernel_mapping({"GeGLUMLP": {fast: example.local_layer("GeGLUMLP", path=REPO)}}):
            model = kernelize(example.tiny_model("gemma"), mode=Mode.INFERENCE, device="cuda")
    finally:
        repos._find_capability.cache_clear()  # the next caller reads the real GPU (or none)
        # kernelize memoizes each repository's layer: the one loaded here is the variant of
        # the faked CUDA torch, so a later caller with the same repository would get it.
        layer_cache._CACHED_LAYER.clear()
        layer_cache._CACHED_LAYER.update(cached_layers)
    assert example.count_kernelized(model) == ({"GeGLUMLP": 2} if swapped else {})
