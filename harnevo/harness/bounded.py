"""A Jinja environment whose renders run within a time and size budget, enforced while they run.

Harness templates may come from others, so a render must not hang and must not allocate without
limit. Jinja's immutable sandbox already refuses unsafe attributes and calls; this environment adds:

- a CPU-time budget per render (`time.thread_time`, so waiting for the GIL under load does not count),
  checked at every loop iteration (each `{% for %}` iterable is wrapped at compile time), every call
  (macros, methods, recursion through `loop(...)`), every intercepted operator, every filter and every
  piece of output. A template without loops or calls runs in time proportional to its source, so
  those checks bound every render.
- a size budget: no value a template makes may exceed `max_chars` (strings count characters,
  containers their items recursively), checked BEFORE the operations that can amplify — `*`, `+`,
  `**`, `%`, `~`, `str.format`, str/bytes methods (center, ljust, rjust, zfill, expandtabs, replace,
  join, translate), `int.to_bytes`, the filters center, indent, join, replace, wordwrap, format,
  batch, slice, sum, tojson — and after every other call and filter. All values a
  render makes together may not exceed `max_work` characters, and the output not `max_chars`.
- `namespace()` objects are checked when assigned to and may not hold, or be held by, containers
  or other namespaces, so no shared structure can grow exponentially behind the checks; every printed
  `{{ value }}` and the input of every filter that makes text of it is sized before it is converted.
- `lipsum` and the `random` filter are removed: a render is a function of its context.

The budget of the render in progress lives in a ContextVar, so renders in concurrent threads (the
runtime renders with `asyncio.to_thread`) never share state. Every breach raises `RenderError`.
"""

from __future__ import annotations

import functools
import inspect
import re
import string
import time
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Iterator

from jinja2 import DictLoader, StrictUndefined, nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer


class RenderError(Exception):
    """A template failed at render time (the episode records it)."""


MAX_INT_BITS = 16_384  # integers a template may make (a 4,900-digit number)
_TICKS_PER_CLOCK = 64  # read the CPU clock every this many checks
_SEQ = (str, bytes, bytearray, list, tuple)
_CONTAINERS = (list, tuple, dict, set, frozenset)
_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_FORMAT_FIELD = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


class RenderBudget:
    """What one render may still spend. Created per render; never shared between threads."""

    __slots__ = ("time_s", "max_chars", "max_work", "deadline", "work", "_ticks", "_memo")

    def __init__(self, time_s: float, max_chars: int, max_work: int):
        self.time_s, self.max_chars, self.max_work = time_s, max_chars, max_work
        self.deadline = time.thread_time() + time_s
        self.work = 0
        self._ticks = 0
        self._memo: dict[int, tuple[Any, int]] = {}  # id -> (container kept alive, weight)

    # --- time ---------------------------------------------------------------------------------------
    def tick(self) -> None:
        self._ticks += 1
        if self._ticks % _TICKS_PER_CLOCK == 0 and time.thread_time() > self.deadline:
            raise RenderError(f"ran past its time budget ({self.time_s:g} s of CPU)")

    def check_time(self) -> None:
        if time.thread_time() > self.deadline:
            raise RenderError(f"ran past its time budget ({self.time_s:g} s of CPU)")

    # --- size ---------------------------------------------------------------------------------------
    def refuse(self, what: str, size: int) -> None:
        raise RenderError(f"{what} would make a value of {size} characters (limit {self.max_chars})")

    def allow(self, size: int, what: str) -> None:
        """Refuse before an operation whose result would be `size` characters."""
        if size > self.max_chars:
            self.refuse(what, size)

    def made(self, value: Any, what: str = "an expression") -> Any:
        """Account for a value the template made; refuse it when it is too large."""
        w = self.weight(value)
        if w > self.max_chars:
            self.refuse(what, w)
        self.work += w
        if self.work > self.max_work:
            raise RenderError(f"made more than {self.max_work} characters of values in one render")
        return value

    def weight(self, v: Any, _depth: int = 0) -> int:
        """About how many characters `v` is as text: strings their length, containers the sum of their
        items (memoised per render, so shared items cost nothing to re-count)."""
        if isinstance(v, (str, bytes, bytearray)):
            return len(v)
        if v is None or isinstance(v, (bool, float)):
            return 1
        if isinstance(v, int):
            return v.bit_length() // 3 + 1
        if isinstance(v, Namespace):
            if _depth:
                raise RenderError("a namespace cannot be put in a list, tuple, dict or other namespace")
            return 1 + sum(self.weight(x, 1) for x in _namespace_attrs(v).values())
        if isinstance(v, _CONTAINERS):
            hit = self._memo.get(id(v))
            if hit is not None and hit[0] is v:
                return hit[1]
            if _depth > 200:
                raise RenderError("values nested too deeply")
            items: Iterable[Any] = (x for kv in v.items() for x in kv) if isinstance(v, dict) else v
            w = 1
            for x in items:
                w += 1 + self.weight(x, _depth + 1)
                if w > self.max_work:
                    break
            self._memo[id(v)] = (v, w)
            return w
        if isinstance(v, _VIEWS):
            return 1 + sum(1 + self.weight(x, _depth + 1) for x in v)
        return 8  # generators, ranges, macros, loop objects: short reprs


_CURRENT: ContextVar[RenderBudget | None] = ContextVar("harnevo_render_budget", default=None)


def _namespace_attrs(ns: Namespace) -> dict[str, Any]:
    return object.__getattribute__(ns, "_Namespace__attrs")


class _BoundedNamespace(Namespace):
    """`namespace()` of bounded templates: every assignment is sized, so a namespace never holds more
    than the budget and never holds another namespace or a container holding one."""

    def __setitem__(self, name: str, value: Any) -> None:
        b = _budget()
        b.tick()
        attrs = dict(_namespace_attrs(self))
        attrs[name] = value
        total = 1 + sum(b.weight(x, 1) for x in attrs.values())
        if total > b.max_chars:
            b.refuse("this namespace assignment", total)
        super().__setitem__(name, value)


def _budget() -> RenderBudget:
    b = _CURRENT.get()
    if b is None:  # outside a render (Jinja folds constants at compile time): the strictest budget
        from harnevo.harness.render import MAX_RENDER_CHARS, MAX_RENDER_WORK, RENDER_TIME_S

        b = RenderBudget(RENDER_TIME_S, MAX_RENDER_CHARS, MAX_RENDER_WORK)
    return b


def activate(budget: RenderBudget):
    """Make `budget` the budget of this thread's (and context's) renders; returns a reset token."""
    return _CURRENT.set(budget)


def deactivate(token) -> None:
    _CURRENT.reset(token)


# --- pre-checks of amplifying operations -------------------------------------------------------------
def _check_percent(b: RenderBudget, fmt: str | bytes, args: Any) -> None:
    text = fmt.decode("latin-1") if isinstance(fmt, (bytes, bytearray)) else fmt
    for m in _FORMAT_FIELD.finditer(text):
        for n in m.groups():
            if n == "*":
                raise RenderError("a '*' width or precision in a % format is not allowed")
            if n is not None and int(n) > b.max_chars:
                b.refuse("a % format width", int(n))
    b.allow(len(text) + b.weight(args), "a % format")


def _check_str_format(b: RenderBudget, fmt: str, args: Any) -> None:
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError as e:
        raise RenderError(f"bad format string: {e}") from None
    for _, _, spec, _ in fields:
        if spec and "{" in spec:
            raise RenderError("nested replacement fields in a format spec are not allowed")
        for n in _DIGITS.findall(spec or ""):
            if int(n) > b.max_chars:
                b.refuse("a format width", int(n))
    b.allow(len(fmt) + b.weight(args), "str.format")


def _seq_times(b: RenderBudget, seq: Any, n: Any, what: str) -> None:
    if isinstance(n, int) and n > 0:
        b.allow(b.weight(seq) * n, what)


def _predict_replace(b: RenderBudget, s: str, old: str, new: str, count: Any) -> None:
    occurrences = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        occurrences = min(occurrences, count)
    b.allow(len(s) + occurrences * max(0, len(new) - len(old)), "replace")


def _predict_join(b: RenderBudget, sep: Any, items: list[Any]) -> None:
    if set(map(type, items)) <= {str}:  # the common case, at C speed
        total = sum(map(len, items))
    else:
        total = 0
        for x in items:
            total += b.weight(x)
            if total > b.max_chars:
                break
    b.allow(total + b.weight(sep) * max(0, len(items) - 1), "join")


def _materialised(b: RenderBudget, iterable: Any) -> list[Any] | tuple[Any, ...]:
    """A list or tuple as it is (finite, in memory); any other iterable walked with the clock checked."""
    if type(iterable) in (list, tuple):
        return iterable
    return list(_ticking(b, iterable))


def _check_method(b: RenderBudget, fn: Any, args: tuple, kwargs: dict) -> tuple:
    """Pre-check a call of a builtin method of str/bytes/int; returns the (possibly materialised) args."""
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    wrapped = getattr(fn, "__wrapped__", None)  # the sandbox's str.format wrapper
    if wrapped is not None and name in ("format", "format_map") and isinstance(wrapped.__self__, str):
        _check_str_format(b, wrapped.__self__, (args, kwargs))
        return args
    if isinstance(owner, (str, bytes, bytearray)):
        arg = (list(args) + list(kwargs.values()) + [None])[0]
        if name in ("center", "ljust", "rjust", "zfill") and isinstance(arg, int):
            b.allow(max(len(owner), arg), f"str.{name}")
        elif name == "expandtabs":
            size = 8 if arg is None else arg
            if isinstance(size, int):
                tabs = owner.count("\t" if isinstance(owner, str) else b"\t")
                b.allow(len(owner) + tabs * max(0, size), "str.expandtabs")
        elif name == "replace" and len(args) >= 2:
            old, new = args[0], args[1]
            count = args[2] if len(args) > 2 else kwargs.get("count", -1)
            if isinstance(old, type(owner)) and isinstance(new, type(owner)):
                _predict_replace(b, owner, old, new, count)
        elif name == "join" and args:
            items = _materialised(b, args[0])
            _predict_join(b, owner, items)
            return (items,) + tuple(args[1:])
        elif name == "translate" and args and isinstance(args[0], dict):
            longest = max([len(v) for v in args[0].values() if isinstance(v, (str, bytes))] + [1])
            b.allow(len(owner) * longest, "str.translate")
    elif isinstance(owner, int) and name == "to_bytes":
        length = (list(args) + [kwargs.get("length", 1)])[0]
        if isinstance(length, int):
            b.allow(length, "int.to_bytes")
    return args


def _ticking(b: RenderBudget, iterable: Iterable[Any]) -> Iterator[Any]:
    for x in iterable:
        b.tick()
        yield x


# --- filters --------------------------------------------------------------------------------------------
def _f_center(b, a):
    b.allow(max(len(str(a["value"])), a["width"] if isinstance(a["width"], int) else 0), "center")


def _f_indent(b, a):
    s, width = str(a["s"]), a["width"]
    pad = width if isinstance(width, int) else len(str(width))
    b.allow(len(s) + (s.count("\n") + 1) * max(0, pad), "indent")


def _f_join(b, a):
    items = _materialised(b, a["value"])
    _predict_join(b, a["d"], items)
    a["value"] = items


def _f_replace(b, a):
    _predict_replace(b, str(a["s"]), str(a["old"]), str(a["new"]), a["count"])


def _f_wordwrap(b, a):
    s = str(a["s"])
    wrap = "\n" if a["wrapstring"] is None else str(a["wrapstring"])
    b.allow(len(s) + (len(s) + 1) * len(wrap), "wordwrap")


def _f_format(b, a):
    _check_percent(b, str(a["value"]), (a["args"], a["kwargs"]))


def _f_batch(b, a):
    if a["fill_with"] is not None and isinstance(a["linecount"], int):
        b.allow(a["linecount"], "batch")


def _f_slice(b, a):
    if isinstance(a["slices"], int):
        b.allow(a["slices"], "slice")


def _f_sum(b, a):
    items = _materialised(b, a["iterable"])
    a["iterable"] = items
    if not isinstance(a["start"], (int, float)):
        _predict_join(b, "", [a["start"], *items])


def _f_tojson(b, a):
    indent = a["indent"]
    if indent is not None and (indent if isinstance(indent, int) else len(str(indent))) > 16:
        raise RenderError("tojson indent larger than 16")


_FILTER_CHECKS: dict[str, Callable[[RenderBudget, dict], None]] = {
    "center": _f_center, "indent": _f_indent, "join": _f_join, "replace": _f_replace,
    "wordwrap": _f_wordwrap, "format": _f_format, "batch": _f_batch, "slice": _f_slice, "sum": _f_sum,
    "tojson": _f_tojson,
}


# filters that turn their input into text: a non-string input is sized before it is converted
_STRINGIFYING = {"capitalize", "center", "e", "escape", "filesizeformat", "forceescape", "format", "indent",
                 "lower", "pprint", "replace", "safe", "string", "striptags", "title", "tojson", "trim",
                 "truncate", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"}


def _bounded_join(func: Callable[..., Any]) -> Callable[..., Any]:
    """`join`, the filter every harness uses, checked without generic argument binding."""

    @functools.wraps(func)
    def bounded(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> str:
        b = _budget()
        b.tick()
        items = _materialised(b, value)
        _predict_join(b, d, items)
        return b.made(func(eval_ctx, items, d, attribute), "filter 'join'")

    return bounded


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    if name == "join" and getattr(func, "jinja_pass_arg", None) is not None:
        return _bounded_join(func)
    check = _FILTER_CHECKS.get(name)
    at = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0  # index of the filtered value
    sized = name in _STRINGIFYING

    def enter(args: tuple) -> RenderBudget:
        b = _budget()
        b.tick()
        if sized and len(args) > at and type(args[at]) is not str:
            b.allow(b.weight(args[at]), what)
        return b

    if check is None:
        @functools.wraps(func)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            b = enter(args)
            return b.made(func(*args, **kwargs), what)
    else:
        params = _Params(func)

        @functools.wraps(func)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            b = enter(args)
            named = params.bind(args, kwargs)
            check(b, named)
            args, kwargs = params.unbind(named)
            return b.made(func(*args, **kwargs), what)

    what = f"filter {name!r}"
    return bounded


class _Params:
    """A filter's parameters: bind a call to names (with defaults) and back, faster than inspect's."""

    def __init__(self, func: Callable[..., Any]):
        # Jinja's async-variant filters (list, slice, ...) take an eval context their signature lacks
        inner = inspect.unwrap(func)
        self.lead = int(getattr(func, "jinja_pass_arg", None) is not None
                        and getattr(inner, "jinja_pass_arg", None) is None)
        params = list(inspect.signature(func).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.names = tuple(p.name for p in positional)
        self.defaults = tuple(p.default for p in positional)
        self.var_args = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
        self.var_kwargs = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        rest = args[self.lead:]
        if len(rest) > len(self.names) and self.var_args is None:
            raise TypeError("too many arguments")
        named: dict[str, Any] = dict(zip(self.names, rest))
        named[""] = args[: self.lead]
        kwargs = dict(kwargs) if kwargs else {}
        for name, default in zip(self.names[len(rest):], self.defaults[len(rest):]):
            if name in kwargs:
                named[name] = kwargs.pop(name)
            elif default is not inspect.Parameter.empty:
                named[name] = default
            else:
                raise TypeError(f"missing argument {name!r}")
        if self.var_args is not None:
            named[self.var_args] = tuple(rest[len(self.names):])
        if self.var_kwargs is not None:
            named[self.var_kwargs] = kwargs
        elif kwargs:
            raise TypeError(f"unexpected argument(s) {', '.join(kwargs)}")
        return named

    def unbind(self, named: dict[str, Any]) -> tuple[tuple, dict]:
        args = [*named[""], *(named[n] for n in self.names)]
        if self.var_args is not None:
            args.extend(named[self.var_args])
        return tuple(args), dict(named[self.var_kwargs]) if self.var_kwargs is not None else {}


# --- compile-time rewriting -------------------------------------------------------------------------
class _Guard(NodeTransformer):
    """Route every loop iterable, `~` concatenation and container literal through the environment's
    bounded helpers (called via `environment.call`, so every one also checks the clock)."""

    def __init__(self, environment: "BoundedEnvironment"):
        self.environment = environment

    def _helper(self, name: str, node: nodes.Node, args: list[nodes.Expr]) -> nodes.Call:
        call = nodes.Call(nodes.EnvironmentAttribute(name), args, [], None, None)
        return call.set_lineno(node.lineno).set_environment(self.environment)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = self._helper("bounded_iter", node, [node.iter])
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return self._helper("bounded_concat", node, list(node.nodes))

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        return self._helper("bounded_value", node, [node])

    visit_List = _literal
    visit_Dict = _literal

    def visit_Tuple(self, node: nodes.Tuple) -> nodes.Node:
        if node.ctx != "load":
            self.generic_visit(node)
            return node
        return self._literal(node)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with StrictUndefined and the budget checks described above. Render with
    `render(template, context, budget)`; every template of this environment is guarded."""

    intercepted_binops = frozenset({"*", "+", "**", "%"})

    def __init__(self, templates: dict[str, str]):
        super().__init__(loader=DictLoader(dict(templates)), undefined=StrictUndefined, autoescape=False,
                         keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True, finalize=_finalize)
        self.globals.pop("lipsum", None)
        self.globals["namespace"] = _BoundedNamespace
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items() if name != "random"}
        # plain functions (not bound methods), so `call` can recognise them by identity
        self.bounded_iter = _bounded_iter
        self.bounded_concat = _bounded_concat
        self.bounded_value = _bounded_value

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _Guard(self).visit(super()._parse(source, name, filename))

    def concat(self, parts: Iterable[str]) -> str:  # type: ignore[override]
        """Joins the buffers of macros, `{% set %}` blocks, call and filter blocks."""
        b = _budget()
        out: list[str] = []
        n = 0
        for p in parts:
            n += len(p)
            if n > b.max_chars:
                b.refuse("a block", n)
            out.append(p)
        return b.made("".join(out), "a block")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        b = _budget()
        b.tick()
        lint, rint = _is_int(left), _is_int(right)
        if operator == "*":
            if lint and rint:
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise RenderError(f"'*' would make an integer of more than {MAX_INT_BITS} bits")
            elif isinstance(left, _SEQ) and rint:
                _seq_times(b, left, right, "'*'")
            elif isinstance(right, _SEQ) and lint:
                _seq_times(b, right, left, "'*'")
        elif operator == "+":
            if isinstance(left, _SEQ) and isinstance(right, _SEQ):
                b.allow(b.weight(left) + b.weight(right), "'+'")
        elif operator == "**":
            if lint and rint and right > 0 and abs(left) > 1:
                if right * abs(left).bit_length() > MAX_INT_BITS:
                    raise RenderError(f"'**' would make an integer of more than {MAX_INT_BITS} bits")
        elif operator == "%":
            if isinstance(left, (str, bytes, bytearray)):
                _check_percent(b, left, right)
        return b.made(self.binop_table[operator](left, right), f"'{operator}'")

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        b = _budget()
        b.tick()
        if __obj is _bounded_iter or __obj is _bounded_concat or __obj is _bounded_value:
            return __obj(b, *args)
        if isinstance(__obj, LoopContext) and args:  # recursion: `loop(children)`
            args = (_bounded_iter(b, args[0]),) + args[1:]
        else:
            plain = {k: v for k, v in kwargs.items() if k not in ("_loop_vars", "_block_vars")}
            args = _check_method(b, __obj, args, plain)
        rv = super().call(__context, __obj, *args, **kwargs)
        return b.made(rv, f"calling {getattr(__obj, '__name__', type(__obj).__name__)!r}")


def _finalize(value: Any) -> Any:
    """Every `{{ value }}` passes here before it becomes text: a non-string is sized first."""
    if type(value) is not str:
        b = _budget()
        b.allow(b.weight(value), "printing a value")
    return value


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _bounded_iter(b: RenderBudget, iterable: Any) -> Iterator[Any]:
    return _ticking(b, iterable)


def _bounded_concat(b: RenderBudget, *parts: Any) -> str:
    total = 0
    for p in parts:
        total += b.weight(p)
        if total > b.max_chars:
            b.refuse("'~'", total)
    return b.made("".join(str(p) for p in parts), "'~'")


def _bounded_value(b: RenderBudget, value: Any) -> Any:
    return b.made(value, "a literal")
