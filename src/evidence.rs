//! Evidence resolution: turn the sources of a request into text the engine
//! can read, or into an honest "unavailable".
//!
//! The engine never does IO, so this module reads what a source references,
//! within the operator's fences: `file://` only under `evidence.roots` (no
//! `..`, symlinks resolved before the check), `http(s)://` only for origins on
//! `evidence.allow_origins`, with a timeout, a size cap and redirects followed
//! only inside the allowlist. A checksum that does not match makes a source
//! unavailable too. The service never goes looking for evidence on its own:
//! only what a request names is read.
//!
//! An allowlisted *hostname* is not trusted to stay where it pointed: its
//! addresses are resolved and checked before the fetch, and the address the
//! connection actually reached is checked again before the body is read (a
//! DNS answer that changes in between gains nothing). Link-local addresses
//! (`169.254.0.0/16`, `fe80::/10`) and the cloud metadata endpoints are
//! refused unless the origin names that very IP literal in `allow_origins`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{HttpConnector, HttpInfo};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use sha2::{Digest, Sha256};

use crate::config::{normalize_origin, uri_origin, EvidenceConfig};

/// How many redirects inside the allowlist are followed.
const MAX_REDIRECTS: usize = 3;

/// Where a source's content comes from, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Inline(String),
    Uri(String),
    /// A source as a captured decision read it, replayed as such: its text
    /// or why it was unavailable, and the uri it was named by, if any.
    /// `verdict replay` never fetches.
    Captured {
        uri: Option<String>,
        text: Result<String, String>,
    },
}

impl Content {
    /// The uri the source is named by, if any.
    pub fn uri(&self) -> Option<&str> {
        match self {
            Content::Inline(_) => None,
            Content::Uri(u) => Some(u),
            Content::Captured { uri, .. } => uri.as_deref(),
        }
    }
}

/// A source to resolve.
#[derive(Debug, Clone)]
pub struct SourceRef {
    pub id: String,
    pub content: Content,
    /// `sha256:<hex>` over the UTF-8 bytes of the content, if given.
    pub checksum: Option<String>,
}

/// The outcome for one source: its text, or why it is unavailable.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub id: String,
    pub text: Result<String, String>,
    /// The uri it was named by (`None` for inline text).
    pub uri: Option<String>,
    /// The `sha256:` checksum the caller gave.
    pub checksum: Option<String>,
}

/// Reads sources for requests. Cheap to clone; holds one pooled client.
#[derive(Clone)]
pub struct Resolver {
    inner: Arc<Inner>,
}

struct Inner {
    roots: Vec<PathBuf>,
    origins: Vec<String>,
    timeout: Duration,
    max_bytes: usize,
    date_order: crate::engine::DateOrder,
    client: Option<Client<HttpsConnector<HttpConnector>, Empty<Bytes>>>,
}

impl Resolver {
    pub fn new(cfg: &EvidenceConfig) -> Resolver {
        // Roots that do not exist cannot hold evidence; keep the canonical form
        // of the rest so symlinked roots compare correctly.
        let roots = cfg
            .roots
            .iter()
            .filter_map(|r| match std::fs::canonicalize(r) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(root = %r.display(), error = %e, "evidence root is unusable");
                    None
                }
            })
            .collect();
        let origins = cfg
            .allow_origins
            .iter()
            .filter_map(|o| normalize_origin(o))
            .collect::<Vec<_>>();
        let client = if origins.is_empty() {
            None
        } else {
            build_client()
        };
        Resolver {
            inner: Arc::new(Inner {
                roots,
                origins,
                timeout: cfg.fetch_timeout,
                max_bytes: cfg.max_source_bytes,
                date_order: cfg.date_order,
                client,
            }),
        }
    }

    /// How ambiguous numeric dates are read (`[evidence] date_order`): the
    /// engine reads sources and claims alike with it.
    pub fn date_order(&self) -> crate::engine::DateOrder {
        self.inner.date_order
    }

    /// Resolves every source; uri sources are fetched concurrently.
    pub async fn resolve(&self, sources: &[SourceRef]) -> Vec<Resolved> {
        let mut set = tokio::task::JoinSet::new();
        let mut out: Vec<Option<Resolved>> = vec![None; sources.len()];
        for (i, s) in sources.iter().enumerate() {
            match &s.content {
                Content::Inline(text) => {
                    out[i] = Some(Resolved {
                        id: s.id.clone(),
                        text: check_sum(text.clone(), s.checksum.as_deref()),
                        uri: None,
                        checksum: s.checksum.clone(),
                    });
                }
                Content::Captured { uri, text } => {
                    out[i] = Some(Resolved {
                        id: s.id.clone(),
                        text: text.clone(),
                        uri: uri.clone(),
                        checksum: s.checksum.clone(),
                    });
                }
                Content::Uri(uri) => {
                    let me = self.clone();
                    let uri = uri.clone();
                    let checksum = s.checksum.clone();
                    set.spawn(async move {
                        let text = match me.fetch(&uri).await {
                            Ok(t) => check_sum(t, checksum.as_deref()),
                            Err(e) => Err(e),
                        };
                        (i, text)
                    });
                }
            }
        }
        while let Some(joined) = set.join_next().await {
            if let Ok((i, text)) = joined {
                if let Some(s) = sources.get(i) {
                    out[i] = Some(Resolved {
                        id: s.id.clone(),
                        text,
                        uri: s.content.uri().map(str::to_string),
                        checksum: s.checksum.clone(),
                    });
                }
            }
        }
        out.into_iter()
            .zip(sources)
            .map(|(r, s)| {
                r.unwrap_or_else(|| Resolved {
                    id: s.id.clone(),
                    text: Err("fetch task failed".into()),
                    uri: s.content.uri().map(str::to_string),
                    checksum: s.checksum.clone(),
                })
            })
            .collect()
    }

    async fn fetch(&self, uri: &str) -> Result<String, String> {
        if let Some(rest) = uri.strip_prefix("file://") {
            let path = self.file_path(rest)?;
            let max = self.inner.max_bytes;
            return tokio::task::spawn_blocking(move || read_capped(&path, max))
                .await
                .map_err(|_| "file read task failed".to_string())?;
        }
        if uri.starts_with("http://") || uri.starts_with("https://") {
            return tokio::time::timeout(self.inner.timeout, self.fetch_http(uri))
                .await
                .map_err(|_| format!("timed out after {:?}", self.inner.timeout))?;
        }
        Err("unsupported uri scheme (file, http and https are supported)".into())
    }

    /// Maps the path part of a `file://` uri to a file under a root.
    fn file_path(&self, rest: &str) -> Result<PathBuf, String> {
        // file:///abs/path and file://localhost/abs/path
        let raw = rest.strip_prefix("localhost").unwrap_or(rest);
        if !raw.starts_with('/') {
            return Err("file uri must be absolute (file:///path)".into());
        }
        let decoded = percent_decode(raw).ok_or("file uri is not valid percent-encoded UTF-8")?;
        let path = PathBuf::from(decoded);
        if path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err("file uri must not contain '..'".into());
        }
        if self.inner.roots.is_empty() {
            return Err("file uris are disabled (evidence.roots is empty)".into());
        }
        let real = std::fs::canonicalize(&path)
            .map_err(|_| "file not found or not readable".to_string())?;
        if !self.inner.roots.iter().any(|root| real.starts_with(root)) {
            return Err("file is outside evidence.roots".into());
        }
        Ok(real)
    }

    async fn fetch_http(&self, uri: &str) -> Result<String, String> {
        let client = self
            .inner
            .client
            .as_ref()
            .ok_or("http(s) uris are disabled (evidence.allow_origins is empty)")?;
        let mut current: Uri = uri.parse().map_err(|_| "invalid uri".to_string())?;
        for _ in 0..=MAX_REDIRECTS {
            let origin = uri_origin(&current).ok_or("invalid uri")?;
            if !self.inner.origins.contains(&origin) {
                return Err(format!("origin {origin} is not on evidence.allow_origins"));
            }
            let literal = ip_literal(&current);
            if literal.is_none() {
                check_resolved(&current).await?;
            }
            let req = Request::get(current.clone())
                .header("accept", "text/plain, text/*;q=0.9, */*;q=0.1")
                .body(Empty::new())
                .map_err(|_| "invalid uri".to_string())?;
            let resp = client
                .request(req)
                .await
                .map_err(|e| format!("fetch failed: {e}"))?;
            // The address actually connected to, whatever DNS said before.
            if let Some(info) = resp.extensions().get::<HttpInfo>() {
                let ip = info.remote_addr().ip();
                if Some(ip) != literal && is_forbidden_ip(ip) {
                    return Err(format!(
                        "{origin} connected to {ip}, a link-local or metadata address"
                    ));
                }
            }
            let status = resp.status();
            if status.is_redirection() {
                let location = resp
                    .headers()
                    .get(http::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or("redirect without a location")?;
                current = join_location(&current, location).ok_or("invalid redirect location")?;
                continue;
            }
            if status != StatusCode::OK {
                return Err(format!("upstream answered {status}"));
            }
            let body = Limited::new(resp.into_body(), self.inner.max_bytes)
                .collect()
                .await
                .map_err(|e| format!("reading body failed: {e}"))?
                .to_bytes();
            return String::from_utf8(body.to_vec())
                .map_err(|_| "content is not UTF-8".to_string());
        }
        Err("too many redirects".into())
    }
}

fn build_client() -> Option<Client<HttpsConnector<HttpConnector>, Empty<Bytes>>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
    {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "no system root certificates; https evidence is disabled");
            return None;
        }
    };
    let connector = builder
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .build();
    Some(
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .build(connector),
    )
}

fn read_capped(path: &Path, max: usize) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|_| "file not readable".to_string())?;
    let mut buf = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|_| "file not readable".to_string())?;
    if buf.len() > max {
        return Err(format!("file is larger than {max} bytes"));
    }
    String::from_utf8(buf).map_err(|_| "content is not UTF-8".to_string())
}

fn check_sum(text: String, checksum: Option<&str>) -> Result<String, String> {
    let Some(want) = checksum else {
        return Ok(text);
    };
    let got = format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())));
    if got.eq_ignore_ascii_case(want) {
        Ok(text)
    } else {
        Err("checksum mismatch".into())
    }
}

/// The uri's host when it is an IP literal (`1.2.3.4` or `[fe80::1]`): an
/// operator who allowlists a literal means that address.
fn ip_literal(uri: &Uri) -> Option<IpAddr> {
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse().ok()
}

/// Resolves an allowlisted hostname and refuses it when any of its addresses
/// is link-local or a metadata endpoint.
async fn check_resolved(uri: &Uri) -> Result<(), String> {
    let host = uri.host().ok_or("invalid uri")?.to_string();
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    match addrs.iter().find(|a| is_forbidden_ip(a.ip())) {
        Some(a) => Err(format!(
            "{host} resolves to {}, a link-local or metadata address",
            a.ip()
        )),
        None => Ok(()),
    }
}

pub(crate) use crate::support::fence::is_forbidden_ip;

fn join_location(base: &Uri, location: &str) -> Option<Uri> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.parse().ok();
    }
    if !location.starts_with('/') {
        return None;
    }
    let mut parts = base.clone().into_parts();
    parts.path_and_query = Some(location.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// Decodes `%XX` escapes (`+` stays a `+`); `None` for a bad escape or
/// bytes that are not UTF-8.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(roots: Vec<PathBuf>, origins: Vec<String>) -> EvidenceConfig {
        EvidenceConfig {
            roots,
            allow_origins: origins,
            fetch_timeout: Duration::from_secs(2),
            max_source_bytes: 64,
            date_order: crate::engine::DateOrder::Ambiguous,
        }
    }

    fn uri(id: &str, u: &str) -> SourceRef {
        SourceRef {
            id: id.into(),
            content: Content::Uri(u.into()),
            checksum: None,
        }
    }

    #[tokio::test]
    async fn files_only_under_roots() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.txt"), "refund of $100").unwrap();
        std::fs::write(root.path().join("big.txt"), "x".repeat(65)).unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            root.path().join("link.txt"),
        )
        .unwrap();
        let r = Resolver::new(&cfg(vec![root.path().to_path_buf()], vec![]));
        let base = root.path().display().to_string();
        let got = r
            .resolve(&[
                uri("ok", &format!("file://{base}/a.txt")),
                uri("dotdot", &format!("file://{base}/../x/secret.txt")),
                uri(
                    "outside",
                    &format!("file://{}/secret.txt", outside.path().display()),
                ),
                uri("link", &format!("file://{base}/link.txt")),
                uri("big", &format!("file://{base}/big.txt")),
                uri("missing", &format!("file://{base}/none.txt")),
                uri("ftp", "ftp://x/y"),
                uri("http", "http://127.0.0.1:1/x"),
            ])
            .await;
        assert_eq!(got[0].text.as_deref(), Ok("refund of $100"));
        for r in &got[1..] {
            assert!(r.text.is_err(), "{r:?}");
        }
        #[cfg(unix)]
        assert_eq!(got[3].text, Err("file is outside evidence.roots".into()));
    }

    #[tokio::test]
    async fn checksums_are_checked() {
        let r = Resolver::new(&cfg(vec![], vec![]));
        let good = format!("sha256:{}", hex::encode(Sha256::digest(b"abc")));
        let got = r
            .resolve(&[
                SourceRef {
                    id: "a".into(),
                    content: Content::Inline("abc".into()),
                    checksum: Some(good),
                },
                SourceRef {
                    id: "b".into(),
                    content: Content::Inline("abd".into()),
                    checksum: Some(format!("sha256:{}", "0".repeat(64))),
                },
            ])
            .await;
        assert!(got[0].text.is_ok());
        assert_eq!(got[1].text, Err("checksum mismatch".into()));
    }

    #[test]
    fn link_local_and_metadata_addresses_are_forbidden() {
        let cases = [
            ("169.254.169.254", true),
            ("169.254.0.1", true),
            ("100.100.100.200", true),
            ("fe80::1", true),
            ("febf::1", true),
            ("fd00:ec2::254", true),
            ("::ffff:169.254.169.254", true),
            ("127.0.0.1", false),
            ("10.0.0.1", false),
            ("::1", false),
            ("fec0::1", false),
            ("100.100.100.201", false),
        ];
        for (ip, forbidden) in cases {
            let parsed: IpAddr = ip.parse().unwrap();
            assert_eq!(is_forbidden_ip(parsed), forbidden, "{ip}");
        }
    }

    /// An allowlisted *hostname* that resolves to the metadata address is
    /// refused before any connection; the same address allowlisted as an IP
    /// literal is the operator's explicit choice and is tried.
    #[tokio::test]
    async fn hostnames_resolving_to_link_local_are_refused() {
        // `2852039166` is 169.254.169.254 written as one number: a name for
        // the resolver, the metadata address once resolved.
        let mut c = cfg(
            vec![],
            vec![
                "http://2852039166:80".into(),
                "http://169.254.169.254:80".into(),
                "http://[fe80::1]:80".into(),
            ],
        );
        c.fetch_timeout = Duration::from_millis(300);
        let r = Resolver::new(&c);
        let got = r
            .resolve(&[
                uri("named", "http://2852039166/latest/meta-data"),
                uri("literal", "http://169.254.169.254/latest/meta-data"),
                uri("v6", "http://[fe80::1]/x"),
                uri("v6-other-port", "http://[fe80::1]:8080/x"),
            ])
            .await;
        let err = |i: usize| got[i].text.clone().unwrap_err();
        assert!(err(0).contains("link-local or metadata"), "{}", err(0));
        // Explicit literals are attempted (and fail to connect here).
        assert!(!err(1).contains("link-local"), "{}", err(1));
        assert!(!err(2).contains("link-local"), "{}", err(2));
        assert!(
            err(3).contains("not on evidence.allow_origins"),
            "{}",
            err(3)
        );
    }
}
