//! Sending the log's checkpoints to its witnesses (`[[audit.witnesses]]`)
//! and keeping the cosignatures they return.
//!
//! A cosignature is a witness's statement that the checkpoint extends every
//! one it cosigned before; stored beside the checkpoints, they let the log
//! (at start and in `verdict audit verify`) and anyone fetching
//! `/v2/audit/checkpoint` see that the log never rolled back past a size a
//! witness saw. Submission runs in one background task, at most once a
//! second per witness and always with the newest checkpoint: a decision never
//! waits for a witness, and a dead witness only shows as lag in
//! `/health/detailed` and as failures in `/metrics`.
//!
//! A witness that holds a tree the log does not extend has seen records the
//! log no longer holds: it names a larger size than the log's (409), names
//! the size it was sent with another root (409), or refuses the consistency
//! proof from its own size (422, a fork: the log was cut back and grew past
//! it again). Each is a rollback. At start (one round runs before the
//! server serves) it stops start-up, even if the local copies of the
//! witness's cosignatures were deleted with the records; at run time it
//! halts the log: every append fails, so nothing more is decided, and
//! `/ready`, `/health` and the audit component of `/health/detailed` say
//! why until the process restarts. `verdict audit verify` asks the same
//! questions ([`ask_witnesses`]).

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus_client::encoding::EncodeLabelSet;
use serde::Serialize;

use super::merkle::{self, Hash};
use super::note;
use super::sqlite::{self, SqlHashes};
use super::{cosign, AuditError, AuditLog};
use crate::config::WitnessConfig;

/// How long one submission may take before it counts as failed.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The pause between rounds.
const INTERVAL: Duration = Duration::from_secs(1);
/// The largest witness response read.
const MAX_RESPONSE: usize = 64 * 1024;

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// What the submission task keeps for its whole life: the HTTP client and
/// the one connection that stores cosignatures.
struct Submitter {
    http: HttpClient,
    cosigner: Arc<Mutex<rusqlite::Connection>>,
}

/// One witness as `/health/detailed` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WitnessStatus {
    pub name: String,
    pub url: String,
    /// The largest tree size this witness cosigned whose cosignature the
    /// log holds: a tree the log extends. `None` before the first; never
    /// a size the witness names but the log has not proven it extends.
    pub cosigned_size: Option<u64>,
    /// Records the log holds beyond `cosigned_size`.
    pub lag: Option<u64>,
    pub last_error: Option<String>,
    /// The size to submit from next: the witness's size as it last named
    /// it (a 409), else `cosigned_size`.
    #[serde(skip)]
    pub(super) from: u64,
    /// The witness showed a rollback; nothing more is sent to it.
    #[serde(skip)]
    pub(super) rolled_back: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WitnessLabels {
    pub witness: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SubmissionLabels {
    pub witness: String,
    pub outcome: String,
}

/// Why a submission to a witness ended without a cosignature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WitnessFailure {
    /// The witness cosigned a larger tree than the log holds.
    #[error(
        "witness {witness} cosigned tree size {cosigned}, but the log holds only {size} \
         records: the newest records were removed (rollback)"
    )]
    RolledBack {
        witness: String,
        cosigned: u64,
        size: u64,
    },
    /// The witness cosigned a tree of `cosigned` records that the log of
    /// `size` does not extend: the consistency proof from its size does
    /// not verify (422), or it holds another root for the size it was sent
    /// (409 naming that size).
    #[error(
        "witness {witness} cosigned tree size {cosigned}, which this log of {size} records \
         does not extend: records the witness saw were removed or changed (rollback)"
    )]
    Forked {
        witness: String,
        cosigned: u64,
        size: u64,
    },
    /// Anything else: unreachable, a refusal that says nothing about the
    /// log's history, a bad answer.
    #[error("{0}")]
    Other(String),
}

impl WitnessFailure {
    /// Whether the witness has seen records the log no longer holds.
    pub fn is_rollback(&self) -> bool {
        !matches!(self, WitnessFailure::Other(_))
    }

    /// The `outcome` label of `verdict_audit_witness_submissions_total`.
    fn outcome(&self) -> &'static str {
        match self {
            WitnessFailure::RolledBack { .. } => "rolled_back",
            WitnessFailure::Forked { .. } => "forked",
            WitnessFailure::Other(_) => "failed",
        }
    }
}

/// What a witness's answer to the checkpoint of `size` records, sent with
/// `old`, means.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// 200: the body holds the cosignature.
    Cosigned,
    /// 409 naming a size the log holds and that was not `old`: submit
    /// again from it.
    From(u64),
    Failed(WitnessFailure),
}

/// Reads a witness's answer (pure: the status codes of the tlog-witness
/// spec, which `verdict witness serve` answers with too).
fn classify(
    witness: &str,
    old: u64,
    size: u64,
    status: StatusCode,
    size_header: bool,
    body: &str,
) -> Answer {
    let fail = |f| Answer::Failed(f);
    match status {
        StatusCode::OK => Answer::Cosigned,
        StatusCode::CONFLICT if size_header => {
            let Ok(theirs) = body.trim_end_matches('\n').parse::<u64>() else {
                return fail(WitnessFailure::Other(format!(
                    "409 with a malformed size {body:?}"
                )));
            };
            if theirs > size {
                fail(WitnessFailure::RolledBack {
                    witness: witness.to_string(),
                    cosigned: theirs,
                    size,
                })
            } else if theirs == old {
                // It holds the size it was sent, and still refuses: another
                // root at that size.
                fail(WitnessFailure::Forked {
                    witness: witness.to_string(),
                    cosigned: theirs,
                    size,
                })
            } else {
                Answer::From(theirs)
            }
        }
        // The witness answers 409 unless it holds `old`: it holds a tree
        // of `old` records that this one does not extend.
        StatusCode::UNPROCESSABLE_ENTITY => fail(WitnessFailure::Forked {
            witness: witness.to_string(),
            cosigned: old,
            size,
        }),
        s => fail(WitnessFailure::Other(format!(
            "{} {}",
            s.as_u16(),
            body.lines().next().unwrap_or("")
        ))),
    }
}

fn client() -> Result<HttpClient, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| format!("no system root certificates: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_timer(TokioTimer::new())
        .build(connector))
}

/// The `add-checkpoint` body: `old <size>`, the proof, a blank line, the note.
fn request_body(old: u64, proof: &[Hash], note: &str) -> String {
    let mut body = format!("old {old}\n");
    for h in proof {
        body.push_str(&B64.encode(h));
        body.push('\n');
    }
    body.push('\n');
    body.push_str(note);
    body
}

/// Submits the checkpoint `note_text` (of `size` records) to `w` from
/// `*from`, and once more from the size a 409 names, which is kept in
/// `*from` for next time. `proof(old)` is the consistency proof from `old`
/// to `size`. On success, the cosignature, verified with the witness's key.
async fn exchange<P, Fut>(
    http: &HttpClient,
    w: &WitnessConfig,
    note_text: &str,
    size: u64,
    from: &mut u64,
    mut proof: P,
) -> Result<cosign::Cosignature, WitnessFailure>
where
    P: FnMut(u64) -> Fut,
    Fut: Future<Output = Result<Vec<Hash>, String>>,
{
    let text = note::parse(note_text)
        .map_err(|e| WitnessFailure::Other(e.to_string()))?
        .text
        .to_string();
    let mut old = (*from).min(size);
    for _ in 0..2 {
        let proof = if old > 0 && old < size {
            proof(old).await.map_err(WitnessFailure::Other)?
        } else {
            Vec::new()
        };
        let (status, size_header, body) = post(http, w, request_body(old, &proof, note_text))
            .await
            .map_err(WitnessFailure::Other)?;
        match classify(&w.name, old, size, status, size_header, &body) {
            Answer::Cosigned => {
                let sigs = cosign::verify_lines(&text, &body, &w.name, &w.key)
                    .map_err(|e| WitnessFailure::Other(format!("bad cosignature: {e}")))?;
                let sig = sigs.into_iter().next().ok_or_else(|| {
                    WitnessFailure::Other(
                        "the answer holds no cosignature by the witness's key".into(),
                    )
                })?;
                *from = size;
                return Ok(sig);
            }
            Answer::From(theirs) => {
                *from = theirs;
                old = theirs;
            }
            Answer::Failed(f) => return Err(f),
        }
    }
    Err(WitnessFailure::Other(
        "the witness's size kept changing".into(),
    ))
}

/// What one witness answered `verdict audit verify`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessCheck {
    pub witness: String,
    /// The size it cosigned: the log's newest checkpoint, which extends
    /// every tree the witness cosigned before.
    pub result: Result<u64, WitnessFailure>,
}

/// Asks each witness whether the log in `db_path` extends the tree it
/// cosigned last, the way the server does: submits the newest checkpoint,
/// from the size of the witness's newest cosignature the log holds (or
/// from the size the witness names instead). Only reads the database; a
/// witness that cosigns moves on to the newest checkpoint, as it would for
/// the server. For the CLI, with the server running or not.
pub async fn ask_witnesses(
    db_path: &Path,
    witnesses: &[WitnessConfig],
) -> Result<Vec<WitnessCheck>, AuditError> {
    let db = db_path.to_path_buf();
    let (conn, newest, known) = tokio::task::spawn_blocking(move || {
        let conn = sqlite::open_reader(&db)?;
        let newest = sqlite::newest_checkpoint(&conn)?;
        let known = sqlite::cosigned_sizes(&conn)?;
        Ok::<_, AuditError>((conn, newest, known))
    })
    .await
    .map_err(|e| AuditError::Unavailable(e.to_string()))??;
    let row = newest.ok_or_else(|| AuditError::Corrupt("the log has no checkpoint".into()))?;
    let conn = Arc::new(Mutex::new(conn));
    let http = client().map_err(AuditError::Config)?;
    let size = row.tree_size;
    let mut out = Vec::with_capacity(witnesses.len());
    for w in witnesses {
        let mut from = known
            .iter()
            .find(|(n, _)| *n == w.name)
            .map_or(0, |(_, s)| *s);
        let result = exchange(&http, w, &row.note, size, &mut from, |old| {
            let conn = Arc::clone(&conn);
            async move {
                tokio::task::spawn_blocking(move || {
                    let conn = conn
                        .lock()
                        .map_err(|_| AuditError::Unavailable("reader poisoned".into()))?;
                    merkle::consistency_proof(&mut SqlHashes::new(&conn), old, size)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
            }
        })
        .await
        .map(|_| size);
        out.push(WitnessCheck {
            witness: w.name.clone(),
            result,
        });
    }
    Ok(out)
}

impl AuditLog {
    /// Runs one round of submissions (refusing to start when a witness
    /// shows a rollback), then keeps submitting in the background until
    /// [`AuditLog::shutdown`], halting the log if a witness shows a
    /// rollback later. Does nothing without witnesses.
    pub async fn start_witnessing(&self, witnesses: Vec<WitnessConfig>) -> Result<(), AuditError> {
        if witnesses.is_empty() {
            return Ok(());
        }
        let db = self.inner.db_path.clone();
        let cosigner = tokio::task::spawn_blocking(move || sqlite::open_side_writer(&db))
            .await
            .map_err(|e| AuditError::Unavailable(e.to_string()))??;
        let client = Submitter {
            http: client().map_err(AuditError::Config)?,
            cosigner: Arc::new(Mutex::new(cosigner)),
        };
        let known = self.read(|conn, _| sqlite::cosigned_sizes(conn)).await?;
        let mut state: Vec<WitnessStatus> = witnesses
            .iter()
            .map(|w| {
                let stored = known.iter().find(|(n, _)| *n == w.name).map(|(_, s)| *s);
                WitnessStatus {
                    name: w.name.clone(),
                    url: w.url.clone(),
                    cosigned_size: stored,
                    from: stored.unwrap_or(0),
                    ..WitnessStatus::default()
                }
            })
            .collect();
        for (w, st) in witnesses.iter().zip(state.iter_mut()) {
            match self.submit(&client, w, st).await {
                Err(f) if f.is_rollback() => return Err(AuditError::RolledBack(f.to_string())),
                _ => {}
            }
        }
        self.publish_witnesses(&state);
        let log = self.clone();
        let mut stop = self.inner.stop.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(INTERVAL) => {}
                    _ = stop.changed() => return,
                }
                for (w, st) in witnesses.iter().zip(state.iter_mut()) {
                    if st.rolled_back {
                        continue;
                    }
                    match log.submit(&client, w, st).await {
                        Err(f) if f.is_rollback() => {
                            st.rolled_back = true;
                            log.halt(f.to_string());
                        }
                        _ => {}
                    }
                }
                log.publish_witnesses(&state);
            }
        });
        Ok(())
    }

    fn publish_witnesses(&self, state: &[WitnessStatus]) {
        let size = self.health().size;
        for w in state {
            let labels = WitnessLabels {
                witness: w.name.clone(),
            };
            let lag = &self.inner.shared.metrics.witness_lag;
            match w.cosigned_size {
                Some(c) => {
                    lag.get_or_create(&labels)
                        .set(i64::try_from(size.saturating_sub(c)).unwrap_or(i64::MAX));
                }
                None => {
                    lag.remove(&labels);
                }
            }
        }
        if let Ok(mut w) = self.inner.shared.witnesses.lock() {
            w.clone_from(&state.to_vec());
        }
    }

    /// Submits the newest checkpoint to one witness unless it already
    /// cosigned it; counts and logs the outcome.
    async fn submit(
        &self,
        client: &Submitter,
        w: &WitnessConfig,
        st: &mut WitnessStatus,
    ) -> Result<(), WitnessFailure> {
        let outcome = self.submit_inner(client, w, st).await;
        let label = match &outcome {
            Ok(true) => Some("ok"),
            Ok(false) => None,
            Err(f) => Some(f.outcome()),
        };
        if let Some(outcome) = label {
            self.inner
                .shared
                .metrics
                .witness_submissions
                .get_or_create(&SubmissionLabels {
                    witness: w.name.clone(),
                    outcome: outcome.into(),
                })
                .inc();
        }
        match &outcome {
            Ok(_) => st.last_error = None,
            Err(f) => {
                let m = f.to_string();
                if st.last_error.as_deref() != Some(&m) {
                    tracing::warn!(witness = %w.name, error = %m, "witness submission failed");
                }
                st.last_error = Some(m);
            }
        }
        outcome.map(|_| ())
    }

    /// `Ok(true)` when a cosignature was stored, `Ok(false)` when there was
    /// nothing new to submit.
    async fn submit_inner(
        &self,
        client: &Submitter,
        w: &WitnessConfig,
        st: &mut WitnessStatus,
    ) -> Result<bool, WitnessFailure> {
        let other = |e: AuditError| WitnessFailure::Other(e.to_string());
        let Some(row) = self
            .read(|conn, _| sqlite::newest_checkpoint(conn))
            .await
            .map_err(other)?
        else {
            return Ok(false);
        };
        let size = row.tree_size;
        if st.cosigned_size == Some(size) {
            return Ok(false);
        }
        let log = self.clone();
        let sig = exchange(&client.http, w, &row.note, size, &mut st.from, |old| {
            let log = log.clone();
            async move {
                log.read(move |conn, _| {
                    merkle::consistency_proof(&mut SqlHashes::new(conn), old, size)
                })
                .await
                .map_err(|e| e.to_string())
            }
        })
        .await?;
        let name = w.name.clone();
        let cosigner = Arc::clone(&client.cosigner);
        tokio::task::spawn_blocking(move || {
            let conn = cosigner
                .lock()
                .map_err(|_| AuditError::Unavailable("cosigner connection poisoned".into()))?;
            sqlite::insert_cosignature(&conn, &name, size, &sig.line, sig.time)
        })
        .await
        .map_err(|e| WitnessFailure::Other(e.to_string()))?
        .map_err(other)?;
        st.cosigned_size = Some(size);
        Ok(true)
    }

    /// Stops the log for good (until the process restarts): a witness
    /// showed that it rolled back. Every append fails from now on, so
    /// nothing more is decided, and health reports `reason`.
    pub(super) fn halt(&self, reason: String) {
        if self.inner.shared.halted.set(reason.clone()).is_ok() {
            tracing::error!(
                error = %reason,
                "audit log rollback: nothing is appended or decided until the server restarts"
            );
        }
    }

    /// The newest checkpoint, as a signed note carrying the log's signature
    /// and every cosignature collected for it.
    pub async fn checkpoint(&self) -> Result<Option<String>, AuditError> {
        self.read(|conn, _| {
            sqlite::newest_checkpoint(conn)?
                .map(|row| cosigned(conn, row))
                .transpose()
        })
        .await
    }

    /// The RFC 6962 consistency proof from tree size `first` to `second`
    /// (`0 < first <= second <=` the newest checkpoint's size); `None` for
    /// sizes outside that range.
    pub async fn consistency(
        &self,
        first: u64,
        second: u64,
    ) -> Result<Option<Vec<Hash>>, AuditError> {
        self.read(move |conn, _| {
            let newest = sqlite::newest_checkpoint(conn)?.map_or(0, |r| r.tree_size);
            if first == 0 || first > second || second > newest {
                return Ok(None);
            }
            merkle::consistency_proof(&mut SqlHashes::new(conn), first, second).map(Some)
        })
        .await
    }

    /// The checkpoint of exactly `size`, with its cosignatures, if one was
    /// signed.
    pub async fn checkpoint_at(&self, size: u64) -> Result<Option<String>, AuditError> {
        self.read(move |conn, _| {
            sqlite::checkpoint_at(conn, size)?
                .map(|row| cosigned(conn, row))
                .transpose()
        })
        .await
    }
}

/// A stored checkpoint's note with its cosignature lines appended.
fn cosigned(conn: &rusqlite::Connection, row: sqlite::CheckpointRow) -> Result<String, AuditError> {
    let mut note = row.note;
    for line in sqlite::cosignatures_at(conn, row.tree_size)? {
        note.push_str(&line);
    }
    Ok(note)
}

/// Posts one `add-checkpoint`; the status, whether the answer is a
/// `text/x.tlog.size`, and the body.
async fn post(
    client: &HttpClient,
    w: &WitnessConfig,
    body: String,
) -> Result<(StatusCode, bool, String), String> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/add-checkpoint", w.url))
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("request: {e}"))?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| format!("{e}"))?;
        let status = resp.status();
        let size_header = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/x.tlog.size"));
        let bytes = Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        let text =
            String::from_utf8(bytes.to_vec()).map_err(|_| "answer is not UTF-8".to_string())?;
        Ok::<_, String>((status, size_header, text))
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {} s", TIMEOUT.as_secs()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(old: u64, size: u64, status: u16, size_header: bool, body: &str) -> Answer {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::IM_A_TEAPOT);
        classify("w", old, size, status, size_header, body)
    }

    fn forked(cosigned: u64, size: u64) -> Answer {
        Answer::Failed(WitnessFailure::Forked {
            witness: "w".into(),
            cosigned,
            size,
        })
    }

    #[test]
    fn a_witness_holding_a_tree_the_log_does_not_extend_is_a_rollback() {
        // 200: cosigned.
        assert_eq!(answer(4, 10, 200, false, "— w x\n"), Answer::Cosigned);
        // 409 naming a smaller size than the log's: submit from there.
        assert_eq!(answer(0, 10, 409, true, "4\n"), Answer::From(4));
        assert_eq!(answer(4, 10, 409, true, "10\n"), Answer::From(10));
        // 409 naming a larger size: the newest records were removed.
        assert_eq!(
            answer(4, 10, 409, true, "13\n"),
            Answer::Failed(WitnessFailure::RolledBack {
                witness: "w".into(),
                cosigned: 13,
                size: 10
            })
        );
        // 409 naming the size it was sent: another root at that size.
        assert_eq!(answer(10, 10, 409, true, "10\n"), forked(10, 10));
        // 422: the proof from the witness's size does not verify, a fork
        // (the log was cut back and grew past the witness's size again).
        assert_eq!(answer(8, 10, 422, false, "no\n"), forked(8, 10));
        // Neither says anything about the log's history.
        for (status, header, body) in [
            (409, false, "4\n"),
            (409, true, "four\n"),
            (403, false, "no trusted signature verifies\n"),
            (404, false, "unknown origin\n"),
            (500, false, "storage failed\n"),
        ] {
            match answer(4, 10, status, header, body) {
                Answer::Failed(f @ WitnessFailure::Other(_)) => {
                    assert!(!f.is_rollback(), "{status}");
                    assert_eq!(f.outcome(), "failed");
                }
                a => panic!("{status} {body:?}: {a:?}"),
            }
        }
    }

    #[test]
    fn a_rollback_names_the_witness_and_both_sizes() {
        let Answer::Failed(f) = answer(8, 10, 422, false, "") else {
            panic!("not a failure");
        };
        assert!(f.is_rollback());
        assert_eq!(f.outcome(), "forked");
        assert_eq!(
            f.to_string(),
            "witness w cosigned tree size 8, which this log of 10 records does not extend: \
             records the witness saw were removed or changed (rollback)"
        );
        let Answer::Failed(f) = answer(8, 10, 409, true, "12") else {
            panic!("not a failure");
        };
        assert_eq!(f.outcome(), "rolled_back");
        assert!(f
            .to_string()
            .contains("tree size 12, but the log holds only 10"));
    }
}
