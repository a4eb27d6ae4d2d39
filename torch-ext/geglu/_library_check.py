"""Is the variant's native library whole, before anything opens it?

dlopen maps a shared library without reading it through; a truncated copy (an
interrupted download or copy) maps too, and the process dies of SIGBUS when the loader
touches a page past the end of the file. So before `_ops` imports the library, its ELF
headers are read and every loadable segment and the section table must lie inside the
file; otherwise an ImportError names the variant and the file. A few hundred bytes are
read: the check costs nothing at import. (kernels 0.17 does not verify metadata.json's
digest at load; `python -m tools.build` does when it builds.)
"""

import struct
from pathlib import Path

_PT_LOAD = 1


def _damage(path: Path):
    """Why the ELF file at `path` cannot be loaded whole, or None if it can."""
    size = path.stat().st_size
    with path.open("rb") as f:
        header = f.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF":
            return f"not an ELF file ({size} bytes)"
        if header[4] != 2 or header[5] != 1:
            return "not a 64-bit little-endian ELF file"
        phoff, shoff = struct.unpack_from("<QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 54)
        need = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
        if phentsize >= 56 and phoff + phentsize * phnum <= size:
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
                if p_type == _PT_LOAD:
                    need = max(need, p_offset + p_filesz)
    if need > size:
        return f"truncated: {size} of the {need} bytes its ELF headers describe"
    return None


def check_native_libraries(package_dir: Path) -> None:
    """Raise ImportError naming the variant and the file if a native library in the
    variant's directory is damaged."""
    for path in sorted(package_dir.glob("*.so")):
        why = _damage(path)
        if why is not None:
            raise ImportError(
                f"geglu: the native library {path.name} of the variant {package_dir.name} is damaged "
                f"({why}): {path}. Download the kernel again (for a Hub download, delete that "
                "snapshot from the Hugging Face cache first) or rebuild it (python -m tools.build)."
            )
