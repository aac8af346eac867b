//! verdict: a sidecar that gates actions with evidence.
//!
//! # Layout
//! - [`config`]: the TOML file, defaults and flags merged into one [`config::Config`].
pub mod config;
