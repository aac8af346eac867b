//! Loader, validation, matching and extraction tests over whole policy files.

use super::*;
use http::HeaderMap;
use serde_json::json;
use std::time::Duration;

const REFUND_EXAMPLE: &str = r#"
[[action]]
type = "refund.create"
requirements = { decision_mode = "strict", min_coverage = 0.9, citations = "required" }
options = { deny_if_any_unsupported = true, evidence_limit = 3 }
require_claims = true
redact = ["params.card_number"]

  [[action.rule]]
  param = "amount"
  op = "gt"
  value = 500
  effect = "review"
  message = "refunds above 500 need a second pair of eyes"

[[route]]
name = "create-refund"
method = "POST"
path = "/api/orders/{order_id}/refunds"
action = "refund.create"
params = { order_id = "path:order_id", amount = "body:/amount", customer = "header:x-customer-id" }
claims = "body:/justification/claims"
sources = "body:/justification/evidence"
on_review = "hold"
hold_timeout = "30s"
"#;

fn errors_of(files: &[(&str, &str)]) -> Vec<String> {
    match PolicySet::from_sources(files) {
        Ok(_) => vec![],
        Err(es) => es.iter().map(ToString::to_string).collect(),
    }
}

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

/// Wraps a rule body in an action so error positions are easy to read:
/// line 3 is `param`, line 4 `op`, line 5 `value` (when present).
fn rule_file(op: &str, value: Option<&str>) -> String {
    let mut s =
        format!("[[action]]\ntype = \"x\"\n[[action.rule]]\nparam = \"p\"\nop = \"{op}\"\n");
    if let Some(v) = value {
        s.push_str(&format!("value = {v}\n"));
    }
    s.push_str("effect = \"deny\"\n");
    s
}

#[test]
fn rule_value_errors() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("gt", Some("\"500\""), "r.toml:6:9: op \"gt\" needs a number value"),
        ("ge", None, "r.toml:5:6: op \"ge\" needs a number value"),
        ("lt", Some("nan"), "r.toml:6:9: op \"lt\" needs a number value"),
        ("le", Some("[1]"), "r.toml:6:9: op \"le\" needs a number value"),
        ("eq", None, "r.toml:5:6: op \"eq\" needs a string, number or boolean value"),
        ("ne", Some("[1]"), "r.toml:6:9: op \"ne\" needs a string, number or boolean value"),
        ("in", Some("\"a\""), "r.toml:6:9: op \"in\" needs an array of strings, numbers or booleans"),
        ("not_in", Some("[[1]]"), "r.toml:6:9: op \"not_in\" needs an array of strings, numbers or booleans"),
        ("in", None, "r.toml:5:6: op \"in\" needs an array of strings, numbers or booleans"),
        ("present", Some("true"), "r.toml:6:9: op \"present\" takes no value"),
        ("absent", Some("1"), "r.toml:6:9: op \"absent\" takes no value"),
        ("matches", Some("5"), "r.toml:6:9: op \"matches\" needs a string value (a regex)"),
        ("matches", Some("\"(abc\""), "r.toml:6:9: invalid regex \"(abc\": unclosed group"),
        ("between", Some("1"), "r.toml:5:6: unknown variant `between`, expected one of `eq`, `ne`, `gt`, `ge`, `lt`, `le`, `in`, `not_in`, `present`, `absent`, `matches`"),
    ];
    for (op, value, want) in cases {
        let text = rule_file(op, *value);
        assert_eq!(
            errors_of(&[("r.toml", &text)]),
            vec![want.to_string()],
            "{op} {value:?}"
        );
    }
    // And the ones that are fine.
    for (op, value) in [
        ("gt", Some("1.5")),
        ("eq", Some("true")),
        ("eq", Some("\"x\"")),
        ("in", Some("[]")),
        ("present", None),
        ("absent", None),
        ("matches", Some("'^\\d+$'")),
    ] {
        let text = rule_file(op, value);
        assert_eq!(
            errors_of(&[("r.toml", &text)]),
            Vec::<String>::new(),
            "{op}"
        );
    }
}

#[test]
fn validation_errors_have_exact_positions() {
    let route = |extra: &str| {
        format!(
            "[[action]]\ntype = \"x\"\n[[route]]\nname = \"r\"\nmethod = \"POST\"\n\
             path = \"/o/{{id}}\"\naction = \"x\"\n{extra}"
        )
    };
    let cases: Vec<(String, &str)> = vec![
        // Syntax and shape errors come from the TOML parser.
        ("[[action]\n".into(), "f.toml:1:9: invalid table header: expected `.`, `]]`"),
        ("[[action]]\ntype = 5\n".into(), "f.toml:2:8: invalid type: integer `5`, expected a string"),
        ("[[action]]\ntype = \"x\"\ntypo = 1\n".into(),
         "f.toml:3:1: unknown field `typo`, expected one of `type`, `requirements`, `options`, `require_claims`, `min_claims`, `approvals`, `redact`, `rule`, `param_types`, `bind`, `evidence`, `sources_from`"),
        ("[[action]]\ntype = \"x\"\nrequirements = { decision_mode = \"lenient\" }\n".into(),
         "f.toml:3:34: unknown variant `lenient`, expected one of `strict`, `balanced`, `audit`"),
        ("[[action]]\ntype = \"x\"\nrequirements = { min_cov = 1 }\n".into(),
         "f.toml:3:18: unknown field `min_cov`, expected one of `decision_mode`, `min_coverage`, `citations`"),
        ("[[policy]]\n".into(), "f.toml:1:3: unknown field `policy`, expected one of `set`, `action`, `route`"),
        ("[[route]]\nname = \"r\"\n".into(), "f.toml:1:1: missing field `method`"),
        // Semantic errors.
        ("[[action]]\ntype = \"x\"\nrequirements = { min_coverage = 1.5 }\n".into(),
         "f.toml:3:33: requirements.min_coverage must be between 0 and 1, got 1.5"),
        ("[[action]]\ntype = \"x\"\nmin_claims = 0\n".into(),
         "f.toml:3:14: min_claims: must be 1 to 32, got 0"),
        ("[[action]]\ntype = \"x\"\nrequire_claims = false\nmin_claims = 2\n".into(),
         "f.toml:4:14: min_claims = 2 needs require_claims = true (the default)"),
        ("[[action]]\ntype = \"x\"\napprovals = 11\n".into(),
         "f.toml:3:13: approvals: must be 1 to 10 (distinct reviewers per held call), got 11"),
        ("[[action]]\ntype = \"x\"\nrequirements = { min_coverage = 0.9 }\noptions = { min_coverage = 0.8 }\n".into(),
         "f.toml:4:28: options.min_coverage 0.8 conflicts with requirements.min_coverage 0.9; set it once"),
        ("[[action]]\ntype = \"\"\n".into(), "f.toml:2:8: action type must not be empty"),
        ("[[action]]\ntype = \"x\"\nredact = [\"\"]\n".into(), "f.toml:3:11: redact entries must not be empty"),
        ("[[action]]\ntype = \"x\"\n[[action.rule]]\nparam = \"a..b\"\nop = \"present\"\neffect = \"deny\"\n".into(),
         "f.toml:4:9: invalid rule param \"a..b\""),
        ("[[action]]\ntype = \"x\"\n[[action]]\ntype = \"x\"\n".into(),
         "f.toml:4:8: duplicate action type \"x\" (first defined at f.toml:2:8)"),
        (route("params = { a = \"cookie:a\" }\n"),
         "f.toml:8:16: params.a: invalid extractor \"cookie:a\": expected path:NAME, query:NAME, header:NAME, body:/POINTER or literal:VALUE"),
        (route("params = { \"a.b\" = \"body:/x\" }\n"),
         "f.toml:8:20: param name \"a.b\" must be non-empty and contain no \".\""),
        (route("params = { a = \"path:nope\" }\n"),
         "f.toml:8:16: params.a: invalid extractor \"path:nope\": the route path has no {nope} segment"),
        (route("claims = \"body:claims\"\n"),
         "f.toml:8:10: claims: invalid extractor \"body:claims\": a JSON pointer must be empty or start with \"/\""),
        (route("sources = \"body:/a~2\"\n"),
         "f.toml:8:11: sources: invalid extractor \"body:/a~2\": \"~\" in a JSON pointer must be followed by 0 or 1"),
        (route("answer = \"header:a b\"\n"),
         "f.toml:8:10: answer: invalid extractor \"header:a b\": bad header name"),
        (route("claims = \"body:/c\"\nanswer = \"body:/a\"\n"),
         "f.toml:9:10: a route takes claims or answer (output mode), not both"),
        (route("hold_timeout = \"soon\"\n"),
         "f.toml:8:16: hold_timeout: invalid duration \"soon\": expected number at 0"),
        (route("on_review = \"wait\"\n"),
         "f.toml:8:13: unknown variant `wait`, expected `hold` or `deny`"),
        (route("failure_mode = \"ajar\"\n"),
         "f.toml:8:16: unknown variant `ajar`, expected `closed` or `open`"),
        (route("bogus = 1\n"), "f.toml:8:1: unknown field `bogus`, expected one of `name`, `method`, `path`, `action`, `params`, `claims`, `sources`, `answer`, `on_review`, `hold_timeout`, `failure_mode`, `content_type`, `suffixes`, `pinned`, `credential_headers`, `join_ignore_headers`, `sources_from`"),
        ("[[action]]\ntype = \"x\"\n[[route]]\nname = \"r\"\nmethod = \"PO ST\"\npath = \"o\"\naction = \"y\"\n".into(),
         "f.toml:5:10: invalid method \"PO ST\": expected one of GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE, CONNECT\nf.toml:6:8: path \"o\" must start with \"/\"\nf.toml:7:10: route \"r\" references unknown action \"y\""),
        ("[[action]]\ntype = \"x\"\n[[route]]\nname = \"r\"\nmethod = \"GET\"\npath = \"/a/{b}x\"\naction = \"x\"\n".into(),
         "f.toml:6:8: invalid path segment \"{b}x\": a parameter must be a whole segment like {name}"),
    ];
    for (text, want) in cases {
        let got = errors_of(&[("f.toml", &text)]).join("\n");
        assert_eq!(got, want, "for file:\n{text}");
    }
}

#[test]
fn duplicate_and_overlapping_routes_across_files() {
    let r = |name: &str, method: &str, path: &str| {
        format!("[[route]]\nname = \"{name}\"\nmethod = \"{method}\"\npath = \"{path}\"\naction = \"x\"\n")
    };
    let a = format!(
        "[[action]]\ntype = \"x\"\n{}",
        r("one", "POST", "/o/{id}/r")
    );
    let b = [
        r("two", "POST", "/o/{order}/r"), // overlaps one: equal specificity
        r("three", "GET", "/o/{id}/r"),   // other method: fine
        r("four", "POST", "/o/lit/r"),    // more specific: fine
        r("one", "PUT", "/p"),            // duplicate name
        r("five", "POST", "/{a}/x/r"),    // overlaps one, less specific: fine
        r("six", "POST", "/o/{id}/s"),    // no overlap: fine
    ]
    .concat();
    assert_eq!(
        errors_of(&[("b.toml", &b), ("a.toml", &a)]),
        vec![
            "b.toml:4:8: route \"two\" (POST /o/{order}/r) matches exactly the paths of route \"one\" (POST /o/{id}/r, a.toml:6:8): one of them could never be reached",
            "b.toml:17:8: duplicate route name \"one\" (first defined at a.toml:4:8)",
        ]
    );
}

#[test]
fn errors_are_collected_across_files_and_sorted() {
    let got = errors_of(&[
        ("b.toml", "[[action]]\ntype = \"y\"\nrequirements = { min_coverage = 2 }\noptions = { min_coverage = -1 }\n"),
        ("a.toml", "[[action]]\ntype = \"x\"\n[[action]]\ntype = \"x\"\nredact = [\"\"]\n"),
        ("c.toml", "not toml at all"),
        ("d.toml", "[[action]]\ntype = \"x\"\n"),
    ]);
    assert_eq!(
        got,
        vec![
            "a.toml:4:8: duplicate action type \"x\" (first defined at a.toml:2:8)",
            "b.toml:3:33: requirements.min_coverage must be between 0 and 1, got 2",
            "b.toml:4:28: options.min_coverage must be between 0 and 1, got -1",
            "c.toml:1:5: expected `.`, `=`",
            "d.toml:2:8: duplicate action type \"x\" (first defined at a.toml:2:8)",
        ]
    );
}

#[test]
fn unknown_action_is_not_reported_when_another_file_is_unparsable() {
    let route = "[[route]]\nname = \"r\"\nmethod = \"GET\"\npath = \"/\"\naction = \"x\"\n";
    assert_eq!(
        errors_of(&[("a.toml", "[[action]\n"), ("b.toml", route)]),
        vec!["a.toml:1:9: invalid table header: expected `.`, `]]`"]
    );
}

fn routes_set() -> PolicySet {
    let r = |name: &str, method: &str, path: &str| {
        format!("[[route]]\nname = \"{name}\"\nmethod = \"{method}\"\npath = \"{path}\"\naction = \"x\"\n")
    };
    let text = [
        "[[action]]\ntype = \"x\"\n".to_string(),
        r("param-param", "GET", "/{a}/{b}"),
        r("lit-param", "GET", "/users/{id}"),
        r("lit-lit", "GET", "/users/me"),
        r("param-lit", "GET", "/{a}/settings"),
        r("longer", "GET", "/users/{id}/orders"),
        r("root", "GET", "/"),
        r("post", "POST", "/users/{id}"),
        r("encoded", "GET", "/files/a b"),
    ]
    .concat();
    PolicySet::from_sources(&[("r.toml", &text)]).unwrap()
}

#[test]
fn most_specific_route_wins() {
    let set = routes_set();
    /// Route name and captured params.
    type Want = Option<(&'static str, &'static [(&'static str, &'static str)])>;
    let cases: &[(&str, &str, Want)] = &[
        ("GET", "/users/me", Some(("lit-lit", &[]))),
        ("GET", "/users/42", Some(("lit-param", &[("id", "42")]))),
        (
            "GET",
            "/users/settings",
            Some(("lit-param", &[("id", "settings")])),
        ),
        (
            "GET",
            "/teams/settings",
            Some(("param-lit", &[("a", "teams")])),
        ),
        (
            "GET",
            "/teams/7",
            Some(("param-param", &[("a", "teams"), ("b", "7")])),
        ),
        ("GET", "/users/42/orders", Some(("longer", &[("id", "42")]))),
        (
            "GET",
            "/users/42/orders?x=1",
            Some(("longer", &[("id", "42")])),
        ),
        (
            "GET",
            "/users/a%2Fb%20c",
            Some(("lit-param", &[("id", "a/b c")])),
        ),
        ("GET", "/%75sers/me", Some(("lit-lit", &[]))),
        ("GET", "/files/a%20b", Some(("encoded", &[]))),
        ("GET", "/", Some(("root", &[]))),
        ("GET", "/?q=1", Some(("root", &[]))),
        ("POST", "/users/1", Some(("post", &[("id", "1")]))),
        ("post", "/users/1", Some(("post", &[("id", "1")]))),
        ("DELETE", "/users/1", None),
        ("GET", "/users/42/orders/9", None),
        // Spellings an upstream would still route the same way.
        ("GET", "/users/42/", Some(("lit-param", &[("id", "42")]))),
        ("GET", "/USERS/Me", Some(("lit-lit", &[]))),
        ("GET", "//users///me", Some(("lit-lit", &[]))),
        ("GET", "/users/x/../me", Some(("lit-lit", &[]))),
        ("GET", "/users/%2e%2e/./users/me", Some(("lit-lit", &[]))),
        // An encoded slash is read strictly as part of a segment; only the
        // lenient reading splits it (see `lenient_readings_are_ambiguous`).
        ("GET", "/users%2F42%2Forders", None),
        ("GET", "/users/a%2fb", Some(("lit-param", &[("id", "a/b")]))),
        ("GET", "/../..", Some(("root", &[]))),
        ("GET", "users/42", None),
        ("GET", "", None),
    ];
    for (method, path, want) in cases {
        let got = set
            .match_route(method, path)
            .map(|(r, p)| (r.name.clone(), p));
        let want = want.map(|(n, ps)| {
            (
                n.to_string(),
                PathParams::new(
                    ps.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
            )
        });
        assert_eq!(got, want, "{method} {path}");
    }
}

#[test]
fn route_extracts_from_a_request() {
    let set = PolicySet::from_sources(&[("refunds.toml", REFUND_EXAMPLE)]).unwrap();
    let (route, pp) = set
        .match_route("POST", "/api/orders/A%2D17/refunds?dry=1")
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("X-Customer-ID", "cust-9".parse().unwrap());
    let body = json!({
        "amount": 120,
        "justification": {"claims": ["the parcel arrived broken"], "evidence": [{"id": "s1"}]},
    });
    let got = route.extract(&RequestParts {
        path_params: &pp,
        query: Some("dry=1"),
        headers: &headers,
        body: Some(&body),
    });
    let want_params = json!({"amount": 120, "customer": "cust-9", "order_id": "A-17"});
    assert_eq!(serde_json::Value::Object(got.params), want_params);
    assert_eq!(got.claims, Some(json!(["the parcel arrived broken"])));
    assert_eq!(got.sources, Some(json!([{"id": "s1"}])));
    assert_eq!(got.answer, None);

    // Missing values are absent, not null.
    let got = route.extract(&RequestParts {
        path_params: &pp,
        query: None,
        headers: &HeaderMap::new(),
        body: Some(&json!({})),
    });
    assert_eq!(
        serde_json::Value::Object(got.params),
        json!({"order_id": "A-17"})
    );
    assert_eq!(got.claims, None);

    // Extracted params feed the rules directly.
    let params_of = |body: serde_json::Value| {
        let parts = RequestParts {
            path_params: &pp,
            query: None,
            headers: &headers,
            body: Some(&body),
        };
        ParamLookup::from(&route.extract(&parts).params)
    };
    let lookup = params_of(json!({"amount": 600}));
    let hits = set.action("refund.create").unwrap().evaluate_rules(&lookup);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].effect, Effect::Review);
    // A numeric string is not a number: a mismatch, never a silent miss.
    let lookup = params_of(json!({"amount": "600"}));
    let eval = set.action("refund.create").unwrap().evaluate(&lookup);
    assert!(eval.hits.is_empty());
    assert_eq!(eval.mismatches.len(), 1, "{eval:?}");
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
fn check_dir_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), REFUND_EXAMPLE).unwrap();
    let (code, out) = check_dir(dir.path());
    assert_eq!(code, 0, "{out}");
    let rev = load_dir(dir.path()).unwrap().revision;
    assert_eq!(
        out,
        format!("ok: 1 files, 1 actions, 1 routes, revision {rev}\nhold_timeout checked against review.ttl 24h (the default; --config FILE checks against a config's)\n")
    );

    std::fs::write(
        dir.path().join("b.toml"),
        "[[action]]\ntype = \"refund.create\"\nx = 1\n",
    )
    .unwrap();
    let (code, out) = check_dir(dir.path());
    assert_eq!(code, 1);
    let d = dir.path().display();
    assert_eq!(
        out,
        format!("{d}/b.toml:3:1: unknown field `x`, expected one of `type`, `requirements`, `options`, `require_claims`, `min_claims`, `approvals`, `redact`, `rule`, `param_types`, `bind`, `evidence`, `sources_from`\n")
    );

    let (code, out) = check_dir(&dir.path().join("nope"));
    assert_eq!(code, 1);
    assert!(out.contains("nope: "), "{out}");
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
fn shape_errors_in_several_tables_are_all_reported() {
    let text = r#"[[action]]
type = "a"
typo = 1
[[action]]
type = "b"
  [[action.rule]]
  param = "x"
  op = "gt"
  value = "no"
  effect = "deny"
  [[action.rule]]
  param = "x"
  op = "between"
  effect = "deny"
[[route]]
name = "r"
method = "GET"
path = "/x"
action = "a"
color = "red"
[[route]]
name = "r2"
method = "GET"
path = "/y"
action = "nope"
params = { p = "cookie:x" }
[[route]]
name = "r3"
path = "/z"
action = "b"
"#;
    assert_eq!(
        errors_of(&[("m.toml", text)]),
        vec![
            "m.toml:3:1: unknown field `typo`, expected one of `type`, `requirements`, `options`, `require_claims`, `min_claims`, `approvals`, `redact`, `rule`, `param_types`, `bind`, `evidence`, `sources_from`",
            "m.toml:9:11: op \"gt\" needs a number value",
            "m.toml:13:8: unknown variant `between`, expected one of `eq`, `ne`, `gt`, `ge`, `lt`, `le`, `in`, `not_in`, `present`, `absent`, `matches`",
            "m.toml:20:1: unknown field `color`, expected one of `name`, `method`, `path`, `action`, `params`, `claims`, `sources`, `answer`, `on_review`, `hold_timeout`, `failure_mode`, `content_type`, `suffixes`, `pinned`, `credential_headers`, `join_ignore_headers`, `sources_from`",
            "m.toml:26:16: params.p: invalid extractor \"cookie:x\": expected path:NAME, query:NAME, header:NAME, body:/POINTER or literal:VALUE",
            "m.toml:27:1: missing field `method`",
        ]
    );
    assert_eq!(
        errors_of(&[("t.toml", "foo = 1\n[[action]]\ntype = 5\n")]),
        vec![
            "t.toml:1:1: unknown field `foo`, expected one of `set`, `action`, `route`",
            "t.toml:3:8: invalid type: integer `5`, expected a string",
        ]
    );
}

#[test]
fn lenient_readings_are_ambiguous() {
    let with_suffix = REFUND_EXAMPLE.replace(
        "hold_timeout = \"30s\"",
        "hold_timeout = \"30s\"\nsuffixes = [\".json\"]",
    );
    let plain = PolicySet::from_sources(&[("refunds.toml", REFUND_EXAMPLE)]).unwrap();
    let suffixed = PolicySet::from_sources(&[("refunds.toml", &with_suffix)]).unwrap();
    let kind = |set: &PolicySet, path: &str| match set.classify("POST", path) {
        RouteMatch::Matched(r, p) => format!("matched {} {:?}", r.name, p.get("order_id")),
        RouteMatch::Ambiguous(r) => format!("ambiguous {}", r.name),
        RouteMatch::Unmatched => "unmatched".to_string(),
    };
    for (path, want) in [
        ("/api/orders/1/refunds", "matched create-refund Some(\"1\")"),
        (
            "/API/Orders/1/REFUNDS/",
            "matched create-refund Some(\"1\")",
        ),
        (
            "/api/orders/1/%72efunds",
            "matched create-refund Some(\"1\")",
        ),
        ("/api\\orders\\1\\refunds", "ambiguous create-refund"),
        (
            "/api/orders/1/refunds;jsessionid=abc",
            "ambiguous create-refund",
        ),
        ("/api;x=1/orders/1/refunds", "ambiguous create-refund"),
        ("/api/x/..;/orders/1/refunds", "ambiguous create-refund"),
        ("/api%5Corders%5C1%5Crefunds", "ambiguous create-refund"),
        ("/api/orders/1/refunds.", "ambiguous create-refund"),
        ("/api/orders/1/refunds%20", "ambiguous create-refund"),
        ("/api/orders/1/refunds.json", "ambiguous create-refund"),
        ("/api/orders%2F1%2Frefunds", "ambiguous create-refund"),
        ("/api/orders/1/%2572efunds", "ambiguous create-refund"),
        ("/api/orders/1/refunds%00", "ambiguous create-refund"),
        ("/api/orders/1/returns", "unmatched"),
        ("/api/orders/1/refundsx", "unmatched"),
    ] {
        assert_eq!(kind(&plain, path), want, "{path}");
    }
    // A declared suffix is part of the route; others are still ambiguous.
    assert_eq!(
        kind(&suffixed, "/api/orders/1/refunds.JSON"),
        "matched create-refund Some(\"1\")"
    );
    assert_eq!(
        kind(&suffixed, "/api/orders/1/refunds.xml"),
        "ambiguous create-refund"
    );
    // Any method's reading counts for a method override.
    assert!(plain.reach_any_method("/api/orders/1/refunds;x").is_some());
    assert!(plain.reach_any_method("/api/orders/1").is_none());
}

#[test]
fn compatibility_characters_that_reach_a_route_are_ambiguous() {
    let set = PolicySet::from_sources(&[("refunds.toml", REFUND_EXAMPLE)]).unwrap();
    let kind = |path: &str| match set.classify("POST", path) {
        RouteMatch::Matched(r, p) => format!("matched {} {:?}", r.name, p.get("order_id")),
        RouteMatch::Ambiguous(r) => format!("ambiguous {}", r.name),
        RouteMatch::Unmatched => "unmatched".to_string(),
    };
    for (path, want) in [
        // Full-width r (U+FF52), escaped and raw: NFKC reads `refunds`.
        ("/api/orders/1/%EF%BD%92efunds", "ambiguous create-refund"),
        ("/api/orders/1/\u{FF52}efunds", "ambiguous create-refund"),
        // A full-width solidus (U+FF0F) splits a segment once folded.
        ("/api/orders/1%EF%BC%8Frefunds", "ambiguous create-refund"),
        // Full-width digits match strictly, but the param would be read as
        // `1` by a normalizing upstream and `１` by the gate.
        ("/api/orders/%EF%BC%91/refunds", "ambiguous create-refund"),
        // Text that is its own NFKC form is an ordinary param.
        (
            "/api/orders/caf%C3%A9/refunds",
            "matched create-refund Some(\"caf\u{e9}\")",
        ),
        // A folded path that reaches no route is none of the gate's business.
        ("/shop/%EF%BD%92efunds", "unmatched"),
        ("/api/orders/1/%EF%BD%92eturns", "unmatched"),
    ] {
        assert_eq!(kind(path), want, "{path}");
    }
    assert!(set
        .reach_any_method("/api/orders/1/%EF%BD%92efunds")
        .is_some());
}

#[test]
fn route_content_type_suffixes_and_pins_are_validated() {
    let route = |extra: &str| {
        format!(
            "[[action]]\ntype = \"a\"\n[[route]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/a\"\naction = \"a\"\nparams = {{ n = \"body:/n\" }}\n{extra}\n"
        )
    };
    let set = PolicySet::from_sources(&[("a.toml", &route("pinned = true"))]).unwrap();
    assert_eq!(set.routes[0].content_type, "application/json");
    assert!(set.routes[0].pinned);
    let set = PolicySet::from_sources(&[(
        "a.toml",
        &route("content_type = \"Application/Vnd.Api+JSON\"\nsuffixes = [\".json\"]"),
    )])
    .unwrap();
    assert_eq!(set.routes[0].content_type, "application/vnd.api+json");
    assert_eq!(set.routes[0].suffixes, [".json"]);
    for (extra, want) in [
        (
            "content_type = \"text/plain\"",
            "a.toml:9:16: route \"r\" reads the body with body: extractors, so it must gate a JSON media type, not \"text/plain\"",
        ),
        (
            "content_type = \"application/json; charset=utf-8\"",
            "a.toml:9:16: content_type \"application/json; charset=utf-8\" is not a media type like \"application/json\" (no parameters)",
        ),
        (
            "suffixes = [\"json\"]",
            "a.toml:9:13: suffix \"json\" must be a dot and letters or digits, like \".json\"",
        ),
    ] {
        assert_eq!(errors_of(&[("a.toml", &route(extra))]), [want], "{extra}");
    }
}

#[test]
fn credential_and_join_ignore_headers_are_validated() {
    let route = |extra: &str| {
        format!(
            "[[action]]\ntype = \"a\"\n[[route]]\nname = \"r\"\nmethod = \"POST\"\npath = \"/a\"\naction = \"a\"\n{extra}\n"
        )
    };
    let set = PolicySet::from_sources(&[(
        "a.toml",
        &route("credential_headers = [\"X-Api-Key\"]\njoin_ignore_headers = [\"X-Attempt\", \"x-attempt\"]"),
    )])
    .unwrap();
    let r = &set.routes[0];
    assert_eq!(r.credential_headers, ["x-api-key"]);
    assert_eq!(r.join_ignore_headers, ["x-attempt"]);
    assert!(r.is_credential("x-api-key") && r.is_credential("cookie"));
    assert!(!r.is_credential("x-attempt"));
    assert!(
        r.join_skips("x-attempt") && r.join_skips("x-request-id") && r.join_skips("traceparent")
    );
    assert!(!r.join_skips("x-api-key") && !r.join_skips("authorization"));
    for (extra, want) in [
        (
            "join_ignore_headers = [\"Authorization\"]",
            "a.toml:8:24: join_ignore_headers: \"Authorization\" carries the caller's credential; a retry with another one must not join the pending review",
        ),
        (
            "credential_headers = [\"x-api-key\"]\njoin_ignore_headers = [\"X-API-KEY\"]",
            "a.toml:9:24: join_ignore_headers: \"X-API-KEY\" carries the caller's credential; a retry with another one must not join the pending review",
        ),
        (
            "credential_headers = [\"x-request-id\"]",
            "a.toml:8:23: credential_headers: \"x-request-id\" is one verdict sets or leaves out by itself",
        ),
        (
            "join_ignore_headers = [\"bad header\"]",
            "a.toml:8:24: join_ignore_headers: \"bad header\" is not a header name",
        ),
    ] {
        assert_eq!(errors_of(&[("a.toml", &route(extra))]), [want], "{extra}");
    }
}

#[test]
fn empty_files_and_types_are_errors() {
    assert_eq!(
        errors_of(&[("a.toml", ""), ("b.toml", " \n\t\n")]),
        [
            "a.toml:1:1: file is empty (a truncated write?); a policy file that means to hold nothing says so with a comment",
            "b.toml:1:1: file is empty (a truncated write?); a policy file that means to hold nothing says so with a comment",
        ]
    );
    assert_eq!(
        errors_of(&[(
            "a.toml",
            "[[action]]\ntype = \"a\"\nparam_types = { amount = \"money\" }\nbind = [\"\"]\n"
        )]),
        [
            "a.toml:3:26: param_types.amount: unknown type \"money\" (number, integer, string, decimal_string)",
            "a.toml:4:9: invalid bind param \"\"",
        ]
    );
    let set = PolicySet::from_sources(&[(
        "a.toml",
        "[set]\nallow_empty = true\nremoved_routes = [\"old\"]\n# nothing gated\n",
    )])
    .unwrap();
    assert!(set.allow_empty);
    assert_eq!(set.removed_routes, ["old"]);
    assert!(!set.gates_anything());
}

#[test]
fn misspelt_methods_are_errors() {
    let route = |m: &str| {
        format!("[[action]]\ntype = \"a\"\n[[route]]\nname = \"r\"\nmethod = \"{m}\"\npath = \"/a\"\naction = \"a\"\n")
    };
    assert_eq!(
        errors_of(&[("a.toml", &route("PSOT"))]),
        ["a.toml:5:10: invalid method \"PSOT\": expected one of GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE, CONNECT"]
    );
    let set = PolicySet::from_sources(&[("a.toml", &route("delete"))]).unwrap();
    assert_eq!(set.routes[0].method, "DELETE");
}

#[test]
fn warnings_name_what_the_author_probably_did_not_mean() {
    let set = PolicySet::from_sources(&[("a.toml", "# nothing yet\n")]).unwrap();
    assert_eq!(
        set.warnings(),
        ["the policy set gates nothing: no actions and no routes"]
    );
    let typo = REFUND_EXAMPLE.replace("param = \"amount\"", "param = \"amt\"");
    let set = PolicySet::from_sources(&[("refunds.toml", &typo)]).unwrap();
    let w = set.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("refunds.toml:3:8: action \"refund.create\"")
            && w[0].contains("\"amt\"")
            && w[0].contains("create-refund"),
        "{w:?}"
    );
    let set = PolicySet::from_sources(&[("refunds.toml", REFUND_EXAMPLE)]).unwrap();
    assert!(set.warnings().is_empty(), "{:?}", set.warnings());

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("refunds.toml"), &typo).unwrap();
    let (code, out) = check_dir_with(dir.path(), false);
    assert_eq!(code, 0, "{out}");
    let at = format!(
        "warning: {}:3:8: action \"refund.create\"",
        dir.path().join("refunds.toml").display()
    );
    assert!(out.starts_with(&at), "{out}");
    let (code, out) = check_dir_with(dir.path(), true);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn a_hold_longer_than_the_review_ttl_is_an_error() {
    let long = REFUND_EXAMPLE.replace("hold_timeout = \"30s\"", "hold_timeout = \"48h\"");
    let set = PolicySet::from_sources(&[("refunds.toml", &long)]).unwrap();
    let errors = set.errors_against(crate::config::DEFAULT_REVIEW_TTL, "the default");
    assert_eq!(
        errors,
        ["refunds.toml:17:8: route \"create-refund\" holds a call for up to hold_timeout 48h, longer than review.ttl 24h (the default): the review would expire, and count as rejected, while the caller still waits"]
    );
    assert!(set
        .errors_against(Duration::from_secs(72 * 3600), "from c.toml")
        .is_empty());
    // A route that answers 403 instead of holding never outlives a review.
    let deny = long.replace("on_review = \"hold\"", "on_review = \"deny\"");
    let set = PolicySet::from_sources(&[("refunds.toml", &deny)]).unwrap();
    assert!(set.errors_against(Duration::from_secs(60), "x").is_empty());

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("refunds.toml"), &long).unwrap();
    let (code, out) = check_dir(dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "longer than review.ttl 24h (the default; --config FILE checks against a config's)"
        ),
        "{out}"
    );
    let opts = CheckOptions {
        review_ttl: Duration::from_secs(72 * 3600),
        config: Some("c.toml".into()),
        ..CheckOptions::default()
    };
    let (code, out) = check(dir.path(), &opts);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("hold_timeout checked against review.ttl 72h (from c.toml)\n"),
        "{out}"
    );
}

/// Routes of one method sharing paths: a partial overlap or a subset is a
/// warning naming the route that wins; a suffix another route takes first
/// is an error.
#[test]
fn routes_that_share_paths() {
    let r = |name: &str, method: &str, path: &str, extra: &str| {
        format!("[[route]]\nname = \"{name}\"\nmethod = \"{method}\"\npath = \"{path}\"\naction = \"x\"\n{extra}")
    };
    // One action `x`, then the routes.
    let set_of = |routes: &[String]| {
        let text = format!("[[action]]\ntype = \"x\"\n{}", routes.concat());
        PolicySet::from_sources(&[("a.toml", &text)]).unwrap()
    };
    let json_suffix = "suffixes = [\".json\"]\n";
    let set = set_of(&[
        r("get-order", "POST", "/api/orders/{id}", ""),
        r("export", "POST", "/api/orders/export", ""),
        r("other-method", "GET", "/api/orders/export", ""),
        r("left", "PUT", "/{a}/x", ""),
        r("right", "PUT", "/y/{b}", ""),
    ]);
    assert_eq!(
        set.warnings(),
        [
            "a.toml:9:8: route \"export\" (POST /api/orders/export) and route \"get-order\" (POST /api/orders/{id}, a.toml:4:8) both match paths such as /api/orders/export; the more specific \"export\" gets them",
            "a.toml:24:8: route \"right\" (PUT /y/{b}) and route \"left\" (PUT /{a}/x, a.toml:19:8) both match paths such as /y/x; the more specific \"right\" gets them",
        ]
    );
    assert!(set
        .errors_against(Duration::from_secs(3600), "x")
        .is_empty());

    // `/api/orders/export.json` is matched by `{id}` as written before the
    // suffix is ever stripped, so the suffix never reaches "export".
    let set = set_of(&[
        r("get-order", "POST", "/api/orders/{id}", ""),
        r("export", "POST", "/api/orders/export", json_suffix),
    ]);
    let errors = set.errors_against(Duration::from_secs(3600), "x");
    assert_eq!(
        errors,
        ["a.toml:9:8: route \"export\" (POST /api/orders/export) lists suffix \".json\", but route \"get-order\" (POST /api/orders/{id}, a.toml:4:8) matches every path it adds, such as /api/orders/export.json, as written and takes it first: the suffix never reaches \"export\""]
    );
    assert_eq!(
        set.match_route("POST", "/api/orders/export.json")
            .unwrap()
            .0
            .name,
        "get-order"
    );
    // Where the other route matches only some of them, a warning.
    let set = set_of(&[
        r("one-export", "POST", "/api/7/export.json", ""),
        r("export", "POST", "/api/{id}/export", json_suffix),
    ]);
    assert!(set
        .errors_against(Duration::from_secs(3600), "x")
        .is_empty());
    let w = set.warnings();
    assert!(
        w.iter().any(
            |w| w.contains("lists suffix \".json\", but route \"one-export\"")
                && w.contains("matches some paths it adds, such as /api/7/export.json")
        ),
        "{w:?}"
    );
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
fn binding_a_number_without_saying_where_evidence_comes_from_warns() {
    let policy = |evidence: &str| {
        format!(
            "[[action]]\ntype = \"refund.create\"\nparam_types = {{ amount = \"number\" }}\nbind = [\"amount\"]\n{evidence}\n"
        )
    };
    let set = PolicySet::from_sources(&[("a.toml", &policy(""))]).unwrap();
    let w = set.warnings();
    assert!(
        w.iter()
            .any(|w| w.contains("\"refund.create\" binds a number (amount)")),
        "{w:?}"
    );
    for evidence in [
        r#"evidence = { from = "any" }"#,
        r#"evidence = { from = "referenced", origins = ["https://billing.internal"] }"#,
    ] {
        let set = PolicySet::from_sources(&[("a.toml", &policy(evidence))]).unwrap();
        assert!(
            set.warnings().is_empty(),
            "{evidence}: {:?}",
            set.warnings()
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
