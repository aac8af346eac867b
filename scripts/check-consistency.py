#!/usr/bin/env python3
"""Independent check of verdict's audit checkpoints and consistency proofs.

Reads the JSON that `cargo run --example audit_vectors` writes and checks,
with nothing but hashlib and cryptography (no code shared with the Rust
implementation):

- every checkpoint note is signed by the log's Ed25519 key (C2SP signed-note,
  key id = SHA-256(name || 0x0A || 0x01 || key)[:4]) and its root is the
  RFC 6962 Merkle tree hash of the first N record hashes;
- every consistency proof verifies (RFC 9162 section 2.1.4.2);
- flipping one bit of any hash in a non-empty proof makes it fail.

Usage: scripts/check-consistency.py VECTORS.json   (exit 0 ok, 1 failure)
"""
import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def sha256(b):
    return hashlib.sha256(b).digest()


def leaf(data):
    return sha256(b"\x00" + data)


def node(left, right):
    return sha256(b"\x01" + left + right)


def mth(leaves):
    """RFC 6962 section 2.1: MTH of a list of leaf inputs' hashes."""
    n = len(leaves)
    if n == 0:
        return sha256(b"")
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node(mth(leaves[:k]), mth(leaves[k:]))


def verify_consistency(first, second, first_root, second_root, proof):
    """RFC 9162 section 2.1.4.2."""
    if first == second:
        return not proof and first_root == second_root
    if first == 0 or first > second or not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node(c, fr)
            sr = node(c, sr)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0


def check_note(note, origin, public_key):
    """Returns (size, root) of a checkpoint note signed by the log's key."""
    text, _, sigs = note.rpartition("\n\n")
    text += "\n"
    key_id = sha256(origin.encode() + b"\n\x01" + public_key)[:4]
    verifier = Ed25519PublicKey.from_public_bytes(public_key)
    signed = False
    for line in sigs.splitlines():
        name, _, blob = line.removeprefix("\u2014 ").partition(" ")
        raw = base64.b64decode(blob)
        if name == origin and raw[:4] == key_id:
            verifier.verify(raw[4:], text.encode())  # raises InvalidSignature
            signed = True
    if not signed:
        raise ValueError("no signature by the log's key")
    lines = text.split("\n")
    if lines[0] != origin:
        raise ValueError(f"origin {lines[0]!r}")
    return int(lines[1]), base64.b64decode(lines[2])


def main(path):
    v = json.load(open(path))
    origin, pk = v["origin"], base64.b64decode(v["public_key"])
    record_hashes = [bytes.fromhex(h.removeprefix("sha256:")) for h in v["leaves"]]
    leaves = [leaf(h) for h in record_hashes]
    failures = 0
    roots = {}
    for size_text, note in v["checkpoints"].items():
        try:
            size, root = check_note(note, origin, pk)
        except (ValueError, InvalidSignature) as e:
            print(f"FAIL checkpoint {size_text}: {e!r}")
            failures += 1
            continue
        if size != int(size_text) or root != mth(leaves[:size]):
            print(f"FAIL checkpoint {size_text}: root is not the MTH of {size} records")
            failures += 1
        roots[size] = root
    flips = 0
    for p in v["proofs"]:
        m, n = p["first"], p["second"]
        proof = [base64.b64decode(h) for h in p["proof"]]
        if not verify_consistency(m, n, roots[m], roots[n], proof):
            print(f"FAIL proof {m} -> {n} does not verify")
            failures += 1
        for i in range(len(proof)):
            bad = list(proof)
            bad[i] = bytes([bad[i][0] ^ 1]) + bad[i][1:]
            flips += 1
            if verify_consistency(m, n, roots[m], roots[n], bad):
                print(f"FAIL proof {m} -> {n} with hash {i} flipped still verifies")
                failures += 1
    print(
        f"{len(roots)} checkpoints, {len(v['proofs'])} consistency proofs, "
        f"{flips} flipped proofs checked; {failures} failures"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
