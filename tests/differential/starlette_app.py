"""A deliberately forgiving Starlette upstream for tests/differential.rs.

It routes the way the most lenient frameworks do (percent-decoding, `\\` as
`/`, `;` path parameters cut off, trailing dots and spaces trimmed, any
extension dropped, case-insensitive), honours method overrides (headers,
`_method` in the query or a form body), reads `amount` from JSON (keys bound
case-insensitively, the last one winning) or from a form, and coerces it the
way pydantic and Python's int() would. Every call that reaches a gated
handler is appended to the JSON-lines log named by DIFF_LOG, with the
decision header verdict added, so the test can check that no gated handler
ever ran undecided.

Usage: python starlette_app.py PORT
"""
import json
import os
import re
import sys
import unicodedata
from urllib.parse import unquote, parse_qs

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

LOG = os.environ["DIFF_LOG"]


def normalise(raw_path):
    path = raw_path
    for _ in range(3):
        path = unquote(path)
    path = path.replace("\\", "/")
    segs = []
    for seg in path.split("/"):
        seg = seg.split(";")[0].strip().rstrip(". \t")
        if seg in ("", "."):
            continue
        if seg == "..":
            if segs:
                segs.pop()
            continue
        segs.append(seg.lower())
    if segs:
        segs[-1] = re.sub(r"\.[A-Za-z0-9]+$", "", segs[-1])
    return "/" + "/".join(segs)


def coerce(value):
    if isinstance(value, list) and value:
        value = value[-1]
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        text = unicodedata.normalize("NFKC", value).strip().replace(",", "").lstrip("$")
        try:
            return int(text, 0)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def last_key(obj, key):
    found = None
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.lower() == key:
                found = v
    return found


async def handle(request: Request):
    raw_path = request.scope.get("raw_path", b"").decode("latin-1") or request.url.path
    path = normalise(raw_path)
    method = request.method.upper()
    for h in ("x-http-method-override", "x-http-method", "x-method-override"):
        if h in request.headers:
            method = request.headers[h].upper()
    query = parse_qs(request.url.query)
    for k, v in query.items():
        if k.lower() == "_method":
            method = v[-1].upper()
    body = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    data = {}
    if ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        data = {k: form.getlist(k)[-1] for k in form.keys()}
        if "_method" in data:
            method = str(data["_method"]).upper()
    else:
        try:
            # Duplicate keys: the last one wins, as in Python's json module.
            data = json.loads(body) if body else {}
        except ValueError:
            data = {}
    handler = None
    if re.fullmatch(r"/api/orders/[^/]+/refunds", path) and method == "POST":
        handler = "refund"
    elif re.fullmatch(r"/api/orders/[^/]+", path) and method == "DELETE":
        handler = "delete-order"
    if handler is None:
        return JSONResponse({"ok": True, "handler": None})
    amount = coerce(last_key(data, "amount")) if handler == "refund" else None
    entry = {
        "framework": "starlette",
        "handler": handler,
        "method": request.method,
        "path": raw_path,
        "decision": request.headers.get("x-verdict-decision"),
        "tag": request.headers.get("x-diff-id"),
        "amount": amount,
    }
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")
    return JSONResponse({"ok": True, "handler": handler, "amount": amount})


app = Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
