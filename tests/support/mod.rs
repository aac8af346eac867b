//! Test support: start a real sidecar in-process on `127.0.0.1:0` with a temp
//! data dir and a keys file, and talk to it over real HTTP.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod postgres;

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

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

    /// Reads a whole response.
    pub async fn read(resp: http::Response<hyper::body::Incoming>) -> Resp {
        let (parts, body) = resp.into_parts();
        Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: body.collect().await.expect("body").to_bytes(),
        }
    }

    /// Asserts the JSON error body (docs/api.md) with `code`.
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

    /// Starts a server with `policies` (file name, text) in its policies
    /// dir, after `edit` adjusts the test config.
    pub async fn with_policies(
        policies: &[(&str, &str)],
        edit: impl FnOnce(&mut Config),
    ) -> TestServer {
        Self::start_with(|c| {
            for (name, text) in policies {
                std::fs::write(c.policies_dir.join(name), text).expect("policy file");
            }
            edit(c);
        })
        .await
    }

    /// The running app.
    pub fn app(&self) -> &std::sync::Arc<verdict::app::App> {
        &self.running.as_ref().expect("running").app
    }

    /// The proxy listener (the config must name an upstream).
    pub fn proxy_addr(&self) -> SocketAddr {
        self.running
            .as_ref()
            .and_then(|r| r.proxy_addr)
            .expect("the proxy listens")
    }

    /// Envoy's ext_authz listener (the config must set `ext_authz_listen`).
    pub fn ext_authz_addr(&self) -> SocketAddr {
        self.running
            .as_ref()
            .and_then(|r| r.ext_authz_addr)
            .expect("ext_authz listens")
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
        Resp::read(self.client.request(req).await.expect("response")).await
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
        self.post_json_with(path, body.to_string(), key, &[]).await
    }

    /// [`TestServer::post_json`] with any body bytes and `extra` headers.
    pub async fn post_json_with(
        &self,
        path: &str,
        body: impl Into<Bytes>,
        key: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Resp {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut h = vec![("content-type", "application/json")];
        if let Some(a) = &auth {
            h.push(("authorization", a.as_str()));
        }
        h.extend_from_slice(extra);
        self.send(Method::POST, path, &h, body).await
    }

    /// `POST /v2/reviews/{id}/{action}` (`approve` or `reject`) with the
    /// body `{"reviewer": reviewer}`.
    pub async fn resolve(&self, id: &str, action: &str, reviewer: &str, key: Option<&str>) -> Resp {
        let body = serde_json::json!({ "reviewer": reviewer }).to_string();
        let path = format!("/v2/reviews/{id}/{action}");
        self.post_json(&path, &body, key).await
    }

    /// `GET /v2/reviews/{id}`.
    pub async fn review(&self, id: &str, key: Option<&str>) -> Resp {
        self.get(&format!("/v2/reviews/{id}"), key).await
    }

    /// Polls `/health/detailed` (up to `within`) until `reached` holds for
    /// its answer, and returns that answer.
    pub async fn health_until(
        &self,
        what: &str,
        within: Duration,
        reached: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        eventually(what, within, || async {
            let h = self.get("/health/detailed", None).await.json();
            if reached(&h) {
                Ok(h)
            } else {
                Err(h)
            }
        })
        .await
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

/// One request the mock upstream received.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A loopback upstream that records every request. Paths:
/// `/slow` answers after 3 s; `/evidence` is a line of plain text;
/// `/redirect-in` and `/redirect-out` redirect inside and outside the
/// origin; `/stream` sends one chunk, waits until the test
/// calls `release_stream`, then sends 8 MiB more; anything else answers 200
/// JSON `{"ok":true,"path":...}`.
pub struct MockUpstream {
    pub addr: SocketAddr,
    pub calls: std::sync::Arc<std::sync::Mutex<Vec<Call>>>,
    release: std::sync::Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl MockUpstream {
    pub async fn start() -> MockUpstream {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let release = std::sync::Arc::new(tokio::sync::Notify::new());
        let (c2, r2) = (calls.clone(), release.clone());
        let (addr, task) = serve_http(move |parts, body| {
            let (calls, release) = (c2.clone(), r2.clone());
            async move {
                let path = parts
                    .uri
                    .path_and_query()
                    .map(|p| p.to_string())
                    .unwrap_or_default();
                calls.lock().expect("calls").push(Call {
                    method: parts.method.to_string(),
                    path: path.clone(),
                    headers: parts.headers.clone(),
                    body,
                });
                if path.starts_with("/slow") {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    http::Response::new(Full::new(Bytes::from_static(b"late")).boxed())
                } else if path.starts_with("/evidence") {
                    http::Response::new(
                        Full::new(Bytes::from_static(
                            b"Refunds are issued within 14 days of delivery.",
                        ))
                        .boxed(),
                    )
                } else if path.starts_with("/redirect-out") {
                    let mut r = http::Response::new(Full::new(Bytes::new()).boxed());
                    *r.status_mut() = http::StatusCode::FOUND;
                    r.headers_mut().insert(
                        "location",
                        http::HeaderValue::from_static("http://127.0.0.2:9/evidence"),
                    );
                    r
                } else if path.starts_with("/redirect-in") {
                    let mut r = http::Response::new(Full::new(Bytes::new()).boxed());
                    *r.status_mut() = http::StatusCode::FOUND;
                    r.headers_mut()
                        .insert("location", http::HeaderValue::from_static("/evidence"));
                    r
                } else if path.starts_with("/stream") {
                    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
                    tokio::spawn(async move {
                        let _ = tx.send(Bytes::from_static(b"first-chunk;")).await;
                        release.notified().await;
                        let block = Bytes::from(vec![b'x'; 1 << 20]);
                        for _ in 0..8 {
                            if tx.send(block.clone()).await.is_err() {
                                break;
                            }
                        }
                    });
                    http::Response::new(ChannelBody(rx).boxed())
                } else {
                    let out = serde_json::json!({"ok": true, "path": path}).to_string();
                    let mut r = http::Response::new(Full::new(Bytes::from(out)).boxed());
                    r.headers_mut().insert(
                        "content-type",
                        http::HeaderValue::from_static("application/json"),
                    );
                    r
                }
            }
        })
        .await;
        MockUpstream {
            addr,
            calls,
            release,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn count(&self) -> usize {
        self.calls.lock().expect("calls").len()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }

    pub fn release_stream(&self) {
        self.release.notify_one();
    }

    /// Stops accepting and drops every connection task's listener.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// The response body type of the loopback test servers.
pub type TestBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// A loopback HTTP/1 and HTTP/2 server that hands each request, its body
/// read whole, to `handler` (one whose body fails to arrive gets a 400). Returns its address and the accept task
/// (abort it to stop accepting).
pub async fn serve_http<F, Fut>(handler: F) -> (SocketAddr, tokio::task::JoinHandle<()>)
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<TestBody>> + Send + 'static,
{
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                break;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let handler = handler.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        // A request whose body never arrived whole is not
                        // handed on (nor recorded), as a real server would
                        // not act on it.
                        let Ok(body) = body.collect().await.map(|c| c.to_bytes()) else {
                            let mut r = http::Response::new(Full::new(Bytes::new()).boxed());
                            *r.status_mut() = http::StatusCode::BAD_REQUEST;
                            return Ok(r);
                        };
                        Ok::<_, std::convert::Infallible>(handler(parts, body).await)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

/// A response body fed from a channel, one data frame per message.
pub struct ChannelBody(pub tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|o| o.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

// === the real binary ===

/// `verdict serve` on `127.0.0.1:0` with `dir`'s keys file (written when
/// absent), policies and data.
fn serve_command(bin: &str, dir: &std::path::Path) -> std::process::Command {
    std::fs::create_dir_all(dir.join("policies")).expect("policies dir");
    if !dir.join("keys.toml").exists() {
        std::fs::write(dir.join("keys.toml"), keys_toml()).expect("keys file");
    }
    let mut command = std::process::Command::new(bin);
    command
        .args(["serve", "--api-listen", "127.0.0.1:0", "--keys"])
        .arg(dir.join("keys.toml"))
        .arg("--policies")
        .arg(dir.join("policies"))
        .arg("--data-dir")
        .arg(dir.join("data"));
    command
}

/// Starts the real `verdict` binary on `127.0.0.1:0` with `dir`'s keys file,
/// policies and data, and returns the child and its API address (read from
/// the "api listening" log line). The rest of its log is drained.
pub fn spawn_binary(bin: &str, dir: &std::path::Path) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = serve_command(bin, dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let addr = loop {
        let Some(line) = lines.next() else {
            let status = child.wait().expect("wait");
            panic!("the server exited before listening: {status}");
        };
        let line = line.expect("a log line");
        if line.contains("api listening") {
            let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
            break v["addr"].as_str().expect("an address").to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// Runs `verdict serve` (as [`spawn_binary`] starts it, with `args` added)
/// for a start that must fail: its output once it exits, or, when it is
/// still running after `within`, `Err` with what it wrote until it was
/// killed.
pub fn serve_until_exit(
    bin: &str,
    dir: &std::path::Path,
    args: &[&str],
    within: Duration,
) -> Result<std::process::Output, std::process::Output> {
    let mut child = serve_command(bin, dir)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let exited = wait_exit(&mut child, within).is_some();
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("its output");
    if exited {
        Ok(out)
    } else {
        Err(out)
    }
}

/// Runs `verdict <args> <path>` (the real binary) and returns its output.
pub fn cli(bin: &str, args: &[&str], path: &std::path::Path) -> std::process::Output {
    std::process::Command::new(bin)
        .args(args)
        .arg(path)
        .output()
        .expect("the binary runs")
}

/// Asserts an exit code, showing stderr when it differs.
pub fn assert_exit(out: &std::process::Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Like [`spawn_binary`], with `RUST_LOG=<filter>`, and every byte the
/// process writes to stdout and stderr captured into the returned buffer.
pub fn spawn_binary_logged(
    bin: &str,
    dir: &std::path::Path,
    filter: &str,
) -> (
    std::process::Child,
    String,
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    spawn_binary_with(bin, dir, filter, &[], &[])
}

/// [`spawn_binary_logged`] with more `serve` arguments and environment
/// variables for the child.
pub fn spawn_binary_with(
    bin: &str,
    dir: &std::path::Path,
    filter: &str,
    args: &[&str],
    envs: &[(&str, &std::path::Path)],
) -> (
    std::process::Child,
    String,
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    use std::io::Read;
    let mut child = serve_command(bin, dir)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .env("RUST_LOG", filter)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let pipes: Vec<Box<dyn Read + Send>> = vec![
        Box::new(child.stdout.take().expect("piped stdout")),
        Box::new(child.stderr.take().expect("piped stderr")),
    ];
    for mut pipe in pipes {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock().expect("log").extend_from_slice(&buf[..n]);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        assert!(
            Instant::now() < deadline,
            "the server never logged its address"
        );
        let text = String::from_utf8_lossy(&log.lock().expect("log")).into_owned();
        let found = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n') && l.contains("api listening"))
            .find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l.trim()).ok()?;
                v["addr"].as_str().map(str::to_string)
            });
        if let Some(addr) = found {
            break addr;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (child, addr, log)
}

/// Stops a server from [`spawn_binary_with`] with SIGTERM, waits (up to
/// 15 s) for it to drain and exit, so every buffered log line is written,
/// and then (up to 5 s) for the pipe readers to reach the end of its output
/// in `log`.
pub fn terminate(child: &mut std::process::Child, log: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    sigterm(child);
    if wait_exit(child, Duration::from_secs(15)).is_none() {
        let _ = child.kill();
        panic!("the server did not stop on SIGTERM");
    }
    // Each reader holds a clone of `log` until its pipe ends.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::sync::Arc::strong_count(log) > 1 {
        assert!(Instant::now() < deadline, "the log pipes did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends SIGTERM to `child`.
pub fn sigterm(child: &std::process::Child) {
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
}

/// Waits (blocking, polling every 50 ms) up to `within` for `child` to exit.
pub fn wait_exit(
    child: &mut std::process::Child,
    within: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// === requests to any listener ===

/// One request to `base` (e.g. `http://127.0.0.1:1234`) on a new client;
/// [`within`] bounds it.
pub async fn call(
    base: &str,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Resp {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = client()
        .request(b.body(Full::new(body.into())).expect("request"))
        .await
        .expect("response");
    Resp::read(resp).await
}

/// Awaits `fut`; panics naming `what` when it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    let shown: String = what.chars().take(80).collect();
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{shown}: no answer within {limit:?}"))
}

// === waiting for a condition ===

/// How often [`eventually`] and [`wait_for`] look again.
pub const POLL: Duration = Duration::from_millis(20);

/// Runs `check` every [`POLL`] until it returns `Ok`, and returns that
/// value; panics with `what` and the last `Err` once `within` has passed.
/// For a state the test must reach, in place of a fixed sleep.
pub async fn eventually<T, E: Display, Fut: Future<Output = Result<T, E>>>(
    what: &str,
    within: Duration,
    check: impl FnMut() -> Fut,
) -> T {
    eventually_every(what, within, POLL, check).await
}

/// [`eventually`], looking again every `every`.
pub async fn eventually_every<T, E: Display, Fut: Future<Output = Result<T, E>>>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: impl FnMut() -> Fut,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}: {last}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// [`eventually_every`] for a test that waits without a runtime: runs
/// `check` every `every` on this thread.
pub fn eventually_blocking<T, E: Display>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}: {last}"
            ),
        }
        std::thread::sleep(every);
    }
}

/// [`eventually`] for a plain condition.
pub async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    eventually(what, within, || {
        std::future::ready(if cond() { Ok(()) } else { Err("still false") })
    })
    .await
}

// === the refund fixture: one policy, its evidence, a gated server ===

/// The claim most refund tests make; [`INVOICE_77`] supports it.
pub const DAMAGED: &str = "The package was damaged in transit.";

/// Evidence for a $100 refund on order 77.
pub const INVOICE_77: &str =
    "Invoice INV-2291 for order 77: amount charged $100.00. Courier note: package damaged in transit.";

/// [`INVOICE_77`] naming the item too.
pub const INVOICE_77_BLENDER: &str = "Invoice INV-2291 for order 77: Vitamix blender, amount charged $100.00. Courier note: package damaged in transit.";

/// The `refund.create` action and, unless [`RefundPolicy::action_only`], its
/// gated route `create-refund`: `POST /api/orders/{order_id}/refunds`,
/// params `order_id` and `amount` (and any [`RefundPolicy::param`]), claims
/// from `body:/claims`, sources from `body:/evidence`. Each test states the
/// floors and rules it relies on; [`RefundPolicy::build`] writes the file.
#[derive(Clone)]
pub struct RefundPolicy {
    mode: &'static str,
    min_coverage: Option<&'static str>,
    rules: String,
    /// Lines of the `[[action]]` table itself, before its rules.
    action_lines: String,
    params: String,
    hold: Option<String>,
    route: bool,
}

impl RefundPolicy {
    /// `decision_mode = mode`, `min_coverage = 0.85`, citations optional,
    /// no rules, the route without a hold.
    pub fn new(mode: &'static str) -> RefundPolicy {
        RefundPolicy {
            mode,
            min_coverage: Some("0.85"),
            rules: String::new(),
            action_lines: String::new(),
            params: String::new(),
            hold: None,
            route: true,
        }
    }

    /// Another `min_coverage` floor, or none.
    pub fn min_coverage(mut self, floor: Option<&'static str>) -> RefundPolicy {
        self.min_coverage = floor;
        self
    }

    /// A line of the `[[action]]` table, e.g. `approvals = 2`.
    pub fn action_line(mut self, line: &str) -> RefundPolicy {
        self.action_lines += line;
        self.action_lines.push('\n');
        self
    }

    /// The rule that sends refunds above `limit` to review.
    pub fn review_over(self, limit: u64) -> RefundPolicy {
        self.rule("amount", "gt", Some(&limit.to_string()), "review", None)
    }

    /// An `[[action.rule]]`; `value` is TOML as written.
    pub fn rule(
        mut self,
        param: &str,
        op: &str,
        value: Option<&str>,
        effect: &str,
        message: Option<&str>,
    ) -> RefundPolicy {
        self.rules += &format!("\n  [[action.rule]]\n  param = \"{param}\"\n  op = \"{op}\"\n");
        if let Some(v) = value {
            self.rules += &format!("  value = {v}\n");
        }
        self.rules += &format!("  effect = \"{effect}\"\n");
        if let Some(m) = message {
            self.rules += &format!("  message = \"{m}\"\n");
        }
        self
    }

    /// One more route param, `name = "from"` (e.g. `header:x-agent`).
    pub fn param(mut self, name: &str, from: &str) -> RefundPolicy {
        self.params += &format!(", {name} = \"{from}\"");
        self
    }

    /// `on_review = "hold"` with this `hold_timeout`.
    pub fn hold(mut self, timeout: &str) -> RefundPolicy {
        self.hold = Some(timeout.to_string());
        self
    }

    /// The action without the route.
    pub fn action_only(mut self) -> RefundPolicy {
        self.route = false;
        self
    }

    /// The policy file.
    pub fn build(&self) -> String {
        let coverage = self
            .min_coverage
            .map(|f| format!(" min_coverage = {f},"))
            .unwrap_or_default();
        let mut out = format!(
            "\n[[action]]\ntype = \"refund.create\"\nrequirements = {{ decision_mode = \"{}\",{coverage} citations = \"optional\" }}\n{}{}",
            self.mode, self.action_lines, self.rules
        );
        if self.route {
            out += &format!(
                "\n[[route]]\nname = \"create-refund\"\nmethod = \"POST\"\npath = \"/api/orders/{{order_id}}/refunds\"\naction = \"refund.create\"\nparams = {{ order_id = \"path:order_id\", amount = \"body:/amount\"{} }}\nclaims = \"body:/claims\"\nsources = \"body:/evidence\"\n",
                self.params
            );
            if let Some(h) = &self.hold {
                out += &format!("on_review = \"hold\"\nhold_timeout = \"{h}\"\n");
            }
        }
        out
    }
}

/// A sidecar whose proxy gates its policy files in front of a fresh
/// [`MockUpstream`].
pub struct Gated {
    pub s: TestServer,
    pub up: MockUpstream,
    /// `http://` and the proxy listener.
    pub proxy: String,
}

impl Gated {
    /// Starts the upstream, then the sidecar with `policies` (file name,
    /// text) and that upstream, after `edit` adjusts the config.
    pub async fn start(policies: &[(&str, &str)], edit: impl FnOnce(&mut Config)) -> Gated {
        let up = MockUpstream::start().await;
        let url = up.url();
        let s = TestServer::with_policies(policies, |c| {
            c.proxy.upstream = Some(url);
            edit(c);
        })
        .await;
        let proxy = format!("http://{}", s.proxy_addr());
        Gated { s, up, proxy }
    }

    /// The proxy listener.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.s.proxy_addr()
    }

    /// `GET path` through the proxy, on a new client.
    pub async fn get(&self, path: &str) -> Resp {
        call(&self.proxy, Method::GET, path, &[], Bytes::new()).await
    }
}

/// A DELETE route next to the shipped refund route, for the gate tests: any
/// decided DELETE is denied (it carries no claims), so a method override
/// that slips past the gate shows up as an upstream call.
pub const DELETE_POLICY: &str = r#"
[[action]]
type = "order.delete"
require_claims = true

[[route]]
name = "delete-order"
method = "DELETE"
path = "/api/orders/{order_id}"
action = "order.delete"
params = { order_id = "path:order_id" }
"#;

/// The shipped `policies/refunds.toml`.
pub fn shipped_refunds() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/policies/refunds.toml"
    ))
    .expect("policies/refunds.toml")
}

// === other shared checks ===

/// A TLS client config that trusts only `root`.
pub fn trusting(root: rustls_pki_types::CertificateDer<'static>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).expect("a root certificate");
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth()
}

/// Asserts that an audit receipt (an authorize answer's `audit` object)
/// carries every field a client needs to check it offline.
pub fn assert_receipt(receipt: &serde_json::Value) {
    for k in [
        "record_id",
        "record_hash",
        "key_id",
        "merkle_root",
        "proof",
        "leaf_index",
        "tree_size",
    ] {
        assert!(receipt.get(k).is_some(), "{k}: {receipt}");
    }
}

/// Runs the engine on one claim (`id`) against `evidence`: one source per
/// passage (`e1`, `e2`, …), no citations, default params.
pub fn check_claim(id: &str, claim: &str, evidence: &[String]) -> verdict::engine::Check {
    use verdict::engine::{verify, Claim, Params, Source};
    let sources: Vec<Source> = evidence
        .iter()
        .enumerate()
        .map(|(i, text)| Source {
            id: format!("e{}", i + 1),
            text: Some(text.clone()),
        })
        .collect();
    let claim = Claim {
        id: id.to_string(),
        text: claim.to_string(),
        citations: Vec::new(),
    };
    let mut checks = verify(&[claim], &sources, &Params::default());
    assert_eq!(checks.len(), 1, "{id}: one check per claim");
    checks.remove(0)
}

// === request bodies ===

/// An authorize request body: `{"action": {"type": ty}}` and whatever the
/// builder methods add. JSON objects serialize with sorted keys, so the
/// order of the calls does not change the bytes.
#[derive(Clone)]
pub struct Authorize(serde_json::Value);

impl Authorize {
    pub fn new(ty: &str) -> Authorize {
        Authorize(serde_json::json!({"action": {"type": ty}}))
    }

    /// `action.params`.
    pub fn params(mut self, params: serde_json::Value) -> Authorize {
        self.0["action"]["params"] = params;
        self
    }

    /// `claims`, as given (strings or claim objects).
    pub fn claims(self, claims: serde_json::Value) -> Authorize {
        self.with("claims", claims)
    }

    /// Appends the source `{"source_id": id, "text": text}`.
    pub fn source(mut self, id: &str, text: &str) -> Authorize {
        let source = serde_json::json!({"source_id": id, "text": text});
        match self.0["sources"].as_array_mut() {
            Some(sources) => sources.push(source),
            None => self.0["sources"] = serde_json::json!([source]),
        }
        self
    }

    /// `requirements`.
    pub fn requirements(self, requirements: serde_json::Value) -> Authorize {
        self.with("requirements", requirements)
    }

    /// `response.mode = "verbose"`.
    pub fn verbose(self) -> Authorize {
        self.with("response", serde_json::json!({"mode": "verbose"}))
    }

    /// Any other top-level field (`answer`, `options`, …).
    pub fn with(mut self, field: &str, value: serde_json::Value) -> Authorize {
        self.0[field] = value;
        self
    }

    pub fn json(self) -> serde_json::Value {
        self.0
    }

    pub fn body(&self) -> String {
        self.0.to_string()
    }
}

impl From<Authorize> for serde_json::Value {
    fn from(a: Authorize) -> serde_json::Value {
        a.0
    }
}

/// Makes `n` allowed decisions (`note.add`, one supported claim) through
/// `/v2/authorize`; returns their audit record ids, in order.
pub async fn decisions(s: &TestServer, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let body = Authorize::new("note.add")
            .params(serde_json::json!({ "i": i }))
            .claims(serde_json::json!([{"text": "The order shipped on 3 March."}]))
            .source("t", "Order 7 shipped on 3 March.")
            .verbose();
        let r = s
            .post_json("/v2/authorize", &body.body(), Some(APP_KEY))
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(
            r.json()["audit"]["record_id"]
                .as_str()
                .expect("a record id")
                .to_string(),
        );
    }
    ids
}

/// The invoice the audit tests decide against.
pub const BLENDER_INVOICE: &str = "Invoice: blender, amount charged $100.00.";

/// A claim [`BLENDER_INVOICE`] supports.
pub const PAID_100: &str = "The customer was charged $100 for the blender.";

/// An authorize request for the action `refund` with `params`: the claim
/// `{"text": claim}` against the source `inv`, [`BLENDER_INVOICE`].
pub fn blender_refund(params: serde_json::Value, claim: &str) -> Authorize {
    Authorize::new("refund")
        .params(params)
        .claims(serde_json::json!([{ "text": claim }]))
        .source("inv", BLENDER_INVOICE)
}

/// The address in the first log line holding `message`.
pub fn logged_addr(log: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>, message: &str) -> String {
    let what = format!("a {message:?} log line");
    eventually_blocking(
        &what,
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
            let found = text.lines().filter(|l| l.contains(message)).find_map(|l| {
                serde_json::from_str::<serde_json::Value>(l).ok()?["addr"]
                    .as_str()
                    .map(str::to_string)
            });
            found.ok_or(text)
        },
    )
}
