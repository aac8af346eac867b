//! Properties over generated input: the same answer every time and in any
//! source order, citation offsets that reproduce their quotes, and no panic
//! on odd input.

use super::*;

#[test]
fn deterministic() {
    let (claims, sources) = sample();
    let p = Params::default();
    let first = verify(&claims, &sources, &p);
    for _ in 0..5 {
        assert_eq!(verify(&claims, &sources, &p), first);
    }
}

#[test]
fn source_order_does_not_matter() {
    let (claims, sources) = sample();
    let p = Params::default();
    let base = verify(&claims, &sources, &p);
    let n = sources.len();
    // Every rotation plus every reversal of it.
    for r in 0..n {
        for rev in [false, true] {
            let mut s = sources.clone();
            s.rotate_left(r);
            if rev {
                s.reverse();
            }
            let got = verify(&claims, &s, &p);
            assert_eq!(got, base, "rotation {r} reversed {rev}");
        }
    }
}

#[test]
fn no_panics_on_odd_input() {
    let odd = [
        "",
        " ",
        "\u{0}",
        "....",
        "$",
        "$$$1",
        "1,,,000",
        "99999999999999999999999999999999999999 %",
        "Ünïcödé 🎉 日本語 العربية e\u{301}",
        "\r\n\r\n- \n1. \n#",
        "nonnonnon n't 'n't",
        "March May June 31 February 2024-13-45",
    ];
    let p = Params::default();
    for a in odd {
        for b in odd {
            let v = verify(&[claim("c", a)], &[src("s", b)], &p);
            assert_eq!(v.len(), 1);
            let _ = extract_claims(a, &[src("s", b)]);
        }
    }
    // Hostile shapes that would be quadratic with naive rescans; each must
    // finish quickly (this test would time out otherwise).
    for hostile in [
        "a.".repeat(100_000),
        "\n".repeat(200_000),
        "[".repeat(200_000),
        "](".repeat(100_000),
        " .".repeat(100_000),
        "(passage ".repeat(20_000),
        "\"Word ".repeat(20_000),
    ] {
        let v = verify(&[claim("c", &hostile)], &[src("s", &hostile)], &p);
        assert_eq!(v.len(), 1);
        let _ = extract_claims(&hostile, &[]);
    }
    let huge = "Refunds are available within 30 days. ".repeat(5000);
    let v = verify(
        &[claim("c", "Refunds are available within 30 days.")],
        &[src("s", &huge)],
        &p,
    );
    assert_eq!(v[0].status, ClaimStatus::Supported);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn citation_offsets_reproduce_quotes(
        before in "[a-z \u{1F389}\u{65E5}\u{672C}e\u{301}\r\n.]{0,40}",
        core in "[a-z\u{1F600}\u{4E2D}\u{0301}]{1,6}( [a-z\u{1F600}\u{4E2D}]{1,6}){2,5}",
        after in "[a-z \u{1F389}\r\n.]{0,40}",
    ) {
        let body = format!("{before}\r\n{core}.\r\n{after}");
        let sources = [src("s", &body)];
        let mut c = claim("c", &core);
        c.citations = vec![CallerCitation { source_id: "s".into(), quote: Some(core.clone()) }];
        let v = verify(&[c, claim("d", &core)], &sources, &Params { min_coverage: 0.0, review_floor: 0.0, evidence_limit: 5, ..Params::default() });
        for check in &v {
            for cit in &check.citations {
                prop_assert_eq!(py_slice(&body, cit.start, cit.end), cit.quote.clone());
            }
        }
        prop_assert!(!v[0].citations.is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary Unicode never panics, and every citation still reproduces
    /// its quote.
    #[test]
    fn arbitrary_text_never_panics(
        claim_text in "\\PC{0,80}",
        body in "(\\PC|[\\r\\n .,$%0-9])*",
        answer in "(\\PC|[\\r\\n\\[\\]()#*:-])*",
    ) {
        let sources = [src("s", &body)];
        let v = verify(&[claim("c", &claim_text)], &sources, &Params::default());
        prop_assert_eq!(v.len(), 1);
        prop_assert!((0.0..=1.0).contains(&v[0].coverage));
        for cit in &v[0].citations {
            prop_assert_eq!(py_slice(&body, cit.start, cit.end), cit.quote.clone());
        }
        let claims = extract_claims(&answer, &sources);
        let _ = verify(&claims, &sources, &Params::default());
    }
}
