//! verdict: a sidecar that gates actions with evidence.
//!
//! It runs beside a service, intercepts the routes named in policy files, and
//! forwards, blocks or holds each call after checking the claims it carries
//! against its evidence. Apps can also call the native JSON API directly.
//!
//! # Layout
//! - [`config`]: the TOML file, defaults and flags merged into one [`config::Config`].
//! - [`app`]: start-up and shutdown of a whole sidecar; the shared [`app::App`] state.
//! - [`server`]: listeners, TLS, connection limits, graceful drain.
//! - [`api`]: the native JSON API: routing table, request pipeline, handlers.
//! - [`error`]: every client-visible error and its one mapping to HTTP.
//! - [`evidence`]: reading `file://` and `http(s)://` sources inside the operator's fences.
//! - [`decide`]: the one-way decision path: domain input and narrow handles in, a typed
//!   decision (durably audited) out; shared by the API and the proxy, and imports neither.
//! - [`http_util`]: body reading with limits, request ids, request hashes.
//! - [`auth`]: API keys, scopes, constant-time lookup, protected mode.
//! - [`health`]: `/health` and the component registry of `/health/detailed`.
//! - [`metrics`]: the Prometheus registry and HTTP metrics.
//! - [`telemetry`]: logging set-up and the shutdown signal.
//! - [`policy`]: `policies/*.toml` → validated [`policy::PolicySet`]; route matching,
//!   extractors, param rules, the `ArcSwap` store and the hot-reload watcher.
//! - [`proxy`]: the reverse proxy: route match, decide, forward / block / hold.
//! - [`engine`]: PURE claim verification: claims + sources → checks, and LLM answers → claims;
//!   the decision table and its vocabulary (`engine::model`). It imports no other module
//!   (`scripts/check-layers.sh` checks this and the other parts' imports in CI).
//! - [`review`]: held requests and their review: durable store, single-use
//!   resolutions, expiry, and the exactly-once forward claim.
//! - [`audit`]: the tamper-evident audit log (Merkle tree, signed checkpoints, SQLite).
//! - [`jobs`]: durable batch jobs: SQLite queue, worker threads, retention.
//! - [`witness`]: `verdict witness serve`, a C2SP witness that cosigns only
//!   checkpoints consistent with those it cosigned before.
//! - `sqlite`: how the connections to the shared database wait for its write lock.

pub mod api;
pub mod app;
pub mod audit;
pub mod auth;
pub mod config;
pub mod datalock;
pub mod decide;
pub mod engine;
pub mod error;
pub mod evidence;
pub mod health;
pub mod http_util;
pub mod jobs;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod review;
pub mod server;
mod sqlite;
pub mod telemetry;
pub mod witness;
