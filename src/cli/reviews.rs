//! `verdict reviews list|show|approve|reject`: a reviewer's command line for
//! a running server, through the Review API only.
//!
//! It exists so that an operator can clear a held refund from a terminal
//! without writing curl by hand. It goes through the same endpoints as any
//! other client (`GET /v2/reviews`, `GET /v2/reviews/{id}`,
//! `POST /v2/reviews/{id}/approve|reject`), so the server's checks, scopes
//! and audit records apply unchanged; nothing here touches the data dir.
//! Output is a readable table, or the server's JSON with `--json`; any
//! refusal is one line on stderr carrying the server's own message, and a
//! non-zero exit code.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::start_runtime;
use crate::config::DEFAULT_API_LISTEN;

/// The environment variable that holds the API key.
pub const KEY_ENV: &str = "VERDICT_KEY";

/// The longest one call may take, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of an answer read (a full list of 1000 reviews fits).
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// `http://` and the default API address.
pub fn default_url() -> String {
    format!("http://{DEFAULT_API_LISTEN}")
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    List {
        status: Option<String>,
        limit: Option<u32>,
    },
    Show {
        id: String,
    },
    Resolve {
        id: String,
        approve: bool,
        reviewer: String,
        note: String,
    },
}

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct Options {
    /// The API's base URL, e.g. `http://127.0.0.1:8181`.
    pub url: String,
    /// The key (`VERDICT_KEY`); `None` is a usage error.
    pub key: Option<String>,
    /// Print the server's JSON rather than a table.
    pub json: bool,
    /// PEM roots for an https URL; the system roots otherwise.
    pub ca_file: Option<PathBuf>,
}

/// Why a command failed: exit 2 for [`CliError::Usage`], 1 otherwise.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    /// The server answered 4xx or 5xx; the message is its own.
    #[error("{message} (HTTP {status}{})", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Refused {
        status: u16,
        code: Option<String>,
        message: String,
    },
    /// No answer, or one that is not what the API sends.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Refused { .. } | CliError::Failed(_) => 1,
        }
    }
}

/// The reviewer name when `--reviewer` is not given: `$USER`, else
/// `verdict-cli`.
pub fn default_reviewer(user: Option<String>) -> String {
    user.map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "verdict-cli".to_string())
}

/// Runs one command and returns what to print on stdout.
pub async fn run(opts: &Options, action: &Action) -> Result<String, CliError> {
    let key = opts
        .key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "set {KEY_ENV} to an API key with the review scope (verdict keys new --name NAME --scopes review)"
            ))
        })?;
    let base = base_url(&opts.url)?;
    let client = build_client(opts.ca_file.as_deref())?;
    let call = |method: Method, path: String, body: Option<Value>| {
        send(&client, &base, key, method, path, body)
    };
    match action {
        Action::List { status, limit } => {
            let mut query = Vec::new();
            if let Some(s) = status {
                query.push(format!("status={}", encode(s)));
            }
            if let Some(n) = limit {
                query.push(format!("limit={n}"));
            }
            let path = if query.is_empty() {
                "/v2/reviews".to_string()
            } else {
                format!("/v2/reviews?{}", query.join("&"))
            };
            let v = call(Method::GET, path, None).await?;
            Ok(if opts.json {
                pretty(&v)
            } else {
                list_table(&v)?
            })
        }
        Action::Show { id } => {
            let v = call(Method::GET, format!("/v2/reviews/{}", encode(id)), None).await?;
            Ok(if opts.json { pretty(&v) } else { show_text(&v) })
        }
        Action::Resolve {
            id,
            approve,
            reviewer,
            note,
        } => {
            let verb = if *approve { "approve" } else { "reject" };
            let body = serde_json::json!({ "reviewer": reviewer, "note": note });
            let v = call(
                Method::POST,
                format!("/v2/reviews/{}/{verb}", encode(id)),
                Some(body),
            )
            .await?;
            Ok(if opts.json {
                pretty(&v)
            } else {
                format!(
                    "{} {} (reviewer {})\n",
                    text(&v["status"]),
                    text(&v["review_id"]),
                    text(&v["reviewer"])
                )
            })
        }
    }
}

/// The URL without a trailing `/`; http or https with a host.
fn base_url(url: &str) -> Result<String, CliError> {
    let base = url.trim().trim_end_matches('/');
    let uri: http::Uri = base
        .parse()
        .map_err(|_| CliError::Usage(format!("--url: {url:?} is not a URL")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(CliError::Usage(format!(
            "--url: {url:?} must be an http:// or https:// URL"
        )));
    }
    if uri.query().is_some() {
        return Err(CliError::Usage(format!(
            "--url: {url:?} must not have a query"
        )));
    }
    Ok(base.to_string())
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

fn build_client(ca_file: Option<&std::path::Path>) -> Result<HttpClient, CliError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(REQUEST_TIMEOUT));
    // Without system roots plain http still works; https then needs --ca-file.
    let tls =
        crate::config::client_tls(ca_file, "https needs --ca-file").map_err(|e| match ca_file {
            Some(path) => CliError::Usage(format!("--ca-file {}: {e}", path.display())),
            None => CliError::Failed(format!("TLS set-up failed: {e}")),
        })?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    let connector = builder.https_or_http().enable_http1().wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// One call; the answer's JSON, or the server's error as [`CliError`].
async fn send(
    client: &HttpClient,
    base: &str,
    key: &str,
    method: Method,
    path: String,
    body: Option<Value>,
) -> Result<Value, CliError> {
    let url = format!("{base}{path}");
    let mut req = Request::builder()
        .method(method)
        .uri(&url)
        .header(ACCEPT, "application/json")
        .header(
            USER_AGENT,
            concat!("verdict-cli/", env!("CARGO_PKG_VERSION")),
        )
        .header(AUTHORIZATION, format!("Bearer {key}"));
    let bytes = match body {
        Some(v) => {
            req = req.header(CONTENT_TYPE, "application/json");
            Bytes::from(v.to_string())
        }
        None => Bytes::new(),
    };
    let req = req
        .body(Full::new(bytes))
        .map_err(|e| CliError::Usage(format!("cannot build a request to {url}: {e}")))?;
    let unreachable = |e: String| CliError::Failed(format!("cannot reach {base}: {e}"));
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| unreachable(crate::http::error_chain(&e)))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| unreachable(format!("reading the answer failed: {e}")))?
            .to_bytes();
        Ok::<_, CliError>((status, body))
    })
    .await
    .map_err(|_| unreachable(format!("no answer within {REQUEST_TIMEOUT:?}")))??;
    let (status, body) = answer;
    let json: Option<Value> = serde_json::from_slice(&body).ok();
    if status.is_client_error() || status.is_server_error() {
        let err = json.as_ref().map(|v| &v["error"]);
        let message = err
            .and_then(|e| e["message"].as_str())
            .map(clean)
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(&body);
                let text: String = text.chars().take(200).collect();
                if text.trim().is_empty() {
                    status
                        .canonical_reason()
                        .unwrap_or("the server refused")
                        .to_string()
                } else {
                    clean(text.trim())
                }
            });
        return Err(CliError::Refused {
            status: status.as_u16(),
            code: err.and_then(|e| e["code"].as_str()).map(clean),
            message,
        });
    }
    json.ok_or_else(|| {
        CliError::Failed(format!(
            "{url} answered {status} with a body that is not JSON"
        ))
    })
}

/// `GET /v2/reviews` as a table, one review a line.
pub fn list_table(v: &Value) -> Result<String, CliError> {
    let reviews = v["reviews"]
        .as_array()
        .ok_or_else(|| CliError::Failed("the answer has no \"reviews\" list".into()))?;
    if reviews.is_empty() {
        return Ok("no reviews\n".into());
    }
    let header = [
        "REVIEW ID",
        "STATUS",
        "CREATED",
        "EXPIRES",
        "ROUTE",
        "ACTION",
        "REASON",
    ];
    let rows: Vec<[String; 7]> = reviews
        .iter()
        .map(|r| {
            [
                text(&r["review_id"]),
                text(&r["status"]),
                when(&r["created_at"]),
                when(&r["expires_at"]),
                text(&r["route"]),
                text(&r["action"]),
                text(&r["reason"]),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                l.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
    Ok(out)
}

/// `GET /v2/reviews/{id}` as `field  value` lines.
pub fn show_text(v: &Value) -> String {
    let mut lines: Vec<(&str, String)> = vec![
        ("review", text(&v["review_id"])),
        ("status", text(&v["status"])),
        ("route", text(&v["route"])),
        ("action", text(&v["action"])),
        ("reason", text(&v["reason"])),
    ];
    if let Some(rules) = v["rules"].as_array() {
        for (i, rule) in rules.iter().enumerate() {
            lines.push((
                if i == 0 { "rules" } else { "" },
                format!("- {}", text(rule)),
            ));
        }
    }
    // What was decided: the params as the audit record holds them and each
    // claim with its status, so a reviewer never approves blind.
    let decision = &v["decision"];
    if let Some(params) = decision["params"].as_object() {
        for (i, (name, value)) in params.iter().enumerate() {
            lines.push((
                if i == 0 { "params" } else { "" },
                format!("{name} = {}", text(value)),
            ));
        }
    }
    if let Some(claims) = decision["claims"].as_array() {
        for (i, c) in claims.iter().enumerate() {
            let reasons = c["reasons"]
                .as_array()
                .filter(|r| !r.is_empty())
                .map(|r| {
                    let r: Vec<String> = r.iter().map(text).collect();
                    format!(" ({})", r.join(", "))
                })
                .unwrap_or_default();
            lines.push((
                if i == 0 { "claims" } else { "" },
                format!("- {} [{}{reasons}]", text(&c["text"]), text(&c["status"])),
            ));
        }
    }
    lines.push(("created", when(&v["created_at"])));
    lines.push(("expires", when(&v["expires_at"])));
    for (label, key) in [
        ("resolved", "resolved_at"),
        ("reviewer", "reviewer"),
        ("note", "note"),
        ("record", "record_id"),
    ] {
        if !v[key].is_null() {
            let value = if key == "resolved_at" {
                when(&v[key])
            } else {
                text(&v[key])
            };
            lines.push((label, value));
        }
    }
    let request = &v["request"];
    lines.push((
        "request",
        format!("{} {}", text(&request["method"]), text(&request["path"])),
    ));
    lines.push(("hash", text(&request["hash"])));
    let forward = &v["forward"];
    let mut fwd = text(&forward["state"]);
    if let Some(s) = forward["upstream_status"].as_u64() {
        fwd.push_str(&format!(" (upstream answered {s})"));
    }
    lines.push(("forward", fwd));
    let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (label, value) in lines {
        out.push_str(format!("{label:<width$}  {value}").trim_end());
        out.push('\n');
    }
    out
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    s.push('\n');
    s
}

/// A JSON value for a terminal: strings as they are (control characters
/// escaped), `null` as `-`.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => clean(s),
        other => clean(&other.to_string()),
    }
}

/// An RFC 3339 time to the second: `2026-11-22T21:30:00Z`.
fn when(v: &Value) -> String {
    match v.as_str() {
        Some(s) => match (s.find('.'), s.ends_with('Z')) {
            (Some(dot), true) => clean(&format!("{}Z", &s[..dot])),
            _ => clean(s),
        },
        None => text(v),
    }
}

/// Escapes control characters, so that a note or a reason cannot move the
/// cursor or recolour another reviewer's terminal.
fn clean(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so an
/// id or a status stays one path segment or query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(id: &str, status: &str) -> Value {
        serde_json::json!({
            "review_id": id, "status": status,
            "created_at": "2026-11-22T21:30:00.123456Z", "expires_at": "2026-11-23T21:30:00.123456Z",
            "route": "create-refund", "action": "refund.create", "reason": "review_required",
            "rules": ["refunds above 500", "new customer"],
            "record_id": "rec-1",
            "forward": {"state": "not_started"},
            "request": {"method": "POST", "path": "/api/orders/77/refunds", "hash": "sha256:ab"},
        })
    }

    #[test]
    fn lists_align_and_keep_full_ids() {
        let v =
            serde_json::json!({"reviews": [review("a-1", "pending"), review("b-22", "approved")]});
        let t = list_table(&v).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("REVIEW ID  STATUS    CREATED"), "{t}");
        assert!(
            lines[1].starts_with("a-1        pending   2026-11-22T21:30:00Z"),
            "{t}"
        );
        assert!(
            lines[2].contains("b-22") && lines[2].ends_with("review_required"),
            "{t}"
        );
        assert_eq!(
            list_table(&serde_json::json!({"reviews": []})).unwrap(),
            "no reviews\n"
        );
        assert!(list_table(&serde_json::json!({})).is_err());
    }

    #[test]
    fn show_prints_every_part_and_escapes_control_characters() {
        let mut v = review("a-1", "approved");
        v["reviewer"] = "alice".into();
        v["note"] = "fine\u{1b}[31m".into();
        v["resolved_at"] = "2026-11-22T22:00:00Z".into();
        v["forward"] = serde_json::json!({"state": "done", "upstream_status": 200});
        v["decision"] = serde_json::json!({
            "params": {"amount": 750, "order_id": "77"},
            "claims": [
                {"text": "Order 77 was charged $750.00.", "status": "supported", "reasons": []},
                {"text": "It arrived broken.", "status": "unsupported", "reasons": ["low_coverage"]},
            ],
        });
        let t = show_text(&v);
        for want in [
            "review    a-1",
            "rules     - refunds above 500",
            "          - new customer",
            "params    amount = 750",
            "          order_id = 77",
            "claims    - Order 77 was charged $750.00. [supported]",
            "          - It arrived broken. [unsupported (low_coverage)]",
            "resolved  2026-11-22T22:00:00Z",
            "reviewer  alice",
            "request   POST /api/orders/77/refunds",
            "forward   done (upstream answered 200)",
        ] {
            assert!(t.contains(want), "{want:?} in\n{t}");
        }
        assert!(!t.contains('\u{1b}'), "{t}");
        assert!(t.contains("fine\\u{1b}[31m"), "{t}");
    }

    #[test]
    fn urls_ids_and_reviewers() {
        assert_eq!(
            base_url("http://127.0.0.1:8181/").unwrap(),
            "http://127.0.0.1:8181"
        );
        assert!(base_url("ftp://x").is_err());
        assert!(base_url("127.0.0.1:8181").is_err());
        assert_eq!(encode("../a b?c"), "..%2Fa%20b%3Fc");
        assert_eq!(default_reviewer(Some(" ops ".into())), "ops");
        assert_eq!(default_reviewer(None), "verdict-cli");
        assert_eq!(default_url(), "http://127.0.0.1:8181");
    }

    #[tokio::test]
    async fn a_missing_key_is_a_usage_error() {
        let opts = Options {
            url: default_url(),
            key: None,
            json: false,
            ca_file: None,
        };
        let e = run(&opts, &Action::Show { id: "x".into() })
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(KEY_ENV), "{e}");
    }

    #[test]
    fn refusals_read_as_one_line() {
        let e = CliError::Refused {
            status: 409,
            code: Some("conflict".into()),
            message: "review x is already approved".into(),
        };
        assert_eq!(
            e.to_string(),
            "review x is already approved (HTTP 409, conflict)"
        );
        assert_eq!(e.exit_code(), 1);
    }
}

#[derive(Args)]
pub(crate) struct ReviewsArgs {
    /// The server's API URL.
    #[arg(long, global = true, env = "VERDICT_URL", default_value_t = default_url())]
    url: String,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// PEM roots for an https URL (the system roots otherwise).
    #[arg(long, global = true)]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: ReviewsCommand,
}

#[derive(Subcommand)]
pub(crate) enum ReviewsCommand {
    /// Reviews, pending oldest first, others newest first.
    List {
        #[arg(long, value_parser = ["pending", "approved", "rejected", "expired"])]
        status: Option<String>,
        /// At most this many (the server's default is 100).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: Option<u32>,
    },
    /// One review: its rules, request, resolution and forward.
    Show { id: String },
    /// Approve a held request: it is then forwarded exactly once (a
    /// record-only review's approval forwards nothing).
    Approve {
        id: String,
        /// Why (stored with the resolution and in its audit record).
        #[arg(long)]
        note: String,
        /// Who approves [default: $USER].
        #[arg(long, env = "VERDICT_REVIEWER")]
        reviewer: Option<String>,
    },
    /// Reject a held request: it is never forwarded.
    Reject {
        id: String,
        /// Why (stored with the resolution and in its audit record).
        #[arg(long)]
        note: String,
        /// Who rejects [default: $USER].
        #[arg(long, env = "VERDICT_REVIEWER")]
        reviewer: Option<String>,
    },
}

/// `verdict reviews ...`: one call to the Review API of a running server.
pub(crate) fn command(args: ReviewsArgs) -> ExitCode {
    let reviewer =
        |r: Option<String>| r.unwrap_or_else(|| default_reviewer(std::env::var("USER").ok()));
    let action = match args.command {
        ReviewsCommand::List { status, limit } => Action::List { status, limit },
        ReviewsCommand::Show { id } => Action::Show { id },
        ReviewsCommand::Approve {
            id,
            note,
            reviewer: r,
        } => Action::Resolve {
            id,
            approve: true,
            reviewer: reviewer(r),
            note,
        },
        ReviewsCommand::Reject {
            id,
            note,
            reviewer: r,
        } => Action::Resolve {
            id,
            approve: false,
            reviewer: reviewer(r),
            note,
        },
    };
    let opts = Options {
        url: args.url,
        key: std::env::var(KEY_ENV).ok(),
        json: args.json,
        ca_file: args.ca_file,
    };
    let rt = match start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(run(&opts, &action)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("verdict: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
