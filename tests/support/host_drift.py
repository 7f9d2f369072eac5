"""The drift guard's reading of the installed Hermes (issue 26, item 4).

What the host can call on its context engine, from two sources:

* the ``ContextEngine`` ABC: every public name it (and its bases) defines;
* the host's code: ``run_agent.py`` and ``agent/**/*.py`` parsed with :mod:`ast`. A name counts
  when it is looked up on an *engine expression*: ``<x>.context_compressor`` (the attribute the
  agent keeps its engine in), ``getattr(<x>, "context_compressor")``, what Hermes' loaders return
  (``load_context_engine``, ``get_plugin_context_engine``, ``_select_context_engine``), a
  ``clone_for_agent()`` / ``copy.deepcopy`` of one, a local assigned from one of these, and a
  parameter named as Hermes names its engine parameters (``engine``, ``compressor``, ...). The
  lookups are attribute reads and writes on it, and calls that take it and a constant name
  (``getattr(engine, "x")``, ``hasattr``, ``type(engine)``, Hermes' ``_call_engine_hook(engine, "x")``).

Each name is then a hook of the contract (``HOOK_SPECS``), a documented non-hook
(``observed_engine/contract/host_surface.py``), a data attribute of the ABC or of a real built-in
``ContextCompressor`` (engine state: the host reads and writes it, H1/H2, nothing to trace) or
*unknown*: a method, or a name neither class has that the host reads or calls (one it also
assigns is state it keeps on the engine, H1). :func:`unknown_names` returns the unknown ones
with where the host uses them; the drift test fails with that list.
"""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, Set

ENGINE_ATTRIBUTES = frozenset({"context_compressor", "context_engine", "_context_engine"})
ENGINE_FACTORIES = frozenset({"load_context_engine", "get_plugin_context_engine", "_select_context_engine"})
ENGINE_PARAMETERS = frozenset({"engine", "compressor", "context_compressor", "context_engine", "_compressor",
                               "_engine"})
_MISSING = object()


def host_root() -> Path:
    """The directory the installed Hermes' ``agent`` package and ``run_agent.py`` are in."""
    import agent.context_engine as module

    return Path(inspect.getfile(module)).resolve().parent.parent


def host_files(root: Path) -> list:
    files = [root / "run_agent.py"] if (root / "run_agent.py").exists() else []
    return files + sorted((root / "agent").rglob("*.py"))


def abc_names(abc: type) -> Set[str]:
    """The public names the ABC and its bases (other than ``object`` and ``abc.ABC``) define."""
    import abc as abc_module

    names: Set[str] = set()
    for klass in abc.__mro__:
        if klass in (object, abc_module.ABC):
            continue
        names.update(n for n in vars(klass) if not n.startswith("_"))
    return names


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


class _Scope(ast.NodeVisitor):
    """One function (or the module): which locals hold an engine, and what is looked up on them."""

    def __init__(self, found: Dict[str, Set[str]], where: str, inherited: Iterable[str] = ()):
        self.found = found
        self.where = where
        self.engines: Set[str] = set(inherited)

    # -- which expressions are an engine -----------------------------------------------------
    def is_engine(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.engines
        if isinstance(node, ast.Attribute):
            return node.attr in ENGINE_ATTRIBUTES
        if isinstance(node, ast.Call):
            func = node.func
            fname = _name_of(func)
            if fname in ENGINE_FACTORIES:
                return True
            if fname == "getattr" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value in ENGINE_ATTRIBUTES:
                return True
            if isinstance(func, ast.Attribute) and func.attr == "clone_for_agent" and self.is_engine(func.value):
                return True
            if fname == "deepcopy" and node.args and self.is_engine(node.args[0]):  # noqa: SIM103
                return True
            return False
        if isinstance(node, ast.BoolOp):
            return any(self.is_engine(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.is_engine(node.body) or self.is_engine(node.orelse)
        if isinstance(node, ast.NamedExpr):
            return self.is_engine(node.value)
        return False

    def collect_engines(self, body: list) -> None:
        """Locals assigned from an engine expression, to a fixed point (``b = a`` after ``a = ...``)."""
        assigns = []
        for stmt in body:
            for node in _walk_scope(stmt):
                if isinstance(node, ast.Assign):
                    targets = [t for t in node.targets if isinstance(t, ast.Name)]
                    assigns.append((targets, node.value))
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name) \
                        and node.value is not None or isinstance(node, ast.NamedExpr):
                    assigns.append(([node.target], node.value))
                elif isinstance(node, (ast.With, ast.AsyncWith)):
                    for item in node.items:
                        if isinstance(item.optional_vars, ast.Name):
                            assigns.append(([item.optional_vars], item.context_expr))
        changed = True
        while changed:
            changed = False
            for targets, value in assigns:
                if self.is_engine(value):
                    for target in targets:
                        if target.id not in self.engines:
                            self.engines.add(target.id)
                            changed = True

    # -- what is looked up on them -------------------------------------------------------------
    def note(self, name: str, how: str) -> None:
        self.found.setdefault(name, set()).add(f"{self.where} ({how})")

    def scan(self, body: list) -> None:
        for stmt in body:
            for node in _walk_scope(stmt):
                if isinstance(node, ast.Attribute) and self.is_engine(node.value):
                    self.note(node.attr, "attribute" if isinstance(node.ctx, ast.Load) else "write")
                elif isinstance(node, ast.Call) and len(node.args) >= 2 \
                        and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                    subject = node.args[0]
                    if isinstance(subject, ast.Call) and _name_of(subject.func) == "type" and subject.args:
                        subject = subject.args[0]
                    if self.is_engine(subject):
                        self.note(node.args[1].value, _name_of(node.func) or "call")


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _walk_scope(node: ast.AST):
    """ast.walk within one scope: nested functions, lambdas and classes are not entered (they
    are scopes of their own, :func:`_nested_scopes`)."""
    if isinstance(node, _SCOPES):
        return
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        todo.extend(child for child in ast.iter_child_nodes(current) if not isinstance(child, _SCOPES))


def _nested_scopes(body: list):
    """The functions, lambdas and classes defined directly in this scope."""
    for stmt in body:
        if isinstance(stmt, _SCOPES):
            yield stmt
            continue
        for node in _walk_scope(stmt):
            yield from (child for child in ast.iter_child_nodes(node) if isinstance(child, _SCOPES))


def _scan_scope(body: list, found, where: str, inherited: Iterable[str] = ()) -> None:
    scope = _Scope(found, where, inherited)
    scope.collect_engines(body)
    scope.scan(body)
    for child in _nested_scopes(body):
        if isinstance(child, ast.ClassDef):
            _scan_scope(child.body, found, where)
        elif isinstance(child, ast.Lambda):
            _scan_scope([ast.Expr(child.body)], found, where, scope.engines)
        else:
            args = child.args
            params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
            # a closure sees the enclosing scope's engines, unless a parameter shadows one
            engines = (scope.engines - params) | (params & ENGINE_PARAMETERS)
            _scan_scope(child.body, found, where, engines)


@functools.lru_cache(maxsize=8)
def host_lookups(root: Path) -> Dict[str, FrozenSet[str]]:
    """Every name the host's code looks up on an engine expression -> where (``file (how)``).
    Parsed once per directory and process (a few seconds for 0.22's ~300 modules)."""
    found: Dict[str, Set[str]] = {}
    for path in host_files(root):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        _scan_scope(tree.body, found, path.relative_to(root).as_posix())
    return {name: frozenset(where) for name, where in found.items()}


def is_state(name: str, abc: type, builtin: object) -> bool:
    """A data attribute (not callable) of the ABC or of a real built-in compressor."""
    for holder in (abc, builtin):
        try:
            value = inspect.getattr_static(holder, name, _MISSING)
        except Exception:
            value = _MISSING
        if value is _MISSING:
            continue
        if isinstance(value, property):
            return True
        return not callable(value) and not isinstance(value, (staticmethod, classmethod))
    return False


def unknown_names(abc: type, builtin: object, root: Path, known: Iterable[str]) -> Dict[str, Set[str]]:
    """The names the host can call on its engine that ``known`` (the hooks and the documented
    non-hooks) does not list, each with where it comes from. Every public ABC name counts; a name
    from the host's code counts unless it is engine state (:func:`is_state`)."""
    known = set(known)
    unknown: Dict[str, Set[str]] = {}
    for name in abc_names(abc) - known:
        unknown.setdefault(name, set()).add("the ContextEngine ABC")
    for name, where in host_lookups(root).items():
        if name in known or name.startswith("__"):
            continue
        if is_state(name, abc, builtin) or any(w.endswith(("(write)", "(setattr)")) for w in where):
            continue          # engine state, or a field the host itself keeps on the engine (H1)
        unknown.setdefault(name, set()).update(where)
    return unknown


def builtin_compressor():
    """A real built-in ``ContextCompressor`` of the installed Hermes (no network: a window given)."""
    from observed_engine import host

    cls = host.context_compressor_class()
    return cls(**host.compressor_arguments(cls, dict(model="fake-model", config_context_length=64_000,
                                                     quiet_mode=True)))


def contract_names() -> Set[str]:
    """What the contract knows: the traced hooks and the documented non-hooks."""
    from observed_engine.contract.hooks import HOOK_NAMES
    from observed_engine.contract.host_surface import NON_HOOKS

    return set(HOOK_NAMES) | set(NON_HOOKS)


def installed_drift(known: Iterable[str] = None) -> Dict[str, Set[str]]:
    """:func:`unknown_names` for the installed Hermes against ``known`` (default: the contract)."""
    from observed_engine import host

    return unknown_names(host.context_engine_abc(), builtin_compressor(), host_root(),
                         contract_names() if known is None else known)


def describe(unknown: Dict[str, Set[str]]) -> str:
    """The failure message: one line per unknown name, with where the host uses it."""
    from observed_engine import host

    found = host.hermes_installation()
    lines = [f"{found.describe() if found else 'this Hermes'} uses {len(unknown)} engine name(s) that "
             "observed_engine/contract/hooks.py (HOOK_SPECS) and contract/host_surface.py do not know:"]
    for name in sorted(unknown):
        lines.append(f"  {name}: {', '.join(sorted(unknown[name])[:4])}")
    lines.append("Give each a HookSpec (to trace it) or an entry in host_surface.py saying why it is not a hook, "
                 "and the host fact in docs/design/host-contract.md.")
    return "\n".join(lines)
