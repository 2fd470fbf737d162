"""Texts stored for people who read them later: approval summaries and reasons, notifications,
job event reasons. They are stored as data — a *message*: the English source text (the gettext
msgid, optionally with a context) and its parameters — and rendered when read, in the reader's
language: the page's, the API's ``Accept-Language``, a mail's (the site language: users have no
language preference of their own). Storing the text rendered in whatever language was active
when it was written showed Chinese summaries in the English UI and API.

A message is a plain JSON object::

    {"msgid": "Approved: %(summary)s", "params": {"summary": {...a message...}}, "note": "ok"}

Parameters are strings and numbers (names, codes and figures do not translate), nested messages
(rendered in the same language) or ``{"datetime": ISO 8601}`` (shown in the site zone). ``note``
is free text a person wrote (a comment), appended after " — " untranslated. Rows written before
messages existed keep their rendered text, which every reader falls back to.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone, translation
from django.utils.translation import gettext, pgettext

Message = dict[str, Any]


def pgettext_noop(context: str, msgid: str) -> str:
    """Marks ``msgid`` for the catalogue under ``context`` and returns it untranslated, as
    ``gettext_noop`` does without a context (Django has none; ``makemessages`` here extracts it:
    portal/management/commands/makemessages.py)."""
    return msgid


def message(msgid: str, *, context: str = "", note: str = "", **params) -> Message:
    """A message to store. ``msgid`` is the English source text, marked with ``gettext_noop``
    (or ``pgettext_noop``) where it is written so the catalogue has it."""
    out: Message = {"msgid": str(msgid), "params": {k: _stored(v) for k, v in params.items()}}
    if context:
        out["context"] = context
    if note:
        out["note"] = note
    return out


def when(value: datetime) -> dict:
    """A date-time parameter: shown in the site zone, ``YYYY-MM-DD HH:MM``."""
    return {"datetime": value.isoformat()}


def is_message(value) -> bool:
    return isinstance(value, dict) and isinstance(value.get("msgid"), str)


def _stored(value):
    if value is None or isinstance(value, bool | int | float | str) or is_message(value):
        return value
    if isinstance(value, dict) and set(value) == {"datetime"}:
        return value
    return str(value)  # a Decimal, a model's __str__, a lazy translation in the active language


def _param(value):
    if is_message(value):
        return render(value)
    if isinstance(value, dict) and "datetime" in value:
        try:
            moment = datetime.fromisoformat(value["datetime"])
        except (TypeError, ValueError):
            return str(value["datetime"])
        return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")
    return value


def render(value, fallback: str = "") -> str:
    """The text of a stored message in the active language; ``value`` may also be a plain
    string (an old row's text, a backend's message), returned as it is; ``fallback`` when there
    is nothing to render or the message does not fit its translation."""
    if isinstance(value, str):
        return value
    if not is_message(value) or not value["msgid"]:
        return fallback
    msgid, context = value["msgid"], value.get("context") or ""
    template = pgettext(context, msgid) if context else gettext(msgid)
    params = {k: _param(v) for k, v in (value.get("params") or {}).items()}
    try:
        text = template % params if params else template
    except (KeyError, TypeError, ValueError):  # a translation that lost a placeholder
        try:
            text = msgid % params if params else msgid
        except (KeyError, TypeError, ValueError):
            return fallback or msgid
    note = value.get("note")
    return f"{text} — {note}" if note else text


def render_in(language: str, value, fallback: str = "") -> str:
    with translation.override(language):
        return render(value, fallback)


def render_for_site(value, fallback: str = "") -> str:
    """In the site language: the text kept next to a message for readers of the raw row (the
    admin's search, a mail's subject) and for code that predates messages."""
    return render_in(settings.LANGUAGE_CODE, value, fallback)


def render_data(data):
    """``data`` (JSON: dicts, lists, values) with every message in it rendered: a request's
    payload as the pages and the API show it."""
    if is_message(data):
        return render(data)
    if isinstance(data, dict):
        return {k: render_data(v) for k, v in data.items()}
    if isinstance(data, list):
        return [render_data(v) for v in data]
    return data
