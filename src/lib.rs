//! verdict: a sidecar that gates actions with evidence.
//!
//! It runs beside a service, intercepts the routes named in policy files, and
//! forwards, blocks or holds each call after checking the claims it carries
//! against its evidence. Apps can also call the native JSON API directly.
//!
//! # Layout
//! The doors, start-up and the listeners:
//! - [`cli`]: every `verdict` subcommand; `src/main.rs` only calls [`cli::main`].
//! - [`app`]: start-up and shutdown of a whole sidecar (`app::start`, `app::Running`).
//! - [`api`]: the HTTP face: the native JSON API's routing table, request pipeline and
//!   handlers, and beside them the parts the proxy and the listeners share:
//!   [`api::error`] (every client-visible error and its one mapping to HTTP; domain
//!   errors of decide, review, jobs and audit are mapped there, nowhere else),
//!   [`api::http_util`] (body reading with limits, request ids, request hashes) and
//!   [`api::auth`] (API keys, scopes, constant-time lookup, protected mode).
//! - [`proxy`]: the reverse proxy, one file per phase: read, guard, gated, unmatched,
//!   upstream, hold, stats, and the per-core affinity of its listeners.
//! - [`server`]: listeners, TLS, connection limits, graceful drain.
//! - [`offline`]: policy test cases, decided offline through the doors' readers and
//!   [`decide`]: `verdict test` and `verdict explain`.
//!
//! Under the doors:
//! - [`runtime`]: the shared state ([`runtime::App`]), health, metrics, logging.
//! - [`decide`]: the one-way decision path: domain input and narrow handles in, a typed
//!   decision (durably audited) out; shared by the API and the proxy, and imports neither.
//! - [`engine`]: PURE claim verification: claims + sources → checks, and LLM answers → claims;
//!   the decision table and its vocabulary (`engine::model`). It is its own crate,
//!   `crates/verdict-engine`, whose manifest has no async, HTTP or JSON dependency.
//! - [`policy`]: `policies/*.toml` → validated [`policy::PolicySet`]; route matching,
//!   extractors, param rules, the `ArcSwap` store and the hot-reload watcher.
//! - [`evidence`]: reading `file://` and `http(s)://` sources inside the operator's fences.
//! - [`review`]: held requests and their review: durable store, single-use
//!   resolutions, expiry, and the exactly-once forward claim.
//! - [`webhook`]: signed webhook notifications of held and resolved reviews,
//!   sent in the background with bounded retries.
//! - [`audit`]: the tamper-evident audit log (Merkle tree, signed checkpoints, SQLite).
//! - [`jobs`]: durable batch jobs: a queue in SQLite or in the shared PostgreSQL
//!   store, worker threads, retention.
//! - [`config`]: the TOML file, defaults and flags merged into one [`config::Config`].
//! - [`witness`]: `verdict witness serve`, a C2SP witness that cosigns only
//!   checkpoints consistent with those it cosigned before.
//! - [`store`]: where state lives: the shared PostgreSQL store's connection side,
//!   SQLite's busy handlers, the data dir's owner lock.
//!
//! What each part may import is checked by `scripts/check-layers.sh` in CI;
//! docs/architecture.md walks one gated proxy request and one `/v2/authorize`
//! call through the code.

pub mod api;
pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod decide;
pub use verdict_engine as engine;
pub mod evidence;
pub mod jobs;
pub mod offline;
pub mod policy;
pub mod proxy;
pub mod review;
pub mod runtime;
pub mod server;
pub mod store;
pub mod webhook;
pub mod witness;
