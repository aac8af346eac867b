//! `verdict witness serve`: a C2SP `tlog-witness` that cosigns the
//! checkpoints of the logs it trusts, and only those consistent with what it
//! cosigned before.
//!
//! A log's own signature cannot show that the log never rolled back: whoever
//! holds its data dir can delete the newest records and checkpoints and go
//! on signing from the shorter tree. A witness remembers, per origin, the
//! largest tree it cosigned, and refuses a checkpoint that is not an
//! extension of it; the log collects its cosignatures and checks at start
//! that it is not behind any of them. The witness is a separate role (its
//! own process, key and data dir), so that it can run where the log's
//! operator cannot reach it.
//!
//! The protocol is `POST /add-checkpoint` with `old <size>`, the consistency
//! proof lines, a blank line and the signed checkpoint; the answer is one
//! cosignature line (`audit::cosign`). Status codes are the spec's: 400 for
//! a malformed request or an old size above the new one, 403 when no
//! trusted signature verifies, 404 for an unknown origin, 409 (with the
//! cosigned size as `text/x.tlog.size`) when the old size is not the one the
//! witness holds or the same size has another root, 422 for a proof that
//! does not verify.
//!
//! Every cosignature and every refusal is one log line (origin, sizes,
//! outcome) and one count in `verdict_witness_requests_total{outcome}`,
//! served at `GET /metrics`: a 422 or a same-size 409 means a log showed
//! the witness a tree that does not extend the one it cosigned, which its
//! operator wants to hear about even if the log's own operator does not.

pub mod remote;

use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::server::ReqBody;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Limited};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use rusqlite::{params, Connection, OptionalExtension as _, TransactionBehavior};

use crate::audit::cosign;
use crate::audit::merkle::{self, Hash};
use crate::audit::note::{self, Checkpoint};
use crate::http::{bytes_response, RespBody};
use crate::server::{ConnInfo, Handler};

/// The largest request body accepted: 63 proof lines and a checkpoint with
/// a few signatures fit in well under this.
const MAX_BODY: usize = 16 * 1024;
/// The spec's limit on consistency proof lines.
const MAX_PROOF: usize = 63;
const KEY_FILE: &str = "witness.key";
const DB_FILE: &str = "witness.db";

/// Why a witness could not start.
#[derive(Debug, thiserror::Error)]
#[error("witness: {0}")]
pub struct WitnessError(pub String);

/// A log the witness cosigns for: its origin and the keys that sign it.
#[derive(Debug, Clone)]
pub struct TrustedLog {
    pub origin: String,
    pub keys: Vec<[u8; 32]>,
}

impl TrustedLog {
    /// From the log's verifier keys (`verdict audit` prints them as
    /// `vkey`); every key must name the same origin.
    pub fn from_vkeys(vkeys: &[String]) -> Result<TrustedLog, WitnessError> {
        let mut origin: Option<String> = None;
        let mut keys = Vec::new();
        for v in vkeys {
            let (name, pk) = note::parse_verifier_key(v)
                .map_err(|e| WitnessError(format!("log key {v:?}: {e}")))?;
            if origin.as_ref().is_some_and(|o| *o != name) {
                return Err(WitnessError(format!(
                    "log keys name two origins: {origin:?} and {name:?}"
                )));
            }
            origin = Some(name);
            keys.push(pk);
        }
        let origin = origin.ok_or_else(|| WitnessError("a log needs a key".into()))?;
        Ok(TrustedLog { origin, keys })
    }
}

/// What a refused `add-checkpoint` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 400: the body is not the protocol's.
    Malformed(String),
    /// 403: no signature by a trusted key verifies.
    Forbidden,
    /// 404: the origin is not one the witness trusts.
    UnknownOrigin(String),
    /// 409: `old` is not the size the witness cosigned last (that size is
    /// the answer), or the same size has another root.
    Conflict { cosigned: u64 },
    /// 422: the consistency proof does not verify.
    BadProof,
    /// 500: the witness's own storage failed; nothing was cosigned.
    Storage(String),
}

impl Refusal {
    /// The `outcome` label of `verdict_witness_requests_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Forbidden => "forbidden",
            Refusal::UnknownOrigin(_) => "unknown_origin",
            Refusal::Conflict { .. } => "conflict",
            Refusal::BadProof => "bad_proof",
            Refusal::Storage(_) => "storage_failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

/// What one request showed, as far as it was read: the fields of its log
/// line.
#[derive(Debug, Default)]
struct Seen {
    origin: Option<String>,
    old: Option<u64>,
    size: Option<u64>,
    /// The size the witness held for the origin.
    held: Option<u64>,
}

/// The witness: its key, the logs it trusts, and the newest checkpoint it
/// cosigned for each.
pub struct Witness {
    name: String,
    key: Ed25519KeyPair,
    logs: Vec<TrustedLog>,
    /// One connection: checking the stored size and storing the new one
    /// happen under this lock and in one transaction, so two concurrent
    /// submissions can never roll the state back.
    db: Mutex<Connection>,
    /// `add-checkpoint` answers by outcome: `cosigned` or a refusal's.
    requests: Family<OutcomeLabels, Counter>,
}

impl Witness {
    /// Opens the witness in `data_dir` (created 0700 if missing), creating
    /// its Ed25519 key (`witness.key`, 0600) on first start.
    pub fn open(
        data_dir: &Path,
        name: &str,
        logs: Vec<TrustedLog>,
    ) -> Result<Witness, WitnessError> {
        if !note::valid_name(name) {
            return Err(WitnessError(format!(
                "bad witness name {name:?}: no spaces or '+'"
            )));
        }
        fs::create_dir_all(data_dir)
            .map_err(|e| WitnessError(format!("{}: {e}", data_dir.display())))?;
        let key = load_or_create_key(&data_dir.join(KEY_FILE))?;
        let db_path = data_dir.join(DB_FILE);
        let conn = Connection::open(&db_path)
            .map_err(|e| WitnessError(format!("{}: {e}", db_path.display())))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA temp_store = MEMORY;
             CREATE TABLE IF NOT EXISTS witness_checkpoints (
                 origin     TEXT PRIMARY KEY,
                 tree_size  INTEGER NOT NULL,
                 root       BLOB NOT NULL,
                 note       TEXT NOT NULL,
                 cosigned_at INTEGER NOT NULL
             );",
        )
        .map_err(|e| WitnessError(format!("{}: {e}", db_path.display())))?;
        Ok(Witness {
            name: name.to_string(),
            key,
            logs,
            db: Mutex::new(conn),
            requests: Family::default(),
        })
    }

    /// Registers `verdict_witness_requests_total{outcome}`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "verdict_witness_requests",
            "add-checkpoint requests by outcome (cosigned, conflict, bad_proof, forbidden, \
             unknown_origin, malformed, storage_failed)",
            self.requests.clone(),
        );
    }

    /// The count of answers with this outcome so far.
    pub fn requests(&self, outcome: &str) -> u64 {
        self.requests
            .get(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .map_or(0, |c| c.get())
    }

    /// The witness's verifier key (`name+id+base64(0x04 ‖ key)`), for a
    /// log's `[audit] witnesses`.
    pub fn vkey(&self) -> String {
        cosign::verifier_key(&self.name, self.key.public_key().as_ref())
    }

    /// The newest size cosigned for `origin`, 0 if none.
    pub fn cosigned_size(&self, origin: &str) -> Result<u64, Refusal> {
        let db = self
            .db
            .lock()
            .map_err(|_| Refusal::Storage("state lock poisoned".into()))?;
        Ok(stored(&db, origin)?.map_or(0, |(size, _)| size))
    }

    /// Handles one `add-checkpoint` body; on success, the cosignature line.
    /// Logs and counts the outcome.
    pub fn add_checkpoint(&self, body: &str, now: u64) -> Result<String, Refusal> {
        let mut seen = Seen::default();
        let outcome = self.check_and_cosign(body, now, &mut seen);
        self.record(&seen, &outcome);
        outcome
    }

    /// Logs and counts a request whose body could not be read (too large,
    /// not UTF-8) as `malformed`.
    pub fn record_unreadable(&self, why: &str) {
        self.record(&Seen::default(), &Err(Refusal::Malformed(why.to_string())));
    }

    /// One log line and one count per answer.
    fn record(&self, seen: &Seen, outcome: &Result<String, Refusal>) {
        let label = match outcome {
            Ok(_) => "cosigned",
            Err(r) => r.outcome(),
        };
        self.requests
            .get_or_create(&OutcomeLabels {
                outcome: label.to_string(),
            })
            .inc();
        let origin = seen.origin.as_deref().unwrap_or("");
        let (old, size, held) = (seen.old, seen.size, seen.held);
        match outcome {
            Ok(_) => tracing::info!(origin, old, size, outcome = label, "checkpoint cosigned"),
            Err(Refusal::Conflict { cosigned }) if seen.old == Some(*cosigned) => {
                tracing::warn!(
                    origin,
                    old,
                    size,
                    held,
                    outcome = label,
                    "checkpoint refused: another tree of the size this witness cosigned (a fork)"
                );
            }
            Err(Refusal::Conflict { .. }) => tracing::info!(
                origin,
                old,
                size,
                held,
                outcome = label,
                "checkpoint refused: the old size is not the one this witness cosigned"
            ),
            Err(Refusal::BadProof) => tracing::warn!(
                origin,
                old,
                size,
                held,
                outcome = label,
                "checkpoint refused: it does not extend the tree this witness cosigned \
                 (the consistency proof does not verify: a fork or a rollback)"
            ),
            Err(Refusal::Storage(e)) => tracing::error!(
                origin,
                old,
                size,
                outcome = label,
                error = %e,
                "checkpoint refused: the witness's storage failed"
            ),
            Err(r) => tracing::warn!(
                origin,
                old,
                size,
                outcome = label,
                error = ?r,
                "checkpoint refused"
            ),
        }
    }

    fn check_and_cosign(&self, body: &str, now: u64, seen: &mut Seen) -> Result<String, Refusal> {
        let req = parse_request(body)?;
        seen.old = Some(req.old);
        let parsed = note::parse(req.note).map_err(|e| Refusal::Malformed(e.to_string()))?;
        let cp = Checkpoint::parse(parsed.text).map_err(|e| Refusal::Malformed(e.to_string()))?;
        seen.origin = Some(cp.origin.clone());
        seen.size = Some(cp.size);
        let log = self
            .logs
            .iter()
            .find(|l| l.origin == cp.origin)
            .ok_or_else(|| Refusal::UnknownOrigin(cp.origin.clone()))?;
        let mut signed = false;
        for pk in &log.keys {
            match parsed.verified_by(&log.origin, pk) {
                Ok(Some(_)) => signed = true,
                Ok(None) => {}
                Err(_) => return Err(Refusal::Forbidden),
            }
        }
        if !signed {
            return Err(Refusal::Forbidden);
        }
        if req.old > cp.size {
            return Err(Refusal::Malformed(format!(
                "old size {} is above the checkpoint's {}",
                req.old, cp.size
            )));
        }
        let mut db = self
            .db
            .lock()
            .map_err(|_| Refusal::Storage("state lock poisoned".into()))?;
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| Refusal::Storage(e.to_string()))?;
        let (size, root) = stored(&tx, &cp.origin)?.unwrap_or((0, merkle::empty_root()));
        seen.held = Some(size);
        if req.old != size {
            return Err(Refusal::Conflict { cosigned: size });
        }
        if req.old == cp.size {
            if root != cp.root {
                return Err(Refusal::Conflict { cosigned: size });
            }
        } else if req.old == 0 {
            if !req.proof.is_empty() {
                return Err(Refusal::BadProof);
            }
        } else if !merkle::verify_consistency(req.old, cp.size, &root, &cp.root, &req.proof) {
            return Err(Refusal::BadProof);
        }
        tx.execute(
            "INSERT INTO witness_checkpoints (origin, tree_size, root, note, cosigned_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (origin) DO UPDATE SET tree_size = ?2, root = ?3, note = ?4,
                 cosigned_at = ?5",
            params![
                cp.origin,
                i64::try_from(cp.size).map_err(|_| Refusal::Malformed("size too large".into()))?,
                cp.root.as_slice(),
                req.note,
                i64::try_from(now).unwrap_or(i64::MAX),
            ],
        )
        .map_err(|e| Refusal::Storage(e.to_string()))?;
        tx.commit().map_err(|e| Refusal::Storage(e.to_string()))?;
        Ok(cosign::sign(parsed.text, now, &self.name, &self.key))
    }
}

fn stored(conn: &Connection, origin: &str) -> Result<Option<(u64, Hash)>, Refusal> {
    let row: Option<(i64, Vec<u8>)> = conn
        .query_row(
            "SELECT tree_size, root FROM witness_checkpoints WHERE origin = ?1",
            [origin],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(|e| Refusal::Storage(e.to_string()))?;
    let Some((size, root)) = row else {
        return Ok(None);
    };
    let root: Hash = root
        .try_into()
        .map_err(|_| Refusal::Storage("stored root is not 32 bytes".into()))?;
    Ok(Some((u64::try_from(size).unwrap_or(0), root)))
}

struct AddCheckpoint<'a> {
    old: u64,
    proof: Vec<Hash>,
    note: &'a str,
}

fn parse_request(body: &str) -> Result<AddCheckpoint<'_>, Refusal> {
    let bad = |m: &str| Refusal::Malformed(m.to_string());
    let Some((head, note)) = body.split_once("\n\n") else {
        return Err(bad(
            "expected an old size line, proof lines, a blank line and a checkpoint",
        ));
    };
    let mut lines = head.split('\n');
    let old = lines
        .next()
        .and_then(|l| l.strip_prefix("old "))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .filter(|n| n.len() == 1 || !n.starts_with('0'))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| bad("the first line must be `old <size>`"))?;
    let mut proof = Vec::new();
    for l in lines {
        if proof.len() == MAX_PROOF {
            return Err(bad("more than 63 proof lines"));
        }
        let h: Hash = B64
            .decode(l)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| bad("a proof line is not a base64 SHA-256 hash"))?;
        proof.push(h);
    }
    Ok(AddCheckpoint { old, proof, note })
}

fn load_or_create_key(path: &Path) -> Result<Ed25519KeyPair, WitnessError> {
    let err = |e: String| WitnessError(format!("{}: {e}", path.display()));
    match fs::read(path) {
        Ok(bytes) => Ed25519KeyPair::from_pkcs8_maybe_unchecked(&bytes)
            .map_err(|e| err(format!("not an Ed25519 PKCS#8 key: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
                .map_err(|_| err("cannot generate a key".into()))?;
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| err(e.to_string()))?;
            f.write_all(pkcs8.as_ref())
                .and_then(|_| f.sync_all())
                .map_err(|e| err(e.to_string()))?;
            if let Some(dir) = path.parent() {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| err(e.to_string()))?;
            }
            Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|e| err(e.to_string()))
        }
        Err(e) => Err(err(e.to_string())),
    }
}

/// The current time in POSIX seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Serves the witness protocol over HTTP (see [`crate::server::serve`]).
pub struct WitnessHandler {
    pub witness: Arc<Witness>,
}

impl Handler for WitnessHandler {
    type Conn = ();

    fn open(&self) {}

    fn handle(
        &self,
        req: Request<ReqBody>,
        _conn: ConnInfo,
        _: &(),
    ) -> impl Future<Output = Response<RespBody>> + Send {
        let witness = self.witness.clone();
        async move {
            match (req.method(), req.uri().path()) {
                (&Method::GET, "/metrics") => return metrics(&witness),
                (_, "/add-checkpoint") => {}
                _ => return text(StatusCode::NOT_FOUND, "not found\n"),
            }
            if req.method() != Method::POST {
                return text(StatusCode::METHOD_NOT_ALLOWED, "use POST\n");
            }
            let body: Bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    witness.record_unreadable("body too large");
                    return text(StatusCode::PAYLOAD_TOO_LARGE, "body too large\n");
                }
            };
            let Ok(body) = String::from_utf8(body.to_vec()) else {
                witness.record_unreadable("body is not UTF-8");
                return text(StatusCode::BAD_REQUEST, "body is not UTF-8\n");
            };
            let outcome = tokio::task::spawn_blocking(move || witness.add_checkpoint(&body, now()))
                .await
                .unwrap_or_else(|e| Err(Refusal::Storage(e.to_string())));
            match outcome {
                Ok(line) => text(StatusCode::OK, line),
                Err(r) => refusal(r),
            }
        }
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<RespBody> {
    bytes_response(status, "text/plain; charset=utf-8", body)
}

/// `GET /metrics`: the witness's counters, OpenMetrics text.
fn metrics(witness: &Witness) -> Response<RespBody> {
    let mut registry = Registry::default();
    witness.register_metrics(&mut registry);
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &registry) {
        Ok(()) => bytes_response(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            out,
        ),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n"),
    }
}

fn refusal(r: Refusal) -> Response<RespBody> {
    match r {
        Refusal::Malformed(m) => text(StatusCode::BAD_REQUEST, format!("{m}\n")),
        Refusal::Forbidden => text(StatusCode::FORBIDDEN, "no trusted signature verifies\n"),
        Refusal::UnknownOrigin(o) => text(StatusCode::NOT_FOUND, format!("unknown origin {o}\n")),
        Refusal::Conflict { cosigned } => bytes_response(
            StatusCode::CONFLICT,
            "text/x.tlog.size",
            format!("{cosigned}\n"),
        ),
        Refusal::BadProof => text(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the consistency proof does not verify\n",
        ),
        Refusal::Storage(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "storage failed\n"),
    }
}

#[cfg(test)]
mod tests;
