//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

use super::*;

#[test]
fn proxy_listen_without_upstream_is_an_error() {
    let err = Config::from_toml(
        "c.toml",
        "[proxy]\nlisten = \"127.0.0.1:8080\"\n",
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("proxy.listen") && err.contains("proxy.upstream"),
        "{err}"
    );
    assert!(Config::from_toml(
        "c.toml",
        "[proxy]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:9000\"\n",
        &Overrides::default(),
    )
    .is_ok());
}

#[test]
fn defaults_serve_on_loopback() {
    let c = Config::defaults(&Overrides::default()).unwrap();
    assert_eq!(c.api.listen.to_string(), "127.0.0.1:8181");
    assert_eq!(c.proxy.listen.to_string(), "127.0.0.1:8080");
    assert!(c.proxy.upstream.is_none());
    assert_eq!(c.limits.max_body_bytes, 1_048_576);
    assert_eq!(c.limits.max_batch_body_bytes, 33_554_432);
    assert_eq!(c.limits.max_batch_items, 10_000);
    assert_eq!(c.audit.max_wait, Duration::ZERO);
    assert_eq!(c.audit.max_batch, 512);
    assert_eq!(c.review_ttl, Duration::from_secs(86_400));
    assert_eq!(c.jobs.workers, 1);
    assert_eq!(c.policies_dir, PathBuf::from("policies"));
    assert_eq!(c.data_dir, PathBuf::from("data"));
    assert_eq!(c.log_format, LogFormat::Json);
}

#[test]
fn per_ip_limit_defaults_to_a_quarter_of_the_cap() {
    let c = Config::defaults(&Overrides::default()).unwrap();
    assert_eq!(c.server.max_connections_per_ip, 1024);
    assert_eq!(c.server.body_read_timeout, Duration::from_secs(10));
    assert_eq!(c.server.body_min_rate, 1024);
    let c = Config::from_toml(
        "c.toml",
        "[server]\nmax_connections = 60\n",
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(c.server.max_connections_per_ip, 15);
    for (text, key) in [
        (
            "[server]\nmax_connections = 60\nmax_connections_per_ip = 61\n",
            "max_connections_per_ip",
        ),
        (
            "[server]\nmax_connections_per_ip = 0\n",
            "max_connections_per_ip",
        ),
        (
            "[server]\nbody_read_timeout = \"0s\"\n",
            "body_read_timeout",
        ),
        ("[server]\nbody_min_rate = 0\n", "body_min_rate"),
    ] {
        let err = Config::from_toml("c.toml", text, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}

#[test]
fn unknown_key_names_key_and_line() {
    let text = "[api]\nlisten = \"127.0.0.1:1\"\n\n[limits]\nmax_body_byts = 5\n";
    let err = Config::from_toml("c.toml", text, &Overrides::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("c.toml:5:"), "{msg}");
    assert!(msg.contains("max_body_byts"), "{msg}");
}

#[test]
fn unknown_section_is_an_error() {
    let err = Config::from_toml("c.toml", "[apii]\n", &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("apii"), "{err}");
}

#[test]
fn flags_override_file() {
    let text = "[api]\nlisten = \"127.0.0.1:1000\"\n[data]\ndir = \"/x\"\n";
    let o = Overrides {
        api_listen: Some("127.0.0.1:2000".parse().unwrap()),
        ..Default::default()
    };
    let c = Config::from_toml("c.toml", text, &o).unwrap();
    assert_eq!(c.api.listen.port(), 2000);
    assert_eq!(c.data_dir, PathBuf::from("/x"));
}

#[test]
fn the_ext_authz_flag_overrides_the_file() {
    let text = "[ext_authz]\nlisten = \"127.0.0.1:1000\"\n";
    let none = Config::from_toml("c.toml", "", &Overrides::default()).unwrap();
    assert_eq!(none.ext_authz_listen, None);
    let file = Config::from_toml("c.toml", text, &Overrides::default()).unwrap();
    assert_eq!(file.ext_authz_listen.map(|a| a.port()), Some(1000));
    let o = Overrides {
        ext_authz_listen: Some("127.0.0.1:2000".parse().unwrap()),
        ..Default::default()
    };
    for text in ["", text] {
        let c = Config::from_toml("c.toml", text, &o).unwrap();
        assert_eq!(c.ext_authz_listen.map(|a| a.port()), Some(2000), "{text}");
    }
}

#[test]
fn bad_values_are_rejected() {
    for text in [
        "[audit]\nmax_wait = \"soon\"\n",
        "[limits]\nmax_body_bytes = 0\n",
        "[api]\ntls_cert = \"a.pem\"\n",
        "[proxy]\nupstream = \"ftp://x\"\n",
        "[proxy]\nunmatched = \"maybe\"\n",
        "[limits]\nmax_body_bytes = \"big\"\n",
    ] {
        assert!(
            Config::from_toml("c.toml", text, &Overrides::default()).is_err(),
            "{text}"
        );
    }
}

#[test]
fn durations() {
    assert_eq!(parse_duration("2ms").unwrap(), Duration::from_millis(2));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
    assert!(parse_duration("").is_err());
    for text in ["48h", "90m", "30s", "1500ms", "0"] {
        assert_eq!(format_duration(parse_duration(text).unwrap()), text);
    }
    assert_eq!(format_duration(DEFAULT_REVIEW_TTL), "24h");
}

#[test]
fn line_col_counts_chars() {
    assert_eq!(line_col("ab\ncd", 4), (2, 2));
    assert_eq!(line_col("é\nx", 3), (2, 1));
    assert_eq!(line_col("abc", 99), (1, 4));
}

#[test]
fn client_tls_trusts_the_ca_file_and_names_what_is_wrong_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["up.test".into()]).unwrap();
    std::fs::write(&good, cert.cert.pem()).unwrap();
    assert!(client_tls(Some(&good), "hint").is_ok());
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let err = client_tls(Some(&empty), "hint").unwrap_err();
    assert_eq!(err, "no certificate found");
    let err = client_tls(Some(&dir.path().join("missing.pem")), "hint").unwrap_err();
    assert!(!err.is_empty(), "{err}");
    // No ca_file: the system's roots, or none; never an error.
    assert!(client_tls(None, "hint").is_ok());
}
