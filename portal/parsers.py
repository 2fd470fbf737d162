"""JSON bodies with a bound on nesting, finite numbers and real characters.

Python's decoder recurses once per ``[`` or ``{``: 2,000 of them (4 KB) raise ``RecursionError``,
which no parser catches, so a tiny anonymous request was a 500. Every JSON body the portal reads
(DRF's parser, the NUL check of ``portal.security``, JSON fields of the admin) goes through
``json_loads_bounded``: deeper than ``MAX_JSON_DEPTH`` levels is a ``ValueError`` like any other
malformed body, hence a 400. No request of ours nests beyond a handful of levels.

Two more things JSON's grammar allows and nothing downstream can hold (issue 32 items 19, 20):
a number beyond a double (``1e999``) decodes to ``inf``, which every integer field and id lookup
turned into an ``OverflowError``; an escaped lone surrogate (``"\\ud800"``) decodes to a string
that cannot be encoded as UTF-8, so the error message that echoed it crashed while it was being
rendered (and PostgreSQL could not store it). Both are refused here, for every body at once.
"""

from __future__ import annotations

import codecs
import json
import math
import re

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils.json import strict_constant

MAX_JSON_DEPTH = 64


class JsonTooDeep(ValueError):
    def __init__(self, limit: int):
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit


class JsonNotRepresentable(ValueError):
    """A number no double holds, or a lone surrogate: valid JSON grammar, no value of ours."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def finite_float(text: str) -> float:
    """``parse_float`` for JSON: ``1e999`` is an error, not ``inf``. The message never echoes a
    huge literal whole."""
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 24 else text[:20] + "…"
        raise JsonNotRepresentable(f"the number {shown} is out of range")
    return value


def _may_hold_surrogates(text: str | bytes) -> bool:
    """Cheap first: a lone surrogate comes from a ``\\u`` escape, or — in bytes, which ``json``
    decodes with ``surrogatepass`` — from its UTF-8-like encoding (0xED 0xA0..0xBF)."""
    if isinstance(text, bytes):
        return b"\\u" in text or b"\xed" in text
    return "\\u" in text or bool(_SURROGATE.search(text))


def _lone_surrogate(value) -> str | None:
    """The first lone surrogate in any key or string of ``value`` (iteratively), as an escape."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                return f"\\u{ord(found.group()):04x}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _deeper_than(value, limit: int) -> bool:
    """Whether containers nest more than ``limit`` levels (iterative: the value may be ~1,000 deep)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return False


def json_loads_bounded(text: str | bytes, *, limit: int = MAX_JSON_DEPTH, **kwargs):
    """``json.loads`` that raises ``JsonTooDeep`` (a ``ValueError``) instead of ``RecursionError``
    and for any nesting deeper than ``limit``, and ``JsonNotRepresentable`` (a ``ValueError``) for
    a number beyond a double or a lone surrogate."""
    kwargs.setdefault("parse_float", finite_float)
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise JsonTooDeep(limit) from None
    # Cheap first: a body with few brackets cannot nest deeply, and most bodies have few.
    opening = text.count(b"[" if isinstance(text, bytes) else "[")
    opening += text.count(b"{" if isinstance(text, bytes) else "{")
    if opening > limit and isinstance(value, dict | list) and _deeper_than(value, limit):
        raise JsonTooDeep(limit)
    if _may_hold_surrogates(text) and (escape := _lone_surrogate(value)):
        raise JsonNotRepresentable(f"{escape} is a lone surrogate, not a character")
    return value


def too_deep_message(limit: int = MAX_JSON_DEPTH) -> str:
    return _("JSON parse error: nested deeper than %(n)d levels.") % {"n": limit}


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser (``DEFAULT_PARSER_CLASSES``) with the nesting bound: a 400, never a 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            text = codecs.getreader(get_encoding(parser_context or {}))(stream).read()
            constant = strict_constant if self.strict else None
            return json_loads_bounded(text, parse_constant=constant)
        except JsonTooDeep as exc:
            raise ParseError(too_deep_message(exc.limit)) from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


class BoundedJSONFormField(forms.JSONField):
    """Django's form ``JSONField`` (the admin's, for ``models.JSONField``) with the same bound:
    its ``to_python`` and ``bound_data`` call ``json.loads`` and let ``RecursionError`` through."""

    default_error_messages = {"too_deep": gettext_lazy("Nested deeper than %(n)d levels.")}

    def _too_deep(self, value) -> bool:
        if not isinstance(value, str) or value in self.empty_values:
            return False
        try:
            json_loads_bounded(value, cls=self.decoder)
        except JsonTooDeep:
            return True
        except ValueError:
            return False  # malformed: Django's own message
        return False

    def to_python(self, value):
        if not self.disabled and self._too_deep(value):
            raise ValidationError(
                self.error_messages["too_deep"], code="too_deep", params={"n": MAX_JSON_DEPTH}
            )
        return super().to_python(value)

    def bound_data(self, data, initial):
        if not self.disabled and self._too_deep(data):
            return forms.fields.InvalidJSONInput(data)
        return super().bound_data(data, initial)
