"""The FastAPI upstream of tests/differential.rs.

A refund service in the style the outside tester modelled: FastAPI routes,
a pydantic model with `amount: int` (lax coercion), form bodies accepted and
method overrides honoured the way a common middleware does. It is made
deliberately MORE lenient than real frameworks, so that the differential test
is stricter than real life:

* routing percent-decodes the path (up to three times), folds it to NFKC,
  takes `\\` as `/`, drops `;params`, control characters (NUL, tab, CR, LF),
  empty segments and a trailing `.`/space/extension (`refunds.json`), resolves
  `.` and `..` and ignores case, and accepts an absolute-form target; the
  method is case-folded too;
* a POST's `_method` is honoured from a header, the query, a form field,
  or a JSON body whatever its Content-Type (as Flask's
  `get_json(force=True)` reads it);
* the amount it would refund is read from JSON when every Content-Type
  header says JSON, and otherwise (form, text/plain, multipart, none, two
  of them) from the body read BOTH as JSON and as a form, with every key
  spelled `amount` in any case; each candidate is coerced the friendliest
  way (`"6_000"`, `"0x1770"`, `"$6000"`, full-width digits, `[6000]`,
  `{"value": 6000}`, `true`) and the LARGEST one wins.

Every request is written as one JSON line to the file named by `DIFF_LOG`
before the answer is sent, so once the sidecar has answered a call the line
is on disk. The first line on stdout is `LISTENING <port>` (the port is
picked by the kernel on 127.0.0.1).
"""

import json
import math
import os
import re
import socket
import unicodedata
import urllib.parse

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

LOG = os.environ["DIFF_LOG"]
NAME = "fastapi"
OVERRIDE_HEADERS = ("x-http-method-override", "x-http-method", "x-method-override")
# Only this many bytes of a body are kept in the log line.
BODY_LOG_LIMIT = 4096


class Refund(BaseModel):
    """What a FastAPI refund endpoint would declare as its body."""

    amount: int
    currency: str | None = None


# === lenient path routing ===


def normalize_path(raw: str) -> str:
    """The path the lenient router routes on (see the module doc)."""
    p = raw.split("#", 1)[0]
    m = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/\\]*", p)
    if m:
        p = p[m.end():]
    for _ in range(3):
        q = urllib.parse.unquote(p)
        if q == p:
            break
        p = q
    p = unicodedata.normalize("NFKC", p).replace("\\", "/")
    out = []
    for seg in p.split("/"):
        seg = seg.split(";", 1)[0]
        seg = "".join(ch for ch in seg if ch.isprintable())
        if seg == ".":
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        seg = seg.rstrip(" .")
        seg = re.sub(r"\.[A-Za-z0-9]{1,5}$", "", seg)
        if seg:
            out.append(seg.lower())
    return "/" + "/".join(out)


class LenientPaths:
    """ASGI middleware: routes on [`normalize_path`] of the raw target."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            scope = dict(scope)
            raw = scope.get("raw_path") or scope["path"].encode()
            raw = raw.decode("latin-1")
            scope["diff.raw_target"] = raw
            path = normalize_path(raw)
            scope["path"] = path
            scope["raw_path"] = path.encode("utf-8")
        await self.app(scope, receive, send)


class MethodOverride:
    """ASGI middleware: a POST may say it is another method, through a header
    (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override), `?_method=`
    or a `_method` form field, as method-override middlewares do."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope = dict(scope)
        scope["diff.wire_method"] = scope["method"]
        scope["method"] = scope["method"].upper()
        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        # Buffer the body (the server bounds it) so a form field can count,
        # then replay it to the app.
        body = b""
        for _ in range(100_000):
            msg = await receive()
            if msg["type"] != "http.request":
                break
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
        override = None
        for name in OVERRIDE_HEADERS:
            override = override or next((v for k, v in headers if k == name), None)
        query = dict(urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        override = override or query.get("_method")
        if not override and any("x-www-form-urlencoded" in v.lower() for k, v in headers if k == "content-type"):
            form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
            override = form.get("_method")
        if not override:
            # Like Flask's get_json(force=True): the body read as JSON whatever
            # the media type (json.loads on bytes detects UTF-8/16/32).
            try:
                doc = json.loads(body)
            except (ValueError, UnicodeDecodeError):
                doc = None
            if isinstance(doc, dict):
                override = next(
                    (v for k, v in doc.items() if isinstance(v, str) and k.strip().lower() == "_method"),
                    None,
                )
        if override and override.strip():
            scope["method"] = override.strip().upper()
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# === lenient body reading ===


def lenient_number(v, depth=0):
    """The number a friendly coercion reads from `v`, or None."""
    if depth > 4 or v is None:
        return None
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, list):
        nums = [n for n in (lenient_number(x, depth + 1) for x in v) if n is not None]
        return max(nums) if nums else None
    if isinstance(v, dict):
        for k, x in v.items():
            if k.strip().lower() in ("value", "amount"):
                return lenient_number(x, depth + 1)
        return None
    if isinstance(v, str):
        s = unicodedata.normalize("NFKC", v).strip().lstrip("$€£")
        s = re.sub(r"[,_\s]", "", s)
        try:
            return int(s, 0)
        except ValueError:
            pass
        try:
            return float(s)
        except ValueError:
            pass
        m = re.match(r"[+-]?\d+(\.\d+)?", s)
        if m:
            return float(m.group())
    return None


def json_number(n):
    """A number for the log line: integral floats as ints, inf/nan as text."""
    if n is None:
        return None
    if isinstance(n, float):
        if math.isinf(n) or math.isnan(n):
            return str(n).replace("inf", "Infinity").replace("nan", "NaN")
        if n.is_integer():
            return int(n)
    return n


class Pairs(dict):
    """A JSON object (last key wins, as `json` does) that keeps its pairs."""

    pairs = ()


def parse_json(text, ambiguous):
    def hook(pairs):
        seen = {}
        for k, _ in pairs:
            norm = k.strip().lower()
            if norm in seen:
                ambiguous.append(f"duplicate key {seen[norm]!r}/{k!r}")
            seen[norm] = k
        obj = Pairs(pairs)
        obj.pairs = pairs
        return obj

    return json.loads(text, object_pairs_hook=hook)


async def read_refund(request: Request, body: bytes):
    """(source, top-level pairs, last-wins dict, ambiguity notes).

    A body whose every Content-Type says JSON (and none says form) is read
    as JSON. Any other body (form, text/plain, multipart, octet-stream, no
    content type, two content types) is read BOTH ways, as some framework
    somewhere does, and the pairs of both count."""
    cts = [v.lower() for k, v in request.headers.items() if k.lower() == "content-type"]
    text = body.decode("utf-8", "replace")
    ambiguous = []
    json_pairs, json_dict = None, {}
    try:
        obj = parse_json(text, ambiguous)
        json_pairs = list(obj.pairs) if isinstance(obj, Pairs) else []
        json_dict = dict(obj) if isinstance(obj, Pairs) else {}
    except ValueError:
        ambiguous.clear()
    json_only = bool(cts) and all("json" in ct and "form" not in ct for ct in cts)
    if json_only and json_pairs is not None:
        return "json", json_pairs, json_dict, ambiguous
    form_pairs = urllib.parse.parse_qsl(text, keep_blank_values=True)
    source = "form"
    if any("multipart/form-data" in ct for ct in cts):
        try:
            form = await request.form()
            multipart = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
            if multipart:
                form_pairs, source = multipart, "multipart"
        except Exception:  # noqa: BLE001 - a lenient reader reads on
            pass
    if json_pairs is None:
        return source, form_pairs, dict(form_pairs), ambiguous
    # What a JSON-first framework would validate natively: the JSON.
    return "json+" + source, json_pairs + form_pairs, json_dict, ambiguous


# === the app ===

app = FastAPI()


def log(request: Request, handler: str, body: bytes, **extra):
    scope = request.scope
    line = {
        "upstream": NAME,
        "corpus_id": request.headers.get("x-corpus-id"),
        "handler": handler,
        "wire_method": scope.get("diff.wire_method", scope["method"]),
        "method": scope["method"],
        "raw_target": scope.get("diff.raw_target"),
        "query": scope.get("query_string", b"").decode("latin-1"),
        "routed_path": scope["path"],
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
        "body": body[:BODY_LOG_LIMIT].decode("utf-8", "replace"),
        "decision": request.headers.get("x-verdict-decision"),
        "record_id": request.headers.get("x-verdict-record-id"),
    }
    line.update(extra)
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


@app.post("/api/orders/{order_id}/refunds")
async def refund(order_id: str, request: Request):
    body = await request.body()
    source, pairs, last_wins, ambiguous = await read_refund(request, body)
    candidates = [v for k, v in pairs if k.strip().lower() == "amount"]
    nums = [n for n in (lenient_number(v) for v in candidates) if n is not None]
    amount = max(nums) if nums else None
    try:
        native = Refund.model_validate(last_wins).amount
        native_error = None
    except ValidationError as e:
        native = None
        native_error = e.errors()[0]["msg"] if e.errors() else str(e)
    log(
        request,
        "refund",
        body,
        order_id=order_id,
        amount=json_number(amount),
        amount_source=source,
        native_amount=native,
        native_error=native_error,
        ambiguous=ambiguous,
    )
    return JSONResponse({"status": "executed", "order_id": order_id, "amount": json_number(amount)}, status_code=201)


@app.delete("/api/orders/{order_id}")
async def delete_order(order_id: str, request: Request):
    body = await request.body()
    log(request, "order_delete", body, order_id=order_id)
    return JSONResponse({"status": "deleted", "order_id": order_id})


@app.api_route("/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def catch_all(rest: str, request: Request):
    body = await request.body()
    log(request, "catch_all", body)
    return JSONResponse({"ok": True, "path": "/" + rest})


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(
        LenientPaths(MethodOverride(app)),
        http="h11",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )
    print(f"LISTENING {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
