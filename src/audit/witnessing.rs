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
//! `/health/detailed` and as failures in `/metrics`. At start, one round is
//! run before the server serves: a witness that has cosigned a larger tree
//! than the log holds stops start-up, even if the local copies of its
//! cosignatures were deleted with the records.

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
use super::store::{self, SqlHashes};
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
    /// The largest tree size it cosigned.
    pub cosigned_size: u64,
    /// Records the log holds beyond `cosigned_size`.
    pub lag: u64,
    pub last_error: Option<String>,
    /// The size whose cosignature by this witness is stored.
    #[serde(skip)]
    pub(super) stored: Option<u64>,
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

/// The outcome of one submission that did not end in a cosignature.
enum Failure {
    /// The witness cosigned a larger tree than the log holds.
    RolledBack(String),
    Other(String),
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

impl AuditLog {
    /// Runs one round of submissions (refusing to start when a witness has
    /// cosigned a larger tree than the log holds), then keeps submitting in
    /// the background until [`AuditLog::shutdown`]. Does nothing without
    /// witnesses.
    pub async fn start_witnessing(&self, witnesses: Vec<WitnessConfig>) -> Result<(), AuditError> {
        if witnesses.is_empty() {
            return Ok(());
        }
        let db = self.inner.db_path.clone();
        let cosigner = tokio::task::spawn_blocking(move || store::open_side_writer(&db))
            .await
            .map_err(|e| AuditError::Unavailable(e.to_string()))??;
        let client = Submitter {
            http: client().map_err(AuditError::Config)?,
            cosigner: Arc::new(Mutex::new(cosigner)),
        };
        let known = self.read(|conn, _| store::cosigned_sizes(conn)).await?;
        let mut state: Vec<WitnessStatus> = witnesses
            .iter()
            .map(|w| {
                let stored = known.iter().find(|(n, _)| *n == w.name).map(|(_, s)| *s);
                WitnessStatus {
                    name: w.name.clone(),
                    url: w.url.clone(),
                    cosigned_size: stored.unwrap_or(0),
                    stored,
                    ..WitnessStatus::default()
                }
            })
            .collect();
        for (w, st) in witnesses.iter().zip(state.iter_mut()) {
            if let Err(Failure::RolledBack(m)) = self.submit(&client, w, st).await {
                return Err(AuditError::Corrupt(m));
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
                    if let Err(Failure::RolledBack(m)) = log.submit(&client, w, st).await {
                        tracing::error!(witness = %w.name, error = %m, "audit log rollback");
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
            self.inner
                .shared
                .metrics
                .witness_lag
                .get_or_create(&WitnessLabels {
                    witness: w.name.clone(),
                })
                .set(i64::try_from(size.saturating_sub(w.cosigned_size)).unwrap_or(i64::MAX));
        }
        if let Ok(mut w) = self.inner.shared.witnesses.lock() {
            w.clone_from(&state.to_vec());
        }
    }

    /// Submits the newest checkpoint to one witness unless it already
    /// cosigned it; on a 409 naming a smaller size, once more from there.
    async fn submit(
        &self,
        client: &Submitter,
        w: &WitnessConfig,
        st: &mut WitnessStatus,
    ) -> Result<(), Failure> {
        let outcome = self.submit_inner(client, w, st).await;
        let label = match &outcome {
            Ok(true) => Some("ok"),
            Ok(false) => None,
            Err(Failure::RolledBack(_)) => Some("rolled_back"),
            Err(Failure::Other(_)) => Some("failed"),
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
            Err(Failure::RolledBack(m) | Failure::Other(m)) => {
                if st.last_error.as_deref() != Some(m) {
                    tracing::warn!(witness = %w.name, error = %m, "witness submission failed");
                }
                st.last_error = Some(m.clone());
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
    ) -> Result<bool, Failure> {
        let other = |e: AuditError| Failure::Other(e.to_string());
        let Some(row) = self
            .read(|conn, _| store::newest_checkpoint(conn))
            .await
            .map_err(other)?
        else {
            return Ok(false);
        };
        let size = row.tree_size;
        st.lag = size.saturating_sub(st.cosigned_size);
        if st.stored == Some(size) {
            return Ok(false);
        }
        let text = note::parse(&row.note)
            .map_err(|e| Failure::Other(e.to_string()))?
            .text
            .to_string();
        let mut old = st.cosigned_size.min(size);
        for _ in 0..2 {
            let proof = if old > 0 && old < size {
                self.read(move |conn, _| {
                    merkle::consistency_proof(&mut SqlHashes::new(conn), old, size)
                })
                .await
                .map_err(other)?
            } else {
                Vec::new()
            };
            let (status, size_header, body) =
                post(&client.http, w, request_body(old, &proof, &row.note))
                    .await
                    .map_err(Failure::Other)?;
            match status {
                StatusCode::OK => {
                    let sigs = cosign::verify_lines(&text, &body, &w.name, &w.key)
                        .map_err(|e| Failure::Other(format!("bad cosignature: {e}")))?;
                    let Some(sig) = sigs.into_iter().next() else {
                        return Err(Failure::Other(
                            "the answer holds no cosignature by the witness's key".into(),
                        ));
                    };
                    let name = w.name.clone();
                    let cosigner = Arc::clone(&client.cosigner);
                    tokio::task::spawn_blocking(move || {
                        let conn = cosigner.lock().map_err(|_| {
                            AuditError::Unavailable("cosigner connection poisoned".into())
                        })?;
                        store::insert_cosignature(&conn, &name, size, &sig.line, sig.time)
                    })
                    .await
                    .map_err(|e| Failure::Other(e.to_string()))?
                    .map_err(other)?;
                    st.cosigned_size = size;
                    st.stored = Some(size);
                    st.lag = 0;
                    return Ok(true);
                }
                StatusCode::CONFLICT if size_header => {
                    let theirs: u64 = body.trim_end_matches('\n').parse().map_err(|_| {
                        Failure::Other(format!("409 with a malformed size {body:?}"))
                    })?;
                    if theirs > size {
                        return Err(Failure::RolledBack(format!(
                            "witness {} cosigned tree size {theirs}, but the log holds only \
                             {size} records: the newest records were removed (rollback)",
                            w.name
                        )));
                    }
                    if theirs == old {
                        return Err(Failure::Other(format!(
                            "witness {} holds another tree of size {theirs} (a fork?)",
                            w.name
                        )));
                    }
                    st.cosigned_size = theirs;
                    old = theirs;
                }
                s => {
                    return Err(Failure::Other(format!(
                        "{} {}",
                        s.as_u16(),
                        body.lines().next().unwrap_or("")
                    )))
                }
            }
        }
        Err(Failure::Other("the witness's size kept changing".into()))
    }

    /// The newest checkpoint, as a signed note carrying the log's signature
    /// and every cosignature collected for it.
    pub async fn checkpoint(&self) -> Result<Option<String>, AuditError> {
        self.read(|conn, _| {
            store::newest_checkpoint(conn)?
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
            let newest = store::newest_checkpoint(conn)?.map_or(0, |r| r.tree_size);
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
            store::checkpoint_at(conn, size)?
                .map(|row| cosigned(conn, row))
                .transpose()
        })
        .await
    }
}

/// A stored checkpoint's note with its cosignature lines appended.
fn cosigned(conn: &rusqlite::Connection, row: store::CheckpointRow) -> Result<String, AuditError> {
    let mut note = row.note;
    for line in store::cosignatures_at(conn, row.tree_size)? {
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
