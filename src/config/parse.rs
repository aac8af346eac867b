//! The small readers the config is built from: the file itself, addresses,
//! TLS pairs and roots, witnesses, durations, and line and column positions
//! for errors.

use super::*;

/// The certificates of a PEM file (`ca_file` keys) as TLS client roots;
/// an error names what is wrong (the caller names the key and the file).
pub fn pem_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(path).map_err(|e| e.to_string())? {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("no certificate found".into());
    }
    Ok(roots)
}

/// The TLS config of an outbound https client (ring): it trusts
/// `ca_file`'s roots when one is given, else the system's. Where the
/// system has none it trusts nothing, so plain http still works and https
/// fails its certificate check; `no_roots` (logged then) says what to do.
/// An error names what is wrong with `ca_file` (the caller names the key).
pub fn client_tls(ca_file: Option<&Path>, no_roots: &str) -> Result<rustls::ClientConfig, String> {
    let roots = match ca_file {
        Some(path) => pem_roots(path)?,
        None => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            for cert in found.certs {
                // A system root rustls cannot parse is skipped, as browsers do.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                tracing::warn!(?errors, "no system root certificates; {no_roots}");
            }
            roots
        }
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

pub(super) fn parse_file(name: &str, text: &str) -> Result<FileConfig, ConfigError> {
    Ok(TomlFileError::parse(name, text)?)
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, byte: usize) -> (usize, usize) {
    let byte = byte.min(text.len());
    let before = text.get(..byte).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count() + 1)
        .unwrap_or(1);
    (line, col)
}

pub(super) fn parse_addr(s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse()
        .map_err(|e| ConfigError::Invalid(format!("bad address {s:?}: {e}")))
}

pub(super) fn tls_pair(
    section: &str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key })),
        _ => Err(ConfigError::Invalid(format!(
            "{section}: tls_cert and tls_key must be set together"
        ))),
    }
}

/// `[[audit.witnesses]]`: each an http(s) URL and a cosigner verifier key
/// (`verdict witness vkey` prints one); names must differ.
pub(super) fn witnesses(list: Vec<FileWitness>) -> Result<Vec<WitnessConfig>, ConfigError> {
    let mut out: Vec<WitnessConfig> = Vec::with_capacity(list.len());
    for (i, w) in list.into_iter().enumerate() {
        let at = format!("audit.witnesses[{i}]");
        let uri: http::Uri = w
            .url
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("{at}.url: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(ConfigError::Invalid(format!(
                "{at}.url: must be an http:// or https:// URL, got {:?}",
                w.url
            )));
        }
        let (name, key) =
            super::vkey::parse_typed_verifier_key(&w.vkey, super::vkey::COSIGNATURE_KEY_TYPE)
                .map_err(|e| ConfigError::Invalid(format!("{at}.vkey: {e}")))?;
        if out.iter().any(|o| o.name == name) {
            return Err(ConfigError::Invalid(format!(
                "{at}: a second witness named {name:?}"
            )));
        }
        out.push(WitnessConfig {
            url: w.url.trim_end_matches('/').to_string(),
            name,
            key,
        });
    }
    Ok(out)
}

pub(super) fn duration(
    key: &str,
    value: Option<impl AsRef<str>>,
    default: &str,
) -> Result<Duration, ConfigError> {
    let text = value.as_ref().map_or(default, AsRef::as_ref);
    parse_duration(text).map_err(|e| ConfigError::Invalid(format!("{key}: {e}")))
}

/// Parses durations such as `2ms`, `30s`, `24h` or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// Prints a duration the way config files write them: `48h`, `90m`,
/// `30s`, `1500ms` (the largest unit that divides it), or `0`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0".into();
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return humantime::format_duration(d).to_string();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    match ms / 1000 {
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
