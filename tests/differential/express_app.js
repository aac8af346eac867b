// A deliberately forgiving Express upstream for tests/differential.rs.
//
// Routes on `new URL(req.url).pathname`, percent-decoded, with `\` as `/`,
// `;` parameters cut off, trailing dots and spaces trimmed, any extension
// dropped, case-insensitively; honours method overrides through the
// `method-override` middleware (headers and `_method`); parses JSON and
// forms; converts `amount` with Number(), taking the last key that matches
// case-insensitively. Every call that reaches a gated handler is appended to
// the JSON-lines log named by DIFF_LOG with its decision header.
//
// Usage: node express_app.js PORT
'use strict';
const fs = require('fs');
const express = require('express');
const methodOverride = require('method-override');

const LOG = process.env.DIFF_LOG;
const app = express();
app.use(express.urlencoded({ extended: false }));
app.use(express.text({ type: () => true }));
app.use(methodOverride('X-HTTP-Method-Override'));
app.use(methodOverride('X-HTTP-Method'));
app.use(methodOverride('X-Method-Override'));
app.use(methodOverride('_method'));
app.use(methodOverride((req) => (req.body && typeof req.body === 'object' && req.body._method) || undefined));

function normalise(raw) {
  let path = raw;
  try { path = new URL(raw.replace(/\\/g, '/'), 'http://x').pathname; } catch (e) { path = raw; }
  for (let i = 0; i < 3; i++) { try { path = decodeURIComponent(path); } catch (e) { break; } }
  path = path.replace(/\\/g, '/');
  const segs = [];
  for (let seg of path.split('/')) {
    seg = seg.split(';')[0].trim().replace(/[.\s]+$/, '');
    if (seg === '' || seg === '.') continue;
    if (seg === '..') { segs.pop(); continue; }
    segs.push(seg.toLowerCase());
  }
  if (segs.length) segs[segs.length - 1] = segs[segs.length - 1].replace(/\.[a-z0-9]+$/i, '');
  return '/' + segs.join('/');
}

function lastKey(obj, key) {
  let found;
  if (obj && typeof obj === 'object') {
    for (const k of Object.keys(obj)) if (k.toLowerCase() === key) found = obj[k];
  }
  return found;
}

app.use((req, res) => {
  let data = req.body;
  if (typeof data === 'string') {
    try { data = JSON.parse(data); } catch (e) { data = {}; }
  }
  const path = normalise(req.originalUrl.split('?')[0]);
  const method = req.method.toUpperCase();
  let handler = null;
  if (/^\/api\/orders\/[^/]+\/refunds$/.test(path) && method === 'POST') handler = 'refund';
  else if (/^\/api\/orders\/[^/]+$/.test(path) && method === 'DELETE') handler = 'delete-order';
  if (!handler) return res.json({ ok: true, handler: null });
  let amount = null;
  if (handler === 'refund') {
    let v = lastKey(data, 'amount');
    if (Array.isArray(v)) v = v[v.length - 1];
    if (v && typeof v === 'object') v = v.value;
    if (typeof v === 'string') v = v.normalize('NFKC').replace(/[_,$\s]/g, '');
    const n = Number(v);
    amount = Number.isFinite(n) ? n : null;
  }
  fs.appendFileSync(LOG, JSON.stringify({
    framework: 'express', handler, method: req.originalMethod || req.method, path: req.originalUrl,
    decision: req.headers['x-verdict-decision'] || null, tag: req.headers['x-diff-id'] || null, amount,
  }) + '\n');
  res.json({ ok: true, handler, amount });
});

app.listen(Number(process.argv[2]), '127.0.0.1');
