//! What the in-process benches (`batch_bench`, `store_bench`) share: the
//! HTTP client they drive the server with, the API key, the temp dir a
//! server starts from, and one authenticated JSON call.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use sha2::{Digest, Sha256};
use verdict::config::Overrides;

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

/// A temp dir holding `policy` as `policies/refunds.toml` and a keys file
/// with [`KEY`] (scopes verify, authorize, batch), and the overrides that
/// point a server at it, listening on 127.0.0.1:0.
pub fn bench_dir(policy: &str) -> Result<(tempfile::TempDir, Overrides), Error> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::create_dir_all(root.join("policies"))?;
    std::fs::write(root.join("policies/refunds.toml"), policy)?;
    let hash = hex::encode(Sha256::digest(KEY.as_bytes()));
    std::fs::write(
        root.join("keys.toml"),
        format!(
            "[[key]]\nname = \"bench\"\nhash = \"sha256:{hash}\"\n\
             scopes = [\"verify\", \"authorize\", \"batch\"]\n"
        ),
    )?;
    let overrides = Overrides {
        api_listen: Some("127.0.0.1:0".parse()?),
        proxy_listen: Some("127.0.0.1:0".parse()?),
        policies: Some(root.join("policies")),
        data_dir: Some(root.join("data")),
        keys: Some(root.join("keys.toml")),
        ..Default::default()
    };
    Ok((dir, overrides))
}
