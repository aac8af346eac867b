//! The runnable examples stay runnable: `examples/sidecar.toml` is a valid
//! config, its keys file parses and admits the demo tokens
//! docs/walkthrough.md uses (with the scopes the walkthrough needs), the policies
//! directory loads, and the config and policy embedded in the Kubernetes
//! manifest are valid and match the repository's. Pure file parsing: fast.

use std::path::{Path, PathBuf};

use verdict::config::{Config, Overrides, Unmatched};
use verdict::http::auth::{KeySet, Scope};
use verdict::policy::PolicySet;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn read(p: &str) -> String {
    std::fs::read_to_string(repo(p)).unwrap_or_else(|e| panic!("read {p}: {e}"))
}

#[test]
fn sidecar_toml_is_a_valid_config_wired_to_the_refund_service() {
    let c = Config::load(Some(&repo("examples/sidecar.toml")), &Overrides::default())
        .expect("examples/sidecar.toml loads");
    assert_eq!(c.api.listen.to_string(), "127.0.0.1:8181");
    assert_eq!(c.proxy.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.proxy.upstream.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(c.proxy.unmatched, Unmatched::Forward);
    assert_eq!(c.policies_dir, PathBuf::from("policies"));
    // Under the git-ignored /data.
    assert!(c.data_dir.starts_with("data"), "{:?}", c.data_dir);
    assert_eq!(c.keys_file, Some(PathBuf::from("examples/keys.toml")));
}

/// `export NAME=value` from the walkthrough.
fn walkthrough_token(name: &str) -> String {
    let walkthrough = read("docs/walkthrough.md");
    let prefix = format!("export {name}=");
    let line = walkthrough
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("docs/walkthrough.md has no `{prefix}...` line"));
    line[prefix.len()..].trim_matches('"').to_string()
}

#[test]
fn keys_file_parses_and_admits_the_walkthrough_demo_tokens() {
    let keys = KeySet::load(&repo("examples/keys.toml")).expect("examples/keys.toml parses");
    assert_eq!(keys.len(), 2);

    let app = keys
        .lookup(&walkthrough_token("APP_KEY"))
        .expect("the walkthrough's APP_KEY is in examples/keys.toml");
    assert!(app.has(Scope::Authorize) && app.has(Scope::Audit));
    assert!(
        !app.has(Scope::Review),
        "the app must not approve its own refunds"
    );

    let reviewer = keys
        .lookup(&walkthrough_token("REVIEW_KEY"))
        .expect("the walkthrough's REVIEW_KEY is in examples/keys.toml");
    assert!(reviewer.has(Scope::Review) && reviewer.has(Scope::Audit));
    assert!(!reviewer.has(Scope::Authorize));
}

#[test]
fn policies_dir_loads_and_gates_the_refund_route() {
    let set = verdict::policy::load_dir(&repo("policies")).expect("policies/ loads");
    let (route, params) = set
        .match_route("POST", "/api/orders/1001/refunds")
        .expect("the refund route is gated");
    assert_eq!(route.action, "refund.create");
    assert_eq!(params.get("order_id"), Some("1001"));
    assert!(set.action("refund.create").is_some());
    // The order details pass through unmatched.
    assert!(set.match_route("GET", "/api/orders/1001").is_none());
}

/// The `|` block scalar under `key:` in a YAML manifest (2-space key, 4-space
/// body, as in examples/kubernetes/refund-service.yaml).
fn yaml_block(yaml: &str, key: &str) -> String {
    let header = format!("  {key}: |");
    let mut lines = yaml.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "no `{header}` in the manifest");
    let mut out = String::new();
    for l in lines {
        if l.is_empty() {
            out.push('\n');
        } else if let Some(body) = l.strip_prefix("    ") {
            out.push_str(body);
            out.push('\n');
        } else {
            break;
        }
    }
    out
}

#[test]
fn kubernetes_manifest_embeds_a_valid_config_and_the_repo_policy() {
    let yaml = read("examples/kubernetes/refund-service.yaml");

    let cfg = Config::from_toml(
        "sidecar.toml",
        &yaml_block(&yaml, "sidecar.toml"),
        &Overrides::default(),
    )
    .expect("the manifest's sidecar.toml is a valid config");
    assert_eq!(cfg.api.listen.port(), 8181);
    assert_eq!(cfg.proxy.listen.port(), 8080);
    assert_eq!(cfg.proxy.upstream.as_deref(), Some("http://127.0.0.1:9000"));

    let embedded = yaml_block(&yaml, "refunds.toml");
    let k8s = PolicySet::from_sources(&[("refunds.toml", &embedded)])
        .expect("the manifest's refunds.toml is a valid policy");
    let ours = PolicySet::from_sources(&[("refunds.toml", &read("policies/refunds.toml"))])
        .expect("policies/refunds.toml is valid");
    // Same rules and routes; only the comments differ, and with them the
    // line each action and route is defined at.
    let routes = |set: &PolicySet| {
        let mut routes = set.routes.to_vec();
        for r in &mut routes {
            r.defined_at.clear();
        }
        format!("{routes:?}")
    };
    let actions = |set: &PolicySet| {
        let mut actions = set.actions.clone();
        for a in actions.values_mut() {
            a.defined_at.clear();
        }
        format!("{actions:?}")
    };
    assert_eq!(actions(&k8s), actions(&ours));
    assert_eq!(routes(&k8s), routes(&ours));
}

/// `examples/provenance/`: the config loads with its own policies and keys
/// (the walkthrough's two tokens and a second reviewer, each as its comment
/// says), and the policy reads evidence only from the origin the config
/// allows.
#[test]
fn provenance_example_loads_and_reads_only_the_allowed_origin() {
    let c = Config::load(
        Some(&repo("examples/provenance/sidecar.toml")),
        &Overrides::default(),
    )
    .expect("examples/provenance/sidecar.toml loads");
    assert_eq!(
        c.policies_dir,
        PathBuf::from("examples/provenance/policies")
    );
    assert_eq!(c.evidence.allow_origins, ["http://127.0.0.1:9000"]);
    let keys_path = c.keys_file.clone().expect("a keys file");
    let keys = KeySet::load(&repo(keys_path.to_str().unwrap())).expect("its keys parse");
    assert_eq!(keys.len(), 3);
    let text = read(keys_path.to_str().unwrap());
    let token = |name: &str| {
        let line = text
            .lines()
            .find(|l| {
                l.trim_start_matches('#')
                    .trim()
                    .starts_with(&format!("{name} "))
            })
            .unwrap_or_else(|| panic!("no {name} in the keys file's comment"));
        line.split_whitespace().last().unwrap().to_string()
    };
    assert_eq!(token("APP_KEY"), walkthrough_token("APP_KEY"));
    assert_eq!(token("REVIEW_KEY"), walkthrough_token("REVIEW_KEY"));
    let second = keys
        .lookup(&token("SECOND_REVIEW_KEY"))
        .expect("the second reviewer");
    assert!(second.has(Scope::Review) && !second.has(Scope::Authorize));

    let set = verdict::policy::load_dir(&repo("examples/provenance/policies"))
        .expect("its policies load");
    let a = set.action("refund.create").unwrap();
    assert!(a.provenance.referenced);
    assert_eq!(a.provenance.origins, ["http://127.0.0.1:9000"]);
    assert_eq!(a.approvals, Some(2));
    let (route, _) = set
        .match_route("POST", "/api/orders/1001/refunds")
        .expect("the refund route is gated");
    assert_eq!(route.sources_from.len(), 1);
}

/// examples/envoy: verdict's config serves ext_authz on the port Envoy's
/// config asks, with no proxy of its own, and Envoy's config sends the body
/// whole and the headers raw, and keeps the gate closed when verdict is
/// unreachable (docs/envoy.md).
#[test]
fn envoy_example_points_envoy_at_verdicts_check() {
    let c = Config::load(
        Some(&repo("examples/envoy/verdict.toml")),
        &Overrides::default(),
    )
    .expect("examples/envoy/verdict.toml loads");
    let listen = c.ext_authz_listen.expect("ext_authz.listen is set");
    assert!(listen.ip().is_loopback());
    assert_eq!(c.proxy.upstream, None);
    let envoy = read("examples/envoy/envoy.yaml");
    for needed in [
        format!("port_value: {}", listen.port()),
        "envoy.filters.http.ext_authz".into(),
        "http2_protocol_options".into(),
        "pack_as_bytes: true".into(),
        "allow_partial_message: false".into(),
        "encode_raw_headers: true".into(),
        "failure_mode_allow: false".into(),
        format!("max_request_bytes: {}", c.limits.max_body_bytes),
    ] {
        assert!(envoy.contains(&needed), "envoy.yaml lacks {needed:?}");
    }
    let istio = read("examples/envoy/istio.yaml");
    for needed in [
        format!("number: {}", listen.port()),
        format!("port: {}", listen.port()),
        "action: CUSTOM".into(),
        "packAsBytes: true".into(),
        "failOpen: false".into(),
    ] {
        assert!(istio.contains(&needed), "istio.yaml lacks {needed:?}");
    }
}
