"""What the ctypes check/bench scripts here share: the repository root (the libraries
are under ROOT/.sm90dev) and one log, printed as it is written and saved whole at the
end, so a script and the helpers it imports from another one write to the same file."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_lines: list[str] = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    _lines.append(s)


def save_log(path: str) -> None:
    with open(path, "w") as f:
        f.write("\n".join(_lines) + "\n")
