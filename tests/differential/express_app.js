// The Express upstream of tests/differential.rs.
//
// A refund service written the way many Express services are: express.json()
// and express.urlencoded() body parsers, the method-override middleware
// honouring X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override,
// `?_method=` and a `_method` form field, routes matched on
// `new URL(req.url, 'http://x').pathname`, amounts converted with Number().
// It is made deliberately MORE lenient than that, so that the differential
// test is stricter than real life:
//
// * routing percent-decodes the path (up to three times), folds it to NFKC,
//   takes `\` as `/`, drops `;params`, control characters (NUL, tab, CR, LF),
//   empty segments and a trailing `.`/space/extension (`refunds.json`),
//   resolves `.` and `..` and ignores case (Express routes ignore case too);
// * the amount it would refund is read from JSON when every Content-Type
//   header says JSON, and otherwise (form, text/plain, multipart, none, two
//   of them) from the body read BOTH as JSON and as a form, with every key
//   spelled `amount` in any case; each candidate is coerced the friendliest
//   way (Number() after stripping `$`, `,`, `_`, spaces, NFKC; `[6000]`;
//   `{"value": 6000}`; `true`) and the LARGEST one wins.
//
// Every request is written as one JSON line to the file named by DIFF_LOG
// before the answer is sent. The first line on stdout is `LISTENING <port>`
// (the port is picked by the kernel on 127.0.0.1).
'use strict';

const fs = require('fs');
const express = require('express');
const methodOverride = require('method-override');

const LOG = process.env.DIFF_LOG;
const NAME = 'express';
// Only this many bytes of a body are kept in the log line.
const BODY_LOG_LIMIT = 4096;

// === lenient path routing ===

function percentDecode(s) {
  // Decodes every valid %XX as a byte and reads the bytes as UTF-8 (lossy),
  // where decodeURIComponent would throw on `%ff` or `%`.
  const bytes = [];
  for (let i = 0; i < s.length; i++) {
    const m = /^%([0-9a-fA-F]{2})/.exec(s.slice(i, i + 3));
    if (m) {
      bytes.push(parseInt(m[1], 16));
      i += 2;
    } else {
      for (const b of Buffer.from(s[i], 'utf8')) bytes.push(b);
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

function normalizePath(rawUrl) {
  let p;
  try {
    p = new URL(rawUrl, 'http://x').pathname;
  } catch (e) {
    p = rawUrl.split('?')[0];
  }
  for (let n = 0; n < 3; n++) {
    const q = percentDecode(p);
    if (q === p) break;
    p = q;
  }
  p = p.normalize('NFKC').replace(/\\/g, '/');
  const out = [];
  for (let seg of p.split('/')) {
    seg = seg.split(';')[0];
    // eslint-disable-next-line no-control-regex
    seg = seg.replace(/[\u0000-\u001f\u007f]/g, '');
    if (seg === '.') continue;
    if (seg === '..') {
      out.pop();
      continue;
    }
    seg = seg.replace(/[ .]+$/, '').replace(/\.[A-Za-z0-9]{1,5}$/, '');
    if (seg) out.push(seg.toLowerCase());
  }
  return '/' + out.join('/');
}

// === lenient body reading ===

// A JSON parser that keeps every key of an object (JSON.parse keeps the
// last), so the app can see duplicate and case-variant keys.
// Objects come back as {pairs: [[key, value], ...]}.
function parsePairs(text, ambiguous) {
  let i = 0;
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
  };
  const fail = () => {
    throw new SyntaxError(`bad JSON at ${i}`);
  };
  const str = () => {
    // eslint-disable-next-line no-control-regex
    const m = /^"(?:[^"\\\u0000-\u001f]|\\.)*"/.exec(text.slice(i));
    if (!m) fail();
    i += m[0].length;
    return JSON.parse(m[0]);
  };
  const value = (depth) => {
    if (depth > 64) fail();
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const pairs = [];
      const seen = new Map();
      ws();
      if (text[i] === '}') {
        i++;
        return { pairs };
      }
      for (let n = 0; n < 100000; n++) {
        ws();
        const k = str();
        ws();
        if (text[i++] !== ':') fail();
        const v = value(depth + 1);
        const norm = k.trim().toLowerCase();
        if (seen.has(norm)) ambiguous.push(`duplicate key '${seen.get(norm)}'/'${k}'`);
        seen.set(norm, k);
        pairs.push([k, v]);
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i++] !== '}') fail();
        return { pairs };
      }
      fail();
    }
    if (c === '[') {
      i++;
      const arr = [];
      ws();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (let n = 0; n < 100000; n++) {
        arr.push(value(depth + 1));
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i++] !== ']') fail();
        return arr;
      }
      fail();
    }
    if (c === '"') return str();
    const m = /^(-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i));
    if (!m) fail();
    i += m[0].length;
    return JSON.parse(m[0]);
  };
  const v = value(0);
  ws();
  if (i !== text.length) fail();
  return v;
}

function lenientNumber(v, depth = 0) {
  if (depth > 4 || v === null || v === undefined) return null;
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v === 'number') return v;
  if (Array.isArray(v)) {
    const nums = v.map((x) => lenientNumber(x, depth + 1)).filter((n) => n !== null);
    return nums.length ? Math.max(...nums) : null;
  }
  if (typeof v === 'object' && Array.isArray(v.pairs)) {
    const hit = v.pairs.find(([k]) => ['value', 'amount'].includes(k.trim().toLowerCase()));
    return hit ? lenientNumber(hit[1], depth + 1) : null;
  }
  if (typeof v === 'string') {
    const s = v.normalize('NFKC').trim().replace(/^[$€£]/, '').replace(/[,_\s]/g, '');
    const n = Number(s);
    if (s !== '' && !Number.isNaN(n)) return n;
    const m = /^[+-]?\d+(\.\d+)?/.exec(s);
    if (m) return Number(m[0]);
  }
  return null;
}

// A number for the log line: Infinity and NaN as text (JSON has neither).
const jsonNumber = (n) => (n === null || n === undefined ? null : Number.isFinite(n) ? n : String(n));

function contentTypes(req) {
  const out = [];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i].toLowerCase() === 'content-type') out.push(req.rawHeaders[i + 1].toLowerCase());
  }
  return out;
}
const anyContentType = (req, needle) => contentTypes(req).some((ct) => ct.includes(needle));
const isForm = (req) => anyContentType(req, 'x-www-form-urlencoded');

// A body whose every Content-Type says JSON (and none says form) is read as
// JSON. Any other body (form, text/plain, multipart, octet-stream, no content
// type, two content types) is read BOTH ways, and the pairs of both count.
function readRefund(req) {
  const text = (req.rawBody || Buffer.alloc(0)).toString('utf8');
  let ambiguous = [];
  let jsonPairs = null;
  try {
    const v = parsePairs(text, ambiguous);
    jsonPairs = v && Array.isArray(v.pairs) ? v.pairs : [];
  } catch (e) {
    ambiguous = [];
  }
  const cts = contentTypes(req);
  const jsonOnly = cts.length > 0 && cts.every((ct) => ct.includes('json') && !ct.includes('form'));
  if (jsonOnly && jsonPairs !== null) return { source: 'json', pairs: jsonPairs, ambiguous };
  const formPairs = [...new URLSearchParams(text)];
  if (jsonPairs === null) return { source: 'form', pairs: formPairs, ambiguous };
  return { source: 'json+form', pairs: jsonPairs.concat(formPairs), ambiguous };
}

// === the app ===

function log(req, handler, extra) {
  const headers = [];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.push([req.rawHeaders[i], req.rawHeaders[i + 1]]);
  const line = {
    upstream: NAME,
    corpus_id: req.get('x-corpus-id') || null,
    handler,
    wire_method: req.wireMethod,
    method: req.method,
    raw_target: req.rawTarget,
    query: req.rawTarget.includes('?') ? req.rawTarget.slice(req.rawTarget.indexOf('?') + 1) : '',
    routed_path: req.path,
    headers,
    body: (req.rawBody || Buffer.alloc(0)).subarray(0, BODY_LOG_LIMIT).toString('utf8'),
    decision: req.get('x-verdict-decision') || null,
    record_id: req.get('x-verdict-record-id') || null,
    ...extra,
  };
  fs.appendFileSync(LOG, JSON.stringify(line) + '\n');
}

const keepRaw = (req, res, buf) => {
  req.rawBody = buf;
};

const app = express();
app.disable('x-powered-by');
app.use((req, res, next) => {
  req.wireMethod = req.method;
  req.rawTarget = req.url;
  req.method = req.method.toUpperCase();
  next();
});
app.use(express.urlencoded({ extended: false, type: isForm, verify: keepRaw }));
app.use(express.json({ strict: false, type: (req) => !isForm(req) && anyContentType(req, 'json'), verify: keepRaw }));
app.use(express.raw({ type: () => true, limit: '1mb' }));
// A body the parsers refused still reaches the routes (leniently).
app.use((err, req, res, next) => {
  req.bodyError = String(err && err.message);
  req.body = undefined;
  next();
});
app.use((req, res, next) => {
  if (!req.rawBody && Buffer.isBuffer(req.body)) req.rawBody = req.body;
  next();
});
app.use(methodOverride('X-HTTP-Method-Override'));
app.use(methodOverride('X-HTTP-Method'));
app.use(methodOverride('X-Method-Override'));
app.use(methodOverride('_method'));
app.use(
  methodOverride((req) => (req.body && typeof req.body === 'object' && !Buffer.isBuffer(req.body) ? req.body._method : undefined)),
);
app.use((req, res, next) => {
  const q = req.url.indexOf('?');
  req.url = normalizePath(req.url) + (q >= 0 ? req.url.slice(q) : '');
  next();
});

app.post('/api/orders/:order_id/refunds', (req, res) => {
  const { source, pairs, ambiguous } = readRefund(req);
  const nums = pairs
    .filter(([k]) => k.trim().toLowerCase() === 'amount')
    .map(([, v]) => lenientNumber(v))
    .filter((n) => n !== null);
  const amount = nums.length ? Math.max(...nums) : null;
  const parsed = req.body && typeof req.body === 'object' && !Buffer.isBuffer(req.body) ? req.body : {};
  const native = Number(parsed.amount);
  log(req, 'refund', {
    order_id: req.params.order_id,
    amount: jsonNumber(amount),
    amount_source: source,
    native_amount: jsonNumber(native),
    native_error: req.bodyError || null,
    ambiguous,
  });
  res.status(201).json({ status: 'executed', order_id: req.params.order_id, amount: jsonNumber(amount) });
});

app.delete('/api/orders/:order_id', (req, res) => {
  log(req, 'order_delete', { order_id: req.params.order_id });
  res.json({ status: 'deleted', order_id: req.params.order_id });
});

app.use((req, res) => {
  log(req, 'catch_all', {});
  res.json({ ok: true, path: req.path });
});

const server = app.listen(0, '127.0.0.1', () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
