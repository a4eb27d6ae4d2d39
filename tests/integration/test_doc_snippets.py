"""Every ```python block of README.md, CARD.md and docs/*.md, run as a reader copies it.

The word after `python` on the fence says how:

- none: run in a fresh interpreter, on CPU without a GPU (LOCAL_KERNELS maps org/geglu
  to this checkout's build/, HF_HUB_OFFLINE=1, TRITON_INTERPRET=1);
- `cuda`: needs a GPU: run where one is present, skipped otherwise;
- `network`: needs the Hub or another online service: skipped;
- `fragment`: continues code shown elsewhere (names it does not define): compiled only.

CARD.md's placeholders are filled with build.toml's repo id and version, as
tools/publish.py fills them for the Hub. One test per block: `<file>[<index>]`, the
index counting the file's python blocks from 0.
"""

import os
import re
import subprocess
import sys
import tomllib

import pytest

from conftest import HAS_CUDA, REPO, REPO_ID

DOCS = [REPO / "README.md", REPO / "CARD.md", *sorted((REPO / "docs").glob("*.md"))]
TAGS = ("", "cuda", "network", "fragment")
FENCE = re.compile(r"^```python(?:[ \t]+(\S+))?[ \t]*$")
TIMEOUT_S = 300


def card_values() -> dict:
    general = tomllib.loads((REPO / "build.toml").read_text())["general"]
    return {"repo_id": general["hub"]["repo-id"], "version": str(general["version"])}


def fill_card(src: str) -> str:
    values = card_values()

    def fill(m: re.Match) -> str:
        assert m.group(1) in values, f"CARD.md's code has the placeholder {m.group(0)}, which this test cannot fill"
        return values[m.group(1)]

    return re.sub(r"\{\{\s*([A-Za-z_]+)\s*\}\}", fill, src)


def python_blocks(path):
    """[(tag, source)] of the file's ```python blocks, in order."""
    blocks, lines = [], path.read_text().splitlines(keepends=True)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].rstrip("\n"))
        i += 1
        if not m:
            continue
        body = []
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"{path.name}: a ```python block is not closed"
        i += 1
        src = "".join(body)
        blocks.append((m.group(1) or "", fill_card(src) if path.name == "CARD.md" else src))
    return blocks


def snippet_params():
    params = []
    for path in DOCS:
        rel = path.relative_to(REPO).as_posix()
        for index, (tag, src) in enumerate(python_blocks(path)):
            params.append(pytest.param(rel, index, tag, src, id=f"{rel}[{index}]"))
    return params


SNIPPETS = snippet_params()


def test_the_docs_have_snippets():
    assert len(SNIPPETS) >= 10, [p.id for p in SNIPPETS]
    assert {p.values[0] for p in SNIPPETS} >= {"README.md", "CARD.md", "docs/API.md"}


@pytest.mark.parametrize("doc,index,tag,src", SNIPPETS)
def test_snippet(doc, index, tag, src, tmp_path):
    name = f"{doc}[{index}]"
    assert tag in TAGS, f"{name}: unknown tag ```python {tag} (known: {', '.join(t for t in TAGS if t)})"
    compile(src, name, "exec")  # every block, whatever its tag, is valid Python
    if tag == "fragment":
        return
    if tag == "network":
        pytest.skip(f"{name} needs the Hub or another online service (```python network)")
    if tag == "cuda" and not HAS_CUDA:
        pytest.skip(f"{name} needs a CUDA GPU (```python cuda)")
    script = tmp_path / "snippet.py"
    script.write_text(src)
    env = dict(os.environ, LOCAL_KERNELS=f"{REPO_ID}={REPO}", HF_HUB_OFFLINE="1")
    if not HAS_CUDA:
        env["TRITON_INTERPRET"] = "1"
    env.pop("GEGLU_HUB_REVISION", None)
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert res.returncode == 0, f"{name} failed as copied (exit {res.returncode}):\n{res.stdout}\n{res.stderr[-6000:]}"
