//! verdict: a sidecar that gates actions with evidence.
//!
//! # Layout
//! - [`config`]: the TOML file, defaults and flags merged into one [`config::Config`].
//! - [`policy`]: `policies/*.toml` → validated [`policy::PolicySet`]; route matching,
//!   extractors, param rules, the `ArcSwap` store and the hot-reload watcher.
pub mod config;
pub mod policy;
