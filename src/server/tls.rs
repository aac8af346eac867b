//! TLS certificates that follow their files: a listener's certificate and key
//! are read again whenever they change on disk, without a restart.
//!
//! Certificates expire and are rotated by tools that replace files under a
//! running process: cert-manager and the kubelet swap a Secret's `..data`
//! symlink, others rename a new file over the old one or write it in place.
//! A sidecar that read its certificate once would serve the old one until
//! someone restarted it, and then fail every handshake once it expired. So
//! each TLS listener serves through a [`ReloadingCert`], a rustls certificate
//! resolver whose certificate and key are swapped atomically when
//! [`ReloadingCert::reload`] reads a good pair. A pair that does not load (a
//! half-written file, a key that does not match the certificate) keeps the
//! last good one serving, is logged as an error and turns the listener's
//! component in `/health/detailed` `degraded` until a reload succeeds. New
//! handshakes use the new certificate; open connections keep theirs.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use super::TlsError;
use crate::config::TlsFiles;
use crate::telemetry::health::{self, Component};

/// A listener's certificate and key, read from their files and read again
/// on [`ReloadingCert::reload`]. Serves as the rustls certificate resolver
/// of that listener and as its `/health/detailed` component.
pub struct ReloadingCert {
    /// The component name, e.g. `api_tls`.
    name: &'static str,
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<Served>,
    /// std Mutex: held for a field copy, never across an await.
    state: Mutex<ReloadState>,
}

/// The pair being served and what identifies it.
struct Served {
    key: Arc<CertifiedKey>,
    /// `sha256:<hex>` of the end-entity certificate's DER bytes.
    fingerprint: String,
}

#[derive(Debug, Default, Clone)]
struct ReloadState {
    reloads_ok: u64,
    reloads_failed: u64,
    last_reload: Option<SystemTime>,
    /// Why the newest reload failed; cleared by a good one.
    last_error: Option<String>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("name", &self.name)
            .field("cert", &self.files.cert)
            .field("key", &self.files.key)
            .finish()
    }
}

impl ReloadingCert {
    /// Reads the pair once; an error here stops start-up.
    pub fn open(name: &'static str, files: &TlsFiles) -> Result<Arc<ReloadingCert>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let served = load(files, &provider)?;
        Ok(Arc::new(ReloadingCert {
            name,
            files: files.clone(),
            provider,
            current: ArcSwap::from_pointee(served),
            state: Mutex::new(ReloadState::default()),
        }))
    }

    /// The rustls config of a listener that serves this certificate (ALPN
    /// h2 and http/1.1).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The files this certificate is read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// `sha256:<hex>` of the certificate being served.
    pub fn fingerprint(&self) -> String {
        self.current.load().fingerprint.clone()
    }

    /// Reads both files again. A good pair is served from the next
    /// handshake on; a bad one leaves the last good pair serving and is
    /// reported in `/health/detailed` until a reload succeeds. Logs either
    /// way; returns whether the new pair is served.
    pub fn reload(&self) -> bool {
        let result = load(&self.files, &self.provider);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.last_reload = Some(SystemTime::now());
        match result {
            Ok(served) => {
                st.reloads_ok += 1;
                st.last_error = None;
                let before = self.current.load().fingerprint.clone();
                if before == served.fingerprint {
                    tracing::debug!(listener = self.name, fingerprint = %before, "tls files changed; same certificate");
                } else {
                    tracing::info!(listener = self.name, previous = %before, fingerprint = %served.fingerprint, "tls certificate reloaded");
                }
                self.current.store(Arc::new(served));
                true
            }
            Err(e) => {
                st.reloads_failed += 1;
                st.last_error = Some(e.to_string());
                tracing::error!(listener = self.name, error = %e, fingerprint = %self.current.load().fingerprint, "tls certificate reload failed; still serving the previous certificate");
                false
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load().key.clone())
    }
}

impl Component for ReloadingCert {
    fn name(&self) -> &'static str {
        self.name
    }

    fn report(&self) -> health::Report {
        let st = self
            .state
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone());
        let status = if st.last_error.is_some() {
            health::Status::Degraded
        } else {
            health::Status::Ok
        };
        let mut r = health::Report::new(status)
            .fact("cert", self.files.cert.display().to_string())
            .fact("key", self.files.key.display().to_string())
            .fact("fingerprint", self.fingerprint())
            .fact("reloads_ok", st.reloads_ok)
            .fact("reloads_failed", st.reloads_failed);
        if let Some(at) = st.last_reload {
            r = r.fact("last_reload", crate::support::time::rfc3339(at));
        }
        if let Some(e) = st.last_error {
            r = r.fact("last_error", e);
        }
        r
    }
}

/// Reads a PEM certificate chain and its private key, and checks that they
/// belong together.
fn load(files: &TlsFiles, provider: &CryptoProvider) -> Result<Served, TlsError> {
    let at =
        |p: &std::path::Path, e: &dyn std::fmt::Display| TlsError(format!("{}: {e}", p.display()));
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| at(&files.cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| at(&files.cert, &e))?;
    let Some(leaf) = certs.first() else {
        return Err(at(&files.cert, &"no certificate found"));
    };
    let fingerprint = format!("sha256:{}", hex::encode(Sha256::digest(leaf.as_ref())));
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| at(&files.key, &e))?;
    let key = CertifiedKey::from_der(certs, key, provider).map_err(|e| {
        TlsError(format!(
            "{} and {}: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    Ok(Served {
        key: Arc::new(key),
        fingerprint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(host: &str) -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec![host.to_string()]).unwrap();
        (c.cert.pem(), c.key_pair.serialize_pem())
    }

    #[test]
    fn a_bad_pair_keeps_the_last_good_one_and_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        let (cert_a, key_a) = pair("a.example");
        std::fs::write(&files.cert, &cert_a).unwrap();
        std::fs::write(&files.key, &key_a).unwrap();
        let c = ReloadingCert::open("api_tls", &files).unwrap();
        let first = c.fingerprint();
        assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");
        assert_eq!(c.report().status, health::Status::Ok);

        // A new certificate with the old key: refused, the old pair serves.
        let (cert_b, key_b) = pair("b.example");
        std::fs::write(&files.cert, &cert_b).unwrap();
        assert!(!c.reload());
        assert_eq!(c.fingerprint(), first);
        let r = c.report();
        assert_eq!(r.status, health::Status::Degraded);
        assert!(
            r.facts["last_error"].as_str().unwrap().contains("key.pem"),
            "{:?}",
            r.facts
        );
        // Garbage: refused too.
        std::fs::write(&files.key, "not a key").unwrap();
        assert!(!c.reload());
        assert_eq!(r.facts["reloads_failed"], 1);
        assert_eq!(c.report().facts["reloads_failed"], 2);
        // The matching key lands: the new pair serves, health is ok again.
        std::fs::write(&files.key, &key_b).unwrap();
        assert!(c.reload());
        assert_ne!(c.fingerprint(), first);
        let r = c.report();
        assert_eq!(r.status, health::Status::Ok);
        assert!(r.facts.get("last_error").is_none());
        // A missing file at start-up is an error naming it.
        let missing = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: files.key.clone(),
        };
        let err = ReloadingCert::open("api_tls", &missing).unwrap_err();
        assert!(err.to_string().contains("nope.pem"), "{err}");
    }
}
