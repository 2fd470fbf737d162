"""``FastSelect`` writes Django's ``Select`` markup itself: byte for byte the same, for plain and
model choices, groups, a selected value, attributes (true, false, strings with quotes) and labels
that need escaping, in both languages."""

import pytest
from django import forms
from django.forms.models import ModelChoiceIterator
from django.utils import translation

from jobs.forms import QUEUE_STATES, JobFilterForm
from portal.widgets import FastSelect
from tests import factories as fx

pytestmark = pytest.mark.django_db

CHOICES = [
    ("", "all"),
    ("a&b", 'say "hi" <b>'),
    ("Group", [("1", "one"), ("2", "two")]),
    (3, "three"),
]


@pytest.mark.parametrize("value", [None, "", "a&b", "2", 3, ["1", 3]])
@pytest.mark.parametrize(
    "attrs", [None, {"aria-invalid": "true", "disabled": True, "hidden": False, "data-x": 'q"<'}]
)
def test_fast_select_markup_is_djangos(value, attrs):
    django_select, fast = forms.Select(choices=CHOICES), FastSelect(choices=CHOICES)
    if isinstance(value, list):
        django_select, fast = forms.SelectMultiple(choices=CHOICES), type(
            "FastMultiple", (FastSelect,), {"allow_multiple_selected": True}
        )(choices=CHOICES)
    expected = django_select.render("field", value, attrs=attrs)
    assert fast.render("field", value, attrs=attrs) == expected
    assert "<option" in expected


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_filter_form_renders_as_with_djangos_select(language, settings):
    fx.flavor("A100 <80GB>")
    fx.flavor("T4")
    d = fx.department("D")
    fx.project("p&1", d)
    fx.project("p2", d)
    admin = fx.platform_admin()
    data = {"project": "p2", "flavor": "T4", "state": "queued", "kind": "training", "mine": "on"}
    with translation.override(language):
        fast = JobFilterForm(data, user=admin, states=QUEUE_STATES)
        plain = JobFilterForm(data, user=admin, states=QUEUE_STATES)
        for name in ("project", "flavor", "state", "kind"):
            plain.fields[name].widget = forms.Select(choices=plain.fields[name].choices)
        assert fast.is_valid() and plain.is_valid()
        for name in ("project", "flavor", "state", "kind"):
            assert str(fast[name]) == str(plain[name])
            assert "selected" in str(fast[name])
        for name in ("project", "flavor"):  # one query, the choices Django's iterator reads
            field = fast.fields[name]
            ours = [(str(value), str(label)) for value, label in field.choices]
            djangos = [(str(value), str(label)) for value, label in ModelChoiceIterator(field)]
            assert ours == djangos and len(ours) >= 3
