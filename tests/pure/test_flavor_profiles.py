"""The flavor profile rules (quotas.profiles, DESIGN §14): pure, table-tested."""

from datetime import date
from decimal import Decimal

import pytest

from quotas import profiles

TODAY = date(2026, 12, 4)
GOOD = {"coverage": "0.93", "source": "vendor operator list v8.0", "date": "2026-06-01"}


def _codes(raw):
    return [(p.code, p.params.get("framework")) for p in profiles.coverage_problems(raw, today=TODAY)]


@pytest.mark.parametrize(
    ("raw", "codes"),
    [
        ({}, []),
        ({"pytorch": GOOD, "mindspore": {**GOOD, "coverage": "1"}}, []),
        ({"pytorch": {**GOOD, "coverage": "0"}}, []),
        ([], [("not_object", None)]),
        ({"PyTorch": GOOD}, [("framework", "PyTorch")]),
        ({"pytorch": {**GOOD, "extra": 1}}, [("keys", "pytorch")]),
        ({"pytorch": {"coverage": "0.9", "source": "x"}}, [("keys", "pytorch")]),
        ({"pytorch": "0.93"}, [("keys", "pytorch")]),
        ({"pytorch": {**GOOD, "coverage": 0.93}}, [("coverage", "pytorch")]),  # a float, not a string
        ({"pytorch": {**GOOD, "coverage": "1.01"}}, [("coverage", "pytorch")]),
        ({"pytorch": {**GOOD, "coverage": "-0.1"}}, [("coverage", "pytorch")]),
        ({"pytorch": {**GOOD, "coverage": "0.9301"}}, [("coverage", "pytorch")]),
        ({"pytorch": {**GOOD, "coverage": "NaN"}}, [("coverage", "pytorch")]),
        ({"pytorch": {**GOOD, "coverage": "93%"}}, [("coverage", "pytorch")]),
        ({"pytorch": {**GOOD, "source": "  "}}, [("source", "pytorch")]),
        ({"pytorch": {**GOOD, "date": "2026-13-01"}}, [("date", "pytorch")]),
        ({"pytorch": {**GOOD, "date": "01/06/2026"}}, [("date", "pytorch")]),
        ({"pytorch": {**GOOD, "date": "2026-12-05"}}, [("future", "pytorch")]),
    ],
)
def test_operator_coverage_rules(raw, codes):
    assert _codes(raw) == codes


@pytest.mark.parametrize(
    ("throughput", "source", "taken", "codes"),
    [
        (Decimal(1), "", None, []),  # the reference card's 1.0 is a definition
        (Decimal("0.8"), "MLPerf v4.0 BERT", date(2026, 5, 1), []),
        (Decimal("0.8"), "", date(2026, 5, 1), [("relative_throughput_source", "source")]),
        (Decimal("0.8"), "bench", None, [("relative_throughput_date", "date")]),
        (Decimal("0.8"), "bench", date(2027, 1, 1), [("relative_throughput_date", "future")]),
        (Decimal(1), "ours", None, [("relative_throughput_date", "date")]),
    ],
)
def test_relative_throughput_needs_a_source_and_a_date(throughput, source, taken, codes):
    found = profiles.throughput_problems(throughput, source, taken, today=TODAY)
    assert [(p.field, p.code) for p in found] == codes


def test_coverages_reads_the_valid_entries_in_framework_order():
    found = profiles.coverages({"tensorflow": {**GOOD, "coverage": "0.8"}, "pytorch": GOOD, "bad": "x"})
    assert [(c.framework, c.coverage, c.date) for c in found] == [
        ("pytorch", Decimal("0.93"), date(2026, 6, 1)),
        ("tensorflow", Decimal("0.8"), date(2026, 6, 1)),
    ]


def test_the_profile_module_imports_no_django():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(profiles))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [n for n in names if n.startswith("django")]
