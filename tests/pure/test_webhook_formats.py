"""The vendors' formats as pure functions (portal/webhook_formats.py): what each kind sends at a
given clock, which answers are vendor errors, and how URLs are shown back."""

import hashlib
import hmac
import json

import pytest

from portal import webhook_formats as f

EVENT = f.Event(event_id="n1-w2", title="T", text="body", link="https://x.example/a/", topic="job")


def test_dingtalk_signs_in_the_query_and_keeps_existing_parameters():
    out = f.build("dingtalk", "https://oapi.dingtalk.com/robot/send?access_token=abc", EVENT, secret="SEC",
                  now_s=1700000000.5)
    assert out.url.startswith("https://oapi.dingtalk.com/robot/send?access_token=abc&timestamp=1700000000500&sign=")
    assert out.url.endswith(f.dingtalk_sign("SEC", 1700000000500))
    assert json.loads(out.body)["markdown"] == {"title": "T", "text": "**T**\n\nbody\n\n[Open](https://x.example/a/)"}


def test_unsigned_robots_send_no_signature():
    assert "sign" not in f.build("dingtalk", "https://d/robot?t=1", EVENT, secret="", now_s=1).url
    assert "sign" not in json.loads(f.build("feishu", "https://f/hook/x", EVENT, secret="", now_s=1).body)


def test_json_signature_covers_timestamp_and_raw_body():
    out = f.build("json", "https://r/in", EVENT, secret="k", now_s=1700000000)
    mac = hmac.new(b"k", b"1700000000." + out.body, hashlib.sha256).hexdigest()
    assert out.headers[f.SIGNATURE_HEADER] == "sha256=" + mac
    assert out.headers[f.TIMESTAMP_HEADER] == "1700000000" and out.headers[f.EVENT_HEADER] == "n1-w2"


@pytest.mark.parametrize(("kind", "body", "error"), [
    ("wecom", b'{"errcode":0,"errmsg":"ok"}', ""),
    ("wecom", b'{"errcode":93000,"errmsg":"invalid webhook url"}', "errcode 93000: invalid webhook url"),
    ("dingtalk", b'{"errcode":310000,"errmsg":"sign not match"}', "errcode 310000: sign not match"),
    ("feishu", b'{"code":0,"msg":"success"}', ""),
    ("feishu", b'{"StatusCode":0,"StatusMessage":"success"}', ""),
    ("feishu", b'{"code":19021,"msg":"sign match fail"}', "code 19021: sign match fail"),
    ("feishu", b"<html>", "not JSON: b'<html>'"),
    ("json", b"anything", ""),
])
def test_vendor_errors_in_2xx_answers(kind, body, error):
    assert f.vendor_error(kind, body) == error


@pytest.mark.parametrize(("url", "shown"), [
    ("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7xxx-4bc4-97a0-0ec2sifa5aaa",
     "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a…"),
    ("https://open.feishu.cn/open-apis/bot/v2/hook/0123456789abcdef0123", "https://open.feishu.cn/open-apis/bot/v2/hook/0123…"),
    ("https://u:p@relay.example/in?x=1", "https://relay.example/in?x=1"),
])
def test_urls_are_shown_with_keys_cut_short(url, shown):
    assert f.masked_url(url) == shown
