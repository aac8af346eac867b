#![allow(clippy::unwrap_used)]

use super::*;
use crate::audit::merkle::{consistency_proof, leaf_hash, range_hash, MemoryHashes};

const ORIGIN: &str = "verdict.test/log";

struct Log {
    key: Ed25519KeyPair,
    leaves: Vec<Hash>,
}

impl Log {
    fn new(tag: &str, n: u64) -> Log {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let mut log = Log {
            key: Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap(),
            leaves: Vec::new(),
        };
        log.grow(tag, n);
        log
    }

    fn grow(&mut self, tag: &str, n: u64) {
        for i in 0..n {
            let at = self.leaves.len();
            self.leaves
                .push(leaf_hash(format!("{tag}-{at}-{i}").as_bytes()));
        }
    }

    fn vkey(&self) -> String {
        note::verifier_key(ORIGIN, self.key.public_key().as_ref())
    }

    fn root(&self, size: u64) -> Hash {
        let (mut m, _) = MemoryHashes::from_leaves(&self.leaves);
        range_hash(&mut m, 0, size).unwrap()
    }

    fn checkpoint(&self, size: u64) -> String {
        let body = Checkpoint {
            origin: ORIGIN.into(),
            size,
            root: self.root(size),
        }
        .body();
        note::sign(
            &body,
            &[note::Signer {
                name: ORIGIN,
                key: &self.key,
            }],
        )
    }

    /// An `add-checkpoint` body from `old` to `new`.
    fn request(&self, old: u64, new: u64) -> String {
        let mut out = format!("old {old}\n");
        if old > 0 && old < new {
            let (mut m, _) = MemoryHashes::from_leaves(&self.leaves);
            for h in consistency_proof(&mut m, old, new).unwrap() {
                out.push_str(&B64.encode(h));
                out.push('\n');
            }
        }
        out.push('\n');
        out.push_str(&self.checkpoint(new));
        out
    }
}

fn witness(dir: &Path, log: &Log) -> Witness {
    let trusted = TrustedLog::from_vkeys(&[log.vkey()]).unwrap();
    Witness::open(dir, "verdict.test/witness", vec![trusted]).unwrap()
}

fn cosignature_verifies(w: &Witness, log: &Log, size: u64, line: &str) {
    let (name, pk) = cosign::parse_verifier_key(&w.vkey()).unwrap();
    let note = log.checkpoint(size);
    let body = note::parse(&note).unwrap().text.to_string();
    let got = cosign::verify_lines(&body, line, &name, &pk).unwrap();
    assert_eq!(got.len(), 1, "{line}");
}

#[test]
fn a_witness_cosigns_a_log_that_only_grows() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::new("a", 5);
    let w = witness(dir.path(), &log);
    let line = w.add_checkpoint(&log.request(0, 5), 100).unwrap();
    cosignature_verifies(&w, &log, 5, &line);
    log.grow("a", 9);
    for (old, new) in [(5, 6), (6, 6), (6, 14)] {
        let line = w.add_checkpoint(&log.request(old, new), 101).unwrap();
        cosignature_verifies(&w, &log, new, &line);
    }
    assert_eq!(w.cosigned_size(ORIGIN).unwrap(), 14);

    // The state survives a restart, key included.
    let vkey = w.vkey();
    drop(w);
    let w = witness(dir.path(), &log);
    assert_eq!(w.vkey(), vkey);
    assert_eq!(w.cosigned_size(ORIGIN).unwrap(), 14);
}

#[test]
fn a_forked_log_is_refused_and_a_consistent_one_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::new("a", 8);
    let w = witness(dir.path(), &log);
    w.add_checkpoint(&log.request(0, 8), 1).unwrap();

    // The same key, the same first 6 leaves, then other ones: a fork.
    let mut fork = Log::new("unused", 0);
    fork.leaves = log.leaves[..6].to_vec();
    fork.grow("fork", 6);
    std::mem::swap(&mut fork.key, &mut log.key);
    // The fork from the witness's size 8 to 12: its proof cannot verify
    // against the root the witness holds.
    assert_eq!(
        w.add_checkpoint(&fork.request(8, 12), 2),
        Err(Refusal::BadProof)
    );
    // A fork at the same size is a conflict.
    assert_eq!(
        w.add_checkpoint(&fork.request(8, 8), 2),
        Err(Refusal::Conflict { cosigned: 8 })
    );
    assert_eq!(w.cosigned_size(ORIGIN).unwrap(), 8);

    // The real log, grown consistently, is still accepted.
    std::mem::swap(&mut fork.key, &mut log.key);
    log.grow("a", 4);
    w.add_checkpoint(&log.request(8, 12), 3).unwrap();
    assert_eq!(w.cosigned_size(ORIGIN).unwrap(), 12);
}

#[test]
fn refusals_follow_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new("a", 10);
    let w = witness(dir.path(), &log);
    w.add_checkpoint(&log.request(0, 4), 1).unwrap();

    // A stale or unknown old size: 409 with the cosigned size.
    assert_eq!(
        w.add_checkpoint(&log.request(0, 10), 1),
        Err(Refusal::Conflict { cosigned: 4 })
    );
    assert_eq!(
        w.add_checkpoint(&log.request(3, 10), 1),
        Err(Refusal::Conflict { cosigned: 4 })
    );
    // old above the checkpoint's size: 400.
    assert!(matches!(
        w.add_checkpoint(&log.request(4, 10).replacen("old 4", "old 11", 1), 1),
        Err(Refusal::Malformed(_))
    ));
    // Another key for the same origin: 403.
    let stranger = Log::new("a", 10);
    assert_eq!(
        w.add_checkpoint(&stranger.request(4, 10), 1),
        Err(Refusal::Forbidden)
    );
    // A flipped proof hash: 422.
    let good = log.request(4, 10);
    let mut lines: Vec<String> = good.split('\n').map(str::to_string).collect();
    let mut raw = B64.decode(&lines[1]).unwrap();
    raw[0] ^= 1;
    lines[1] = B64.encode(raw);
    assert_eq!(
        w.add_checkpoint(&lines.join("\n"), 1),
        Err(Refusal::BadProof)
    );
    // Unknown origin: 404.
    let other = log.request(4, 10).replace(ORIGIN, "verdict.test/other");
    assert!(matches!(
        w.add_checkpoint(&other, 1),
        Err(Refusal::UnknownOrigin(_))
    ));
    // Not the protocol: 400.
    for body in ["", "old 4\n", "old 04\n\nx", "old 4\nnot base64\n\nx"] {
        assert!(
            matches!(w.add_checkpoint(body, 1), Err(Refusal::Malformed(_))),
            "{body:?}"
        );
    }
    assert_eq!(w.cosigned_size(ORIGIN).unwrap(), 4);
    w.add_checkpoint(&good, 1).unwrap();
}

#[test]
fn every_answer_is_counted_by_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::new("a", 10);
    let w = witness(dir.path(), &log);
    w.add_checkpoint(&log.request(0, 6), 1).unwrap();
    assert_eq!(
        w.add_checkpoint(&log.request(0, 10), 1),
        Err(Refusal::Conflict { cosigned: 6 })
    );
    // The log's key over other leaves after the first 4: a fork, at the
    // witness's size and past it.
    let mut fork = Log::new("unused", 0);
    fork.leaves = log.leaves[..4].to_vec();
    fork.grow("fork", 6);
    std::mem::swap(&mut fork.key, &mut log.key);
    assert_eq!(
        w.add_checkpoint(&fork.request(6, 6), 1),
        Err(Refusal::Conflict { cosigned: 6 })
    );
    assert_eq!(
        w.add_checkpoint(&fork.request(6, 10), 1),
        Err(Refusal::BadProof)
    );
    std::mem::swap(&mut fork.key, &mut log.key);
    assert_eq!(
        w.add_checkpoint(&fork.request(6, 10), 1),
        Err(Refusal::Forbidden)
    );
    let other = log.request(6, 10).replace(ORIGIN, "verdict.test/other");
    assert!(matches!(
        w.add_checkpoint(&other, 1),
        Err(Refusal::UnknownOrigin(_))
    ));
    assert!(matches!(
        w.add_checkpoint("old 1\n", 1),
        Err(Refusal::Malformed(_))
    ));
    w.record_unreadable("body too large");
    w.add_checkpoint(&log.request(6, 10), 1).unwrap();
    for (outcome, n) in [
        ("cosigned", 2),
        ("conflict", 2),
        ("bad_proof", 1),
        ("forbidden", 1),
        ("unknown_origin", 1),
        ("malformed", 2),
        ("storage_failed", 0),
    ] {
        assert_eq!(w.requests(outcome), n, "{outcome}");
    }
    let mut registry = Registry::default();
    w.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("verdict_witness_requests_total{outcome=\"bad_proof\"} 1"),
        "{text}"
    );
}
