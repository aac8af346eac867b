//! A request no route gates: stream it through (or block it when
//! `proxy.unmatched = "deny"`), reading its body only when the path is
//! gated under another method, to refuse a `_method` in it.

use crate::server::ReqBody;
use http::{Request, Response};
use http_body_util::BodyExt;

use super::upstream::Outbound;
use super::{blocked, read, Downstream, Proxy};
use crate::api::http_util::{self, full, RespBody};
use crate::config::Unmatched;
use crate::policy::{PolicySet, Route};

impl Proxy {
    /// Unmatched: stream through, or block when `proxy.unmatched = "deny"`.
    pub(super) async fn unmatched(
        &self,
        req: Request<ReqBody>,
        from: Downstream<'_>,
    ) -> Response<RespBody> {
        let request_id = from.request_id;
        if self.cfg.unmatched == Unmatched::Deny {
            self.stats.count("unmatched", "deny");
            return blocked(
                request_id,
                "deny",
                "unmatched_route",
                None,
                "no policy route matches this request",
            );
        }
        self.stats.unmatched_pass.inc();
        let (parts, body) = req.into_parts();
        let body = body.boxed_unsync();
        self.forward(Outbound::new(parts, body, from.conn, request_id, &[]).on(from.affinity))
            .await
    }

    /// Unmatched, with a body, on a path that `route` gates under another
    /// method: the body is read (within `limits.max_body_bytes`) and refused
    /// if it asks for another method with `_method`, else forwarded as read.
    pub(super) async fn unmatched_body(
        &self,
        req: Request<ReqBody>,
        from: Downstream<'_>,
        set: &PolicySet,
        route: &Route,
    ) -> Response<RespBody> {
        let request_id = from.request_id;
        let (parts, body) = req.into_parts();
        let limit = self.app.config.limits.max_body_bytes;
        let bytes = match http_util::read_body(&parts.headers, body, limit).await {
            Ok(b) => b,
            Err(e) => return e.into_response(request_id),
        };
        if let Some(refusal) = read::unmatched_body_refusal(route, &parts.headers, &bytes) {
            let probe = Request::from_parts(parts, ());
            return self.refuse(set, &probe, refusal, request_id).await;
        }
        self.stats.unmatched_pass.inc();
        self.forward(
            Outbound::new(parts, full(bytes), from.conn, request_id, &[]).on(from.affinity),
        )
        .await
    }
}
