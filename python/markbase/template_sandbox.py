"""The jinja2 sandbox chat templates run in, with one budget per render.

A chat template comes with the checkpoint and renders user content: it is hostile input. jinja2's
ImmutableSandboxedEnvironment keeps it away from Python internals but not from exhausting the machine
(`'a'.ljust(10**10)`, a string doubled in a loop, two nested loops over a long string). So every render
(and every compilation, which folds constants) gets a thread-local `RenderBudget` of

- output: characters the render produces, summed over every string and list it creates (`~`, `+`, `*`,
  `%`, str methods, filters, slices, macro and block bodies, the text itself; a list item counts as
  LIST_ITEM_CHARS). What can be far larger than its operands (ljust, replace, join, format widths,
  indent, a structure turned into text, ...) is checked before it is allocated, the rest is charged after;
- work: steps of interpretation: loop iterations and calls weighted by the size of the body they run,
  filter and test applications, nodes visited when measuring a structure, and one step per
  SCAN_CHARS_PER_STEP characters that a comparison, a search or a string method scans.

Exceeding either raises `BudgetExceeded` (a jinja2 SecurityError).
"""

from __future__ import annotations

import functools
import inspect
import json
import operator
import re
import threading
from collections.abc import ItemsView, KeysView, Mapping, ValuesView
from datetime import datetime
from itertools import chain
from typing import Any, NamedTuple

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.ext import Extension, loopcontrols
from jinja2.filters import make_attrgetter
from jinja2.runtime import BlockReference, LoopContext, Macro, markup_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import Namespace, _PassArg, generate_lorem_ipsum
from markupsafe import EscapeFormatter, Markup, soft_str

MAX_RENDER_CHARS = 3 * 10**7  # characters one render may produce (the largest real prompt is ~10^6)
MAX_RENDER_STEPS = 10**6      # interpretation steps one render may take (a step is about a microsecond)
SCAN_CHARS_PER_STEP = 1000    # characters a comparison or string method scans per step
ITEMS_PER_STEP = 10           # items a Python-level loop inside a filter or method handles per step
NODES_PER_STEP = 10           # plain template nodes (names, constants, text) a body runs per step
SANDBOXED_NODE_STEPS = 4      # an attribute, item, filter, test, comparison or operator: a sandbox call
CALL_STEPS = 10               # a call through the sandbox (a method, a global, a macro)
LIST_ITEM_CHARS = 8           # what a list item (or a call argument) costs, in characters (a pointer)
DICT_ITEM_CHARS = 40          # what a dict or namespace entry costs (hash, key, value, free slots)
STR_OBJECT_CHARS = 56         # what a new string object costs beyond its characters (its header)
MAX_INT_BITS = 1 << 16        # the largest integer a template may compute
FLOAT_TEXT_CHARS = 330        # the longest a float formats to ('%f' % 1e308) beyond width and precision
MAX_SPEC_NUMBER = 10**18      # any width or precision past this is refused anyway
HTML_ESCAPE_EXPANSION = 5     # Markup escapes a character into at most 5 ('&amp;', '&#34;')
QUOTE_CHUNK = 1 << 14         # characters quoted at a time when measuring a string's repr or JSON

OUTPUT_EXCEEDED = (f"the chat template exceeded its output budget of {MAX_RENDER_CHARS:,} characters per render "
                   "(the prompt is too long, or the template grows text without bound)")
WORK_EXCEEDED = (f"the chat template exceeded its work budget of {MAX_RENDER_STEPS:,} steps per render "
                 "(it loops, recurses or scans too much)")


class BudgetExceeded(jinja2.exceptions.SecurityError):
    """A render ran out of its output or work budget."""


class RenderBudget:
    """What is left of one render's budget; raises BudgetExceeded when an expense does not fit."""

    def __init__(self):
        self.chars = MAX_RENDER_CHARS
        self.steps = MAX_RENDER_STEPS

    def expect(self, chars: int) -> None:
        """Checks, before allocating, that `chars` more characters fit."""
        if chars > self.chars:
            raise BudgetExceeded(OUTPUT_EXCEEDED)

    def produce(self, chars: int) -> None:
        self.chars -= chars
        if self.chars < 0:
            raise BudgetExceeded(OUTPUT_EXCEEDED)

    def work(self, steps: int) -> None:
        self.steps -= steps
        if self.steps < 0:
            raise BudgetExceeded(WORK_EXCEEDED)

    def scan(self, chars: int) -> None:
        self.work(chars // SCAN_CHARS_PER_STEP)


_local = threading.local()


def start_budget() -> RenderBudget:
    """Gives the calling thread a fresh budget (call before each render or compilation)."""
    _local.budget = RenderBudget()
    return _local.budget


def current_budget() -> RenderBudget:
    budget = getattr(_local, "budget", None)
    return budget if budget is not None else start_budget()


# -- sizes ------------------------------------------------------------------------------------------------


def allocated(value: Any) -> int:
    """Characters charged for a freshly made value (strings by length, containers by item count)."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return len(value) * LIST_ITEM_CHARS
    if type(value) is Namespace:
        value = object.__getattribute__(value, "_Namespace__attrs")
    if isinstance(value, (dict, set, frozenset)):
        return len(value) * DICT_ITEM_CHARS
    return 0


def count_arg(value: Any) -> int:
    """An integer argument used as a size (width, count, ...); anything else the callee will refuse."""
    return max(value, 0) if isinstance(value, int) else 0


class Shape(NamedTuple):
    chars: int      # characters of the text form (or of the strings, for style "len")
    nodes: int      # values visited
    depth_sum: int  # sum of the nesting depths of the values visited (for indentation)
    max_depth: int


_QUOTERS = {"repr": repr, "ascii": ascii, "json": lambda s: json.dumps(s, ensure_ascii=False),
            "json_ascii": json.dumps}


def _quoted_size(text: str, style: str) -> int:
    """len(repr(text)) (or ascii / JSON), without building the whole quoted copy."""
    current_budget().scan(len(text))
    json_style = style.startswith("json")
    if text.isascii() and text.isprintable():
        return len(text) + 2 + text.count("\\") + text.count('"' if json_style else "'")
    quote = _QUOTERS[style]
    # Chunks may pick different quote characters than the whole string: count every ' as escaped.
    escaped_quotes = 0 if json_style else text.count("'")
    return escaped_quotes + sum(len(quote(text[i:i + QUOTE_CHUNK])) for i in range(0, len(text), QUOTE_CHUNK))


_SCALAR_SIZES = {bool: 5, type(None): 5, float: 24}


def _leaf_size(value: Any, style: str, top: bool) -> int:
    if isinstance(value, str):
        if style == "len" or (top and style == "str"):
            return len(value)
        return _quoted_size(value, "repr" if style == "str" else style)
    if isinstance(value, (bytes, bytearray)):
        return len(value) if style == "len" else 4 * len(value) + 14
    if style == "len":
        return 0
    if type(value) in _SCALAR_SIZES:
        return _SCALAR_SIZES[type(value)]
    if isinstance(value, int):
        return int(value.bit_length() * 0.302) + 2  # decimal digits and sign
    if isinstance(value, jinja2.Undefined):
        return 0
    return 100  # functions, generators, loop objects: their repr names them, not their contents


def _children(value: Any, style: str):
    """(characters the container adds around its items, iterator over its items) or None for a leaf."""
    kind = type(value)
    if kind in (str, int, float, bool, type(None)):
        return None
    per_item = 0 if style == "len" else 2
    if kind is Namespace:
        value, kind = object.__getattribute__(value, "_Namespace__attrs"), dict
    if kind in (list, tuple):
        return 2 + per_item * len(value), iter(value)
    if isinstance(value, (dict, ItemsView)):
        items = value.items() if isinstance(value, dict) else value
        return 12 + 2 * per_item * len(items), chain.from_iterable(items)
    if isinstance(value, (list, tuple, set, frozenset, KeysView, ValuesView)):
        return 40 + per_item * len(value), iter(value)  # named tuples, sets, views: type and field names
    return None


MAX_NESTING = 500  # deeper values cannot be printed anyway (repr and json recurse)


def measure(value: Any, style: str = "str", limit: int | None = None) -> Shape:
    """The size of `value` as text: style "str" (str()), "repr", "ascii", "json", "json_ascii", or "len"
    (string lengths and item counts: what a comparison may scan). Walks containers, one work step per
    value visited, and stops once `chars` passes `limit` (default: the output budget left)."""
    budget = current_budget()
    if isinstance(value, str) and style in ("str", "len"):
        return Shape(len(value), 1, 0, 0)
    limit = budget.chars if limit is None else limit
    chars = nodes_seen = depth_sum = max_depth = 0
    stack = [(iter((value,)), 0)]
    while stack and chars <= limit and nodes_seen <= budget.steps:
        items, depth = stack[-1]
        item = next(items, stack)  # the stack itself marks the end (no template value can be it)
        if item is stack:
            stack.pop()
            continue
        nodes_seen += 1
        depth_sum += depth
        children = _children(item, style)
        if children is None:
            chars += _leaf_size(item, style, top=depth == 0)
            continue
        if depth >= MAX_NESTING:
            raise jinja2.exceptions.SecurityError(f"a value nested more than {MAX_NESTING} levels deep")
        max_depth = max(max_depth, depth + 1)
        chars += children[0]
        stack.append((children[1], depth + 1))
    budget.work(nodes_seen)
    return Shape(chars, nodes_seen, depth_sum, max_depth)


def text_size(value: Any, style: str = "str") -> int:
    return measure(value, style).chars


_NUMBERS = (int, float, bool, type(None))  # as text: at most a few thousand digits (see MAX_INT_BITS)


def expect_text(value: Any, style: str = "str") -> None:
    """Checks that turning `value` into text (str(), repr(), ...) fits the output budget."""
    if type(value) not in _NUMBERS:
        current_budget().expect(measure(value, style).chars)


def scan_cost(value: Any) -> None:
    """Charges the work of comparing all of `value` once: its strings' characters and its values."""
    budget = current_budget()
    if isinstance(value, (str, bytes, bytearray)):
        budget.scan(len(value))
    elif isinstance(value, (list, tuple, dict, set, frozenset, Namespace)):
        budget.scan(measure(value, "len", limit=budget.steps * SCAN_CHARS_PER_STEP).chars)


def pass_cost(value: Any) -> None:
    """Charges the work of one pass over `value`'s characters or items (not into the items)."""
    if isinstance(value, (str, bytes, bytearray)):
        current_budget().scan(len(value))
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        current_budget().work(len(value) // ITEMS_PER_STEP)


_SIZED = (str, bytes, bytearray, list, tuple, dict)


def charge_comparison(op: str, left: Any, right: Any) -> None:
    """Work of `left <op> right`: membership scans the container, equality and order the shorter side."""
    if op in ("in", "notin"):
        scan_cost(left if isinstance(right, (dict, set, frozenset)) else right)
    elif isinstance(left, _SIZED) and isinstance(right, _SIZED):
        if op in ("eq", "ne") and len(left) != len(right):
            return  # decided by the lengths
        scan_cost(left if len(left) <= len(right) else right)


# -- formatting (`%`, str.format) -------------------------------------------------------------------------

_PERCENT_SPEC = re.compile(r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d*))?"
                           r"[hlL]?(?P<conversion>.?)", re.DOTALL)
_DIGITS = re.compile(r"\d+")


def _spec_number(digits: Any) -> int:
    if isinstance(digits, int):
        return max(digits, 0)
    if not isinstance(digits, str) or not digits:
        return 0
    return int(digits) if len(digits) <= 18 else MAX_SPEC_NUMBER


def _field_size(value: Any, style: str = "str") -> int:
    """Upper bound of one formatted field, widths and precisions aside."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return 2 * text_size(value) + FLOAT_TEXT_CHARS  # grouping separators, '%' type, fixed-point floats
    return text_size(value, style)


def percent_format_size(fmt: str | bytes, args: Any) -> int:
    """Upper bound of `fmt % args`, from the format's widths and precisions and the arguments' sizes."""
    if isinstance(fmt, bytes):
        fmt = fmt.decode("latin-1")
    positional = list(args) if isinstance(args, tuple) else [args]
    mapping = args if isinstance(args, Mapping) else None
    next_index = 0

    def next_arg():
        nonlocal next_index
        next_index += 1
        return positional[next_index - 1] if next_index <= len(positional) else None

    size = len(fmt)
    for spec in _PERCENT_SPEC.finditer(fmt):
        current_budget().work(1)
        if spec["conversion"] == "%":
            continue
        for number in (spec["width"], spec["precision"]):
            size += _spec_number(next_arg() if number == "*" else number)
        value = mapping.get(spec["key"]) if spec["key"] is not None and mapping is not None else next_arg()
        size += _field_size(value, {"r": "repr", "a": "ascii"}.get(spec["conversion"], "str"))
    return size * (HTML_ESCAPE_EXPANSION if isinstance(fmt, Markup) else 1)  # Markup escapes its arguments


class BudgetFormatter(SandboxedFormatter):
    """str.format in the sandbox: each field is checked against the budget before it is formatted."""

    expansion = 1  # of a field's text once formatted

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        styles = {"s": "str", "r": "repr", "a": "ascii"}
        if conversion in styles:
            expect_text(value, styles[conversion])
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> str:
        budget = current_budget()
        budget.work(1)
        widths = sum(_spec_number(d) for d in _DIGITS.findall(format_spec))
        budget.expect(self.expansion * (widths + _field_size(value)))
        text = super().format_field(value, format_spec)
        budget.produce(len(text))
        return text


class BudgetEscapeFormatter(BudgetFormatter, EscapeFormatter):
    expansion = HTML_ESCAPE_EXPANSION


# -- str / bytes methods ----------------------------------------------------------------------------------


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _pieces_size(chars: int, pieces: int) -> int:
    """What splitting `chars` characters into `pieces` new strings costs (list items, string headers)."""
    return pieces * (LIST_ITEM_CHARS + STR_OBJECT_CHARS) + chars


_WHITESPACE = tuple(c for c in map(chr, range(0x3001)) if c.isspace())  # str.split()'s separators
_LINE_BREAKS = tuple(c for c in map(chr, range(0x3001)) if len(("a" + c + "a").splitlines()) == 2)


def _count_any(text: str | bytes, chars: tuple) -> int:
    if isinstance(text, bytes):
        chars = tuple(c.encode() for c in chars if c.isascii())
    elif text.isascii():
        chars = tuple(c for c in chars if c.isascii())
    return sum(text.count(c) for c in chars)


def _split_pieces(text: str | bytes, sep: Any, maxsplit: Any) -> int:
    """An upper bound of how many pieces `text.split(sep, maxsplit)` makes, counted without allocating."""
    if isinstance(sep, (str, bytes)) and sep:
        pieces = text.count(sep) + 1
    else:
        pieces = _count_any(text, _WHITESPACE) + 1
    return min(pieces, maxsplit + 1) if isinstance(maxsplit, int) and maxsplit >= 0 else pieces


def _translation_size(table: Any) -> int:
    """The longest replacement a str.translate table holds."""
    if isinstance(table, (str, bytes, bytearray)):
        return 1
    values = table.values() if isinstance(table, Mapping) else table if isinstance(table, (list, tuple)) else ()
    current_budget().work(len(values) // ITEMS_PER_STEP)
    return max((len(v) if isinstance(v, (str, bytes)) else 1 for v in values), default=1)


def check_text_method(text: str | bytes, name: str, args: tuple, kwargs: dict) -> tuple:
    """Checks a str/bytes method call against the budget before it runs; returns the arguments to call
    it with (join's iterable, materialized to be measured)."""
    budget = current_budget()
    kind = str if isinstance(text, str) else bytes
    budget.scan(len(text) + sum(len(a) for a in args if isinstance(a, (str, bytes))))
    size = 0  # an upper bound of the result, when it can outgrow the text
    if name in ("ljust", "rjust", "center", "zfill"):
        size = max(len(text), count_arg(_arg(args, kwargs, 0, "width")))
    elif name == "expandtabs":
        size = len(text) + text.count("\t" if kind is str else b"\t") * count_arg(_arg(args, kwargs, 0, "tabsize", 8))
    elif name == "replace" and len(args) >= 2 and all(isinstance(a, kind) for a in args[:2]):
        old, new = args[0], args[1]
        hits = text.count(old) if old else len(text) + 1
        count = _arg(args, kwargs, 2, "count", -1)
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        size = len(text) + hits * max(len(new) - len(old), 0)
    elif name == "join" and args:
        items = list(args[0])
        args = (items,) + args[1:]
        budget.work(len(items) // ITEMS_PER_STEP)
        size = sum(len(i) for i in items if isinstance(i, (str, bytes))) + max(len(items) - 1, 0) * len(text)
    elif name == "translate" and args:
        size = len(text) * _translation_size(args[0])
    elif name in ("split", "rsplit"):
        pieces = _split_pieces(text, _arg(args, kwargs, 0, "sep"), _arg(args, kwargs, 1, "maxsplit", -1))
        size = _pieces_size(len(text), pieces)
    elif name == "splitlines":
        size = _pieces_size(len(text), _count_any(text, _LINE_BREAKS) + 1)
    budget.expect(size * (HTML_ESCAPE_EXPANSION if isinstance(text, Markup) else 1))  # Markup escapes arguments
    return args


# -- filters, tests and globals ---------------------------------------------------------------------------
# A bound function takes a filter's arguments and returns an upper bound of its result's size, checked
# before the filter runs; every filter's result is charged after it runs.

def _bound_center(value, width=80):
    return max(text_size(value), count_arg(width))


def _bound_indent(s, width=4, first=False, blank=False):
    indent = len(width) if isinstance(width, str) else count_arg(width)
    lines = s.count("\n") + 1 if isinstance(s, str) else text_size(s) + 1
    return text_size(s) + lines * indent


def _bound_wordwrap(s, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True):
    size = text_size(s)
    current_budget().work(size // ITEMS_PER_STEP)  # textwrap works word by word
    return size + (size + 1) * (text_size(wrapstring) if wrapstring is not None else 2)


def _bound_replace(s, old, new, count=None):
    size, old_size, new_size = text_size(s), text_size(old), text_size(new)
    hits = s.count(old) if isinstance(s, str) and isinstance(old, str) and old else size + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return size + old_size + new_size + hits * max(new_size - old_size, 0)


def _bound_format(value, *args, **kwargs):
    expect_text(value)  # the format is str(value)
    return percent_format_size(soft_str(value), kwargs or args)


def _attribute_values(env, items, attribute):
    return items if attribute is None else [make_attrgetter(env, attribute)(item) for item in items]


def _bound_join(env, value, d="", attribute=None):
    items = _attribute_values(env, value, attribute)  # `value` is materialized: see MATERIALIZED_FILTERS
    current_budget().work(len(items) // ITEMS_PER_STEP)
    return sum(text_size(item) for item in items) + max(len(items) - 1, 0) * text_size(d)


def _bound_sum(env, iterable, attribute=None, start=0):
    # Adding sequences copies the running total each time: charge that work, bound the result.
    values = _attribute_values(env, iterable, attribute)
    current_budget().work(len(values) // ITEMS_PER_STEP)
    total = allocated(start)
    copied = 0
    for value in values:
        total += allocated(value)
        copied += total
    current_budget().scan(copied)
    return total


def _bound_tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    shape = measure(x, "json_ascii" if ensure_ascii else "json")
    indent_chars = len(indent) if isinstance(indent, str) else count_arg(indent)
    newline = 0 if indent is None else 1
    seps = separators if isinstance(separators, (tuple, list)) and len(separators) == 2 else ("", "")
    sep_chars = sum(text_size(s) for s in seps)
    return shape.chars + shape.nodes * (sep_chars + 2 * newline) + 2 * shape.depth_sum * indent_chars


def _bound_pprint(value):
    shape = measure(value, "repr")
    current_budget().work(shape.nodes)  # pprint is Python code, value by value
    return (shape.chars + shape.nodes) * (shape.max_depth + 5)  # a line per value or string piece, indented


def _bound_urlize(value, trim_url_limit=None, nofollow=False, target=None, rel=None, extra_schemes=None):
    size = text_size(value)
    current_budget().work(size // ITEMS_PER_STEP)  # a regex match per word
    link_chars = 64 + (text_size(target) if target else 0) + (text_size(rel) if rel else 0)
    return 2 * HTML_ESCAPE_EXPANSION * size + (size // 2 + 1) * link_chars  # every word a link, escaped twice


def _bound_wordcount(s):
    size = text_size(s)
    return _pieces_size(size, size // 2 + 1)  # findall keeps every word


def _bound_batch(value, linecount, fill_with=None):
    return count_arg(linecount) * LIST_ITEM_CHARS if fill_with is not None else 0


def _bound_slice(value, slices, fill_with=None):
    current_budget().work(count_arg(slices) // ITEMS_PER_STEP)
    size = len(value) if isinstance(value, (str, list, tuple, dict)) else 0
    return (size + 2 * count_arg(slices)) * LIST_ITEM_CHARS


def _bound_list(value):
    if isinstance(value, str):  # one string per character; only ASCII ones are shared
        return len(value) * (LIST_ITEM_CHARS + (0 if value.isascii() else STR_OBJECT_CHARS))
    return len(value) * LIST_ITEM_CHARS if isinstance(value, (list, tuple, dict)) else 0


def _scaled_text(factor: int):
    def bound(value, *args, **kwargs):
        return factor * text_size(value)
    return bound


FILTER_BOUNDS = {
    "center": _bound_center, "indent": _bound_indent, "wordwrap": _bound_wordwrap, "replace": _bound_replace,
    "format": _bound_format, "join": _bound_join, "sum": _bound_sum, "tojson": _bound_tojson,
    "pprint": _bound_pprint, "urlize": _bound_urlize, "wordcount": _bound_wordcount, "batch": _bound_batch,
    "slice": _bound_slice, "list": _bound_list,
    # Case mapping can triple a character ('ﬃ' -> 'FFI'), URL quoting make it 12 ('%F0%9F%98%80').
    "upper": _scaled_text(3), "lower": _scaled_text(3), "title": _scaled_text(3), "capitalize": _scaled_text(3),
    "e": _scaled_text(HTML_ESCAPE_EXPANSION), "escape": _scaled_text(HTML_ESCAPE_EXPANSION),
    "forceescape": _scaled_text(HTML_ESCAPE_EXPANSION), "xmlattr": _scaled_text(HTML_ESCAPE_EXPANSION),
    "urlencode": _scaled_text(12),
    "trim": _scaled_text(1), "string": _scaled_text(1), "striptags": _scaled_text(1), "safe": _scaled_text(1),
    "truncate": _scaled_text(1),
}
MATERIALIZED_FILTERS = frozenset(["join", "sum"])  # they iterate their value; bound and filter share one pass
ENVIRONMENT_BOUNDS = frozenset(["join", "sum"])    # they get attributes the template's way
SELECTING_FILTERS = frozenset(["default", "d", "first", "last", "random", "attr", "max", "min"])  # no new value
CONSTANT_TIME_FILTERS = frozenset(["length", "count", "default", "d", "first", "last", "random", "attr",
                                   "abs", "round", "filesizeformat"])
COMPARING_FILTERS = frozenset(["sort", "unique", "max", "min", "dictsort", "groupby"])  # compare whole items
COMPARISON_TESTS = {"==": "eq", "eq": "eq", "equalto": "eq", "!=": "ne", "ne": "ne", "<": "lt", "lt": "lt",
                    "lessthan": "lt", "<=": "lteq", "le": "lteq", ">": "gt", "gt": "gt", "greaterthan": "gt",
                    ">=": "gteq", "ge": "gteq", "in": "in"}
COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "lteq": operator.le, "gt": operator.gt,
           "gteq": operator.ge, "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}


def _budgeted_filter(env, name: str, func):
    value_at = 1 if _PassArg.from_obj(func) is not None else 0
    bound = FILTER_BOUNDS.get(name)
    if name in ENVIRONMENT_BOUNDS:
        bound = functools.partial(bound, env)
    signature = inspect.signature(bound) if bound else None

    @functools.wraps(func)
    def budgeted(*args, **kwargs):
        budget = current_budget()
        budget.work(1)
        if len(args) <= value_at:
            return func(*args, **kwargs)
        value = args[value_at]
        budget.produce((len(args) + len(kwargs)) * LIST_ITEM_CHARS)  # `*list` makes a tuple
        if name in MATERIALIZED_FILTERS and not isinstance(value, (str, list, tuple, dict)):
            value = list(value)
            budget.produce(allocated(value))
            args = args[:value_at] + (value,) + args[value_at + 1:]
        if bound is not None:
            try:
                bound_args = signature.bind(*args[value_at:], **kwargs)
            except TypeError:
                pass  # the filter itself refuses these arguments
            else:
                budget.expect(bound(*bound_args.args, **bound_args.kwargs))
        if name in COMPARING_FILTERS:
            scan_cost(value)
        elif name not in CONSTANT_TIME_FILTERS:
            pass_cost(value)
        result = func(*args, **kwargs)
        if name not in SELECTING_FILTERS and result is not value:
            budget.produce(allocated(result))
        return result

    return budgeted


def _budgeted_test(name: str, func):
    op = COMPARISON_TESTS.get(name)

    @functools.wraps(func)
    def budgeted(value, *args, **kwargs):
        current_budget().work(1)
        if op is not None and args:
            charge_comparison(op, value, args[0])
        elif isinstance(value, str):
            scan_cost(value)
        return func(value, *args, **kwargs)

    return budgeted


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' tojson: no HTML escaping, json.dumps' options."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


STRFTIME_EXPANSION = 16  # '%c' (2 characters) formats to 24


def strftime_now(fmt):
    if isinstance(fmt, str):
        current_budget().expect(STRFTIME_EXPANSION * len(fmt))
    return datetime.now().strftime(fmt)


def bounded_range(*args):
    """range(), one work step per item: the sandbox caps one range, this caps all of a render's loops."""
    budget = current_budget()
    for x in range(*args):
        budget.work(1)
        yield x


LIPSUM_WORD_CHARS = 16  # a lorem ipsum word with its punctuation and markup
_LIPSUM_SIGNATURE = inspect.signature(generate_lorem_ipsum)


def bounded_lipsum(*args, **kwargs):
    bound = _LIPSUM_SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    words = count_arg(bound.arguments["n"]) * count_arg(bound.arguments["max"])
    current_budget().work(words // ITEMS_PER_STEP)
    current_budget().expect(words * LIPSUM_WORD_CHARS)
    return generate_lorem_ipsum(*args, **kwargs)


# -- code generation --------------------------------------------------------------------------------------

class BudgetCalls(Extension):
    """What `instrument` calls from loops and bodies (jinja2 allows no custom node types, so the calls
    are extension attributes: no template can name them)."""

    @staticmethod
    def loop_items(iterable, steps: int):
        """A for loop's iterable, charged `steps` per item (the loop's `if` test runs once per item)."""
        budget = current_budget()
        for item in iterable:
            budget.work(steps)
            yield item

    @staticmethod
    def spend(steps: int) -> None:
        current_budget().work(steps)


# Bodies that run a variable number of times pay for themselves each time they run (see instrument).
_OWN_BODIES = ((nodes.For, ("body", "else_", "test")), (nodes.If, ("body", "else_")),
               (nodes.Macro, ("body",)), (nodes.CallBlock, ("body",)), (nodes.Block, ("body",)))
_SANDBOXED_NODES = (nodes.Getattr, nodes.Getitem, nodes.Filter, nodes.Test, nodes.Compare, nodes.BinExpr,
                    nodes.Concat)


def _run_units(node: nodes.Node) -> int:
    """What running `node` once costs, in plain nodes, leaving out the bodies that pay for themselves."""
    units = SANDBOXED_NODE_STEPS * NODES_PER_STEP if isinstance(node, _SANDBOXED_NODES) else 1
    own_bodies = next((fields for kind, fields in _OWN_BODIES if isinstance(node, kind)), ())
    return units + sum(_run_units(child) for child in node.iter_child_nodes(exclude=own_bodies))


def _steps(statements: list) -> int:
    return 1 + sum(_run_units(node) for node in statements) // NODES_PER_STEP


def _budget_call(method: str, args: list, lineno: int) -> nodes.Call:
    target = nodes.ExtensionAttribute(BudgetCalls.identifier, method, lineno=lineno)
    return nodes.Call(target, args, [], None, None, lineno=lineno)


def _pay_on_entry(body: list, lineno: int) -> None:
    body.insert(0, nodes.ExprStmt(_budget_call("spend", [nodes.Const(_steps(body))], lineno), lineno=lineno))


def instrument(tree: nodes.Template) -> nodes.Template:
    """Makes every run of a loop body, branch, macro or block pay for the template code it runs, and
    every loop item for the loop's `if` test; code outside them runs once and is bounded by its size."""
    for node in list(tree.find_all(tuple(kind for kind, _ in _OWN_BODIES))):
        _pay_on_entry(node.body, node.lineno)
        if isinstance(node, (nodes.For, nodes.If)) and node.else_:
            _pay_on_entry(node.else_, node.lineno)
        if isinstance(node, nodes.For):
            test_steps = nodes.Const(_steps([node.test]) if node.test else 1)
            node.iter = _budget_call("loop_items", [node.iter, test_steps], node.lineno)
    return tree


class BudgetedCodeGenerator(CodeGenerator):
    """jinja2's code generator, with `~`, comparisons and slices routed through the budget."""

    def visit_Concat(self, node, frame):
        # jinja2 joins with markup_join under autoescape and str_join otherwise.
        markup = "context.eval_ctx.volatile" if frame.eval_ctx.volatile else repr(bool(frame.eval_ctx.autoescape))
        self.write("environment.join_operands((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write(f"), {markup})")

    def visit_Compare(self, node, frame):
        self.write("environment.compare(")
        self.visit(node.expr, frame)
        self.write(", (")
        for operand in node.ops:
            self.write(f"({operand.op!r}, ")
            self.visit(operand.expr, frame)
            self.write("), ")
        self.write("))")

    def visit_Call(self, node, frame, **kwargs):
        target = node.node
        if not (isinstance(target, nodes.ExtensionAttribute) and target.identifier == BudgetCalls.identifier):
            return super().visit_Call(node, frame, **kwargs)
        self.visit(target, frame)  # instrument()'s own calls: direct, not through the sandbox
        self.write("(")
        for arg in node.args:
            self.visit(arg, frame)
            self.write(", ")
        self.write(")")

    def visit_Getitem(self, node, frame):
        if not isinstance(node.arg, nodes.Slice):
            return super().visit_Getitem(node, frame)
        self.write("environment.charged(")  # slices bypass environment.getitem: charge the copy
        super().visit_Getitem(node, frame)
        self.write(")")


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with every growth of text, lists and numbers charged to the render's budget."""

    code_generator_class = BudgetedCodeGenerator
    intercepted_binops = frozenset(["+", "*", "%", "**"])

    def _parse(self, source, name, filename):
        return instrument(super()._parse(source, name, filename))

    # Called by the generated code.

    def concat(self, chunks) -> str:
        """Joins a body's output (the template's text, a macro's, a block's), charging each chunk."""
        budget = current_budget()
        kept = []
        for chunk in chunks:
            budget.produce(len(chunk))
            kept.append(chunk)
        return "".join(kept)

    def join_operands(self, operands: tuple, markup: bool) -> str:
        """The `~` operator."""
        budget = current_budget()
        texts = []
        for operand in operands:
            if not isinstance(operand, str) and type(operand) not in _NUMBERS:
                expect_text(operand)
            texts.append(soft_str(operand))
        budget.expect(sum(map(len, texts)) * (HTML_ESCAPE_EXPANSION if markup else 1))
        joined = markup_join(texts) if markup else "".join(texts)
        budget.produce(len(joined))
        return joined

    def compare(self, left: Any, operands: tuple):
        """A comparison chain, charged for what it scans (operands are evaluated before comparing)."""
        result = True
        for op, right in operands:
            charge_comparison(op, left, right)
            result = COMPARE[op](left, right)
            if not result:
                return result
            left = right
        return result

    def charged(self, value):
        current_budget().produce(allocated(value))
        return value

    # Sandbox hooks.

    def is_safe_attribute(self, obj, attr, value):
        if type(obj) is Namespace:  # jinja2's answer, without its abc checks (slow on a Namespace)
            return not attr.startswith("_")
        return super().is_safe_attribute(obj, attr, value)

    def call_binop(self, context, operator, left, right):
        budget = current_budget()
        if operator == "**":
            _check_power(left, right)
        elif operator == "*":
            _check_product(left, right)
        elif operator == "+" and isinstance(left, _SIZED) and isinstance(right, _SIZED):
            escaping = HTML_ESCAPE_EXPANSION if isinstance(left, Markup) or isinstance(right, Markup) else 1
            budget.expect(escaping * (allocated(left) + allocated(right)))
        elif operator == "%" and isinstance(left, (str, bytes)):
            budget.expect(percent_format_size(left, right))
        result = super().call_binop(context, operator, left, right)
        budget.produce(allocated(result))
        return result

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
        budget = current_budget()
        budget.work(CALL_STEPS)
        budget.produce((len(args) + len(kwargs)) * LIST_ITEM_CHARS)  # `*list` makes a tuple
        receiver = getattr(__obj, "__self__", None)
        if isinstance(receiver, (str, bytes)):
            args = check_text_method(receiver, __obj.__name__, args, kwargs)
        elif isinstance(receiver, (list, tuple)):
            scan_cost(receiver)
        elif isinstance(receiver, int) and __obj.__name__ == "to_bytes":
            budget.expect(count_arg(_arg(args, kwargs, 0, "length", 1)))
        elif isinstance(__obj, LoopContext) and args:  # a recursive loop's next level
            args = (BudgetCalls.loop_items(args[0], 1),) + args[1:]
        result = super().call(__context, __obj, *args, **kwargs)
        size = allocated(result)
        if size and not isinstance(__obj, _CHARGES_ITS_OUTPUT) and not _is_any(result, receiver, *args):
            budget.produce(size)
        return result

    def wrap_str_format(self, value):
        """jinja2's str.format / format_map sandboxing, with the budgeted formatter."""
        if not callable(value) or getattr(value, "__name__", None) not in ("format", "format_map"):
            return None
        text = getattr(value, "__self__", None)
        if not isinstance(text, str):
            return None
        if isinstance(text, Markup):
            formatter = BudgetEscapeFormatter(self, escape=text.escape)
        else:
            formatter = BudgetFormatter(self)
        is_format_map = value.__name__ == "format_map"

        def wrapper(*args, **kwargs):
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one positional argument")
                args, kwargs = (), args[0]
            return type(text)(formatter.vformat(text, args, kwargs))

        return functools.update_wrapper(wrapper, value)


_CHARGES_ITS_OUTPUT = (Macro, LoopContext, BlockReference)  # their bodies' output went through concat()


def _is_any(value, *candidates) -> bool:
    """Whether a call returned one of its inputs (no new allocation to charge)."""
    return any(value is candidate for candidate in candidates)


def finalize_output(value):
    """Every `{{ value }}` is turned into text after this: check how long that text will be."""
    if not isinstance(value, str) and type(value) not in _NUMBERS:
        expect_text(value)
    return value


def _check_power(base, exponent):
    if (isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1
            and base.bit_length() * exponent > MAX_INT_BITS):
        raise BudgetExceeded(f"{OUTPUT_EXCEEDED}: {base.bit_length()}-bit ** {exponent} has more than "
                             f"{MAX_INT_BITS} bits")


def _check_product(left, right):
    if isinstance(left, int) and isinstance(right, int):
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise BudgetExceeded(f"{OUTPUT_EXCEEDED}: a product of more than {MAX_INT_BITS} bits")
        return
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, _SIZED) and isinstance(times, int):
            current_budget().expect(allocated(seq) * max(times, 0))


def make_environment() -> BudgetedSandbox:
    """The environment transformers' apply_chat_template uses (sandboxed, trim_blocks, lstrip_blocks,
    loopcontrols, raise_exception, strftime_now, a tojson that does not HTML-escape), budgeted."""
    env = BudgetedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, BudgetCalls],
                          finalize=finalize_output)
    env.filters["tojson"] = tojson
    env.filters = {name: _budgeted_filter(env, name, f) for name, f in env.filters.items()}
    env.tests = {name: _budgeted_test(name, f) for name, f in env.tests.items()}
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, range=bounded_range,
                       lipsum=bounded_lipsum)
    return env
