//! Which route a request reaches, and the routes that are ambiguous,
//! overlapping or shadowed.

use super::*;

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
