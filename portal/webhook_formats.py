"""What each webhook kind sends, and how it is signed (docs/notifications.md). Pure: no Django,
no network — the vendors' documented formats as functions of the message, the secret and the
clock, so a test can check them against the vendors' own verification.

- WeCom group robot (企业微信群机器人): ``{"msgtype": "markdown", "markdown": {"content": …}}``;
  no signature (the robot's key is in its URL).
- DingTalk custom robot (钉钉自定义机器人): ``{"msgtype": "markdown", "markdown": {"title", "text"}}``;
  with a secret ("加签"), ``timestamp`` (ms) and ``sign`` = URL-encoded
  base64(HMAC-SHA256(key=secret, msg="<timestamp>\\n<secret>")) as query parameters.
- Feishu custom bot (飞书自定义机器人): ``{"msg_type": "text", "content": {"text": …}}``; with a
  secret, ``timestamp`` (s) and ``sign`` = base64(HMAC-SHA256(key="<timestamp>\\n<secret>",
  msg="")) in the body.
- Generic JSON: the event as JSON; ``X-Gpupool-Timestamp: <unix s>`` and
  ``X-Gpupool-Signature: sha256=<hex HMAC-SHA256(key=secret, msg="<timestamp>.<body>")>``.

Vendors answer HTTP 200 with an error in the body (DingTalk and WeCom ``errcode``, Feishu
``code``): ``vendor_error`` finds it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote_plus, urlsplit, urlunsplit

KINDS = ("wecom", "dingtalk", "feishu", "json")
SIGNATURE_HEADER = "X-Gpupool-Signature"
TIMESTAMP_HEADER = "X-Gpupool-Timestamp"
EVENT_HEADER = "X-Gpupool-Event"


@dataclass(frozen=True, slots=True)
class Event:
    """One notification as a webhook tells it, already in the hook's language."""

    event_id: str
    title: str
    text: str
    link: str = ""
    link_label: str = "Open"
    topic: str = "other"
    project: str = ""
    recipient: str = ""
    created_at: str = ""
    language: str = "en"
    test: bool = False


@dataclass(frozen=True, slots=True)
class Outgoing:
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """The ``sign`` query parameter, URL-encoded as DingTalk documents it."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


def feishu_sign(secret: str, timestamp_s: int) -> str:
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def json_signature(secret: str, timestamp_s: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), str(timestamp_s).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def _markdown(event: Event) -> str:
    text = f"**{event.title}**\n\n{event.text}"
    return f"{text}\n\n[{event.link_label}]({event.link})" if event.link else text


def _dumps(payload: dict) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def build(kind: str, url: str, event: Event, *, secret: str, now_s: float) -> Outgoing:
    """The request a hook of ``kind`` sends for ``event`` at ``now_s`` (unix seconds)."""
    headers = {"Content-Type": "application/json; charset=utf-8"}
    if kind == "wecom":
        body = _dumps({"msgtype": "markdown", "markdown": {"content": _markdown(event)}})
        return Outgoing(url, body, headers)
    if kind == "dingtalk":
        body = _dumps({"msgtype": "markdown", "markdown": {"title": event.title, "text": _markdown(event)}})
        if secret:
            ts = int(now_s * 1000)
            # ``sign`` is already URL-encoded; appended as is so it is not encoded twice.
            url = f"{url}{'&' if urlsplit(url).query else '?'}timestamp={ts}&sign={dingtalk_sign(secret, ts)}"
        return Outgoing(url, body, headers)
    if kind == "feishu":
        text = f"{event.title}\n{event.text}" + (f"\n{event.link}" if event.link else "")
        payload: dict = {"msg_type": "text", "content": {"text": text}}
        if secret:
            ts = int(now_s)
            payload = {"timestamp": str(ts), "sign": feishu_sign(secret, ts), **payload}
        return Outgoing(url, _dumps(payload), headers)
    if kind == "json":
        body = _dumps({
            "event": "test" if event.test else "notification",
            "id": event.event_id,
            "topic": event.topic,
            "title": event.title,
            "text": event.text,
            "link": event.link,
            "project": event.project,
            "recipient": event.recipient,
            "created_at": event.created_at,
            "language": event.language,
        })
        ts = int(now_s)
        headers = {**headers, EVENT_HEADER: event.event_id, TIMESTAMP_HEADER: str(ts)}
        if secret:
            headers[SIGNATURE_HEADER] = json_signature(secret, ts, body)
        return Outgoing(url, body, headers)
    raise ValueError(f"unknown webhook kind {kind!r}")


def vendor_error(kind: str, body: bytes) -> str:
    """The error a vendor reported inside a 2xx answer, or "" when it reports success."""
    if kind == "json":
        return ""
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        return "" if kind == "wecom" and not body else f"not JSON: {body[:100]!r}"
    if not isinstance(answer, dict):
        return f"unexpected answer: {str(answer)[:100]}"
    code_key, message_key = ("code", "msg") if kind == "feishu" else ("errcode", "errmsg")
    if kind == "feishu" and code_key not in answer and "StatusCode" in answer:  # the older answer shape
        code_key, message_key = "StatusCode", "StatusMessage"
    code = answer.get(code_key, 0)
    return "" if code in (0, "0") else f"{code_key} {code}: {answer.get(message_key, '')}"[:200]


def masked_url(url: str) -> str:
    """The URL to show back: robot keys and tokens (query values, long path segments) cut short."""
    parts = urlsplit(url)
    path = "/".join(_cut(p) for p in parts.path.split("/"))
    query = "&".join(f"{k}={_cut(v)}" for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], path, query, ""))


def _cut(value: str) -> str:
    return value[:4] + "…" if len(value) >= 16 else value
