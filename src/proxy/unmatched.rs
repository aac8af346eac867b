//! A request no route gates: stream it through (or block it when
//! `proxy.unmatched = "deny"`), reading its body only when the path is
//! gated under another method, to refuse a `_method` in it. Even then only
//! a body that is or may be a JSON object is read whole: any other is
//! streamed on once its first character shows what it is.

use crate::server::ReqBody;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body::Frame;
use http_body_util::BodyExt;

use super::upstream::Outbound;
use super::{blocked, guard, read, Downstream, Proxy};
use crate::config::Unmatched;
use crate::http::error::ApiError;
use crate::http::{full, BoxError, RespBody};
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
    /// method. A body labelled JSON, or compressed, or that begins like a
    /// JSON object, is read whole (within `limits.max_body_bytes`) and
    /// refused if it asks for another method with `_method`, else forwarded
    /// as read. Any other body (an upload, a form of another kind) is
    /// streamed on after the bytes that showed its first character.
    pub(super) async fn unmatched_body(
        &self,
        req: Request<ReqBody>,
        from: Downstream<'_>,
        set: &PolicySet,
        route: &Route,
    ) -> Response<RespBody> {
        let request_id = from.request_id;
        let (parts, mut body) = req.into_parts();
        let limit = self.app.config.limits.max_body_bytes;
        let whole = read::body_read_whole(&parts.headers);
        // The first bytes, until they show whether this is a JSON object.
        let mut head = BytesMut::new();
        let mut ended = false;
        if !whole {
            loop {
                match guard::prefix_opens_object(&head, ended) {
                    Some(false) => {
                        self.stats.unmatched_pass.inc();
                        let rest: RespBody = if ended {
                            full(head.freeze())
                        } else {
                            Prefixed {
                                head: Some(head.freeze()),
                                rest: body,
                            }
                            .boxed_unsync()
                        };
                        return self
                            .forward(
                                Outbound::new(parts, rest, from.conn, request_id, &[])
                                    .on(from.affinity),
                            )
                            .await;
                    }
                    Some(true) => break,
                    None if head.len() > limit => {
                        return ApiError::PayloadTooLarge(limit).into_response(request_id)
                    }
                    None => {}
                }
                match body.frame().await {
                    None => ended = true,
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            head.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => {
                        return crate::http::body_error(e.as_ref()).into_response(request_id)
                    }
                }
            }
        }
        // Read whole: what came first, then the rest within the limit.
        let bytes = if ended {
            head.freeze()
        } else {
            let rest = Prefixed {
                head: Some(head.freeze()),
                rest: body,
            };
            match crate::http::read_body(&parts.headers, rest, limit).await {
                Ok(b) => b,
                Err(e) => return e.into_response(request_id),
            }
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

/// A request body whose first bytes were already read: they come first,
/// then the rest as it arrives.
struct Prefixed {
    head: Option<Bytes>,
    rest: ReqBody,
}

impl http_body::Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(head) = self.head.take().filter(|h| !h.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.head.as_ref().is_none_or(Bytes::is_empty) && self.rest.is_end_stream()
    }
}
