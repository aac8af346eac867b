//! Test support: start a real sidecar in-process on `127.0.0.1:0` with a temp
//! data dir and a keys file, and talk to it over real HTTP.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::net::SocketAddr;
use std::path::PathBuf;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};
use verdict::app::Running;
use verdict::config::{Config, Overrides};

/// Every scope but `review`.
pub const APP_KEY: &str = "test-app-key-0123456789";
/// `review` and `audit`.
pub const REVIEW_KEY: &str = "test-reviewer-key-0123456789";
/// `verify` only.
pub const VERIFY_ONLY_KEY: &str = "test-verify-only-key-0123456789";
/// Every scope but `review`, a second tenant.
pub const OTHER_KEY: &str = "test-other-tenant-key-0123456789";

pub fn sha(s: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(s.as_bytes())))
}

pub fn keys_toml() -> String {
    format!(
        "[[key]]\nname = \"app\"\nhash = \"{}\"\nscopes = [\"verify\", \"authorize\", \"batch\", \"audit\"]\n\n\
         [[key]]\nname = \"reviewer\"\nhash = \"{}\"\nscopes = [\"review\", \"audit\"]\n\n\
         [[key]]\nname = \"limited\"\nhash = \"{}\"\nscopes = [\"verify\"]\n\n\
         [[key]]\nname = \"other\"\nhash = \"{}\"\nscopes = [\"verify\", \"authorize\", \"batch\"]\n",
        sha(APP_KEY),
        sha(REVIEW_KEY),
        sha(VERIFY_ONLY_KEY),
        sha(OTHER_KEY)
    )
}

/// A test config: loopback port 0, temp dirs, the test keys file.
pub fn test_config(dir: &tempfile::TempDir) -> Config {
    let root = dir.path();
    std::fs::create_dir_all(root.join("policies")).expect("policies dir");
    std::fs::write(root.join("keys.toml"), keys_toml()).expect("keys file");
    let overrides = Overrides {
        api_listen: Some("127.0.0.1:0".parse().expect("addr")),
        proxy_listen: Some("127.0.0.1:0".parse().expect("addr")),
        policies: Some(root.join("policies")),
        data_dir: Some(root.join("data")),
        keys: Some(root.join("keys.toml")),
        ..Default::default()
    };
    Config::defaults(&overrides).expect("default config")
}

pub struct TestServer {
    pub running: Option<Running>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    client: Client<HttpConnector, Full<Bytes>>,
}

pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the DESIGN §3 error body with `code`.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        let v = self.json();
        assert_eq!(v["error"]["code"], code, "{}", self.text());
        assert!(v["error"]["message"].is_string(), "{}", self.text());
        assert!(v["error"]["request_id"].is_string(), "{}", self.text());
    }
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// Starts a server after `edit` adjusts the test config.
    pub async fn start_with(edit: impl FnOnce(&mut Config)) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = test_config(&dir);
        edit(&mut config);
        let running = verdict::app::start(config).await.expect("server starts");
        TestServer {
            addr: running.api_addr,
            running: Some(running),
            dir,
            client: client(),
        }
    }

    /// Wraps an already running server (after a restart on the same dir).
    pub fn attach(running: Running, dir: tempfile::TempDir) -> TestServer {
        TestServer {
            addr: running.api_addr,
            running: Some(running),
            dir,
            client: client(),
        }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Resp {
        let mut b = Request::builder().method(method).uri(self.url(path));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(body.into())).expect("request");
        let resp = self.client.request(req).await.expect("response");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    }

    pub async fn get(&self, path: &str, key: Option<&str>) -> Resp {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut h = vec![];
        if let Some(a) = &auth {
            h.push(("authorization", a.as_str()));
        }
        self.send(Method::GET, path, &h, Bytes::new()).await
    }

    pub async fn post_json(&self, path: &str, body: &str, key: Option<&str>) -> Resp {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut h = vec![("content-type", "application/json")];
        if let Some(a) = &auth {
            h.push(("authorization", a.as_str()));
        }
        self.send(Method::POST, path, &h, body.to_string()).await
    }

    /// Drains the server; returns the temp dir so that callers can inspect
    /// the data it left (dropping it deletes everything).
    pub async fn shutdown(mut self) -> tempfile::TempDir {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
        self.dir
    }
}
