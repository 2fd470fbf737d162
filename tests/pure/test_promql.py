"""The PromQL parser of autoscaling queries (issue 32 item 18; ``jobs.scheduler.promql``): what
it reads, the selectors it finds — in comments none, in every branch of every operator all — and
what it refuses. No Django."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduler.promql import Matcher, PromQLError, Scope, parse, selectors, tokens, unscoped


def _found(query: str) -> list[tuple[str | None, tuple]]:
    return [(s.name, tuple((m.label, m.op, m.value) for m in s.matchers)) for s in selectors(parse(query))]


SELECTED = [
    ("up", [("up", ())]),
    ('up{job="a"}', [("up", (("job", "=", "a"),))]),
    ('{job="a", pod=~"b-.*", x!="c", y!~"d",}', [(None, (("job", "=", "a"), ("pod", "=~", "b-.*"),
                                                       ("x", "!=", "c"), ("y", "!~", "d")))]),
    ("rate(http_requests_total[5m])", [("http_requests_total", ())]),
    ("a or b unless c and d", [("a", ()), ("b", ()), ("c", ()), ("d", ())]),
    ("a # b", [("a", ())]),
    ("# only a comment\na", [("a", ())]),
    ('sum by (le) (rate(h_bucket{j="x"}[5m] offset -1h @ 1700000000))', [("h_bucket", (("j", "=", "x"),))]),
    ("sum(a) without (instance) / on(job) group_left(x) b", [("a", ()), ("b", ())]),
    ("a > bool 1", [("a", ())]),
    ("a * ignoring(x) group_right b", [("a", ()), ("b", ())]),
    ("max_over_time(rate(a[1m])[30m:1m] @ end()) + min_over_time(b[5m:])", [("a", ()), ("b", ())]),
    ("topk(3, a) + quantile(0.9, b) + count_values(\"v\", c)", [("a", ()), ("b", ()), ("c", ())]),
    ('histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="b"}[5m])))', [("x_bucket", (("a", "=", "b"),))]),
    ('label_replace(a, "dst", "$1", "src", "(.*)")', [("a", ())]),
    ("vector(1) + scalar(time()) - 2 ^ 3 ^ -Inf", []),
    ("-(a) % +b atan2 c", [("a", ()), ("b", ()), ("c", ())]),
    ("level:metric:rate5m", [("level:metric:rate5m", ())]),
    ('a{on="x", by="y", sum="z"}', [("a", (("on", "=", "x"), ("by", "=", "y"), ("sum", "=", "z")))]),
    ("0x1F + 1.5e3 + .5 + NaN", []),
]


@pytest.mark.parametrize(("query", "found"), SELECTED)
def test_every_selector_is_found_wherever_it_stands(query, found):
    assert _found(query) == found


STRINGS = [
    (r'"a\"b"', 'a"b'),
    (r"'a\'b'", "a'b"),
    (r'"\x41\u00e9\U0001F680\101\n\t\\"', "Aé🚀A\n\t\\"),
    (r"`a\d+`", r"a\d+"),
    (r'"{job}"', "{job}"),
]


@pytest.mark.parametrize(("literal", "value"), STRINGS)
def test_strings_decode_as_go_decodes_them(literal, value):
    (selector,) = selectors(parse(f"x{{l={literal}}}"))
    assert selector.matchers == (Matcher("l", "=", value),)


REFUSED = [
    "",
    "# nothing but a comment",
    "up{",
    'up{job="a"',
    "up{job}",
    "up{job=a}",
    'up{job=="a"}',
    'up{"my.metric"}',
    'up{a="b" or c="d"}',
    "{}",
    "sum(",
    "sum(a, b)",
    "topk(a)",
    "sum by a (b)",
    "rate(a[5])",
    "rate(a[5m]",
    "(a + b)[5m]",
    "a offset 5",
    "a @ now",
    "no_such_function(a)",
    'info(a, {k8s="x"})',
    "a b",
    "a = b",
    "a and bool b",
    "a or on() group_left b",
    "by",
    "and",
    ":weird_name",
    '"unterminated',
    r'"\q"',
    r'"\x4"',
    r'"\ud800"',
    "5mx",
    "a{x=~\"y\"} $ 1",
    "(" * 50 + "a" + ")" * 50,
    "-" * 50 + "a",
]


@pytest.mark.parametrize("query", REFUSED, ids=lambda q: repr(q)[:40])
def test_anything_outside_the_subset_is_an_error_naming_the_position(query):
    with pytest.raises(PromQLError) as error:
        parse(query)
    assert 0 <= error.value.position <= len(query)
    assert f"(at character {error.value.position + 1})" in str(error.value)


def test_a_duration_and_a_number_are_told_apart():
    kinds = [(t.kind, t.text) for t in tokens("a[1h30m] offset 100ms + 1e3 + 5")][:-1]
    assert kinds == [("ident", "a"), ("punct", "["), ("duration", "1h30m"), ("punct", "]"),
                     ("ident", "offset"), ("duration", "100ms"), ("op", "+"), ("number", "1e3"),
                     ("op", "+"), ("number", "5")]


def test_unscoped_lists_the_selectors_a_scope_does_not_cover():
    scope = Scope({("job", "=", "gp-7")})
    assert [s.name for s in unscoped('a{job="gp-7"} or b{job="gp-8"} or c', scope)] == ["b", "c"]
    assert unscoped('sum(a{job="gp-7", x="y"}) # b', scope) == []


_LABEL = st.sampled_from(["job", "pod", "x", "le"])
_VALUE = st.text(alphabet="ab-.*{}\"'\\", max_size=6)


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


@st.composite
def _expressions(draw, depth=0):
    """Random expressions of the subset, with the selectors they hold."""
    if depth > 3 or draw(st.booleans()):
        name = draw(st.sampled_from(["a", "b_total", "c:d"]))
        ops = st.sampled_from(["=", "!=", "=~", "!~"])
        matchers = draw(st.lists(st.tuples(_LABEL, ops, _VALUE), max_size=2))
        quoted = ", ".join(f'{label}{op}"{_escaped(value)}"' for label, op, value in matchers)
        return f"{name}{{{quoted}}}", [(name, tuple(matchers))]
    shape = draw(st.sampled_from(["binary", "call", "agg", "paren", "subquery", "comment"]))
    left, found = draw(_expressions(depth + 1))
    if shape == "binary":
        # ``group_left`` is followed by its label list: a bare one before a parenthesised
        # operand would read that operand as the list (as Prometheus reads it too).
        op = draw(st.sampled_from(["+", "or", "unless", "and", "/ on(x)", "> bool",
                                   "* ignoring(le) group_left(le)"]))
        right, more = draw(_expressions(depth + 1))
        return f"{left} {op} {right}", found + more
    if shape == "call":
        return f"abs({left})", found
    if shape == "agg":
        return f"sum by (x) ({left})", found
    if shape == "paren":
        return f"({left})", found
    if shape == "subquery":
        return f"max_over_time(({left})[5m:1m])", found
    return f"{left} # hidden{{job=\"x\"}} or z\n", found  # a comment ends with its line


@settings(max_examples=300, deadline=None)
@given(_expressions())
def test_generated_expressions_yield_exactly_their_selectors(case):
    query, expected = case
    assert _found(query) == expected
