"""A small PromQL parser for the tests of the shipped dashboard and alert rules: it checks an expression's syntax
(balanced brackets, operands around every operator, label matchers, range and subquery brackets, known functions
and aggregations) and names the series it selects, so a test can hold them against the operator's registry.

Why here and not promtool: promtool does not build quickly from Go modules on the test machine; this covers what
the shipped expressions use (it is not a full PromQL implementation: no native histograms, no `@ end()`, no
experimental functions). Grafana's variables (`$namespace`, `${stack}`, `$__rate_interval`) are accepted where
Grafana substitutes them: in strings, and as a range or a number.

Must never accept an expression Prometheus would refuse for a reason it checks (the tests of this module show
which).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate", "label_join",
    "label_replace", "last_over_time", "ln", "log10", "log2", "max_over_time", "min_over_time", "minute", "month",
    "predict_linear", "present_over_time", "quantile_over_time", "rate", "resets", "round", "scalar", "sgn", "sort",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "time", "timestamp", "vector",
    "year",
})
AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile"})
PARAMETRIC = frozenset({"count_values", "bottomk", "topk", "quantile"})  # take a parameter before the vector
BINARY = frozenset({"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless", "atan2"})
COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPERATORS = frozenset({"and", "or", "unless"})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"})
MATCH_OPERATORS = frozenset({"=", "!=", "=~", "!~"})

_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+)(?![\w.])
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|0x[0-9a-fA-F]+|Inf|NaN)(?![\w])
  | (?P<variable>\$\{[A-Za-z_]\w*(?::\w+)?\}|\$[A-Za-z_]\w*|\[\[[A-Za-z_]\w*\]\])
  | (?P<ident>[A-Za-z_][\w:]*)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=(){}\[\],:@])
""", re.VERBOSE)


class PromQLError(ValueError):
    """The expression is not valid PromQL; the message says where."""


@dataclass(frozen=True)
class Token:
    kind: str  # string, duration, number, variable, ident, op, end
    text: str
    at: int


def tokenize(expr: str) -> list[Token]:
    tokens: list[Token] = []
    at = 0
    while at < len(expr):
        match = _TOKEN.match(expr, at)
        if match is None:
            raise PromQLError(f"unexpected character {expr[at]!r} at {at}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(Token(kind, match.group(), at))
        at = match.end()
    tokens.append(Token("end", "", len(expr)))
    return tokens


@dataclass
class Parsed:
    """What an expression selects: series names (with their label matchers) and the functions it calls."""

    selectors: list[tuple[str, dict[str, tuple[str, str]]]] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)

    @property
    def metrics(self) -> set[str]:
        return {name for name, _ in self.selectors if name}


class _Parser:
    """Recursive descent over the grammar the docstring of :func:`parse` gives; each method consumes what it
    parses and returns the expression's type (``scalar``, ``string``, ``instant`` or ``range``)."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.at = 0
        self.parsed = Parsed()

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def fail(self, what: str) -> PromQLError:
        token = self.token
        found = repr(token.text) if token.kind != "end" else "the end"
        return PromQLError(f"{what} at {token.at}, found {found}: {self.expr!r}")

    def accept(self, *texts: str) -> Token | None:
        token = self.token
        if token.kind in ("op", "ident") and token.text in texts:
            self.at += 1
            return token
        return None

    def expect(self, text: str) -> None:
        if self.accept(text) is None:
            raise self.fail(f"expected {text!r}")

    def expression(self, min_precedence: int = 0) -> str:
        left = self.unary()
        while True:
            token = self.token
            if token.kind not in ("op", "ident") or token.text not in BINARY:
                return left
            precedence = _precedence(token.text)
            if precedence < min_precedence:
                return left
            self.at += 1
            if token.text in COMPARISONS:
                self.accept("bool")
            self.vector_matching()
            # `^` is right-associative, every other operator left-associative
            right = self.expression(precedence if token.text == "^" else precedence + 1)
            left = self.combine(token.text, left, right)

    def combine(self, op: str, left: str, right: str) -> str:
        if "range" in (left, right) or "string" in (left, right):
            raise PromQLError(f"{op!r} needs instant vectors or scalars, not {left} and {right}: {self.expr!r}")
        if op in SET_OPERATORS and "scalar" in (left, right):
            raise PromQLError(f"{op!r} needs instant vectors on both sides: {self.expr!r}")
        return "scalar" if left == right == "scalar" else "instant"

    def vector_matching(self) -> None:
        if self.accept("on", "ignoring"):
            self.label_list()
        if self.accept("group_left", "group_right") and self.token.text == "(":
            self.label_list()

    def label_list(self) -> None:
        self.expect("(")
        while self.token.text != ")":
            if self.token.kind != "ident":
                raise self.fail("expected a label name")
            self.at += 1
            if not self.accept(","):
                break
        self.expect(")")

    def unary(self) -> str:
        if self.accept("-", "+"):
            kind = self.unary()
            if kind not in ("scalar", "instant"):
                raise self.fail("a sign needs a scalar or an instant vector")
            return kind
        return self.postfix(self.primary())

    def postfix(self, kind: str) -> str:
        if self.accept("["):
            if kind != "instant":
                raise self.fail("a range needs an instant vector")
            self.duration()
            if self.accept(":") and self.token.text != "]":
                self.duration()
            kind = "range"
            self.expect("]")
        if self.accept("offset"):
            self.accept("-")
            self.duration()
        if self.accept("@"):
            self.number()
        return kind

    def duration(self) -> None:
        if self.token.kind not in ("duration", "variable"):
            raise self.fail("expected a duration")
        self.at += 1

    def number(self) -> None:
        self.accept("-", "+")
        if self.token.kind not in ("number", "variable"):
            raise self.fail("expected a number")
        self.at += 1

    def primary(self) -> str:
        token = self.token
        if token.kind in ("number", "variable"):
            self.at += 1
            return "scalar"
        if token.kind == "string":
            self.at += 1
            return "string"
        if token.kind == "duration":  # `5m` alone is not an expression
            raise self.fail("expected an expression")
        if self.accept("("):
            kind = self.expression()
            self.expect(")")
            return kind
        if token.text == "{":
            self.selector("")
            return "instant"
        if token.kind == "ident":
            name = token.text
            if name in KEYWORDS or name in SET_OPERATORS:
                raise self.fail("expected an expression")
            self.at += 1
            if name in AGGREGATIONS and (self.token.text == "(" or self.token.text in ("by", "without")):
                return self.aggregation(name)
            if self.token.text == "(":
                return self.call(name)
            self.selector(name)
            return "instant"
        raise self.fail("expected an expression")

    def aggregation(self, name: str) -> str:
        self.parsed.functions.add(name)
        grouped = bool(self.accept("by", "without"))
        if grouped:
            self.label_list()
        self.expect("(")
        if name in PARAMETRIC:
            self.expression()
            self.expect(",")
        if self.expression() != "instant":
            raise self.fail(f"{name} needs an instant vector")
        self.expect(")")
        if not grouped and self.accept("by", "without"):
            self.label_list()
        return "instant"

    def call(self, name: str) -> str:
        if name not in FUNCTIONS:
            raise self.fail(f"unknown function {name!r}")
        self.parsed.functions.add(name)
        self.expect("(")
        kinds = []
        while self.token.text != ")":
            kinds.append(self.expression())
            if not self.accept(","):
                break
        self.expect(")")
        ranged = name.endswith("_over_time") or name in {"rate", "irate", "increase", "delta", "idelta", "deriv",
                                                          "predict_linear", "changes", "resets", "holt_winters"}
        if ranged and (not kinds or kinds[0] != "range"):
            raise PromQLError(f"{name}() needs a range vector first: {self.expr!r}")
        if not ranged and "range" in kinds:
            raise PromQLError(f"{name}() takes no range vector: {self.expr!r}")
        if name == "histogram_quantile" and kinds != ["scalar", "instant"]:
            raise PromQLError(f"histogram_quantile(φ, buckets) expected: {self.expr!r}")
        return "scalar" if name in ("time", "scalar") else "instant"

    def selector(self, name: str) -> None:
        matchers: dict[str, tuple[str, str]] = {}
        if self.accept("{"):
            while self.token.text != "}":
                label = self.token
                if label.kind != "ident":
                    raise self.fail("expected a label name")
                self.at += 1
                op = self.token
                if op.text not in MATCH_OPERATORS:
                    raise self.fail("expected a label matcher operator")
                self.at += 1
                if self.token.kind != "string":
                    raise self.fail("expected a quoted label value")
                matchers[label.text] = (op.text, self.token.text[1:-1])
                self.at += 1
                if not self.accept(","):
                    break
            self.expect("}")
            if not name and not any(op in ("=", "=~") and value not in ("", ".*") for op, value in matchers.values()):
                raise PromQLError(f"a selector needs a name or a non-empty matcher: {self.expr!r}")
        self.parsed.selectors.append((name, matchers))


def _precedence(op: str) -> int:
    if op == "or":
        return 1
    if op in ("and", "unless"):
        return 2
    if op in COMPARISONS:
        return 3
    if op in ("+", "-"):
        return 4
    if op in ("*", "/", "%", "atan2"):
        return 5
    return 6  # ^


def parse(expr: str) -> Parsed:
    """Parse `expr` (raise :class:`PromQLError` when it is not valid), the series it selects and the functions it
    calls. An expression that is a string (``"x"``) or a range vector (``x[5m]``) is refused: neither is a valid
    alert or graph expression."""
    parser = _Parser(expr)
    kind = parser.expression()
    if parser.token.kind != "end":
        raise parser.fail("unexpected trailing input")
    if kind in ("string", "range"):
        raise PromQLError(f"a {kind} is not a query result a rule or a panel can use: {expr!r}")
    return parser.parsed


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<selector>.+?)\s*,\s*(?P<label>[A-Za-z_]\w*)\s*\)\s*$")


def parse_variable_query(query: str) -> Parsed:
    """A Grafana Prometheus variable query: `label_values(selector, label)` or a PromQL `query_result(...)`."""
    match = _LABEL_VALUES.match(query)
    if match is not None:
        return parse(match.group("selector"))
    inner = re.match(r"^\s*query_result\((?P<expr>.*)\)\s*$", query, re.DOTALL)
    if inner is not None:
        return parse(inner.group("expr"))
    raise PromQLError(f"not a Grafana Prometheus variable query: {query!r}")
