//! The errors and warnings a policy author sees, with their positions.

use super::*;

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
