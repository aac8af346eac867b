//! The proxy's phases for Envoy's external authorization: a checking proxy
//! reads, routes, refuses, decides and records a request exactly as the
//! forwarding one does (the same code, one snapshot of the same policies),
//! because a second reading of the same request is where a gate and its
//! proxy come to disagree. Only the two things Envoy does itself differ:
//! a request let through is not forwarded but answered [`Passed`], and a
//! call that needs review is not held; its review is created and answered
//! at once with the `202` a hold timeout gives, and an approval forwards
//! nothing (the ext_authz door turns both into Envoy's answers).

use std::sync::Arc;

use http::{Request, Response, StatusCode, Uri};

use super::upstream::Outbound;
use super::{Mode, Proxy, ProxyStats};
use crate::config::ProxyConfig;
use crate::http::{full, RespBody};
use crate::runtime::App;
use crate::server::{ConnInfo, ReqBody};

/// A request a checking proxy let through, in its answer's extensions: the
/// headers Envoy should set on the request it forwards (the decision, its
/// record, a started trace), and the client's own `x-verdict-*` headers,
/// which must not reach the upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Passed {
    pub set: Vec<(String, String)>,
    pub remove: Vec<String>,
}

impl Proxy {
    /// A proxy that checks for Envoy: the proxy's settings and metrics, no
    /// upstream of its own.
    pub fn checker(app: Arc<App>, cfg: ProxyConfig, stats: ProxyStats) -> Result<Proxy, String> {
        let mut proxy = Proxy::new(app, Uri::default(), cfg, stats)?;
        proxy.mode = Mode::Check;
        proxy.raw = None;
        Ok(proxy)
    }

    /// Answers the request Envoy asks about, from the client at `conn`:
    /// 200 with [`Passed`] when it may go on, otherwise the answer the
    /// proxy would give the client (403, 202, 4xx refusals, 503).
    pub async fn check(&self, req: Request<ReqBody>, conn: ConnInfo) -> Response<RespBody> {
        debug_assert_eq!(self.mode, Mode::Check);
        self.handle_from(req, conn, None).await
    }
}

/// What a checking proxy answers where the forwarding one would forward
/// `out`.
pub(super) fn passed(out: &Outbound<'_>) -> Response<RespBody> {
    let passed = Passed {
        set: out
            .extra
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
        remove: out
            .headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-verdict-"))
            .map(|k| k.as_str().to_string())
            .collect(),
    };
    let mut resp = Response::new(full(bytes::Bytes::new()));
    *resp.status_mut() = StatusCode::OK;
    resp.extensions_mut().insert(passed);
    resp
}
