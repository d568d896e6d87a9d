"""Drives the official Segment Python SDK (segment-analytics-python) as a user would, for
test/ingest/sdk-python.test.ts.

Reads one JSON object on stdin:
  {"host": "http://127.0.0.1:1234", "writeKey": "...", "options": {"gzip": true, ...},
   "calls": [{"method": "track", "kwargs": {"user_id": "u", "event": "E"}}, ...]}
`options` are set as module attributes (analytics.gzip = True, ...) before the first call.

Makes the calls through the module-level API, then analytics.shutdown(), and prints on stdout a
JSON report: the SDK's name and version, each call's return value (the message as the SDK queued
it), every HTTP request the SDK made with the answer it got (recorded with a `requests` response
hook on the SDK's own session, so nothing the SDK sends is changed), and every on_error report.
"""

import gzip
import json
import sys
import threading

import segment.analytics as analytics
from segment.analytics import request as sdk_request


def decode_body(body, encoding):
    """The request body as JSON, gunzipped first if the SDK compressed it."""
    if body is None:
        return None
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    return json.loads(raw.decode("utf-8"))


def main():
    instructions = json.load(sys.stdin)
    lock = threading.Lock()
    requests_seen = []
    errors = []

    def record_response(response, *_args, **_kwargs):
        sent = response.request
        headers = dict(sent.headers)
        body = sent.body
        entry = {
            "method": sent.method,
            "url": sent.url,
            "headers": headers,
            "bodyBytes": len(body.encode("utf-8") if isinstance(body, str) else body or b""),
            "body": decode_body(body, headers.get("Content-Encoding")),
            "status": response.status_code,
            "responseHeaders": dict(response.headers),
            "responseText": response.text,
        }
        with lock:
            requests_seen.append(entry)
        return response

    # The SDK posts through this module-level requests.Session; a response hook only observes.
    sdk_request._session.hooks["response"].append(record_response)

    def on_error(error, batch):
        report = {
            "type": type(error).__name__,
            "text": str(error),
            "messageIds": [item.get("messageId") for item in batch],
        }
        for attr in ("status", "code", "message"):
            if hasattr(error, attr):
                report[attr] = getattr(error, attr)
        with lock:
            errors.append(report)

    analytics.write_key = instructions["writeKey"]
    analytics.host = instructions["host"]
    analytics.on_error = on_error
    for name, value in instructions.get("options", {}).items():
        if not hasattr(analytics, name):
            raise SystemExit(f"send.py: segment.analytics has no option {name!r}")
        setattr(analytics, name, value)

    calls = []
    for call in instructions["calls"]:
        success, message = getattr(analytics, call["method"])(**call["kwargs"])
        calls.append({"method": call["method"], "queued": success, "message": message})

    analytics.shutdown()

    json.dump(
        {
            "sdk": {"name": "analytics-python", "version": analytics.VERSION},
            "calls": calls,
            "requests": requests_seen,
            "errors": errors,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
