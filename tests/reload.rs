//! Live reload: policies under a steady stream of authorize requests, the
//! keys file, and `verdict check`.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{TestServer, APP_KEY};

const EV: &str =
    "Invoice INV-2291. Item: Vitamix E310 blender. Amount charged: $100.00 on Visa ending 4421.";

fn policy(threshold: u64) -> String {
    format!(
        "[[action]]\ntype = \"refund.create\"\nrequirements = {{ decision_mode = \"strict\", citations = \"optional\" }}\n\n  [[action.rule]]\n  param = \"amount\"\n  op = \"gt\"\n  value = {threshold}\n  effect = \"review\"\n"
    )
}

/// (time, status, decision) of every request the load clients sent.
type Log = Arc<Mutex<Vec<(Instant, u16, String)>>>;

/// Waits (up to 10 s) until `n` requests have been answered after `since`.
async fn answered_since(log: &Log, since: Instant, n: usize) {
    support::eventually("requests under load", Duration::from_secs(10), || async {
        let seen = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _, _)| *t > since)
            .count();
        if seen >= n {
            Ok(())
        } else {
            Err(format!("{seen} of {n}"))
        }
    })
    .await
}

/// A server gating refunds above 500 for review, the refund of 200 two
/// client tasks keep sending to `/v2/authorize` (for at most `secs`), the
/// log of their answers, the flag that stops them, and the tasks.
async fn under_load(
    secs: u64,
) -> (
    Arc<TestServer>,
    String,
    Log,
    Arc<AtomicBool>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let s = Arc::new(
        TestServer::start_with(|c| {
            std::fs::write(c.policies_dir.join("refunds.toml"), policy(500)).unwrap()
        })
        .await,
    );
    let body = json!({"action": {"type": "refund.create", "params": {"amount": 200}},
                      "claims": ["The Vitamix E310 blender was charged $100.00 on the Visa ending 4421."],
                      "sources": [{"source_id": "inv", "text": EV}]})
    .to_string();
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (s, log, stop, body) = (s.clone(), log.clone(), stop.clone(), body.clone());
        clients.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(secs);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let r = s.post_json("/v2/authorize", &body, Some(APP_KEY)).await;
                let decision = if r.status == 200 {
                    r.json()["decision"].as_str().unwrap_or("").to_string()
                } else {
                    String::new()
                };
                log.lock()
                    .unwrap()
                    .push((Instant::now(), r.status, decision));
            }
        }));
    }
    (s, body, log, stop, clients)
}

/// Replaces a file the way editors and config-map updates do: write a temp
/// file, then rename it over the old one.
fn replace(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reload_under_load_is_all_or_nothing() {
    let (s, _, log, stop, clients) = under_load(30).await;
    let started = Instant::now();
    answered_since(&log, started, 10).await;
    let file = s.path("policies/refunds.toml");

    // A broken edit that would switch decisions if it were ever applied.
    let broken_at = Instant::now();
    replace(
        &file,
        &policy(150).replace("effect = \"review\"", "effect = \"reveiw\""),
    );
    let h = s
        .health_until("the broken file noticed", Duration::from_secs(10), |h| {
            h["components"]["policies"]["status"] == "degraded"
        })
        .await;
    assert_eq!(h["status"], "degraded");
    assert!(
        h["components"]["policies"]["last_error"]
            .as_str()
            .unwrap()
            .contains("refunds.toml:"),
        "{h}"
    );
    // Requests keep being answered while the broken file is on disk.
    answered_since(&log, Instant::now(), 10).await;

    // The fix lands: decisions switch from allow to needs_review.
    let good_at = Instant::now();
    replace(&file, &policy(150));
    let switched_at = support::eventually_every(
        "the good file to take effect",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || async {
            log.lock()
                .unwrap()
                .iter()
                .find(|(t, _, d)| *t > good_at && d == "needs_review")
                .map(|(t, _, _)| *t)
                .ok_or("no needs_review yet")
        },
    )
    .await;
    // Requests answered after the switch settled.
    let settle = switched_at + Duration::from_millis(50);
    answered_since(&log, settle, 10).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let h = s.get("/health/detailed", None).await.json();
    assert_eq!(h["components"]["policies"]["status"], "ok", "{h}");

    let log = log.lock().unwrap();
    let failed = log.iter().filter(|(_, st, _)| *st != 200).count();
    assert_eq!(failed, 0, "no request fails during reloads");
    // Before the good file: never needs_review (the broken edit never applied).
    assert!(log
        .iter()
        .filter(|(t, _, _)| *t < good_at)
        .all(|(_, _, d)| d == "allow"));
    assert!(log.iter().any(|(t, _, _)| *t > broken_at && *t < good_at));
    // After the switch: only needs_review (requests that started before it
    // may still finish on the old snapshot, within a few milliseconds).
    assert!(log
        .iter()
        .filter(|(t, _, _)| *t > settle)
        .all(|(_, _, d)| d == "needs_review"));
    println!(
        "reload: {} requests, file write to new decision {} ms",
        log.len(),
        switched_at.duration_since(good_at).as_millis()
    );
}

/// Twenty edits written in place (truncate, half the text, a pause, the
/// rest, close) while two clients keep calling: every edit goes live, no
/// request fails, and no half-written file is ever read (no reload is
/// rejected), since a reload waits for the writer's close, not a timer.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_edits_in_place_under_load_each_go_live_whole() {
    let (s, body, log, stop, clients) = under_load(60).await;
    answered_since(&log, Instant::now(), 10).await;
    let file = s.path("policies/refunds.toml");
    for i in 0..20 {
        // 150 sends the 200 refund to review; 500 allows it.
        let (text, want) = if i % 2 == 0 {
            (policy(150), "needs_review")
        } else {
            (policy(500), "allow")
        };
        let mut f = std::fs::File::create(&file).unwrap();
        let (head, tail) = text.split_at(text.len() / 2);
        std::io::Write::write_all(&mut f, head.as_bytes()).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        std::io::Write::write_all(&mut f, tail.as_bytes()).unwrap();
        drop(f);
        let written = Instant::now();
        support::eventually_every(
            "the edit to take effect",
            Duration::from_secs(5),
            Duration::from_millis(2),
            || async {
                let r = s.post_json("/v2/authorize", &body, Some(APP_KEY)).await;
                if r.json()["decision"] == want {
                    Ok(())
                } else {
                    Err(r.text())
                }
            },
        )
        .await;
        answered_since(&log, written, 2).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let (sent, failed) = {
        let log = log.lock().unwrap();
        let failed = log.iter().filter(|(_, st, _)| *st != 200).count();
        (log.len(), failed)
    };
    assert!(sent > 40, "the load ran: {sent}");
    assert_eq!(failed, 0);
    let h = s.get("/health/detailed", None).await.json();
    let policies = &h["components"]["policies"];
    assert_eq!(policies["status"], "ok", "{h}");
    assert_eq!(
        policies["reloads_failed"], 0,
        "a half-written file was read: {h}"
    );
}

/// Waits up to `within` for `key` to be known (404 for a missing job, not
/// 401).
async fn key_works(s: &TestServer, key: &str, within: Duration) {
    support::eventually("the new key to work", within, || async {
        match s.get("/v2/jobs/x", Some(key)).await.status {
            404 => Ok(()),
            other => Err(other),
        }
    })
    .await
}

/// Waits (up to 10 s) until the log holds `n` key reloads that were
/// refused: each failed reload of the keys file is audited, after the
/// previous keys were kept.
async fn refused_key_changes(s: &TestServer, n: usize) {
    support::eventually("a refused keys reload", Duration::from_secs(10), || async {
        let page = s
            .get("/v2/audit/records?kind=key_change&limit=100", Some(APP_KEY))
            .await
            .json();
        let refused = page["records"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["detail"]["applied"] == false)
            .count();
        if refused >= n {
            Ok(())
        } else {
            Err(page)
        }
    })
    .await
}

#[tokio::test]
async fn keys_file_reloads_without_restart_and_keeps_the_last_good_set() {
    let s = TestServer::start().await;
    let new_key = "a-brand-new-key-0123456789";
    let file = s.path("keys.toml");
    assert_eq!(s.get("/v2/jobs/x", Some(new_key)).await.status, 401);
    let text = format!(
        "{}\n[[key]]\nname = \"new\"\nhash = \"{}\"\nscopes = [\"batch\"]\n",
        support::keys_toml(),
        support::sha(new_key)
    );
    replace(&file, &text);
    key_works(&s, new_key, Duration::from_secs(10)).await;
    // A broken keys file keeps the previous keys.
    replace(&file, "[[key]]\nname = \n");
    refused_key_changes(&s, 1).await;
    assert_eq!(s.get("/v2/jobs/x", Some(new_key)).await.status, 404);
    assert_eq!(s.get("/v2/jobs/x", Some(APP_KEY)).await.status, 404);
    // So does one that names a key after a reserved principal: the `proxy`
    // key never works and the previous keys stay.
    let proxy_key = "a-key-posing-as-the-proxy-0123";
    replace(
        &file,
        &format!(
            "[[key]]\nname = \"proxy\"\nhash = \"{}\"\nscopes = [\"audit\"]\n",
            support::sha(proxy_key)
        ),
    );
    refused_key_changes(&s, 2).await;
    assert_eq!(s.get("/v2/jobs/x", Some(proxy_key)).await.status, 401);
    assert_eq!(s.get("/v2/jobs/x", Some(new_key)).await.status, 404);
    s.shutdown().await;
}

#[test]
fn check_prints_a_summary_or_every_error() {
    let bin = env!("CARGO_BIN_EXE_verdict");
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&good).unwrap();
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(good.join("a.toml"), "[[action]]\ntype = \"x\"\n").unwrap();
    std::fs::write(bad.join("a.toml"), "[[action]]\ntype = \"x\"\nbogus = 1\n").unwrap();
    std::fs::write(
        bad.join("b.toml"),
        "[[action]]\ntype = \"y\"\n\n  [[action.rule]]\n  param = \"amount\"\n  op = \"gt\"\n  value = \"lots\"\n  effect = \"deny\"\n",
    )
    .unwrap();

    let out = support::cli(bin, &["check", "--policies"], &good);
    support::assert_exit(&out, 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("ok: 1 files, 1 actions, 0 routes, revision sha256:"),
        "{text}"
    );

    let out = support::cli(bin, &["check", "--policies"], &bad);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    let a = format!("{}:3:1: unknown field `bogus`, expected one of `type`, `requirements`, `options`, `require_claims`, `min_claims`, `approvals`, `redact`, `rule`, `param_types`, `bind`, `evidence`, `sources_from`", bad.join("a.toml").display());
    assert_eq!(lines.first().copied(), Some(a.as_str()), "{err}");
    assert_eq!(lines.len(), 2, "{err}");
    let b = format!(
        "{}:7:11: op \"gt\" needs a number value",
        bad.join("b.toml").display()
    );
    assert_eq!(lines[1], b, "{err}");

    // The shipped example policies are valid.
    let shipped = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/policies"));
    let out = support::cli(bin, &["check", "--policies"], shipped);
    support::assert_exit(&out, 0);
}

/// The keys file mounted from a Kubernetes Secret: `keys.toml ->
/// ..data/keys.toml`, `..data -> ..<timestamp>`. The kubelet updates it by
/// swapping the `..data` symlink; the new key works within 2 s.
#[tokio::test]
async fn keys_file_follows_a_kubernetes_secret_swap() {
    use std::os::unix::fs::symlink;
    let secret = tempfile::tempdir().unwrap();
    let root = secret.path();
    std::fs::create_dir(root.join("..2026_11_25_01")).unwrap();
    std::fs::write(root.join("..2026_11_25_01/keys.toml"), support::keys_toml()).unwrap();
    symlink("..2026_11_25_01", root.join("..data")).unwrap();
    symlink("..data/keys.toml", root.join("keys.toml")).unwrap();
    let keys = root.join("keys.toml");
    let s = TestServer::start_with(|c| c.keys_file = Some(keys.clone())).await;
    let new_key = "a-key-from-the-rotated-secret-0123";
    assert_eq!(s.get("/v2/jobs/x", Some(new_key)).await.status, 401);

    // The kubelet's atomic writer: a new timestamped dir, a temporary
    // symlink to it, renamed over `..data`.
    std::fs::create_dir(root.join("..2026_11_25_02")).unwrap();
    std::fs::write(
        root.join("..2026_11_25_02/keys.toml"),
        format!(
            "{}\n[[key]]\nname = \"rotated\"\nhash = \"{}\"\nscopes = [\"batch\"]\n",
            support::keys_toml(),
            support::sha(new_key)
        ),
    )
    .unwrap();
    symlink("..2026_11_25_02", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_11_25_01")).unwrap();

    key_works(&s, new_key, Duration::from_secs(2)).await;
    s.shutdown().await;
}

/// `verdict check` on the operator traps: each is refused with a message
/// and exit 1 (`--strict` for warnings), and `--config` validates the
/// config too (exit 64) and checks hold_timeout against its review.ttl.
#[test]
fn check_refuses_operator_traps() {
    let bin = env!("CARGO_BIN_EXE_verdict");
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(bin).arg("check").args(args).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let policies = |name: &str, text: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        if !text.is_empty() {
            std::fs::write(d.join("p.toml"), text).unwrap();
        }
        d.to_str().unwrap().to_string()
    };
    let route = |extra: &str| {
        format!(
            "[[action]]\ntype = \"refund.create\"\n\n  [[action.rule]]\n  param = \"amount\"\n  op = \"gt\"\n  value = 500\n  effect = \"review\"\n\n\
             [[route]]\nname = \"refund\"\nmethod = \"POST\"\npath = \"/api/orders/{{order_id}}/refunds\"\naction = \"refund.create\"\n\
             params = {{ order_id = \"path:order_id\", amount = \"body:/amount\" }}\n{extra}"
        )
    };

    // An empty directory gates nothing: a warning, an error with --strict.
    let empty = policies("empty", "");
    let (code, text) = run(&["--policies", &empty]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("warning: the policy set gates nothing"),
        "{text}"
    );
    let (code, text) = run(&["--policies", &empty, "--strict"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("--strict makes them errors"), "{text}");

    // A misspelt method is an error.
    let psot = policies("psot", &route("").replace("\"POST\"", "\"PSOT\""));
    let (code, text) = run(&["--policies", &psot]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("invalid method \"PSOT\""), "{text}");

    // A rule on a param no route extracts: a warning, an error with --strict.
    let unextracted = policies(
        "unextracted",
        &route("").replace("amount = \"body:/amount\"", "amt = \"body:/amount\""),
    );
    let (code, text) = run(&["--policies", &unextracted]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("reads param \"amount\""), "{text}");
    let (code, _) = run(&["--policies", &unextracted, "--strict"]);
    assert_eq!(code, Some(1));

    // A hold longer than the review ttl: an error against the default ttl,
    // which the output names; fine against a config whose ttl is longer.
    let long = policies("long", &route("hold_timeout = \"48h\"\n"));
    let (code, text) = run(&["--policies", &long]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("hold_timeout 48h, longer than review.ttl 24h (the default;"),
        "{text}"
    );
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[review]\nttl = \"72h\"\n").unwrap();
    let (code, text) = run(&["--policies", &long, "--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!("review.ttl 72h (from {})", config.display())),
        "{text}"
    );
    std::fs::write(&config, "[review]\nttl = \"36h\"\n").unwrap();
    let (code, text) = run(&["--policies", &long, "--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("longer than review.ttl 36h (from "), "{text}");
    // --config validates the file the way serve does: exit 64, named key.
    std::fs::write(
        &config,
        "[review]\nttl = \"72h\"\n[proxy]\nlisten = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let (code, text) = run(&["--policies", &long, "--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(64), "{text}");
    assert!(
        text.contains("proxy.listen") && text.contains("proxy.upstream"),
        "{text}"
    );
    // Without --policies, the config's policies dir is checked.
    std::fs::write(&config, format!("[policies]\ndir = \"{long}\"\n")).unwrap();
    let (code, text) = run(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("hold_timeout 48h"), "{text}");
    // ...and its shadow set too: a broken shadow set fails the check.
    let good = policies("good", &route(""));
    std::fs::write(
        &config,
        format!("[policies]\ndir = \"{good}\"\nshadow_dir = \"{psot}\"\n"),
    )
    .unwrap();
    let (code, text) = run(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("shadow set {psot}:")) && text.contains("invalid method \"PSOT\""),
        "{text}"
    );

    // Routes that share paths: a warning (an error with --strict); a route
    // suffix another route takes first: an error naming both routes.
    let shared = format!(
        "{}\n[[route]]\nname = \"one-order\"\nmethod = \"POST\"\npath = \"/api/orders/7/{{kind}}\"\naction = \"refund.create\"\nparams = {{ amount = \"body:/amount\" }}\n",
        route("")
    );
    let shared = policies("shared", &shared);
    let (code, text) = run(&["--policies", &shared]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("route \"one-order\" (POST /api/orders/7/{kind}) and route \"refund\"")
            && text.contains(
                "such as /api/orders/7/refunds; the more specific \"one-order\" gets them"
            ),
        "{text}"
    );
    let (code, _) = run(&["--policies", &shared, "--strict"]);
    assert_eq!(code, Some(1));
    let shadow = format!(
        "{}\n[[route]]\nname = \"by-kind\"\nmethod = \"POST\"\npath = \"/api/orders/{{order_id}}/{{kind}}\"\naction = \"refund.create\"\nparams = {{ amount = \"body:/amount\" }}\n",
        route("suffixes = [\".json\"]\n")
    );
    let shadow = policies("shadow", &shadow);
    let (code, text) = run(&["--policies", &shadow]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("p.toml:11:8: route \"refund\"")
            && text.contains("lists suffix \".json\", but route \"by-kind\"")
            && text.contains("p.toml:19:8)"),
        "{text}"
    );
}

/// A fresh self-signed certificate for `localhost`: PEM cert, PEM key, and
/// the DER a client trusts it by.
fn localhost_cert() -> (String, String, rustls_pki_types::CertificateDer<'static>) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    (
        c.cert.pem(),
        c.key_pair.serialize_pem(),
        c.cert.der().clone(),
    )
}

/// `GET path` over a new TLS connection that trusts only `root`: the
/// status and body, or `None` when the handshake (or anything) fails.
async fn tls_get(
    port: u16,
    root: &rustls_pki_types::CertificateDer<'static>,
    path: &str,
) -> Option<(u16, bytes::Bytes)> {
    use http_body_util::{BodyExt, Empty};
    let tls = support::trusting(root.clone());
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client: hyper_util::client::legacy::Client<_, Empty<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let req = http::Request::get(format!("https://localhost:{port}{path}"))
        .body(Empty::new())
        .unwrap();
    let resp = client.request(req).await.ok()?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some((status, body))
}

/// Whether `/health` answers 200 to a client that trusts only `root`: a
/// handshake with any other certificate fails.
async fn tls_serves(port: u16, root: &rustls_pki_types::CertificateDer<'static>) -> bool {
    matches!(tls_get(port, root, "/health").await, Some((200, _)))
}

/// `/health/detailed` over TLS, trusting `root`.
async fn tls_detailed(
    port: u16,
    root: &rustls_pki_types::CertificateDer<'static>,
) -> serde_json::Value {
    let (status, body) = tls_get(port, root, "/health/detailed")
        .await
        .expect("served");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

async fn wait_until_served(
    port: u16,
    root: &rustls_pki_types::CertificateDer<'static>,
    what: &str,
) {
    support::eventually(what, Duration::from_secs(2), || async {
        match tls_serves(port, root).await {
            true => Ok(()),
            false => Err("not served"),
        }
    })
    .await
}

/// The API's certificate mounted from a Kubernetes TLS Secret
/// (`tls.crt -> ..data/tls.crt`): the kubelet's `..data` swap is served
/// within 2 s, and the old certificate no longer is.
#[tokio::test]
async fn tls_certificate_follows_a_kubernetes_secret_swap() {
    use std::os::unix::fs::symlink;
    let secret = tempfile::tempdir().unwrap();
    let root = secret.path();
    let (cert_a, key_a, der_a) = localhost_cert();
    std::fs::create_dir(root.join("..2026_11_25_01")).unwrap();
    std::fs::write(root.join("..2026_11_25_01/tls.crt"), cert_a).unwrap();
    std::fs::write(root.join("..2026_11_25_01/tls.key"), key_a).unwrap();
    symlink("..2026_11_25_01", root.join("..data")).unwrap();
    symlink("..data/tls.crt", root.join("tls.crt")).unwrap();
    symlink("..data/tls.key", root.join("tls.key")).unwrap();
    let files = verdict::config::TlsFiles {
        cert: root.join("tls.crt"),
        key: root.join("tls.key"),
    };
    let s = TestServer::start_with(|c| c.api.tls = Some(files.clone())).await;
    let port = s.addr.port();
    assert!(tls_serves(port, &der_a).await);

    let (cert_b, key_b, der_b) = localhost_cert();
    assert!(!tls_serves(port, &der_b).await);
    std::fs::create_dir(root.join("..2026_11_25_02")).unwrap();
    std::fs::write(root.join("..2026_11_25_02/tls.crt"), cert_b).unwrap();
    std::fs::write(root.join("..2026_11_25_02/tls.key"), key_b).unwrap();
    symlink("..2026_11_25_02", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_11_25_01")).unwrap();
    wait_until_served(port, &der_b, "the swapped certificate").await;
    assert!(
        !tls_serves(port, &der_a).await,
        "the old certificate is gone"
    );
    let h = tls_detailed(port, &der_b).await;
    assert_eq!(h["components"]["api_tls"]["status"], "ok", "{h}");
    s.shutdown().await;
}

/// Certificate files replaced by renames or rewritten in place: a good pair
/// is served within 2 s; a broken one keeps the last good certificate
/// serving, and `/health/detailed` says `degraded` with the error until a
/// good pair is back.
#[tokio::test]
async fn tls_certificate_reloads_on_renames_and_writes_and_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let files = verdict::config::TlsFiles {
        cert: dir.path().join("cert.pem"),
        key: dir.path().join("key.pem"),
    };
    let (cert_a, key_a, der_a) = localhost_cert();
    std::fs::write(&files.cert, cert_a).unwrap();
    std::fs::write(&files.key, key_a).unwrap();
    let s = TestServer::start_with(|c| c.api.tls = Some(files.clone())).await;
    let port = s.addr.port();
    assert!(tls_serves(port, &der_a).await);

    // Both files renamed into place, key first.
    let (cert_b, key_b, der_b) = localhost_cert();
    replace(&files.key, &key_b);
    replace(&files.cert, &cert_b);
    wait_until_served(port, &der_b, "the renamed certificate").await;

    // A certificate written in place that does not match the key: the last
    // good pair still serves, and health says why it did not change.
    let (cert_c, key_c, der_c) = localhost_cert();
    std::fs::write(&files.cert, &cert_c).unwrap();
    let h = support::eventually(
        "the broken pair reported",
        Duration::from_secs(2),
        || async {
            let h = tls_detailed(port, &der_b).await;
            if h["components"]["api_tls"]["status"] == "degraded" {
                Ok(h)
            } else {
                Err(h)
            }
        },
    )
    .await;
    assert_eq!(h["status"], "degraded", "{h}");
    let tls = &h["components"]["api_tls"];
    assert!(
        tls["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("cert.pem")),
        "{h}"
    );
    assert!(
        tls_serves(port, &der_b).await,
        "the last good certificate serves"
    );
    assert!(!tls_serves(port, &der_c).await);
    // Garbage in place: the same.
    let before = tls_detailed(port, &der_b).await["components"]["api_tls"].clone();
    std::fs::write(&files.key, "-----BEGIN PRIVATE KEY-----\nnot base64\n").unwrap();
    support::eventually(
        "the garbage key refused",
        Duration::from_secs(5),
        || async {
            let h = tls_detailed(port, &der_b).await;
            let now = &h["components"]["api_tls"];
            let failed = |t: &serde_json::Value| t["reloads_failed"].as_u64().unwrap();
            if failed(now) > failed(&before) && now["last_error"] != before["last_error"] {
                Ok(())
            } else {
                Err(h)
            }
        },
    )
    .await;
    assert!(
        tls_serves(port, &der_b).await,
        "the last good certificate serves"
    );

    // The matching key written in place: served, and health is ok again.
    std::fs::write(&files.key, &key_c).unwrap();
    wait_until_served(port, &der_c, "the repaired pair").await;
    let h = tls_detailed(port, &der_c).await;
    assert_eq!(h["components"]["api_tls"]["status"], "ok", "{h}");
    assert!(
        h["components"]["api_tls"].get("last_error").is_none(),
        "{h}"
    );
    s.shutdown().await;
}
