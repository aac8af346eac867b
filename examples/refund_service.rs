//! A tiny demo upstream for the walkthrough (docs/walkthrough.md): a "refund service" that
//! verdict sits in front of.
//!
//! ```text
//! cargo run --example refund_service                           # 127.0.0.1:9000
//! cargo run --example refund_service -- --listen 127.0.0.1:9001
//! ```
//!
//! It knows nothing about verdict and has no checks of its own: whatever
//! reaches `POST /api/orders/{id}/refunds` is executed. That is the point of
//! the demo: put `verdict serve --config examples/sidecar.toml` in front of it
//! and only the refunds that the policy allows (or a reviewer approves) ever
//! get here. Every executed refund is printed on stdout, so you can watch
//! which calls got through and that an approved review is executed once.
//!
//! Endpoints:
//!
//! - `POST /api/orders/{id}/refunds`: reads `amount` (and `currency`) from the
//!   JSON body and answers `201` with a new refund id, echoing the amount.
//! - `GET /api/orders/{id}`: the details of demo order `1001` or `1002`,
//!   with the invoice text a client would cite as evidence.
//! - `GET /billing/orders/{id}/invoice`: the same invoice as `text/plain`,
//!   as a billing system would serve it: the record verdict reads itself
//!   in the provenance walkthrough (`examples/provenance/`).
//! - `GET /healthz`: `200 {"status":"ok"}`.
//!
//! Nothing is stored: refund ids count up from 1 for each run. It listens on
//! loopback only by default and stops on Ctrl-C.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

const DEFAULT_LISTEN: &str = "127.0.0.1:9000";
/// Demo requests are small; anything bigger is refused.
const MAX_BODY: usize = 64 * 1024;

/// The demo orders: `(order id, customer, item, amount charged)`. Their
/// invoice text is the evidence a client quotes when it asks for a refund.
const ORDERS: [(&str, &str, &str, &str); 2] = [
    ("1001", "C-1001", "Vitamix blender", "100.00"),
    ("1002", "C-2002", "espresso machine", "750.00"),
];

fn order(id: &str) -> Option<Value> {
    let (id, customer, item, amount) = ORDERS.iter().find(|o| o.0 == id)?;
    Some(json!({
        "order_id": id,
        "customer_id": customer,
        "item": item,
        "amount_charged": amount,
        "currency": "USD",
        "status": "delivered",
        "invoice": {
            "source_id": format!("inv-{id}"),
            "text": invoice(id)?,
        },
    }))
}

/// The invoice text of demo order `id`.
fn invoice(id: &str) -> Option<String> {
    let (id, _, item, amount) = ORDERS.iter().find(|o| o.0 == id)?;
    Some(format!(
        "Invoice INV-{id} for order {id}: {item}, amount charged ${amount}. \
         Courier note: package damaged in transit."
    ))
}

struct State {
    next_refund: AtomicU64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen: SocketAddr = listen_arg()?.parse()?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("refund_service listening on http://{listen}");
    println!("  POST /api/orders/{{id}}/refunds   GET /api/orders/{{id}}   GET /healthz");
    println!("  GET /billing/orders/{{id}}/invoice");
    let state = Arc::new(State {
        next_refund: AtomicU64::new(1),
    });
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = tokio::signal::ctrl_c() => {
                println!("refund_service: Ctrl-C, bye");
                return Ok(());
            }
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                eprintln!("refund_service: accept failed: {e}");
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(state.clone(), req));
            if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                eprintln!("refund_service: connection error: {e}");
            }
        });
    }
}

/// `--listen ADDR` (or `--listen=ADDR`); anything else is a usage error.
fn listen_arg() -> Result<String, String> {
    let mut args = std::env::args().skip(1);
    let mut listen = DEFAULT_LISTEN.to_string();
    while let Some(a) = args.next() {
        if a == "--listen" {
            listen = args.next().ok_or("--listen needs an address")?;
        } else if let Some(v) = a.strip_prefix("--listen=") {
            listen = v.to_string();
        } else {
            return Err(format!(
                "unknown argument {a:?}; usage: refund_service [--listen {DEFAULT_LISTEN}]"
            ));
        }
    }
    Ok(listen)
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resp = match (&parts.method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => reply(StatusCode::OK, json!({"status": "ok"})),
        (&Method::GET, ["api", "orders", id]) => match order(id) {
            Some(o) => reply(StatusCode::OK, o),
            None => error(StatusCode::NOT_FOUND, "no such order (try 1001 or 1002)"),
        },
        (&Method::GET, ["billing", "orders", id, "invoice"]) => match invoice(id) {
            Some(text) => {
                let mut resp = Response::new(Full::new(Bytes::from(text)));
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                resp
            }
            None => error(StatusCode::NOT_FOUND, "no such invoice (try 1001 or 1002)"),
        },
        (&Method::POST, ["api", "orders", id, "refunds"]) => {
            match Limited::new(body, MAX_BODY).collect().await {
                Ok(b) => refund(&state, id, &parts.headers, &b.to_bytes()),
                Err(_) => error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body too large or unreadable",
                ),
            }
        }
        _ => error(StatusCode::NOT_FOUND, "no such endpoint"),
    };
    Ok(resp)
}

/// Executes a refund: no questions asked (verdict asked them already).
fn refund(
    state: &State,
    order_id: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response<Full<Bytes>> {
    if order(order_id).is_none() {
        return error(StatusCode::NOT_FOUND, "no such order (try 1001 or 1002)");
    }
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return error(StatusCode::BAD_REQUEST, "the body must be JSON");
    };
    let Some(amount) = req.get("amount").filter(|v| v.is_number()).cloned() else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "amount must be a number");
    };
    let currency = req.get("currency").and_then(Value::as_str).unwrap_or("USD");
    let n = state.next_refund.fetch_add(1, Ordering::Relaxed);
    let refund_id = format!("rf_{n:04}");
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // The headers verdict adds on the way through (absent when called directly).
    let decision = header("x-verdict-decision").unwrap_or("-");
    let via = match (header("x-verdict-review-id"), header("x-verdict-record-id")) {
        (Some(review), _) => format!("review {review}"),
        (None, Some(record)) => format!("record {record}"),
        (None, None) => "no verdict headers".to_string(),
    };
    println!(
        "EXECUTED refund {refund_id}: order {order_id}, {amount} {currency}, customer {} (verdict: {decision}, {via})",
        header("x-customer-id").unwrap_or("-"),
    );
    reply(
        StatusCode::CREATED,
        json!({
            "refund_id": refund_id,
            "order_id": order_id,
            "amount": amount,
            "currency": currency,
            "status": "executed",
        }),
    )
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    reply(status, json!({"error": {"message": message}}))
}
