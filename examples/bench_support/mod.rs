//! What the in-process benches (`batch_bench`, `store_bench`) share: the
//! HTTP client they drive the server with, the API key both write into
//! their keys file, and one authenticated JSON call.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The bench's API key (its hash goes into the keys file).
pub const KEY: &str = "bench-key-0123456789abcdef";

/// One JSON call with the bench's key; the status and the whole body.
pub async fn send(
    client: &HttpClient,
    method: Method,
    url: &str,
    body: Bytes,
) -> Result<(u16, Bytes), Error> {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .body(Full::new(body))?;
    let resp = client.request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}
