"""A real HTTP receiver for webhook tests: an ``http.server`` thread on 127.0.0.1 that checks
each vendor's signature exactly as the vendor documents it and answers as the vendor does
(DingTalk/WeCom ``errcode``, Feishu ``code``; the generic JSON hook: 401 on a bad signature or a
replayed timestamp), and records every request.

Paths: ``/wecom``, ``/dingtalk``, ``/feishu``, ``/json`` (anything after them is ignored).
``script[path]``: answers to give first, ``(status, body)`` each, before the vendor's usual one."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

REPLAY_WINDOW_S = 300


@dataclass
class Received:
    kind: str
    path: str
    query: dict
    headers: dict
    raw: bytes
    verified: bool

    @property
    def body(self) -> dict:
        return json.loads(self.raw)


@dataclass
class Receiver:
    secrets: dict[str, str] = field(default_factory=dict)
    script: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    clock: float | None = None  # the receiver's "now" for the JSON replay check (None: real time)
    url: str = ""

    def of(self, kind: str) -> list[Received]:
        return [r for r in self.received if r.kind == kind]

    # --- each vendor's documented check ---------------------------------------------------

    def dingtalk_ok(self, query: dict) -> bool:
        secret = self.secrets.get("dingtalk", "")
        if not secret:
            return "sign" not in query
        ts, sign = query["timestamp"][0], query["sign"][0]  # parse_qs undid the URL-encoding
        expected = base64.b64encode(
            hmac.new(secret.encode(), f"{ts}\n{secret}".encode(), hashlib.sha256).digest()
        ).decode()
        return hmac.compare_digest(sign, expected)

    def feishu_ok(self, body: dict) -> bool:
        secret = self.secrets.get("feishu", "")
        if not secret:
            return "sign" not in body
        key = f"{body['timestamp']}\n{secret}".encode()
        expected = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
        return hmac.compare_digest(body["sign"], expected)

    def json_ok(self, headers: dict, raw: bytes) -> bool:
        secret = self.secrets.get("json", "")
        ts = headers.get("x-gpupool-timestamp", "")
        signature = headers.get("x-gpupool-signature", "")
        if not ts.isdigit() or abs((self.clock or time.time()) - int(ts)) > REPLAY_WINDOW_S:
            return False
        mac = hmac.new(secret.encode(), ts.encode() + b"." + raw, hashlib.sha256).hexdigest()
        return hmac.compare_digest(signature, "sha256=" + mac)

    def answer(self, kind: str, query: dict, headers: dict, raw: bytes) -> tuple[int, bytes, bool]:
        if kind == "wecom":
            ok = "markdown" in json.loads(raw)
            return 200, json.dumps({"errcode": 0 if ok else 40008, "errmsg": "ok"}).encode(), ok
        if kind == "dingtalk":
            ok = self.dingtalk_ok(query)
            out = {"errcode": 0, "errmsg": "ok"} if ok else {"errcode": 310000, "errmsg": "sign not match"}
            return 200, json.dumps(out).encode(), ok
        if kind == "feishu":
            ok = self.feishu_ok(json.loads(raw))
            out = {"code": 0, "msg": "success", "data": {}}
            if not ok:
                out = {"code": 19021, "msg": "sign match fail"}
            return 200, json.dumps(out).encode(), ok
        ok = self.json_ok(headers, raw)
        return (204, b"", ok) if ok else (401, b"bad signature", ok)


def start_receiver(**kwargs) -> tuple[Receiver, ThreadingHTTPServer]:
    receiver = Receiver(**kwargs)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            parts = urlsplit(self.path)
            kind = parts.path.strip("/").split("/")[0]
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            query = parse_qs(parts.query)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, body, ok = receiver.answer(kind, query, headers, raw)
            scripted = receiver.script.get(kind)
            if scripted:
                status, body = scripted.pop(0)
            receiver.received.append(Received(kind, parts.path, query, headers, raw, ok))
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", receiver.url + parts.path)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver, server
