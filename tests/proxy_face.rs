//! Tests of the reverse proxy and the listeners against real servers and
//! upstreams on 127.0.0.1:0: routing and gating, hostile and differential
//! requests, evidence from upstreams, live policy reload, slow bodies,
//! connection limits, drain and injected faults.
//!
//! One test binary of a few (see Cargo.toml): each module is one file of
//! tests/, named as before, so `cargo test --test proxy_face -- MODULE::` runs one.

// Tests may panic on setup failures, and a test reads as one scenario, top
// to bottom: the unwrap and 100-line limits are for src/.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod support;

mod differential;
mod ext_authz;
mod faults;
mod gate;
mod hostile;
mod provenance;
mod proxy;
mod raw_pass;
mod reload;
mod server_limits;
mod shutdown;
mod slow_bodies;
mod traces;
