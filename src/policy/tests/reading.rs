//! What a policy file says once read: actions, rules, defaults, revisions,
//! and the files a directory load takes.

use super::*;

#[test]
fn design_example_parses() {
    let set = PolicySet::from_sources(&[("refunds.toml", REFUND_EXAMPLE)]).unwrap();
    assert_eq!(set.files, vec!["refunds.toml"]);
    let a = set.action("refund.create").unwrap();
    assert_eq!(a.requirements.decision_mode, Some(DecisionMode::Strict));
    assert_eq!(a.requirements.min_coverage, Some(0.9));
    assert_eq!(a.requirements.citations, Some(Citations::Required));
    assert_eq!(a.options.deny_if_any_unsupported, Some(true));
    assert_eq!(a.options.evidence_limit, Some(3));
    assert_eq!(a.options.min_coverage, None);
    assert!(a.require_claims);
    assert_eq!(a.redact, vec!["params.card_number"]);
    assert_eq!(a.rules.len(), 1);
    assert_eq!(a.rules[0].param, "amount");
    assert_eq!(a.rules[0].effect, Effect::Review);
    assert!(matches!(a.rules[0].op, Op::Gt(n) if n == 500.0));
    assert_eq!(
        a.rules[0].message,
        "refunds above 500 need a second pair of eyes"
    );

    let r = &set.routes[0];
    assert_eq!(r.name, "create-refund");
    assert_eq!(r.method, "POST");
    assert_eq!(r.action, "refund.create");
    assert_eq!(
        r.params,
        vec![
            ("amount".to_string(), Extractor::Body("/amount".into())),
            (
                "customer".to_string(),
                Extractor::Header("x-customer-id".into())
            ),
            ("order_id".to_string(), Extractor::Path("order_id".into())),
        ]
    );
    assert_eq!(
        r.claims,
        Some(Extractor::Body("/justification/claims".into()))
    );
    assert_eq!(
        r.sources,
        Some(Extractor::Body("/justification/evidence".into()))
    );
    assert_eq!(r.answer, None);
    assert_eq!(r.on_review, OnReview::Hold);
    assert_eq!(r.hold_timeout, Duration::from_secs(30));
    assert_eq!(r.failure_mode, FailureMode::Closed);
    assert_eq!(r.file, "refunds.toml");
    assert!(r.reads_body());
}

#[test]
fn min_claims_and_approvals_are_read() {
    let set = PolicySet::from_sources(&[(
        "a.toml",
        "[[action]]\ntype = \"x\"\nmin_claims = 2\napprovals = 3\n",
    )])
    .unwrap();
    let a = set.action("x").unwrap();
    assert_eq!((a.min_claims, a.approvals), (2, Some(3)));
    assert_eq!(a.floor().min_claims, 2);
}

#[test]
fn defaults_and_minimal_files() {
    let set = PolicySet::from_sources(&[
        ("a.toml", "[[action]]\ntype = \"x\"\n"),
        (
            "b.toml",
            "[[route]]\nname = \"r\"\nmethod = \"get\"\npath = \"/x\"\naction = \"x\"\n\
             failure_mode = \"open\"\non_review = \"deny\"\nanswer = \"query:text\"\n",
        ),
        ("empty.toml", "# nothing here yet\n"),
    ])
    .unwrap();
    let a = set.action("x").unwrap();
    assert!(a.require_claims);
    assert_eq!((a.min_claims, a.approvals), (1, None));
    assert_eq!(a.requirements, Requirements::default());
    assert_eq!(a.options, Options::default());
    let r = &set.routes[0];
    assert_eq!(r.method, "GET");
    assert_eq!(r.hold_timeout, DEFAULT_HOLD_TIMEOUT);
    assert_eq!(r.failure_mode, FailureMode::Open);
    assert_eq!(r.on_review, OnReview::Deny);
    assert!(!r.reads_body());
    assert_eq!(set.files, vec!["a.toml", "b.toml", "empty.toml"]);
}

#[test]
fn rule_messages_default_to_the_rule() {
    let set = PolicySet::from_sources(&[(
        "a.toml",
        "[[action]]\ntype = \"x\"\n[[action.rule]]\nparam = \"tier\"\nop = \"in\"\n\
         value = [\"gold\", 2]\neffect = \"deny\"\n",
    )])
    .unwrap();
    assert_eq!(
        set.action("x").unwrap().rules[0].message,
        "tier in [\"gold\", 2]"
    );
}

#[test]
fn revision_is_stable_and_sensitive() {
    let a = ("a.toml", "[[action]]\ntype = \"a\"\n");
    let b = ("b.toml", "[[action]]\ntype = \"b\"\n");
    let r1 = PolicySet::from_sources(&[a, b]).unwrap().revision;
    let r2 = PolicySet::from_sources(&[b, a]).unwrap().revision;
    assert_eq!(r1, r2);
    assert!(r1.starts_with("sha256:") && r1.len() == 7 + 64, "{r1}");
    let renamed = PolicySet::from_sources(&[("c.toml", a.1), b])
        .unwrap()
        .revision;
    assert_ne!(r1, renamed);
    let edited = PolicySet::from_sources(&[("a.toml", "[[action]]\ntype = \"a\" \n"), b])
        .unwrap()
        .revision;
    assert_ne!(r1, edited);
    // Known value, so a change to the hashing scheme is a visible decision.
    assert_eq!(
        PolicySet::empty().revision,
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn load_dir_reads_only_policy_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(p.join("a.toml"), "[[action]]\ntype = \"a\"\n").unwrap();
    for junk in [
        ".a.toml.swp",
        "a.toml~",
        ".hidden.toml",
        "a.toml.swp",
        "notes.txt",
        "#a.toml#",
        // Policy test files sit beside the policies; only `verdict test`
        // reads them.
        "a.test.toml",
    ] {
        std::fs::write(p.join(junk), "garbage [[[").unwrap();
    }
    std::fs::create_dir(p.join("sub.toml")).unwrap();
    assert!(crate::policy::is_test_file("a.test.toml"));
    assert!(!crate::policy::is_test_file("a.toml") && !crate::policy::is_test_file(".a.test.toml"));
    let set = load_dir(p).unwrap();
    assert_eq!(set.files, vec!["a.toml"]);
    // Same revision as the in-memory build: directory location does not count.
    assert_eq!(
        set.revision,
        PolicySet::from_sources(&[("a.toml", "[[action]]\ntype = \"a\"\n")])
            .unwrap()
            .revision
    );

    let empty = tempfile::tempdir().unwrap();
    let set = load_dir(empty.path()).unwrap();
    assert!(set.actions.is_empty() && set.routes.is_empty() && set.files.is_empty());

    let missing = p.join("missing");
    let errs = load_dir(&missing).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert!(
        matches!(&errs[0], PolicyError::Io { path, .. } if path == &missing.display().to_string())
    );
}

#[test]
fn load_dir_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.toml"), "[[action]]\ntype = 1\n").unwrap();
    std::fs::write(dir.path().join("bin.toml"), [0xff, 0xfe]).unwrap();
    let errs: Vec<String> = load_dir(dir.path())
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    let d = dir.path().display();
    assert_eq!(
        errs,
        vec![
            format!("{d}/bad.toml:2:8: invalid type: integer `1`, expected a string"),
            format!("{d}/bin.toml:1:1: file is not valid UTF-8"),
        ]
    );
}

#[test]
fn shipped_example_policies_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let set = match load_dir(&dir) {
        Ok(s) => s,
        Err(es) => panic!(
            "{}",
            es.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    };
    for t in ["refund.create", "account.access", "llm.reply"] {
        assert!(set.action(t).is_some(), "missing action {t}");
    }
    let (route, _) = set.match_route("POST", "/api/orders/o-1/refunds").unwrap();
    assert_eq!(route.action, "refund.create");
    let refunds = set.action("refund.create").unwrap();
    let amount = |n: f64| {
        let mut p = ParamLookup::new();
        p.insert("amount", ParamValue::Number(n));
        p.insert("currency", ParamValue::String("EUR".into()));
        refunds.evaluate_rules(&p).iter().map(|h| h.effect).max()
    };
    assert_eq!(amount(100.0), None);
    assert_eq!(amount(600.0), Some(Effect::Review));
    assert_eq!(amount(6000.0), Some(Effect::Deny));
}

#[test]
fn evidence_provenance_is_parsed_and_checked() {
    let action = |evidence: &str| format!("[[action]]\ntype = \"refund.create\"\n{evidence}\n");
    let set = PolicySet::from_sources(&[(
        "a.toml",
        &action(
            r#"evidence = { from = "referenced", origins = ["HTTPS://Billing.Internal/", "http://127.0.0.1:8080", "file://"], require_checksum = true }"#,
        ),
    )])
    .unwrap();
    let p = &set.action("refund.create").unwrap().provenance;
    assert!(p.declared && p.referenced && p.require_checksum);
    assert_eq!(
        p.origins,
        [
            "https://billing.internal:443",
            "http://127.0.0.1:8080",
            "file://"
        ]
    );
    // Inline text, another origin and a missing checksum are refused; the
    // listed origin with a checksum is taken.
    assert!(p.refuses(None, true).is_some());
    assert!(p.refuses(Some("https://evil.example/x"), true).is_some());
    let uri = Some("https://Billing.Internal:443/orders/1");
    assert!(p.refuses(uri, false).is_some());
    assert_eq!(p.refuses(uri, true), None);
    assert_eq!(p.refuses(Some("file:///srv/evidence/a.txt"), true), None);
    // `from = "any"` refuses nothing.
    let any =
        PolicySet::from_sources(&[("a.toml", &action(r#"evidence = { from = "any" }"#))]).unwrap();
    let p = &any.action("refund.create").unwrap().provenance;
    assert!(p.declared && !p.referenced);
    assert_eq!(p.refuses(None, false), None);

    for (evidence, want) in [
        (
            r#"evidence = { from = "somewhere" }"#,
            "unknown value \"somewhere\"",
        ),
        (r#"evidence = { from = "referenced" }"#, "needs origins"),
        (
            r#"evidence = { from = "referenced", origins = ["https://billing.internal/orders"] }"#,
            "is not an origin",
        ),
        (
            r#"evidence = { from = "referenced", origins = ["ftp://x"] }"#,
            "is not an origin",
        ),
        (
            r#"evidence = { from = "any", origins = ["https://billing.internal"] }"#,
            "apply only with from = \"referenced\"",
        ),
        (r#"evidence = { from = "any", fromm = 1 }"#, "unknown field"),
    ] {
        let errors = errors_of(&[("a.toml", &action(evidence))]);
        assert!(
            errors
                .iter()
                .any(|e| e.contains(want) && e.starts_with("a.toml:")),
            "{evidence}: {errors:?}"
        );
    }
}

#[test]
fn a_source_template_fills_one_path_segment_per_param() {
    use crate::policy::route::SourceTemplate;
    let t = SourceTemplate::parse(
        "invoice",
        "https://billing.internal/orders/{order_id}/invoice?v={v}",
    )
    .unwrap();
    assert_eq!(t.params().collect::<Vec<_>>(), ["order_id", "v"]);
    for bad in [
        "https://b/{",
        "https://b/}x",
        "https://b/{}",
        "https://b/{a{b}}",
    ] {
        assert!(SourceTemplate::parse("d", bad).is_err(), "{bad}");
    }
    let params = |id: serde_json::Value| {
        serde_json::json!({"order_id": id, "v": 2})
            .as_object()
            .cloned()
            .unwrap()
    };
    assert_eq!(
        t.fill(&params("1001".into())).unwrap(),
        "https://billing.internal/orders/1001/invoice?v=2"
    );
    for (value, want) in [
        ("../admin", "..%2Fadmin"),
        ("1001/../x", "1001%2F..%2Fx"),
        ("1001%2F..", "1001%252F.."),
        ("1001?x=", "1001%3Fx%3D"),
        ("@evil", "%40evil"),
        ("a#b", "a%23b"),
        ("é", "%C3%A9"),
    ] {
        assert_eq!(
            t.fill(&params(value.into())).unwrap(),
            format!("https://billing.internal/orders/{want}/invoice?v=2"),
            "{value}"
        );
    }
    for bad in [json!(""), json!("."), json!(".."), json!(null), json!([1])] {
        assert!(t.fill(&params(bad.clone())).is_err(), "{bad}");
    }
    assert!(t.fill(&serde_json::Map::new()).is_err());

    let route = |uri: &str| {
        format!(
            "[[action]]\ntype = \"a\"\n\n[[route]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/o/{{id}}\"\naction = \"a\"\nparams = {{ id = \"path:id\" }}\nsources_from = [{{ id = \"doc\", uri = \"{uri}\" }}]\n"
        )
    };
    let set = PolicySet::from_sources(&[("a.toml", &route("https://b.internal/o/{id}"))]).unwrap();
    assert_eq!(set.routes[0].sources_from[0].id, "doc");
    for (uri, want) in [
        ("https://{id}.internal/o", "the origin must be written out"),
        (
            "https://b.internal/o/{nope}",
            "{nope} is not a param of this route",
        ),
        ("https://b.internal/o/{id", "unclosed"),
        ("gopher://b.internal/{id}", "only http, https and file"),
        ("b.internal/{id}", "is not a uri"),
    ] {
        let errors = errors_of(&[("a.toml", &route(uri))]);
        assert!(errors.iter().any(|e| e.contains(want)), "{uri}: {errors:?}");
    }
}

#[test]
fn an_action_source_template_names_declared_params_only() {
    let action = |uri: &str, declared: &str| {
        format!(
            "[[action]]\ntype = \"a\"\nparam_types = {{ {declared} }}\nsources_from = [{{ id = \"doc\", uri = \"{uri}\" }}]\n"
        )
    };
    let set = PolicySet::from_sources(&[(
        "a.toml",
        &action("https://b.internal/o/{id}", "id = \"string\""),
    )])
    .unwrap();
    assert_eq!(set.action("a").unwrap().sources_from[0].id, "doc");
    let errors = errors_of(&[(
        "a.toml",
        &action("https://b.internal/o/{id}", "n = \"number\""),
    )]);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("{id} is not a param declared in param_types")),
        "{errors:?}"
    );
    // A route may not read a source under an id its action reads.
    let both = format!(
        "{}\n[[route]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/o/{{id}}\"\naction = \"a\"\nparams = {{ id = \"path:id\" }}\nsources_from = [{{ id = \"doc\", uri = \"https://b.internal/x/{{id}}\" }}]\n",
        action("https://b.internal/o/{id}", "id = \"string\"")
    );
    let errors = errors_of(&[("a.toml", &both)]);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("sources_from id \"doc\" is also read by its action")),
        "{errors:?}"
    );
}
