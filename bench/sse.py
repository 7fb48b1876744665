"""Server-sent events of an OpenAI-style streamed response, for the API benchmarks (stdlib only)."""

import json


def sse_json_events(response):
    """Yields each `data: {...}` event's parsed JSON as it arrives (the final [DONE] is skipped).

    `response` is an http.client.HTTPResponse; reading with read1 hands over each event as soon as
    the server sends it, so the caller can time it.
    """
    buf = b""
    while True:
        data = response.read1(65536)
        if not data:
            return
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event[6:] == b"[DONE]":
                continue
            yield json.loads(event[6:])
