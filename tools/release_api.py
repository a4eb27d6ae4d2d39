"""The public API of a build variant, read statically from the variant's files.

A version branch `v<N>` promises that nothing a user can call disappears or changes
meaning, so the publish command compares the API of what it uploads with the API of
what the branch already has. The policy: public is what a user is told to call, and
the gate (`compare_python_api`, `compare_ops`) checks only that:

- `__all__` of the variant's `__init__.py`, and the signature of every public function
  (parameter names, kinds and default values, resolved through the package's relative
  imports);
- the layers: public `nn.Module` subclasses of `layers.py`, with their `forward`
  signature and the `has_backward` / `can_torch_compile` flags `kernelize` reads;
- the public ops: every op whose name does not start with `_` (`is_public_op`). These
  are the documented kernels-community-style ops users call through `kernel.ops` /
  `_ops.ops` (the native `gelu_and_mul`, `gelu_tanh_and_mul`, `gelu`, `gelu_tanh`,
  `geglu`, `geglu_backward`); their name must not disappear and their schema must not
  change. Ops named `_...` (`_geglu_triton`, `_linear_epilogue`, `_geglu_mlp`,
  ...) are internal helpers of the Python API: they are listed in the description for
  information, but removing or changing one never fails the gate.

Every op schema registered under the build's namespace is read: native ops from the
schema strings in the compiled module (`ops.def("name(...) -> ...")` literals survive
compilation verbatim), Python custom ops from their `(...) -> ...` schema literals or,
without one, inferred from the implementation's annotations as `custom_op` infers them
(direct calls, decorators, and one level of helper such as `_define(name, impl)` or a
class whose `__init__(self, name, impl, ...)` defines the op).

Why statically: it works the same for every variant (any torch, any CUDA, aarch64),
for the local build and for files downloaded from the Hub, and never executes code
fetched from the Hub. tests/release/test_release.py cross-checks the op schemas against what
torch registers when the local CPU variant is imported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

POS_ONLY, POSITIONAL, VAR_POSITIONAL, KEYWORD_ONLY, VAR_KEYWORD = (
    "positional-only",
    "positional",
    "*args",
    "keyword-only",
    "**kwargs",
)

# `name(<args with at most one level of parentheses>) -> <returns>`, NUL-terminated in .so.
_NATIVE_SCHEMA = re.compile(rb"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?\((?:[^\x00-\x1f()]|\([^\x00-\x1f()]*\))*\) -> [^\x00-\x1f]{1,300})\x00")
_PY_SCHEMA = re.compile(r"^\(.*\)\s*->\s*\S.*$", re.S)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _norm(schema: str) -> str:
    return " ".join(schema.split())


def is_public_op(name: str) -> bool:
    """Whether the op `name` (`op` or `op.overload`) is public: its name does not start
    with `_`. Internal (`_`-prefixed) ops are outside the version branch's promise."""
    return not name.startswith("_")


# --------------------------------------------------------------------------- signatures


def _params(args: ast.arguments, drop_first: bool = False) -> list[dict]:
    """Parameters as [{name, kind, default}] (defaults as source text; annotations are
    not part of the contract: callers pass values, not types)."""
    out: list[dict] = []
    positional = [(a, POS_ONLY) for a in args.posonlyargs] + [(a, POSITIONAL) for a in args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for (a, kind), d in zip(positional, defaults):
        out.append({"name": a.arg, "kind": kind, "default": None if d is None else ast.unparse(d)})
    if args.vararg:
        out.append({"name": args.vararg.arg, "kind": VAR_POSITIONAL, "default": None})
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append({"name": a.arg, "kind": KEYWORD_ONLY, "default": None if d is None else ast.unparse(d)})
    if args.kwarg:
        out.append({"name": args.kwarg.arg, "kind": VAR_KEYWORD, "default": None})
    return out[1:] if drop_first and out and out[0]["kind"] in (POS_ONLY, POSITIONAL) else out


def signature_text(params: list[dict]) -> str:
    parts, saw_kwonly, saw_posonly = [], False, False
    for p in params:
        if p["kind"] == POS_ONLY:
            saw_posonly = True
        elif saw_posonly:
            parts.append("/")
            saw_posonly = False
        if p["kind"] == KEYWORD_ONLY and not saw_kwonly:
            parts.append("*")
            saw_kwonly = True
        if p["kind"] == VAR_POSITIONAL:
            saw_kwonly = True
            parts.append("*" + p["name"])
        elif p["kind"] == VAR_KEYWORD:
            parts.append("**" + p["name"])
        else:
            parts.append(p["name"] + ("" if p["default"] is None else "=" + p["default"]))
    if saw_posonly:
        parts.append("/")
    return "(" + ", ".join(parts) + ")"


# --------------------------------------------------------------------------- the package


class _Package:
    """The variant's Python modules, parsed once, with relative imports resolved."""

    def __init__(self, files: Mapping[str, bytes]):
        self.sources = {p: b for p, b in files.items() if p.endswith(".py") and "/" not in p.strip("/")}
        self.trees: dict[str, ast.Module] = {}
        self.errors: list[str] = []

    def module(self, name: str) -> ast.Module | None:
        """Top-level module `name` (`activation` -> activation.py); None if absent."""
        path = f"{name}.py"
        if path not in self.sources:
            return None
        if path not in self.trees:
            try:
                self.trees[path] = ast.parse(self.sources[path].decode("utf-8"), filename=path)
            except (SyntaxError, UnicodeDecodeError) as e:
                self.errors.append(f"{path}: cannot parse ({e})")
                self.trees[path] = ast.Module(body=[], type_ignores=[])
        return self.trees[path]

    def resolve(self, module: str, name: str, depth: int = 0) -> dict:
        """What `module.name` is: a function (with its parameters), a module, a class."""
        tree = self.module(module)
        if tree is None or depth > 8:
            return {"kind": "unknown"}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                params = _params(node.args)
                return {"kind": "function", "params": params, "text": signature_text(params)}
            if isinstance(node, ast.ClassDef) and node.name == name:
                return {"kind": "class"}
        # Later bindings win, as at import time.
        for node in reversed(tree.body):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                for alias in node.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    if node.module is None:  # from . import layers
                        return {"kind": "module", "module": alias.name}
                    return self.resolve(node.module.split(".")[0], alias.name, depth + 1)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                # `a = b = impl` chains: every target is bound to the same value.
                if name in targets:
                    return self.resolve(module, node.value.id, depth + 1)
        return {"kind": "unknown"}


def _literal_all(tree: ast.Module) -> list[str] | None:
    names: list[str] | None = None
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            target, value = "=", node.value
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            target, value = "+=", node.value
        if target is None:
            continue
        try:
            items = list(ast.literal_eval(value))
        except ValueError:
            return None
        names = items if target == "=" else (names or []) + items
    return names


def _layers(pkg: _Package, module: str) -> dict:
    tree = pkg.module(module)
    if tree is None:
        return {}
    exported = _literal_all(tree)
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        if exported is not None and node.name not in exported:
            continue
        if not any(ast.unparse(b).split(".")[-1] == "Module" for b in node.bases):
            continue
        layer = {"forward": None, "text": None, "has_backward": True, "can_torch_compile": False}
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "forward":
                layer["forward"] = _params(item.args, drop_first=True)
                layer["text"] = signature_text(layer["forward"])
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id in ("has_backward", "can_torch_compile") and item.value:
                        try:
                            layer[t.id] = bool(ast.literal_eval(item.value))
                        except ValueError:
                            pass
        out[node.name] = layer
    return out


# Python annotation -> schema type, as torch.library.custom_op infers a schema.
_SCALAR_TYPES = {"Tensor": "Tensor", "int": "SymInt", "float": "float", "bool": "bool", "str": "str",
                 "dtype": "ScalarType", "device": "Device", "Number": "Scalar", "None": "()"}


def _schema_type(ann: ast.expr | None) -> str:
    if ann is None:
        return "?"
    if isinstance(ann, ast.Constant) and ann.value is None:
        return "()"
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):  # "Tensor" (string annotation)
        try:
            return _schema_type(ast.parse(ann.value, mode="eval").body)
        except SyntaxError:
            return ann.value
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | None
        sides = [ann.left, ann.right]
        rest = [a for a in sides if not (isinstance(a, ast.Constant) and a.value is None)]
        if len(rest) == 1:
            return _schema_type(rest[0]) + "?"
    if isinstance(ann, ast.Subscript):
        base = ast.unparse(ann.value).split(".")[-1]
        args = list(ann.slice.elts) if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if base == "Optional" and len(args) == 1:
            return _schema_type(args[0]) + "?"
        if base == "Union":
            rest = [a for a in args if not (isinstance(a, ast.Constant) and a.value is None)]
            if len(rest) == 1 and len(args) == 2:
                return _schema_type(rest[0]) + "?"
        if base in ("List", "list", "Sequence") and len(args) == 1:
            return _schema_type(args[0]) + "[]"
        if base in ("Tuple", "tuple"):
            return "(" + ", ".join(_schema_type(a) for a in args) + ")"
    text = ast.unparse(ann)
    return _SCALAR_TYPES.get(text.split(".")[-1], text)


def _schema_from_function(name: str, fn: ast.FunctionDef, mutates: tuple[str, ...]) -> str:
    """The schema torch infers for `custom_op(name, fn, mutates_args=mutates)`."""
    parts = []
    params = _params(fn.args)
    anns = {a.arg: a.annotation for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    for i, p in enumerate(p for p in params if p["kind"] in (POS_ONLY, POSITIONAL, KEYWORD_ONLY)):
        t = _schema_type(anns.get(p["name"]))
        if p["name"] in mutates and t.startswith("Tensor"):
            t = t.replace("Tensor", f"Tensor(a{mutates.index(p['name'])}!)", 1)
        parts.append(f"{t} {p['name']}" + ("" if p["default"] is None else f"={p['default'].replace(chr(39), chr(34))}"))
    return _norm(f"{name}({', '.join(parts)}) -> {_schema_type(fn.returns)}")


def _python_ops(pkg: _Package) -> dict[str, str]:
    """Custom ops defined in Python, by op name -> `name(args) -> returns`.

    Definition sites are `custom_op(...)` / `library.define(...)` calls and
    `@custom_op(...)` decorators. The op name is a string constant, possibly wrapped in
    `add_op_namespace_prefix(...)`; when it is a parameter of a helper function (e.g.
    `def define(name, schema, impl): custom_op(add_op_namespace_prefix(name), impl,
    schema=schema)`), every call of the helper in the module is a definition, with the
    helper's parameters bound to that call's arguments. The schema is the literal when
    given, else inferred from the implementation's annotations as custom_op does."""
    ops: dict[str, str] = {}
    for path in sorted(pkg.sources):
        tree = pkg.module(path[: -len(".py")])
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

        def value(expr, env):
            return env.get(expr.id, expr) if isinstance(expr, ast.Name) else expr

        def op_name(expr, env):
            expr = value(expr, env)
            if isinstance(expr, ast.Constant) and isinstance(expr.value, str) and _IDENT.match(expr.value):
                return expr.value
            if isinstance(expr, ast.Call) and ast.unparse(expr.func).split(".")[-1] == "add_op_namespace_prefix" and expr.args:
                return op_name(expr.args[0], env)
            return None

        def record(call: ast.Call, env: dict, impl: ast.FunctionDef | None = None) -> None:
            name = op_name(call.args[0], env) if call.args else None
            if name is None:
                return
            kw = {k.arg: value(k.value, env) for k in call.keywords if k.arg}
            is_define = ast.unparse(call.func).endswith("library.define")
            schema = kw.get("schema") or (value(call.args[1], env) if is_define and len(call.args) > 1 else None)
            if isinstance(schema, ast.Constant) and isinstance(schema.value, str) and _PY_SCHEMA.match(schema.value.strip()):
                ops[name] = _norm(name + schema.value.strip())
                return
            if impl is None and not is_define:
                fn = value(call.args[1], env) if len(call.args) > 1 else kw.get("fn")
                impl = functions.get(fn.id) if isinstance(fn, ast.Name) else None
            if impl is not None:
                mutates = kw.get("mutates_args")
                try:
                    names = tuple(ast.literal_eval(mutates)) if mutates is not None else ()
                except ValueError:
                    names = ()
                ops[name] = _schema_from_function(name, impl, tuple(n for n in names if isinstance(n, str)))

        def bind(helper: ast.FunctionDef, call: ast.Call, skip: int = 0) -> dict:
            params = [a.arg for a in helper.args.posonlyargs + helper.args.args][skip:]
            defaults = dict(zip(params[len(params) - len(helper.args.defaults):], helper.args.defaults))
            env = {**defaults, **dict(zip(params, call.args))}
            env.update({k.arg: k.value for k in call.keywords if k.arg})
            return env

        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in node.decorator_list:
                    if isinstance(dec, ast.Call) and ast.unparse(dec.func).split(".")[-1] == "custom_op":
                        record(dec, {}, impl=node)
                continue
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func)
            if not (func.split(".")[-1] == "custom_op" or func.endswith("library.define")):
                continue
            if isinstance(parents.get(node), (ast.FunctionDef, ast.AsyncFunctionDef)) and node in parents[node].decorator_list:
                continue
            if op_name(node.args[0], {}) if node.args else None:
                record(node, {})
                continue
            # The name comes from a parameter of the enclosing helper: each call of it defines an op.
            helper = parents.get(node)
            while helper is not None and not isinstance(helper, (ast.FunctionDef, ast.AsyncFunctionDef)):
                helper = parents.get(helper)
            if helper is None:
                continue
            callee, skip = helper.name, 0
            owner = parents.get(helper)
            if helper.name == "__init__" and isinstance(owner, ast.ClassDef):
                callee, skip = owner.name, 1  # a class whose constructor defines the op; `self` is not passed
            for site in ast.walk(tree):
                if isinstance(site, ast.Call) and isinstance(site.func, ast.Name) and site.func.id == callee:
                    record(node, bind(helper, site, skip))
    return ops


def native_ops(blob: bytes) -> dict[str, str]:
    """Op schemas compiled into a native module (the `ops.def` string literals)."""
    out = {}
    for m in _NATIVE_SCHEMA.finditer(blob):
        text = m.group(1).decode("ascii", "replace")
        out[text.split("(", 1)[0]] = _norm(text)
    return out


def describe_api(files: Mapping[str, bytes]) -> dict:
    """The public API of one variant, from its files (relpath -> content). `ops` lists
    every op the variant registers, internal (`_`) ones included for information."""
    pkg = _Package(files)
    init = pkg.module("__init__")
    api: dict = {"all": [], "entries": {}, "layers": {}, "ops": {}, "errors": []}
    if init is None:
        api["errors"].append("no __init__.py")
        return api
    names = _literal_all(init)
    if names is None:
        api["errors"].append("__init__.py has no literal __all__")
        names = []
    api["all"] = sorted(names)
    layers_module = None
    for name in api["all"]:
        entry = pkg.resolve("__init__", name)
        api["entries"][name] = entry
        if name == "layers" and entry.get("kind") == "module":
            layers_module = entry["module"]
    if "layers" not in api["all"]:
        api["errors"].append("`layers` is not in __all__")
    api["layers"] = _layers(pkg, layers_module or "layers")
    ops = _python_ops(pkg)
    for path, blob in sorted(files.items()):
        if path.endswith(".so") and "/" not in path:
            ops.update(native_ops(blob))
    api["ops"] = dict(sorted(ops.items()))
    api["errors"] += pkg.errors
    return api


# --------------------------------------------------------------------------- comparison


def _param_changes(where: str, old: list[dict], new: list[dict]) -> tuple[list[str], list[str]]:
    """(breaks, additions) going from parameters `old` to `new` of the same callable."""
    breaks, adds = [], []
    positional = (POS_ONLY, POSITIONAL)
    old_pos = [p for p in old if p["kind"] in positional]
    new_pos = [p for p in new if p["kind"] in positional]
    matched: set[str] = set()

    def same_default(p: dict, q: dict) -> None:
        if p["default"] is not None and q["default"] is None:
            breaks.append(f"{where}: parameter `{p['name']}` lost its default {p['default']} (now required)")
        elif p["default"] is not None and q["default"] != p["default"]:
            breaks.append(f"{where}: default of `{p['name']}` changed from {p['default']} to {q['default']}")

    new_var_pos = any(q["kind"] == VAR_POSITIONAL for q in new)
    new_var_kw = any(q["kind"] == VAR_KEYWORD for q in new)
    for i, p in enumerate(old_pos):
        if i >= len(new_pos):
            # Still accepted when *args (and, for keyword callers, **kwargs) take it.
            if not (new_var_pos and (p["kind"] == POS_ONLY or new_var_kw)):
                breaks.append(f"{where}: positional parameter `{p['name']}` removed")
            continue
        q = new_pos[i]
        matched.add(q["name"])
        if p["kind"] == POSITIONAL and q["name"] != p["name"]:
            breaks.append(f"{where}: parameter `{p['name']}` renamed to `{q['name']}` (breaks keyword callers)")
        elif p["kind"] == POSITIONAL and q["kind"] == POS_ONLY:
            breaks.append(f"{where}: parameter `{p['name']}` became positional-only")
        same_default(p, q)
    by_name = {q["name"]: q for q in new if q["kind"] in (POSITIONAL, KEYWORD_ONLY)}
    for p in (p for p in old if p["kind"] == KEYWORD_ONLY):
        q = by_name.get(p["name"])
        if q is None:
            if not new_var_kw:
                breaks.append(f"{where}: keyword parameter `{p['name']}` removed")
            continue
        matched.add(q["name"])
        same_default(p, q)
    for kind in (VAR_POSITIONAL, VAR_KEYWORD):
        if any(p["kind"] == kind for p in old) and not any(q["kind"] == kind for q in new):
            breaks.append(f"{where}: no longer accepts {kind}")
    for q in new:
        if q["kind"] in (VAR_POSITIONAL, VAR_KEYWORD) or q["name"] in matched:
            continue
        if any(p["name"] == q["name"] and p["kind"] == q["kind"] for p in old):
            continue
        if q["default"] is None:
            breaks.append(f"{where}: new required parameter `{q['name']}`")
        else:
            adds.append(f"{where}: new optional parameter `{q['name']}={q['default']}`")
    return breaks, adds


def compare_python_api(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """(breaks, additions) in `__all__`, public signatures and layers from `old` to `new`."""
    breaks, adds = [], []
    for name in old["all"]:
        if name not in new["all"]:
            breaks.append(f"`{name}` removed from __all__")
            continue
        o, n = old["entries"].get(name, {}), new["entries"].get(name, {})
        if o.get("kind") in (None, "unknown"):
            continue
        if n.get("kind") != o.get("kind"):
            breaks.append(f"`{name}` changed from a {o.get('kind')} to a {n.get('kind')}")
        elif o["kind"] == "function":
            b, a = _param_changes(f"`{name}{o['text']}` -> `{name}{n['text']}`", o["params"], n["params"])
            breaks += b
            adds += a
    adds += [f"`{name}` added to __all__" for name in new["all"] if name not in old["all"]]
    for cls, o in old["layers"].items():
        n = new["layers"].get(cls)
        if n is None:
            breaks.append(f"layer `{cls}` removed")
            continue
        if o["forward"] is not None:
            if n["forward"] is None:
                breaks.append(f"layer `{cls}` lost its forward")
            else:
                b, a = _param_changes(f"layer `{cls}.forward{o['text']}` -> `{n['text']}`", o["forward"], n["forward"])
                breaks += b
                adds += a
        for flag in ("has_backward", "can_torch_compile"):
            if o[flag] and not n[flag]:
                breaks.append(f"layer `{cls}`: {flag} changed from True to False")
    adds += [f"layer `{cls}` added" for cls in new["layers"] if cls not in old["layers"]]
    return breaks, adds


def compare_ops(old: dict, new: dict) -> list[str]:
    """Public ops of `old` that `new` drops or whose schema it changes (additions are
    fine; internal `_` ops are not compared: see `is_public_op`)."""
    breaks = []
    for name, schema in old["ops"].items():
        if not is_public_op(name):
            continue
        if name not in new["ops"]:
            breaks.append(f"op `{name}` removed (was `{schema}`)")
        elif new["ops"][name] != schema:
            breaks.append(f"op schema changed: `{schema}` -> `{new['ops'][name]}`")
    return breaks


def python_api_key(api: dict) -> tuple:
    """What two variants of one build must agree on (ops differ per backend)."""
    return (tuple(api["all"]), repr(sorted(api["entries"].items())), repr(sorted(api["layers"].items())))
