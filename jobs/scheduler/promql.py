"""A PromQL parser for the subset a query about one job needs (issue 32 item 18). Pure: no Django.

An autoscaling query must read only its own job's series (docs/scheduling.md "Autoscaling"). A
substring test for the ``{job}`` placeholder could be passed by a placeholder in a comment or in
an unrelated ``or`` branch; deciding it needs the query's structure: every *vector selector* in
it — inside functions, aggregations, subqueries and both sides of every binary operator — with
its label matchers. :func:`parse` builds that tree, :func:`selectors` lists the selectors.

What it reads, following the Prometheus 2.x/3.x grammar (``promql/parser``):

* comments (``#`` to the end of the line), whitespace;
* numbers (decimal, ``0x`` hex, exponents, ``Inf``, ``NaN``), durations (``5m``, ``1h30m``,
  ``100ms``) inside ``[…]`` and after ``offset``;
* strings in ``"…"`` and ``'…'`` with Go's escapes (``\\n``, ``\\\\``, ``\\xHH``, ``\\uHHHH``, octal …;
  any other escape is an error, as it is for Prometheus) and raw strings in backticks;
* vector selectors ``name{label op "value", …}`` and ``{…}`` with ``=``, ``!=``, ``=~``, ``!~``,
  range selectors ``[5m]``, subqueries ``[30m:1m]`` / ``[30m:]``, ``offset [-]dur``, ``@ t`` /
  ``@ start()`` / ``@ end()``;
* unary ``+``/``-``, parentheses, binary ``^ * / % atan2 + - == != > < >= <= and unless or`` with
  their precedence, ``bool``, ``on(…)``/``ignoring(…)``, ``group_left(…)``/``group_right(…)``;
* aggregations (``sum``, ``avg``, ``count``, ``min``, ``max``, ``group``, ``stddev``, ``stdvar``,
  ``topk``, ``bottomk``, ``quantile``, ``count_values``, ``limitk``, ``limit_ratio``) with
  ``by``/``without`` before or after their arguments;
* calls of Prometheus's functions, by name.

Anything else is a :class:`PromQLError` naming the position: refused, never guessed. Left out on
purpose: Prometheus 3's quoted metric and label names (``{"my.metric"}``), ``or`` inside braces,
metric names starting with ``:``, and the experimental ``info()`` (it reads series its arguments do
not select) — a query about one job needs none of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

AGGREGATIONS = frozenset({
    "sum", "avg", "count", "min", "max", "group", "stddev", "stdvar",
    "topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio",
})
AGGREGATIONS_WITH_PARAMETER = frozenset(
    {"topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio"}
)
FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg", "delta",
    "deriv", "double_exponential_smoothing", "exp", "floor", "histogram_avg", "histogram_count",
    "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum",
    "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time", "min_over_time",
    "minute", "month", "pi", "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate",
    "resets", "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh",
    "time", "timestamp", "vector", "year",
})
# Binary operators by precedence, lowest first; ``^`` is right-associative.
PRECEDENCE = (("or",), ("and", "unless"), ("==", "!=", "<=", "<", ">=", ">"), ("+", "-"),
              ("*", "/", "%", "atan2"), ("^",))
COMPARISONS = frozenset({"==", "!=", "<=", "<", ">=", ">"})
SET_OPERATORS = frozenset({"and", "or", "unless"})
KEYWORDS = frozenset({"and", "or", "unless", "atan2", "by", "without", "on", "ignoring", "group_left",
                      "group_right", "offset", "bool"})
MATCH_OPERATORS = ("=~", "!~", "!=", "=")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
                  "\\": "\\", '"': '"', "'": "'"}
MAX_DEPTH = 40  # operands inside operands (parentheses, calls, unary signs): deeper is refused
DIGITS = "0123456789"


class PromQLError(ValueError):
    def __init__(self, message: str, position: int):
        super().__init__(f"{message} (at character {position + 1})")
        self.message = message
        self.position = position


# ---- the tree --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # =, !=, =~, !~
    value: str  # decoded


@dataclass(frozen=True)
class VectorSelector:
    name: str | None
    matchers: tuple[Matcher, ...]
    position: int

    def all_matchers(self) -> tuple[Matcher, ...]:
        """The matchers, the metric name as ``__name__ =`` included."""
        named = (Matcher("__name__", "=", self.name),) if self.name else ()
        return named + self.matchers

    def text(self) -> str:
        inner = ", ".join(f'{m.label}{m.op}"{m.value}"' for m in self.matchers)
        return f"{self.name or ''}{{{inner}}}" if inner or not self.name else self.name


@dataclass(frozen=True)
class Node:
    """Any other expression: ``kind`` (number, string, call, aggregation, unary, binary, paren,
    range, subquery, modified) and its children in order."""

    kind: str
    children: tuple = ()
    detail: str = ""


@dataclass
class _Token:
    kind: str  # ident, number, duration, string, op, punct, eof
    text: str
    position: int
    value: str = ""  # a string's decoded value


# ---- the lexer -------------------------------------------------------------------------------

_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IDENT = re.compile(r"[a-zA-Z_][a-zA-Z0-9_:]*")
_OPERATORS = ("=~", "!~", "!=", "==", "<=", ">=", "+", "-", "*", "/", "%", "^", "<", ">", "=")
_PUNCT = "(){}[],:@"


def _decode(text: str, start: int, quote: str) -> tuple[str, int]:
    """The string starting at ``text[start]`` (its quote) decoded; the index after it."""
    out, i = [], start + 1
    while True:
        if i >= len(text) or text[i] == "\n":
            raise PromQLError("unterminated string", start)
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c != "\\" or quote == "`":
            out.append(c)
            i += 1
            continue
        out.append(_escape(text, i))
        i += _escape_length(text, i)


def _escape_length(text: str, i: int) -> int:
    c = text[i + 1] if i + 1 < len(text) else ""
    return {"x": 4, "u": 6, "U": 10}.get(c, 4 if c in "01234567" and c else 2)


def _escape(text: str, i: int) -> str:
    c = text[i + 1] if i + 1 < len(text) else ""
    if c in SIMPLE_ESCAPES:
        return SIMPLE_ESCAPES[c]
    digits = {"x": (2, 16, "0123456789abcdefABCDEF"), "u": (4, 16, "0123456789abcdefABCDEF"),
              "U": (8, 16, "0123456789abcdefABCDEF")}
    if c in digits:
        count, base, allowed = digits[c]
        body = text[i + 2:i + 2 + count]
    elif c and c in "01234567":
        count, base, allowed, body = 3, 8, "01234567", text[i + 1:i + 4]
    else:
        raise PromQLError(f"unknown escape sequence \\{c}", i)
    if len(body) != count or any(ch not in allowed for ch in body):
        raise PromQLError("malformed escape sequence", i)
    code = int(body, base)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF or (base == 8 and code > 255):
        raise PromQLError("escape sequence is an invalid character", i)
    return chr(code)


def tokens(text: str) -> list[_Token]:
    found, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif c in "\"'`":
            value, end = _decode(text, i, c)
            found.append(_Token("string", text[i:end], i, value))
            i = end
        elif c in DIGITS or (c == "." and text[i + 1:i + 2] in tuple(DIGITS)):
            duration, number = _DURATION.match(text, i), _NUMBER.match(text, i)
            if duration and duration.end() >= number.end():
                found.append(_Token("duration", duration.group(), i))
                i = duration.end()
            else:
                found.append(_Token("number", number.group(), i))
                i = number.end()
            if i < len(text) and (text[i] in DIGITS or text[i] == "_" or text[i].isalpha()):
                start = found[-1].position
                raise PromQLError(f"bad number or duration {text[start:i + 1]!r}", start)
        elif _IDENT.match(text, i):
            word = _IDENT.match(text, i).group()
            found.append(_Token("ident", word, i))
            i += len(word)
        elif c in _PUNCT:
            found.append(_Token("punct", c, i))
            i += 1
        else:
            operator = next((op for op in _OPERATORS if text.startswith(op, i)), None)
            if operator is None:
                raise PromQLError(f"unexpected character {c!r}", i)
            found.append(_Token("op", operator, i))
            i += len(operator)
    found.append(_Token("eof", "", len(text)))
    return found


# ---- the parser ------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str):
        self.tokens = tokens(text)
        self.at = 0
        self.depth = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def peek(self, ahead: int = 1) -> _Token:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def is_(self, text: str, kind: str | None = None) -> bool:
        token = self.token
        return token.text == text and (kind is None or token.kind == kind) and token.kind != "string"

    def take(self) -> _Token:
        token = self.token
        self.at += 1
        return token

    def expect(self, text: str) -> _Token:
        if not self.is_(text):
            self.fail(f"expected {text!r}")
        return self.take()

    def fail(self, message: str):
        token = self.token
        shown = "the end of the query" if token.kind == "eof" else repr(token.text)
        raise PromQLError(f"{message}, found {shown}", token.position)

    # expressions

    def expression(self, level: int = 0):
        if level == len(PRECEDENCE):
            return self.unary()
        left = self.expression(level + 1)
        while self.token.kind in ("op", "ident") and self.token.text in PRECEDENCE[level]:
            operator = self.take().text
            modifiers = self.binary_modifiers(operator)
            # ^ is right-associative: its right side may hold another ^.
            right = self.expression(level if operator == "^" else level + 1)
            left = Node("binary", (left, right), f"{operator}{modifiers}")
        return left

    def binary_modifiers(self, operator: str) -> str:
        text = ""
        if self.is_("bool", "ident"):
            if operator not in COMPARISONS:
                self.fail("bool is only for comparison operators")
            self.take()
            text += " bool"
        if self.is_("on", "ident") or self.is_("ignoring", "ident"):
            text += f" {self.take().text}({','.join(self.label_list())})"
            if self.is_("group_left", "ident") or self.is_("group_right", "ident"):
                if operator in SET_OPERATORS:
                    self.fail("no grouping with a set operator")
                text += f" {self.take().text}"
                if self.is_("("):
                    text += f"({','.join(self.label_list())})"
        return text

    def unary(self):
        # Each operand inside another costs a dozen Python frames: bound the nesting.
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail("nested too deeply")
        try:
            if self.token.kind == "op" and self.token.text in ("+", "-"):
                operator = self.take().text
                return Node("unary", (self.unary(),), operator)
            return self.postfix(self.primary())
        finally:
            self.depth -= 1

    def postfix(self, expr):
        while True:
            if self.is_("["):
                expr = self.range_or_subquery(expr)
            elif self.is_("offset", "ident"):
                self.take()
                sign = self.take().text if self.token.kind == "op" and self.token.text == "-" else ""
                expr = Node("modified", (expr,), f"offset {sign}{self.duration()}")
            elif self.is_("@"):
                self.take()
                expr = Node("modified", (expr,), f"@ {self.at_time()}")
            else:
                return expr

    def range_or_subquery(self, expr):
        start = self.take().position
        span = self.duration()
        if self.is_(":"):
            self.take()
            step = self.duration() if self.token.kind == "duration" else ""
            self.expect("]")
            return Node("subquery", (expr,), f"[{span}:{step}]")
        self.expect("]")
        if not isinstance(expr, VectorSelector):
            raise PromQLError("a range needs a vector selector (use a subquery [range:step])", start)
        return Node("range", (expr,), f"[{span}]")

    def duration(self) -> str:
        if self.token.kind != "duration":
            self.fail("expected a duration such as 5m")
        return self.take().text

    def at_time(self) -> str:
        if self.is_("start", "ident") or self.is_("end", "ident"):
            name = self.take().text
            self.expect("(")
            self.expect(")")
            return f"{name}()"
        sign = self.take().text if self.token.kind == "op" and self.token.text in "+-" else ""
        if self.token.kind != "number":
            self.fail("expected a timestamp, start() or end() after @")
        return sign + self.take().text

    def primary(self):
        token = self.token
        if token.kind == "number":
            return Node("number", (), self.take().text)
        if token.kind == "string":
            return Node("string", (), self.take().value)
        if self.is_("("):
            self.take()
            inner = self.expression()
            self.expect(")")
            return Node("paren", (inner,))
        if self.is_("{"):
            return self.selector(None, token.position)
        if token.kind == "ident":
            return self.identifier()
        self.fail("expected an expression")

    def identifier(self):
        token = self.take()
        word = token.text
        if word.lower() in ("inf", "nan"):
            return Node("number", (), word)
        grouped = self.is_("by", "ident") or self.is_("without", "ident")
        if word in AGGREGATIONS and (self.is_("(") or grouped):
            return self.aggregation(word)
        if self.is_("("):
            if word not in FUNCTIONS:
                raise PromQLError(f"unknown function {word!r}", token.position)
            return Node("call", tuple(self.arguments()), word)
        if word in KEYWORDS or word in AGGREGATIONS:
            raise PromQLError(f"{word!r} is a keyword, not a metric name", token.position)
        return self.selector(word, token.position)

    def arguments(self) -> list:
        self.expect("(")
        found = []
        while not self.is_(")"):
            found.append(self.expression())
            if not self.is_(")"):
                self.expect(",")
        self.take()
        return found

    def aggregation(self, name: str):
        grouping = self.grouping() if self.is_("by", "ident") or self.is_("without", "ident") else ""
        arguments = self.arguments()
        wanted = 2 if name in AGGREGATIONS_WITH_PARAMETER else 1
        if len(arguments) != wanted:
            self.at -= 1
            self.fail(f"{name} takes {wanted} argument{'s' if wanted > 1 else ''}")
        if not grouping and (self.is_("by", "ident") or self.is_("without", "ident")):
            grouping = self.grouping()
        return Node("aggregation", tuple(arguments), f"{name} {grouping}".strip())

    def grouping(self) -> str:
        word = self.take().text
        return f"{word}({','.join(self.label_list())})"

    def label_list(self) -> list[str]:
        self.expect("(")
        labels = []
        while not self.is_(")"):
            labels.append(self.label_name())
            if not self.is_(")"):
                self.expect(",")
        self.take()
        return labels

    def label_name(self) -> str:
        token = self.token
        if token.kind != "ident" or not LABEL_NAME.match(token.text):
            self.fail("expected a label name")
        return self.take().text

    def selector(self, name: str | None, position: int) -> VectorSelector:
        matchers: list[Matcher] = []
        if self.is_("{"):
            self.take()
            while not self.is_("}"):
                label = self.label_name()
                if self.token.kind != "op" or self.token.text not in MATCH_OPERATORS:
                    self.fail("expected =, !=, =~ or !~")
                op = self.take().text
                if self.token.kind != "string":
                    self.fail("expected a quoted label value")
                matchers.append(Matcher(label, op, self.take().value))
                if not self.is_("}"):
                    self.expect(",")
            self.take()
        if name is None and not matchers:
            raise PromQLError("a selector names a metric or has a matcher", position)
        return VectorSelector(name, tuple(matchers), position)


def parse(text: str):
    """The expression tree of ``text``; ``PromQLError`` for anything outside the subset."""
    parser = _Parser(text)
    if parser.token.kind == "eof":
        raise PromQLError("the query is empty", 0)
    expr = parser.expression()
    if parser.token.kind != "eof":
        parser.fail("expected an operator or the end of the query")
    return expr


def selectors(expr) -> Iterator[VectorSelector]:
    """Every vector selector of the tree, in the order written."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, VectorSelector):
            yield node
        else:
            stack.extend(reversed(node.children))


@dataclass
class Scope:
    """Matchers that make a selector read one job's series only: ``(label, op, value)``."""

    allowed: set[tuple[str, str, str]] = field(default_factory=set)

    def covers(self, selector: VectorSelector) -> bool:
        return any((m.label, m.op, m.value) in self.allowed for m in selector.matchers)


def unscoped(text: str, scope: Scope) -> list[VectorSelector]:
    """The selectors of ``text`` that ``scope`` does not cover (``PromQLError`` if unparsable)."""
    return [s for s in selectors(parse(text)) if not scope.covers(s)]
