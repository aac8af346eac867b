//! Load harness for the proxy and the authorize API (issue 7): throughput and
//! tail latency of verdict against a direct call and against nginx, plus the
//! memory verdict needs idle and with many open connections.
//!
//! The harness runs the load generator and a trivial upstream (a hyper server
//! on 127.0.0.1 answering every request with a small fixed 200) in this
//! process, and verdict as a **separate child process**
//! (`target/release/verdict serve --config ...`, temp data dir, generated keys
//! file, one gated route), so that the RSS read from `/proc/<pid>/status` is
//! verdict's alone. Scenarios, all against the same upstream:
//!
//! 1. `direct`: straight to the upstream;
//! 2. `pass`: through verdict's proxy on an unmatched (pass-through) route;
//! 3. `gated`: through verdict's proxy on a gated route that allows (3 claims,
//!    3 inline sources of about 2 KB each; durable audit, default config);
//! 4. `authorize`: `POST /v2/authorize` with the same justification;
//! 5. `nginx`: through nginx (started by `bench/nginx.sh` when `nginx` is on
//!    PATH, or an already running one given with `--nginx-port`).
//!
//! Each scenario runs a closed loop (`--connections` keep-alive connections,
//! each sending its next request when the previous one answered) and an open
//! loop at a fixed `--rate` (each connection owns every `connections`-th slot
//! of a fixed schedule; latency counts from the *intended* send time, so a
//! stalled server is charged for the requests it delayed, i.e. no coordinated
//! omission). Scenarios alternate within each of `--rounds` rounds (order
//! reversed every other round) so that machine drift hits all of them alike.
//! `--baseline-bin` adds a second verdict binary (e.g. before a change): each
//! scenario then runs beside its baseline, and which of the two goes first
//! alternates every round. The run ends with one `SUMMARY` line: P1, P2 over
//! pass-through and over direct, P6, and the gated stages' medians.
//!
//! `cargo build --release --bin verdict && cargo run --release --example
//! loadtest -- [--duration-secs 3] [--rounds 2] [--connections 64]
//! [--rate 1000] [--idle-connections 1000] [--verdict-bin PATH]
//! [--baseline-bin PATH] [--shadow] [--baseline-no-capture] [--baseline-ext-authz]
//! [--nginx-port PORT | --no-nginx]
//! [--scenarios direct,pass,gated,authorize,nginx,ext_authz]`
//!
//! `ext_authz` sends the gated call as Envoy's `Check` (gRPC over HTTP/2)
//! to verdict's ext_authz listener: the same decision without the proxy's
//! forward, so its stage table shows what the door adds over the decision
//! and its audit commit.
//!
//! Everything is on loopback and bounded in time: with the defaults the run
//! takes about two minutes.

// A harness reads as one run, top to bottom; the 100-line limit is for src/.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, HOST};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A kept-alive connection: HTTP/1, or HTTP/2 for gRPC.
enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    async fn ready(&mut self) -> Result<(), hyper::Error> {
        match self {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    async fn send_request(
        &mut self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper::Error> {
        match self {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => s.send_request(req).await,
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }
}

const KEY: &str = "loadtest-key-0123456789abcdef";
/// What the upstream answers to everything.
const UPSTREAM_BODY: &[u8] = br#"{"ok":true,"service":"upstream"}"#;
/// Unmeasured traffic at the start of every phase.
const WARMUP: Duration = Duration::from_millis(500);
/// How long an open loop may run past its schedule to finish late requests.
const OPEN_LOOP_GRACE: Duration = Duration::from_secs(2);

const POLICY: &str = r#"
[[action]]
type = "refund.create"
requirements = { decision_mode = "balanced", min_coverage = 0.8, citations = "optional" }

  [[action.rule]]
  param = "amount"
  op = "gt"
  value = 5000
  effect = "deny"

[[route]]
name = "create-refund"
method = "POST"
path = "/api/orders/{order_id}/refunds"
action = "refund.create"
params = { order_id = "path:order_id", amount = "body:/amount" }
claims = "body:/claims"
sources = "body:/evidence"
on_review = "deny"
"#;

/// What `--shadow` changes in the shadow copy of [`POLICY`]:
/// `LOADTEST_SHADOW=rules` a rule threshold (the engine's work is shared),
/// anything else `min_coverage` (the claims are verified again).
const SHADOW_FROM: &str = "min_coverage = 0.8";
const SHADOW_TO: &str = "min_coverage = 0.75";

// === arguments ===

struct Args {
    duration: Duration,
    rounds: usize,
    connections: usize,
    rate: u64,
    idle_connections: usize,
    verdict_bin: PathBuf,
    baseline_bin: Option<PathBuf>,
    /// Run the tested verdict (not the baseline) with a shadow policy set
    /// whose `min_coverage` differs, so every gated decision is decided a
    /// second time, claims verified again: the worst case of shadow mode.
    shadow: bool,
    /// Run the baseline with `[audit] capture_inputs = false`: with the same
    /// binary as baseline, this measures what capturing inputs costs.
    baseline_no_capture: bool,
    /// The baseline serves `[ext_authz]` too (it must know the key).
    baseline_ext_authz: bool,
    nginx_port: Option<u16>,
    no_nginx: bool,
    scenarios: Vec<String>,
}

fn parse_args() -> Result<Args, Error> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut a = Args {
        duration: Duration::from_secs(3),
        rounds: 2,
        connections: 64,
        rate: 1000,
        idle_connections: 1000,
        verdict_bin: root.join("target/release/verdict"),
        baseline_bin: None,
        shadow: false,
        baseline_no_capture: false,
        baseline_ext_authz: false,
        nginx_port: None,
        no_nginx: false,
        scenarios: ["direct", "pass", "gated", "authorize", "nginx"]
            .map(String::from)
            .to_vec(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag}: missing value"));
        match flag.as_str() {
            "--duration-secs" => a.duration = Duration::from_secs_f64(value()?.parse()?),
            "--rounds" => a.rounds = value()?.parse()?,
            "--connections" => a.connections = value()?.parse()?,
            "--rate" => a.rate = value()?.parse()?,
            "--idle-connections" => a.idle_connections = value()?.parse()?,
            "--verdict-bin" => a.verdict_bin = value()?.into(),
            "--baseline-bin" => a.baseline_bin = Some(value()?.into()),
            "--shadow" => a.shadow = true,
            "--baseline-no-capture" => a.baseline_no_capture = true,
            "--baseline-ext-authz" => a.baseline_ext_authz = true,
            "--nginx-port" => a.nginx_port = Some(value()?.parse()?),
            "--no-nginx" => a.no_nginx = true,
            "--scenarios" => a.scenarios = value()?.split(',').map(String::from).collect(),
            "-h" | "--help" => {
                println!(
                    "loadtest [--duration-secs S] [--rounds R] [--connections C] [--rate N] \
                     [--idle-connections N] [--verdict-bin PATH] [--baseline-bin PATH] [--shadow] [--baseline-no-capture] [--baseline-ext-authz] \
                     [--nginx-port PORT | --no-nginx] [--scenarios direct,pass,gated,authorize,nginx,ext_authz]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if a.rounds == 0 || a.connections == 0 || a.rate == 0 || a.duration.is_zero() {
        return Err("--rounds, --connections, --rate and --duration-secs must be > 0".into());
    }
    Ok(a)
}

// === payloads ===

/// About 2 KB of invoice-like evidence (the text of `batch_bench`).
fn source_text(i: usize, topic: &str) -> String {
    let mut s = String::with_capacity(2200);
    let mut line = 0;
    while s.len() < 2000 {
        s.push_str(&format!(
            "Record {i}-{line} ({topic}): order ORD-{i}{line} for customer C-{c} was charged ${a}.00 \
             on Visa ending {card}; the parcel shipped on 2026-03-0{d} and arrived damaged. ",
            c = 1000 + i % 97,
            a = 20 + (i * 7 + line) % 400,
            card = 4000 + (i + line) % 999,
            d = 1 + line % 9,
        ));
        line += 1;
    }
    s
}

const TOPICS: [&str; 3] = ["invoice", "shipping", "ticket"];

/// One claim per source, each stated by its source's first record (e.g.
/// "Order ORD-10 for customer C-1001 was charged $27.00 on Visa ending
/// 4001."), so that the default engine allows the call.
fn claims(i: usize) -> serde_json::Value {
    let texts: Vec<serde_json::Value> = TOPICS
        .iter()
        .enumerate()
        .map(|(k, topic)| {
            let src = source_text(i + k, topic);
            let after = src.split_once(": ").map(|(_, r)| r).unwrap_or(&src);
            let fact = after.split(';').next().unwrap_or(after);
            let mut chars = fact.chars();
            let first = chars.next().map(|c| c.to_ascii_uppercase()).unwrap_or(' ');
            json!({"text": format!("{first}{}.", chars.as_str())})
        })
        .collect();
    serde_json::Value::Array(texts)
}

fn sources(i: usize) -> serde_json::Value {
    let all: Vec<serde_json::Value> = TOPICS
        .iter()
        .enumerate()
        .map(|(k, topic)| json!({"source_id": topic, "text": source_text(i + k, topic)}))
        .collect();
    serde_json::Value::Array(all)
}

/// The service's own request body on the gated route.
fn gated_body(i: usize) -> Bytes {
    Bytes::from(json!({"amount": 100, "claims": claims(i), "evidence": sources(i)}).to_string())
}

/// The same justification as a `/v2/authorize` call.
fn authorize_body(i: usize) -> Bytes {
    Bytes::from(
        json!({
            "action": {"type": "refund.create", "params": {"order_id": "77", "amount": 100}},
            "claims": claims(i),
            "sources": sources(i),
        })
        .to_string(),
    )
}

// === targets ===

/// How a scenario's answer is recognised as the expected one.
#[derive(Clone, Copy)]
enum Expect {
    /// 200 from the upstream.
    Upstream,
    /// 200 from the upstream, let through by an `allow` decision.
    Allowed,
    /// 200 with an `allow` decision in the body.
    AllowBody,
    /// A gRPC `CheckResponse` that lets the call through, decided `allow`.
    CheckAllowed,
}

/// One scenario: where to send which request.
struct Target {
    name: String,
    addr: SocketAddr,
    method: Method,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Bytes,
    expect: Expect,
    /// Processes whose CPU time is charged to this scenario's server side.
    server_pids: Vec<u32>,
    /// The API of the verdict behind a gated scenario, whose `/metrics`
    /// give the breakdown of its open-loop phases.
    metrics: Option<SocketAddr>,
    /// gRPC over HTTP/2 (the `Check` of `ext_authz`).
    grpc: bool,
}

impl Target {
    fn request(&self) -> Result<Request<Full<Bytes>>, Error> {
        let mut b = Request::builder().method(self.method.clone());
        b = if self.grpc {
            b.uri(format!("http://{}{}", self.addr, self.path))
        } else {
            b.uri(self.path).header(HOST, self.addr.to_string())
        };
        for (k, v) in &self.headers {
            b = b.header(*k, v.as_str());
        }
        Ok(b.body(Full::new(self.body.clone()))?)
    }

    fn check(&self, head: &http::response::Parts, body: &Bytes) -> Result<(), Error> {
        let ok = head.status == StatusCode::OK
            && match self.expect {
                Expect::Upstream => body.as_ref() == UPSTREAM_BODY,
                Expect::Allowed => {
                    body.as_ref() == UPSTREAM_BODY
                        && head
                            .headers
                            .get("x-verdict-decision")
                            .is_some_and(|v| v == "allow")
                }
                Expect::AllowBody => body.starts_with(br#"{"decision":"allow""#),
                Expect::CheckAllowed => check_allowed(body),
            };
        if ok {
            Ok(())
        } else {
            let shown = &body[..body.len().min(400)];
            Err(format!(
                "{}: unexpected answer {}: {}",
                self.name,
                head.status,
                String::from_utf8_lossy(shown)
            )
            .into())
        }
    }
}

async fn connect(addr: SocketAddr) -> Result<Sender, Error> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Sender::H1(sender))
}

/// A connection to `t`, of the protocol it speaks.
async fn connect_to(t: &Target) -> Result<Sender, Error> {
    if !t.grpc {
        return connect(t.addr).await;
    }
    let stream = TcpStream::connect(t.addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Sender::H2(sender))
}

/// The gated call as Envoy's `Check` sends it (`with_request_body`,
/// `pack_as_bytes`, `encode_raw_headers`), framed as one gRPC message.
fn check_body(i: usize) -> Bytes {
    use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue as Raw};
    use envoy_types::pb::envoy::service::auth::v3::{
        attribute_context, AttributeContext, CheckRequest,
    };
    use prost::Message;
    let body = gated_body(i);
    let path = "/api/orders/77/refunds";
    let headers = [
        (":method", "POST"),
        (":path", path),
        (":authority", "shop.example"),
        ("content-type", "application/json"),
    ];
    let req = CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(attribute_context::Request {
                http: Some(attribute_context::HttpRequest {
                    method: "POST".into(),
                    path: path.into(),
                    host: "shop.example".into(),
                    scheme: "http".into(),
                    size: i64::try_from(body.len()).unwrap_or(-1),
                    raw_body: body.to_vec(),
                    header_map: Some(HeaderMap {
                        headers: headers
                            .iter()
                            .map(|(k, v)| Raw {
                                key: (*k).to_string(),
                                raw_value: v.as_bytes().to_vec(),
                                ..Raw::default()
                            })
                            .collect(),
                    }),
                    ..attribute_context::HttpRequest::default()
                }),
                ..attribute_context::Request::default()
            }),
            ..AttributeContext::default()
        }),
    };
    let msg = req.encode_to_vec();
    let mut framed = Vec::with_capacity(5 + msg.len());
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    framed.extend_from_slice(&msg);
    Bytes::from(framed)
}

/// Whether a gRPC answer body is a `CheckResponse` that lets the call
/// through with an `allow` decision.
fn check_allowed(body: &Bytes) -> bool {
    use envoy_types::pb::envoy::service::auth::v3::{check_response::HttpResponse, CheckResponse};
    use prost::Message;
    let Some(msg) = body.get(5..) else {
        return false;
    };
    let Ok(r) = CheckResponse::decode(msg) else {
        return false;
    };
    let ok_status = r.status.as_ref().is_some_and(|s| s.code == 0);
    let allowed = matches!(&r.http_response, Some(HttpResponse::OkResponse(ok))
        if ok.headers.iter().filter_map(|h| h.header.as_ref())
            .any(|h| h.key == "x-verdict-decision" && h.value == "allow"));
    ok_status && allowed
}

/// One request on a kept-alive connection, answer read to the end and checked.
async fn call(sender: &mut Sender, t: &Target) -> Result<(), Error> {
    sender.ready().await?;
    let resp = sender.send_request(t.request()?).await?;
    let (head, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    t.check(&head, &body)
}

// === the upstream ===

async fn start_upstream() -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                break;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    // Read the body so the connection can serve the next request.
                    let _ = req.into_body().collect().await;
                    let mut resp = Response::new(Full::new(Bytes::from_static(UPSTREAM_BODY)));
                    resp.headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    Ok::<_, std::convert::Infallible>(resp)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

// === verdict as a child process ===

struct Verdict {
    label: String,
    child: Child,
    api: SocketAddr,
    proxy: SocketAddr,
    /// Envoy's `Check`, when the run asks for the `ext_authz` scenario.
    ext_authz: Option<SocketAddr>,
    dir: tempfile::TempDir,
}

fn free_port() -> Result<SocketAddr, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

async fn start_verdict(
    label: &str,
    bin: &Path,
    upstream: SocketAddr,
    shadow: bool,
    capture: bool,
    ext_authz: bool,
) -> Result<Verdict, Error> {
    if !bin.is_file() {
        return Err(format!(
            "{}: no verdict binary; build it first with `cargo build --release --bin verdict` \
             (or pass --verdict-bin)",
            bin.display()
        )
        .into());
    }
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    std::fs::create_dir_all(root.join("policies"))?;
    std::fs::write(root.join("policies/refunds.toml"), POLICY)?;
    std::fs::write(
        root.join("keys.toml"),
        format!(
            "[[key]]\nname = \"loadtest\"\nhash = \"sha256:{}\"\nscopes = [\"verify\", \"authorize\"]\n",
            hex::encode(Sha256::digest(KEY.as_bytes()))
        ),
    )?;
    let (api, proxy) = (free_port()?, free_port()?);
    let mut config = format!(
        "[api]\nlisten = \"{api}\"\n\n[proxy]\nlisten = \"{proxy}\"\nupstream = \"http://{upstream}\"\n\n\
         [auth]\nkeys_file = {keys:?}\n\n[policies]\ndir = {pol:?}\n",
        keys = root.join("keys.toml").display().to_string(),
        pol = root.join("policies").display().to_string(),
    );
    if shadow {
        std::fs::create_dir_all(root.join("shadow"))?;
        std::fs::write(
            root.join("shadow/refunds.toml"),
            if std::env::var("LOADTEST_SHADOW").as_deref() == Ok("rules") {
                POLICY.replace("value = 5000", "value = 4000")
            } else {
                POLICY.replace(SHADOW_FROM, SHADOW_TO)
            },
        )?;
        config.push_str(&format!(
            "shadow_dir = {:?}\n",
            root.join("shadow").display().to_string()
        ));
    }
    config.push_str(&format!(
        "\n[data]\ndir = {:?}\n",
        root.join("data").display().to_string()
    ));
    // Every connection of the harness comes from 127.0.0.1, and the idle
    // connections round opens more than the default share of one peer (a
    // quarter of `max_connections`).
    config.push_str("\n[server]\nmax_connections_per_ip = 4096\n");
    if !capture {
        config.push_str("\n[audit]\ncapture_inputs = false\n");
    }
    let ext_authz = if ext_authz {
        let addr = free_port()?;
        config.push_str(&format!("\n[ext_authz]\nlisten = \"{addr}\"\n"));
        Some(addr)
    } else {
        None
    };
    std::fs::write(root.join("verdict.toml"), config)?;
    let child = Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(root.join("verdict.toml"))
        // One JSON line per proxied request, as shipped; not kept.
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("stderr.log"))?)
        .spawn()?;
    let mut v = Verdict {
        label: label.to_string(),
        child,
        api,
        proxy,
        ext_authz,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = v.child.try_wait()? {
            let err = std::fs::read_to_string(v.dir.path().join("stderr.log")).unwrap_or_default();
            return Err(format!("{label}: verdict exited at start-up ({status}): {err}").into());
        }
        if health_ok(api).await {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{label}: verdict did not become healthy in 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(v)
}

async fn health_ok(api: SocketAddr) -> bool {
    let Ok(mut s) = connect(api).await else {
        return false;
    };
    let Ok(req) = Request::get("/health")
        .header(HOST, api.to_string())
        .body(Full::new(Bytes::new()))
    else {
        return false;
    };
    matches!(s.send_request(req).await, Ok(r) if r.status() == StatusCode::OK)
}

impl Verdict {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM (graceful drain), then SIGKILL after 10 s.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "{}: verdict did not stop within 10 s; killing it",
            self.label
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn targets(&self, wanted: &[String]) -> Vec<Target> {
        let sfx = |s: &str| {
            if self.label.is_empty() {
                s.to_string()
            } else {
                format!("{s} ({})", self.label)
            }
        };
        let json_headers = || vec![("content-type", "application/json".to_string())];
        let mut out = Vec::new();
        if wanted.iter().any(|w| w == "pass") {
            out.push(Target {
                name: sfx("pass"),
                addr: self.proxy,
                method: Method::GET,
                path: "/api/items/42",
                headers: vec![],
                body: Bytes::new(),
                expect: Expect::Upstream,
                server_pids: vec![self.pid()],
                metrics: None,
                grpc: false,
            });
        }
        if wanted.iter().any(|w| w == "gated") {
            out.push(Target {
                name: sfx("gated"),
                addr: self.proxy,
                method: Method::POST,
                path: "/api/orders/77/refunds",
                headers: json_headers(),
                body: gated_body(1),
                expect: Expect::Allowed,
                server_pids: vec![self.pid()],
                metrics: Some(self.api),
                grpc: false,
            });
        }
        if wanted.iter().any(|w| w == "authorize") {
            let mut headers = json_headers();
            headers.push(("authorization", format!("Bearer {KEY}")));
            out.push(Target {
                name: sfx("authorize"),
                addr: self.api,
                method: Method::POST,
                path: "/v2/authorize",
                headers,
                body: authorize_body(1),
                expect: Expect::AllowBody,
                server_pids: vec![self.pid()],
                metrics: None,
                grpc: false,
            });
        }
        if let (true, Some(addr)) = (wanted.iter().any(|w| w == "ext_authz"), self.ext_authz) {
            out.push(Target {
                name: sfx("ext_authz"),
                addr,
                method: Method::POST,
                path: "/envoy.service.auth.v3.Authorization/Check",
                headers: vec![
                    ("content-type", "application/grpc".to_string()),
                    ("te", "trailers".to_string()),
                ],
                body: check_body(1),
                expect: Expect::CheckAllowed,
                server_pids: vec![self.pid()],
                metrics: Some(self.api),
                grpc: true,
            });
        }
        out
    }
}

// === nginx ===

struct Nginx {
    dir: Option<tempfile::TempDir>,
    port: u16,
    pids: Vec<u32>,
}

fn nginx_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/nginx.sh")
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

fn start_nginx(upstream: SocketAddr, workers: usize) -> Result<Nginx, Error> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?.port();
    let out = Command::new(nginx_script())
        .arg("start")
        .arg(dir.path())
        .arg(port.to_string())
        .arg(upstream.port().to_string())
        .arg(workers.to_string())
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "bench/nginx.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let master: u32 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    std::thread::sleep(Duration::from_millis(300));
    let mut pids = vec![master];
    pids.extend(children_of(master));
    Ok(Nginx {
        dir: Some(dir),
        port,
        pids,
    })
}

// Children are stopped on every way out of `run`, errors included.
impl Drop for Verdict {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Nginx {
    /// Stops an nginx started by `bench/nginx.sh` (not one given by port).
    fn stop(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _ = Command::new(nginx_script())
                .arg("stop")
                .arg(dir.path())
                .status();
        }
    }
}

// === /proc ===

/// Pids whose parent is `pid` (nginx workers).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// User and system CPU seconds of `pids`, apart (Linux; zero elsewhere).
fn cpu_split(pids: &[u32]) -> (f64, f64) {
    pids.iter()
        .map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let f: Vec<&str> = stat
                .rsplit_once(") ")
                .map(|(_, r)| r)
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            (t(11) / 100.0, t(12) / 100.0)
        })
        .fold((0.0, 0.0), |(u, s), (pu, ps)| (u + pu, s + ps))
}

/// (VmRSS, VmHWM) of `pid` in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

// === load ===

#[derive(Default)]
struct Samples {
    /// From the (intended, for the open loop) send time to the answer's end.
    lat: Vec<Duration>,
    /// Open loop only: from the actual send time.
    service: Vec<Duration>,
    /// Every answered request, warm-up included (the server's CPU covers them).
    served: u64,
    errors: u64,
    last_error: Option<String>,
}

impl Samples {
    fn failed(&mut self, e: Error) {
        self.errors += 1;
        self.last_error = Some(e.to_string());
    }

    fn merge(&mut self, o: Samples) {
        self.lat.extend(o.lat);
        self.service.extend(o.service);
        self.served += o.served;
        self.errors += o.errors;
        if o.last_error.is_some() {
            self.last_error = o.last_error;
        }
    }
}

/// Closed loop on one connection from `start` (after the warm-up) to `end`.
async fn closed_worker(
    t: Arc<Target>,
    warm_from: Instant,
    start: Instant,
    end: Instant,
) -> Samples {
    let mut s = Samples::default();
    let mut sender: Option<Sender> = None;
    tokio::time::sleep_until(warm_from.into()).await;
    while Instant::now() < end {
        let snd = match sender.as_mut() {
            Some(x) => x,
            None => match connect_to(&t).await {
                Ok(x) => sender.insert(x),
                Err(e) => {
                    s.failed(e);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let t0 = Instant::now();
        match call(snd, &t).await {
            Ok(()) => {
                s.served += 1;
                if t0 >= start {
                    s.lat.push(t0.elapsed());
                }
            }
            Err(e) => {
                s.failed(e);
                sender = None;
            }
        }
    }
    s
}

/// Open loop: this connection sends schedule slots `k`, `k + n`, `k + 2n`...
/// of a schedule of one request every `period` from `warm_from`; slots
/// before `start` are the warm-up.
#[allow(clippy::too_many_arguments)]
async fn open_worker(
    t: Arc<Target>,
    k: u64,
    n: u64,
    period: Duration,
    warm_from: Instant,
    start: Instant,
    end: Instant,
) -> Samples {
    let mut s = Samples::default();
    let mut sender = match connect_to(&t).await {
        Ok(x) => Some(x),
        Err(e) => {
            s.failed(e);
            None
        }
    };
    let mut slot = k;
    loop {
        let intended = warm_from + period.mul_f64(slot as f64);
        if intended >= end || Instant::now() >= end + OPEN_LOOP_GRACE {
            break;
        }
        slot += n;
        tokio::time::sleep_until(intended.into()).await;
        let snd = match sender.as_mut() {
            Some(x) => x,
            None => match connect_to(&t).await {
                Ok(x) => sender.insert(x),
                Err(e) => {
                    s.failed(e);
                    continue;
                }
            },
        };
        let sent = Instant::now();
        match call(snd, &t).await {
            Ok(()) => {
                s.served += 1;
                if intended >= start {
                    let done = Instant::now();
                    s.lat.push(done - intended);
                    s.service.push(done - sent);
                }
            }
            Err(e) => {
                s.failed(e);
                sender = None;
            }
        }
    }
    s
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Closed,
    Open,
}

/// One measured phase of one scenario.
struct Phase {
    samples: Samples,
    secs: f64,
    cpu: f64,
    /// The user-space part of `cpu`.
    user: f64,
    /// Requests the open-loop schedule asked for in the measured window.
    scheduled: u64,
}

async fn run_phase(t: &Arc<Target>, mode: Mode, args: &Args) -> Phase {
    let conns = args.connections as u64;
    let cpu0 = cpu_split(&t.server_pids);
    // Leave time to connect before the schedule starts.
    let warm_from = Instant::now() + Duration::from_millis(100);
    let start = warm_from + WARMUP;
    let end = start + args.duration;
    let mut tasks = Vec::new();
    for k in 0..conns {
        let t = t.clone();
        tasks.push(match mode {
            Mode::Closed => tokio::spawn(closed_worker(t, warm_from, start, end)),
            Mode::Open => {
                let period = Duration::from_secs_f64(1.0 / args.rate as f64);
                tokio::spawn(open_worker(t, k, conns, period, warm_from, start, end))
            }
        });
    }
    let mut samples = Samples::default();
    for task in tasks {
        match task.await {
            Ok(s) => samples.merge(s),
            Err(e) => samples.failed(Box::new(e)),
        }
    }
    let secs = args.duration.as_secs_f64();
    let cpu1 = cpu_split(&t.server_pids);
    Phase {
        samples,
        secs,
        cpu: (cpu1.0 + cpu1.1) - (cpu0.0 + cpu0.1),
        user: cpu1.0 - cpu0.0,
        scheduled: (secs * args.rate as f64).round() as u64,
    }
}

#[derive(Default, Clone, Copy)]
struct Summary {
    n: usize,
    rps: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    /// Open loop: p50 and p99 from the actual send time.
    svc_p50: f64,
    svc_p99: f64,
    errors: u64,
    /// Server-side CPU per answered request, microseconds (includes warm-up).
    cpu_us: f64,
    /// The user-space part of `cpu_us`.
    user_us: f64,
    /// Open loop: scheduled requests not answered in time.
    missed: u64,
}

fn quantiles(v: &mut [Duration]) -> impl Fn(f64) -> f64 + '_ {
    v.sort_unstable();
    move |p: f64| {
        if v.is_empty() {
            return f64::NAN;
        }
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i].as_secs_f64() * 1000.0
    }
}

/// Pools the rounds of one scenario and mode. `cpu_known`: whether the
/// server's processes are known (not for the in-process upstream).
fn summarize(phases: &mut [Phase], mode: Mode, cpu_known: bool) -> Summary {
    let mut lat = Vec::new();
    let mut svc = Vec::new();
    let (mut errors, mut secs, mut cpu, mut scheduled, mut served) = (0, 0.0, 0.0, 0, 0);
    let mut user = 0.0;
    for p in phases.iter_mut() {
        lat.append(&mut p.samples.lat);
        svc.append(&mut p.samples.service);
        errors += p.samples.errors;
        served += p.samples.served;
        secs += p.secs;
        cpu += p.cpu;
        user += p.user;
        scheduled += p.scheduled;
    }
    let n = lat.len();
    let q = quantiles(&mut lat);
    let (p50, p99, p999, max) = (q(0.5), q(0.99), q(0.999), q(1.0));
    let qs = quantiles(&mut svc);
    Summary {
        n,
        rps: n as f64 / secs,
        p50,
        p99,
        p999,
        max,
        svc_p50: if mode == Mode::Open {
            qs(0.5)
        } else {
            f64::NAN
        },
        svc_p99: if mode == Mode::Open {
            qs(0.99)
        } else {
            f64::NAN
        },
        errors,
        cpu_us: if cpu_known && served > 0 {
            cpu / served as f64 * 1e6
        } else {
            f64::NAN
        },
        user_us: if cpu_known && served > 0 {
            user / served as f64 * 1e6
        } else {
            f64::NAN
        },
        missed: if mode == Mode::Open {
            scheduled.saturating_sub(n as u64)
        } else {
            0
        },
    }
}

// === idle memory ===

/// Opens `n` keep-alive connections to the proxy, one pass-through request
/// each (32 at a time, so the upstream pool stays small), holds them, and
/// returns verdict's (VmRSS, VmHWM) while they are open.
async fn rss_with_connections(
    v: &Verdict,
    t: &Arc<Target>,
    n: usize,
) -> Result<(f64, f64, usize), Error> {
    let mut held = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        let batch = (n - i).min(32);
        let mut tasks = Vec::new();
        for _ in 0..batch {
            let t = t.clone();
            tasks.push(tokio::spawn(async move {
                let mut s = connect_to(&t).await?;
                call(&mut s, &t).await?;
                Ok::<_, Error>(s)
            }));
        }
        for task in tasks {
            held.push(task.await??);
        }
        i += batch;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss, hwm) = rss_mib(v.pid());
    let open = held.iter().filter(|s| !s.is_closed()).count();
    drop(held);
    Ok((rss, hwm, open))
}

// === report ===

fn fmt(x: f64, digits: usize) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.digits$}")
    }
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> Result<(), Error> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "loadtest: {} s per phase, {} round(s), {} connections, open loop {} req/s; \
         nproc {threads}; loadavg {}",
        args.duration.as_secs_f64(),
        args.rounds,
        args.connections,
        args.rate,
        loadavg()
    );
    let upstream = start_upstream().await?;
    let wanted = &args.scenarios;

    let mut verdicts = vec![
        start_verdict(
            "",
            &args.verdict_bin,
            upstream,
            args.shadow,
            true,
            wanted.iter().any(|w| w == "ext_authz"),
        )
        .await?,
    ];
    if let Some(b) = &args.baseline_bin {
        let capture = !args.baseline_no_capture;
        // A baseline may predate `[ext_authz]`: it runs without it unless
        // told otherwise.
        let ext = args.baseline_ext_authz && wanted.iter().any(|w| w == "ext_authz");
        verdicts.push(start_verdict("baseline", b, upstream, false, capture, ext).await?);
    }

    // Memory: idle, then with many open connections (before any load).
    let mut rss_rows = Vec::new();
    for v in &verdicts {
        let (idle, _) = rss_mib(v.pid());
        let pass = v
            .targets(&["pass".to_string()])
            .into_iter()
            .next()
            .map(Arc::new)
            .ok_or("no pass target")?;
        let (rss, hwm, open) = rss_with_connections(v, &pass, args.idle_connections).await?;
        rss_rows.push((v.label.clone(), idle, rss, hwm, open));
    }

    let mut nginx = None;
    if wanted.iter().any(|w| w == "nginx") && !args.no_nginx {
        if let Some(port) = args.nginx_port {
            nginx = Some(Nginx {
                dir: None,
                port,
                pids: vec![],
            });
        } else if on_path("nginx") {
            nginx = Some(start_nginx(upstream, threads)?);
        } else {
            println!(
                "nginx: not on PATH, scenario skipped (install nginx-light, or pass --nginx-port)"
            );
        }
    }

    let mut targets = Vec::new();
    if wanted.iter().any(|w| w == "direct") {
        targets.push(Target {
            name: "direct".into(),
            addr: upstream,
            method: Method::GET,
            path: "/api/items/42",
            headers: vec![],
            body: Bytes::new(),
            expect: Expect::Upstream,
            server_pids: vec![],
            metrics: None,
            grpc: false,
        });
    }
    if let Some(n) = &nginx {
        targets.push(Target {
            name: "nginx".into(),
            addr: SocketAddr::from(([127, 0, 0, 1], n.port)),
            method: Method::GET,
            path: "/api/items/42",
            headers: vec![],
            body: Bytes::new(),
            expect: Expect::Upstream,
            server_pids: n.pids.clone(),
            metrics: None,
            grpc: false,
        });
    }
    for v in &verdicts {
        targets.extend(v.targets(wanted));
    }
    let targets: Vec<Arc<Target>> = targets.into_iter().map(Arc::new).collect();

    // Every scenario must answer as expected before anything is measured.
    for t in &targets {
        let mut s = connect_to(t).await?;
        call(&mut s, t).await?;
    }

    let modes = [Mode::Closed, Mode::Open];
    // Per gated scenario: the growth of each stage's `_sum` and `_count`
    // over its open-loop phases.
    let mut stages: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut phases: Vec<Vec<Vec<Phase>>> = (0..targets.len())
        .map(|_| modes.iter().map(|_| Vec::new()).collect())
        .collect();
    for round in 0..args.rounds {
        for (m, &mode) in modes.iter().enumerate() {
            for i in round_order(&targets, round) {
                let scrape = match (mode, targets[i].metrics) {
                    (Mode::Open, Some(api)) => Some((api, metric_sums(api).await?)),
                    _ => None,
                };
                let p = run_phase(&targets[i], mode, &args).await;
                if let Some((api, before)) = scrape {
                    let after = metric_sums(api).await?;
                    let acc = stages.entry(targets[i].name.clone()).or_default();
                    for (k, v) in after {
                        *acc.entry(k.clone()).or_default() +=
                            v - before.get(&k).copied().unwrap_or(0.0);
                    }
                }
                let mode_name = if mode == Mode::Closed {
                    "closed"
                } else {
                    "open"
                };
                eprintln!(
                    "round {} {mode_name:<6} {:<22} {:>7} ok {:>4} errors  loadavg {}",
                    round + 1,
                    targets[i].name,
                    p.samples.lat.len(),
                    p.samples.errors,
                    loadavg()
                );
                if let Some(e) = &p.samples.last_error {
                    eprintln!("  last error: {e}");
                }
                phases[i][m].push(p);
            }
        }
    }
    let after_hwm: Vec<(String, f64, f64)> = verdicts
        .iter()
        .map(|v| {
            let (rss, hwm) = rss_mib(v.pid());
            (v.label.clone(), rss, hwm)
        })
        .collect();

    let mut sums: Vec<[Summary; 2]> = Vec::new();
    for (t, per_mode) in targets.iter().zip(phases.iter_mut()) {
        let known = !t.server_pids.is_empty();
        let c = summarize(&mut per_mode[0], Mode::Closed, known);
        let o = summarize(&mut per_mode[1], Mode::Open, known);
        sums.push([c, o]);
    }

    println!("\nloadavg at the end: {}", loadavg());
    println!(
        "\nClosed loop, {} keep-alive connections ({} round(s) x {} s pooled)",
        args.connections,
        args.rounds,
        args.duration.as_secs_f64()
    );
    println!("| scenario | samples | req/s | p50 ms | p99 ms | p99.9 ms | max ms | server CPU us/req | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (t, s) in targets.iter().zip(&sums) {
        let c = &s[0];
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
            t.name,
            c.n,
            c.rps,
            fmt(c.p50, 3),
            fmt(c.p99, 3),
            fmt(c.p999, 3),
            fmt(c.max, 1),
            fmt(c.cpu_us, 1),
            c.errors
        );
    }
    println!(
        "\nOpen loop, {} req/s over {} connections, latency from the intended send time",
        args.rate, args.connections
    );
    println!(
        "| scenario | samples | req/s | p50 ms | p99 ms | p99.9 ms | max ms | p50 / p99 from send, ms | server CPU us/req | missed | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (t, s) in targets.iter().zip(&sums) {
        let o = &s[1];
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} / {} | {} | {} | {} |",
            t.name,
            o.n,
            o.rps,
            fmt(o.p50, 3),
            fmt(o.p99, 3),
            fmt(o.p999, 3),
            fmt(o.max, 1),
            fmt(o.svc_p50, 3),
            fmt(o.svc_p99, 3),
            fmt(o.cpu_us, 1),
            o.missed,
            o.errors
        );
    }

    // Ratios and goals.
    let find = |name: &str| targets.iter().position(|t| t.name == name).map(|i| sums[i]);
    println!();
    if let (Some(p), Some(n)) = (find("pass"), find("nginx")) {
        let tput = p[0].rps / n[0].rps;
        println!(
            "P1 pass-through vs nginx, closed loop: throughput {tput:.2}x (goal >= 1.0x: {}), \
             p99 {} vs {} ms (goal <=: {})",
            met(tput >= 1.0),
            fmt(p[0].p99, 3),
            fmt(n[0].p99, 3),
            met(p[0].p99 <= n[0].p99)
        );
        println!(
            "   open loop p50 / p99: pass {} / {} ms, nginx {} / {} ms; server CPU per request \
             pass {} us, nginx {} us ({:.2}x); of which user space pass {} us, nginx {} us, \
             kernel pass {} us, nginx {} us",
            fmt(p[1].p50, 3),
            fmt(p[1].p99, 3),
            fmt(n[1].p50, 3),
            fmt(n[1].p99, 3),
            fmt(p[0].cpu_us, 1),
            fmt(n[0].cpu_us, 1),
            p[0].cpu_us / n[0].cpu_us,
            fmt(p[0].user_us, 1),
            fmt(n[0].user_us, 1),
            fmt(p[0].cpu_us - p[0].user_us, 1),
            fmt(n[0].cpu_us - n[0].user_us, 1),
        );
    }
    if let Some(d) = find("direct") {
        for name in [
            "pass",
            "gated",
            "authorize",
            "nginx",
            "pass (baseline)",
            "gated (baseline)",
        ] {
            let Some(s) = find(name) else { continue };
            println!(
                "{name} vs direct: closed-loop throughput {:.2}x; open loop adds {} ms p50, {} ms p99, {} ms p99.9",
                s[0].rps / d[0].rps,
                fmt(s[1].p50 - d[1].p50, 3),
                fmt(s[1].p99 - d[1].p99, 3),
                fmt(s[1].p999 - d[1].p999, 3),
            );
        }
    }
    if let (Some(g), Some(p)) = (find("gated"), find("pass")) {
        // From the send: the pacer's lateness (the timer's tick, about a
        // millisecond) differs between scenarios by more than the goal's
        // margin, so the difference of latencies from the intended send
        // is printed beside it but not judged.
        let (a50, a99) = (g[1].svc_p50 - p[1].svc_p50, g[1].svc_p99 - p[1].svc_p99);
        println!(
            "P2 gated allow at {} req/s over pass-through, from send: +{} ms p50 (goal <= 0.65: {}), +{} ms p99 (goal <= 2: {}); from the intended send +{} / +{} ms",
            args.rate,
            fmt(a50, 3),
            met(a50 <= 0.65 && g[1].missed == 0),
            fmt(a99, 3),
            met(a99 <= 2.0 && g[1].missed == 0),
            fmt(g[1].p50 - p[1].p50, 3),
            fmt(g[1].p99 - p[1].p99, 3),
        );
    }
    let mut medians = BTreeMap::new();
    for (name, acc) in &stages {
        let m = print_breakdown(name, acc, args.rate, find("direct").zip(find(name)));
        medians.insert(name.clone(), m);
    }
    if let (Some(x), Some(m)) = (find("ext_authz"), medians.get("ext_authz")) {
        let stage = |k: &str| {
            m.iter()
                .find(|(s, _)| *s == k)
                .map_or(f64::NAN, |(_, v)| *v)
        };
        let (decision, audit) = (stage("decision"), stage("audit"));
        let added = x[1].svc_p50 - decision - audit;
        println!(
            "ext_authz: Check at {} req/s, p50 from send {} ms over the decision ({} ms) and its commit ({} ms) medians: +{} ms (goal <= 0.3: {})",
            args.rate,
            fmt(x[1].svc_p50, 3),
            fmt(decision, 3),
            fmt(audit, 3),
            fmt(added, 3),
            met(added <= 0.3 && x[1].missed == 0)
        );
    }
    for name in ["pass", "gated", "authorize", "ext_authz"] {
        let (Some(a), Some(b)) = (find(name), find(&format!("{name} (baseline)"))) else {
            continue;
        };
        println!(
            "A/B {name}: this / baseline closed-loop throughput {:.2}x, CPU per request {:.2}x, \
             open-loop p50 {} vs {} ms, p99 {} vs {} ms",
            a[0].rps / b[0].rps,
            a[0].cpu_us / b[0].cpu_us,
            fmt(a[1].p50, 3),
            fmt(b[1].p50, 3),
            fmt(a[1].p99, 3),
            fmt(b[1].p99, 3),
        );
    }
    println!("\nverdict memory (MiB)");
    println!("| binary | RSS idle | RSS with N open connections | N open | VmHWM then | RSS / VmHWM after the load |");
    println!("|---|---:|---:|---:|---:|---:|");
    for ((label, idle, rss, hwm, open), (_, arss, ahwm)) in rss_rows.iter().zip(&after_hwm) {
        println!(
            "| {} | {:.1} | {:.1} | {open} | {:.1} | {:.1} / {:.1} |",
            if label.is_empty() { "verdict" } else { label },
            idle,
            rss,
            hwm,
            arss,
            ahwm
        );
        if label.is_empty() {
            println!(
                "P6 memory: idle {idle:.1} MiB (goal <= 10: {}), {open} connections {rss:.1} MiB (goal <= 40: {})",
                met(*idle <= 10.0),
                met(*rss <= 40.0)
            );
        }
    }
    println!(
        "\n{}",
        one_line(&find, rss_rows.first(), medians.get("gated"))
    );

    drop(nginx);
    drop(verdicts);
    Ok(())
}

/// The order of the scenarios in `round`: each scenario beside its
/// baseline, the groups reversed every other round, and within a pair the
/// binary that runs first alternating every round (so neither binary always
/// runs on a machine just warmed, or just loaded, by the other).
fn round_order(targets: &[Arc<Target>], round: usize) -> Vec<usize> {
    let scenario = |t: &Target| t.name.trim_end_matches(" (baseline)").to_string();
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let key = scenario(t);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    if round % 2 == 1 {
        groups.reverse();
    }
    groups
        .into_iter()
        .flat_map(|(_, mut members)| {
            if round % 2 == 1 {
                members.reverse();
            }
            members
        })
        .collect()
}

/// P1, P2 (over pass-through and over direct) and P6 on one line, with the
/// gated stages' medians: the figures a run is judged by, for a commit
/// message or a table row. A scenario not run reads `-`.
fn one_line(
    find: &dyn Fn(&str) -> Option<[Summary; 2]>,
    memory: Option<&(String, f64, f64, f64, usize)>,
    stages: Option<&Vec<(&'static str, f64)>>,
) -> String {
    let ratio = |a: Option<[Summary; 2]>, b: Option<[Summary; 2]>| match (a, b) {
        (Some(a), Some(b)) => format!(
            "{:.2}x, p99 {} vs {} ms",
            a[0].rps / b[0].rps,
            fmt(a[0].p99, 3),
            fmt(b[0].p99, 3)
        ),
        _ => "-".into(),
    };
    let added = |a: Option<[Summary; 2]>, b: Option<[Summary; 2]>| match (a, b) {
        (Some(a), Some(b)) => format!(
            "+{} / +{} ms",
            fmt(a[1].svc_p50 - b[1].svc_p50, 3),
            fmt(a[1].svc_p99 - b[1].svc_p99, 3)
        ),
        _ => "-".into(),
    };
    let (pass, gated) = (find("pass"), find("gated"));
    let memory = memory.map_or("-".into(), |(_, idle, rss, _, open)| {
        format!("idle {idle:.1} MiB, {open} connections {rss:.1} MiB")
    });
    let stages = stages.map_or("-".into(), |m| {
        m.iter()
            .map(|(k, v)| format!("{k} {}", fmt(*v, 3)))
            .collect::<Vec<_>>()
            .join(", ")
    });
    format!(
        "SUMMARY P1 pass/nginx {} | P2 gated p50/p99 from send over pass {} (over direct {}) | P6 {memory} | gated stage medians ms: {stages}",
        ratio(pass, find("nginx")),
        added(gated, pass),
        added(gated, find("direct")),
    )
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

// === the gated path's breakdown ===

/// The stage histograms whose means make the breakdown: (metric, label
/// filter, stage name printed, short name for the one-line summary).
const STAGES: [(&str, &str, &str, &str); 13] = [
    (
        "verdict_proxy_gated_stage_seconds",
        "stage=\"body\"",
        "body read and buffered",
        "body",
    ),
    (
        "verdict_proxy_gated_stage_seconds",
        "stage=\"input\"",
        "input: JSON, extractors, request hash",
        "input",
    ),
    (
        "verdict_decision_stage_seconds",
        "source=\"proxy\",stage=\"evaluate\"",
        "decision: evidence, engine, policy, record built",
        "decision",
    ),
    (
        "verdict_decision_stage_seconds",
        "source=\"proxy\",stage=\"engine\"",
        "  of which: the engine (claims checked)",
        "engine",
    ),
    (
        "verdict_decision_stage_seconds",
        "source=\"proxy\",stage=\"record\"",
        "audit append, until durable",
        "audit",
    ),
    (
        "verdict_ext_authz_stage_seconds",
        "stage=\"body\"",
        "check: body read",
        "body",
    ),
    (
        "verdict_ext_authz_stage_seconds",
        "stage=\"input\"",
        "check: input: JSON, extractors, request hash",
        "input",
    ),
    (
        "verdict_decision_stage_seconds",
        "source=\"ext_authz\",stage=\"evaluate\"",
        "check: decision: evidence, engine, policy, record built",
        "decision",
    ),
    (
        "verdict_decision_stage_seconds",
        "source=\"ext_authz\",stage=\"engine\"",
        "  check: of which: the engine (claims checked)",
        "engine",
    ),
    (
        "verdict_decision_stage_seconds",
        "source=\"ext_authz\",stage=\"record\"",
        "check: audit append, until durable",
        "audit",
    ),
    (
        "verdict_audit_commit_seconds",
        "",
        "  of which: one group commit (flush)",
        "flush",
    ),
    (
        "verdict_proxy_gated_stage_seconds",
        "stage=\"forward\"",
        "forward, until the upstream's head",
        "forward",
    ),
    (
        "verdict_audit_group_size",
        "",
        "records per group commit",
        "group size",
    ),
];

/// `_sum` and `_count` of every [`STAGES`] series, from verdict's
/// `/metrics`, keyed `metric{labels}_sum` / `_count`.
async fn metric_sums(api: SocketAddr) -> Result<BTreeMap<String, f64>, Error> {
    let mut sender = connect(api).await?;
    let req = Request::get("/metrics")
        .header(HOST, api.to_string())
        .body(Full::new(Bytes::new()))?;
    let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(req)).await??;
    let body = resp.into_body().collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&body);
    let mut out = BTreeMap::new();
    for line in text.lines() {
        for (metric, labels, _, _) in STAGES {
            // `metric_bucket{labels,le="x"} v`, kept as `metric{labels}_le_x`.
            if let Some(rest) = line.strip_prefix(&format!("{metric}_bucket{{")) {
                let Some((have, value)) = rest.split_once("} ") else {
                    continue;
                };
                // Label pairs in any order; `le` apart.
                let (mut le, mut rest) = (None, Vec::new());
                for pair in have.split("\",") {
                    let pair = pair.trim_end_matches('"');
                    match pair.strip_prefix("le=\"") {
                        Some(v) => le = Some(v),
                        None => rest.push(format!("{pair}\"")),
                    }
                }
                if let (Some(le), Ok(v)) = (le, value.trim().parse::<f64>()) {
                    if rest.join(",") == labels {
                        out.insert(format!("{metric}{{{labels}}}_le_{le}"), v);
                    }
                }
                continue;
            }
            for suffix in ["_sum", "_count"] {
                let series = format!("{metric}{suffix}");
                let Some(rest) = line.strip_prefix(&series) else {
                    continue;
                };
                let (have, value) = match rest.strip_prefix('{') {
                    Some(r) => match r.split_once("} ") {
                        Some((l, v)) => (l, v),
                        None => continue,
                    },
                    None => ("", rest.trim_start()),
                };
                if labels.is_empty() || have == labels {
                    if let Ok(v) = value.trim().parse::<f64>() {
                        out.insert(format!("{metric}{{{labels}}}{suffix}"), v);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Prints the mean of each stage over a gated scenario's open-loop phases,
/// beside what it adds over direct at the median; returns each stage's
/// median (ms; records for the group size) by short name.
fn print_breakdown(
    name: &str,
    acc: &BTreeMap<String, f64>,
    rate: u64,
    sums: Option<([Summary; 2], [Summary; 2])>,
) -> Vec<(&'static str, f64)> {
    let mut medians = Vec::new();
    println!("\n{name}: where the time goes at {rate} req/s (means over the open-loop phases, from verdict's /metrics)");
    println!("| stage | mean ms | median ms (within its bucket) |");
    println!("|---|---:|---:|");
    for (metric, labels, label, short) in STAGES {
        let key = format!("{metric}{{{labels}}}");
        let sum = acc.get(&format!("{key}_sum")).copied().unwrap_or(0.0);
        let count = acc.get(&format!("{key}_count")).copied().unwrap_or(0.0);
        if count <= 0.0 {
            continue;
        }
        // Group sizes are whole numbers: the median is its bucket's bound,
        // not a point inside it.
        let sizes = metric == "verdict_audit_group_size";
        let median = bucket_median(acc, &key, count, !sizes);
        medians.push((short, if sizes { median } else { median * 1000.0 }));
        if sizes {
            println!(
                "| {label} | {:.2} (records) | {} |",
                sum / count,
                fmt(median, 2)
            );
        } else {
            println!(
                "| {label} | {:.3} | {} |",
                sum / count * 1000.0,
                fmt(median * 1000.0, 3)
            );
        }
    }
    if let Some((d, g)) = sums {
        println!(
            "| (added over direct: open-loop p50 from send) | {} | |",
            fmt(g[1].svc_p50 - d[1].svc_p50, 3)
        );
    }
    medians
}

/// The median of a histogram from its cumulative bucket counts: linear
/// within the bucket that holds it, or that bucket's upper bound when not
/// `interpolate` (NaN when there are none).
fn bucket_median(acc: &BTreeMap<String, f64>, key: &str, count: f64, interpolate: bool) -> f64 {
    let prefix = format!("{key}_le_");
    let mut buckets: Vec<(f64, f64)> = acc
        .iter()
        .filter_map(|(k, v)| {
            let le = k.strip_prefix(&prefix)?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, *v))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let half = count / 2.0;
    let (mut lo, mut below) = (0.0, 0.0);
    for (le, cum) in buckets {
        if cum >= half {
            if !le.is_finite() {
                return lo;
            }
            if !interpolate {
                return le;
            }
            let share = if cum > below {
                (half - below) / (cum - below)
            } else {
                0.0
            };
            return lo + (le - lo) * share;
        }
        (lo, below) = (le, cum);
    }
    f64::NAN
}
