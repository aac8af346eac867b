//! verdict: a sidecar that gates actions with evidence.
//!
//! It runs beside a service, intercepts the routes named in policy files, and
//! forwards, blocks or holds each call after checking the claims it carries
//! against its evidence. Apps can also call the native JSON API directly.
//!
//! The modules stand in layers, each importing only layers below it. The
//! doors ([`cli`], [`app`], [`api`], [`proxy`], [`offline`]) read requests.
//! Below them is what the doors share: [`server`] (the listeners),
//! [`runtime`] (the state the doors read), [`http`] (bodies, API keys, and
//! the one mapping of every domain error to a status), [`webhook`] and
//! [`witness`]. Then the decision path ([`decide`], [`policy`],
//! [`evidence`]) turns a request into a typed, durably audited decision
//! with the pure core ([`engine`], its own crate with no IO); under it lies
//! state ([`audit`], [`review`], [`jobs`]), and last the leaves ([`store`],
//! [`telemetry`], [`support`], [`config`]), which import no part above
//! them.
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
pub mod ext_authz;
pub mod http;
pub mod jobs;
pub mod offline;
pub mod policy;
pub mod proxy;
pub mod review;
pub mod runtime;
pub mod server;
pub mod shipping;
pub mod store;
pub mod support;
pub mod telemetry;
pub mod webhook;
pub mod witness;
