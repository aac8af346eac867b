#!/usr/bin/env python3
"""Verify a verdict audit proof offline, sharing no code with verdict.

usage: verify-proof.py PROOF.json KEY.json [RECORD.json]
  PROOF  = GET /v2/audit/{record_id}/proof   KEY = GET /v2/audit/keys/{kid}
  RECORD = GET /v2/audit/{record_id} (the bytes as served: canonical JSON)
Prints "ok" and exits 0, or names the failed check and exits 1.
Needs `cryptography` (pip install cryptography) for Ed25519.
"""
import base64, hashlib, json, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

H = lambda b: hashlib.sha256(b).digest()
unhex = lambda s: bytes.fromhex(s.removeprefix("sha256:"))
proof, key = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
if len(sys.argv) > 3:  # the record is the one proven: sha256 of its canonical bytes
    assert H(open(sys.argv[3], "rb").read()) == unhex(proof["record_hash"]), "record_hash"
h = H(b"\x00" + unhex(proof["record_hash"]))  # RFC 6962 leaf hash
for step in proof["proof"]:  # the audit path, each sibling with its side
    sib = unhex(step["hash"])
    h = H(b"\x01" + sib + h) if step["position"] == "left" else H(b"\x01" + h + sib)
assert h == unhex(proof["merkle_root"]), "inclusion path does not reach merkle_root"
note = proof["checkpoint"]  # C2SP signed note: origin, size, root; blank line; signatures
body = note[: note.index("\n\n") + 1]
origin, size, root = body.splitlines()
assert int(size) == proof["tree_size"] and base64.b64decode(root) == h, "checkpoint"
pk = base64.urlsafe_b64decode(key["x"] + "==")
kid = hashlib.sha256(('{"crv":"Ed25519","kty":"OKP","x":"%s"}' % key["x"]).encode()).digest()
assert base64.urlsafe_b64encode(kid).rstrip(b"=").decode() == proof["key_id"], "key_id"
Ed25519PublicKey.from_public_bytes(pk).verify(base64.b64decode(proof["signature"]), body.encode())
print("ok")
