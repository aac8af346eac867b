//! The corpus of tests/differential.rs: requests that try to reach a gated
//! handler of a lenient upstream without verdict deciding on what the
//! upstream will act on. Each entry is the exact bytes sent on one fresh
//! connection, with an id (`C1-007`) that the request also carries in an
//! `X-Corpus-Id` header, so the upstream's log names the entry it came from.
//! A pipelined or smuggled second request carries `<id>.2`.
//!
//! Classes (the letters are the outside tester's):
//! - `P`  controls: must behave (an allowed refund reaches the handler).
//! - `C1` path spellings that lenient routers send to the refund handler.
//! - `C2` spellings of `amount` that a friendly coercion reads as 6000.
//! - `D3` content types under which a JSON body is read as a form.
//! - `D4` duplicate and case-variant keys.
//! - `D5` method overrides and method spellings against the DELETE route.
//! - `S`  request framing: CL/TE, duplicated lengths, obs-fold, absolute
//!   form, pipelining.
//! - `X`  spoofed `X-Verdict-*` headers.

/// A justification that supports a refund of $100 on order 1001 under the
/// shipped policy (strict, citations required): with `"amount": 100` the
/// shipped policy allows the call.
pub const JUSTIFICATION_100: &str = r#"{"claims":[{"text":"Order 1001 was charged $100.00.","citations":[{"source_id":"inv-1001"}]},{"text":"The package was damaged in transit.","citations":[{"source_id":"inv-1001"}]}],"evidence":[{"source_id":"inv-1001","text":"Invoice INV-1001 for order 1001: Vitamix blender, amount charged $100.00. Courier note: package damaged in transit."}]}"#;

/// The same claims, saying $6000: unsupported by the evidence.
const CLAIMS_6000: &str =
    r#"[{"text":"Order 1001 was charged $6000.00.","citations":[{"source_id":"inv-1001"}]}]"#;
const CLAIMS_100: &str = r#"[{"text":"Order 1001 was charged $100.00.","citations":[{"source_id":"inv-1001"}]},{"text":"The package was damaged in transit.","citations":[{"source_id":"inv-1001"}]}]"#;
const EVIDENCE_100: &str = r#"[{"source_id":"inv-1001","text":"Invoice INV-1001 for order 1001: Vitamix blender, amount charged $100.00. Courier note: package damaged in transit."}]"#;

pub const REFUND: &str = "/api/orders/1001/refunds";
pub const ORDER: &str = "/api/orders/1001";

/// A refund body with `amount` spelled as `amount_json` and the $100
/// justification: verdict allows it exactly when it reads an amount <= 500.
pub fn refund_body(amount_json: &str) -> String {
    format!(r#"{{"amount":{amount_json},"currency":"USD","justification":{JUSTIFICATION_100}}}"#)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Control,
    Path,
    Number,
    ContentType,
    DuplicateKey,
    MethodOverride,
    Framing,
    Spoof,
}

impl Class {
    pub const ALL: [Class; 8] = [
        Class::Control,
        Class::Path,
        Class::Number,
        Class::ContentType,
        Class::DuplicateKey,
        Class::MethodOverride,
        Class::Framing,
        Class::Spoof,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Class::Control => "P",
            Class::Path => "C1",
            Class::Number => "C2",
            Class::ContentType => "D3",
            Class::DuplicateKey => "D4",
            Class::MethodOverride => "D5",
            Class::Framing => "S",
            Class::Spoof => "X",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Class::Control => "controls",
            Class::Path => "path spellings",
            Class::Number => "numeric spellings of amount",
            Class::ContentType => "non-JSON content types",
            Class::DuplicateKey => "duplicate / case-variant keys",
            Class::MethodOverride => "method overrides / spellings",
            Class::Framing => "request framing",
            Class::Spoof => "spoofed x-verdict headers",
        }
    }
}

pub struct Entry {
    pub id: String,
    pub class: Class,
    /// One line for the report.
    pub summary: String,
    /// What goes on the wire, as is.
    pub bytes: Vec<u8>,
}

/// A request with ordinary framing: `Host`, `X-Corpus-Id`, `Connection:
/// close`, the given headers, then `Content-Length` unless it is a GET
/// without a body.
fn http(id: &str, method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: shop.example\r\nX-Corpus-Id: {id}\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

const JSON: (&str, &str) = ("Content-Type", "application/json");
const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// One chunk and the last chunk.
fn chunked(body: &str) -> String {
    format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len())
}

#[derive(Default)]
struct Builder {
    entries: Vec<Entry>,
}

impl Builder {
    fn next_id(&self, class: Class) -> String {
        let n = self.entries.iter().filter(|e| e.class == class).count() + 1;
        format!("{}-{n:03}", class.code())
    }

    /// Adds an entry whose bytes `build` makes from its id.
    fn raw(
        &mut self,
        class: Class,
        summary: impl Into<String>,
        build: impl FnOnce(&str) -> Vec<u8>,
    ) {
        let id = self.next_id(class);
        let bytes = build(&id);
        self.entries.push(Entry {
            id,
            class,
            summary: summary.into(),
            bytes,
        });
    }

    /// Adds an ordinarily framed request.
    fn req(
        &mut self,
        class: Class,
        summary: impl Into<String>,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) {
        self.raw(class, summary, |id| http(id, method, target, headers, body));
    }
}

/// Path spellings of `POST /api/orders/1001/refunds` (C1). Lenient routers
/// (the test's upstreams) send every one of them to the refund handler; some
/// are matched by verdict as well, which is fine as long as it decides.
pub const REFUND_SPELLINGS: &[&str] = &[
    r"/api\orders\1001\refunds",
    r"/api/orders/1001\refunds",
    "/api/orders/1001/refunds;jsessionid=abc",
    "/api/orders/1001/refunds;",
    "/api;x=1/orders/1001/refunds",
    "/api/orders/1001;v=2/refunds",
    "/api/x/..;/orders/1001/refunds",
    "/api%5Corders%5C1001%5Crefunds",
    "/api/orders/1001%5Crefunds",
    "/api/orders/1001/refunds.",
    "/api/orders/1001/refunds..",
    "/api/orders/1001/refunds%2e",
    "/api/orders/1001/refunds%20",
    "/api/orders/1001/refunds.json",
    "/api/orders/1001/REFUNDS.JSON",
    "/api/orders/1001/refunds%2Ejson",
    "/api/orders/1001/refunds.xml",
    "/api/orders/1001/%72efunds",
    "/api/orders/1001/%2572efunds",
    "/api/orders/1001/ref%75nds",
    "/%61pi/orders/1001/refunds",
    "/api/%6Frders/1001/refunds",
    "/api//orders/1001/refunds",
    "//api/orders/1001/refunds",
    "/api/orders//1001/refunds",
    "/api/orders/1001//refunds",
    "/api/orders/1001/refunds/",
    "/API/Orders/1001/REFUNDS",
    "/api/orders/1001/Refunds",
    "/api%2Forders%2F1001%2Frefunds",
    "/api/orders/1001%2Frefunds",
    "/api%252Forders%252F1001%252Frefunds",
    "/api/./orders/1001/refunds",
    "/./api/orders/1001/refunds",
    "/api/orders/x/../1001/refunds",
    "/api/x/%2e%2e/orders/1001/refunds",
    "/api/orders/1001/refunds/.",
    "/api/orders/1001/refunds%00",
    "/api/orders/1001/ref%00unds",
    "/api/orders/1001/refunds%09",
    "/api/orders/1001/refunds%0d%0a",
    "/api/orders/1001/refunds%3Bx=1",
    "/api/orders/1001/%EF%BD%92efunds",
    "/api/orders/%31%30%30%31/refunds",
    "/api/orders/1001/refunds?x=1",
    "/api/orders/1001/refunds#frag",
];

/// A body for the C1 spellings: label, content type, bytes.
struct C1Body {
    label: &'static str,
    content_type: (&'static str, &'static str),
    body: String,
}

/// The bodies each C1 spelling is sent with.
fn c1_bodies() -> Vec<C1Body> {
    let body = |label, content_type, body: &str| C1Body {
        label,
        content_type,
        body: body.to_string(),
    };
    vec![
        body("json 6000 + $100 claims", JSON, &refund_body("6000")),
        body("json {amount:6000}", JSON, r#"{"amount":6000}"#),
        body("form amount=6000", FORM, "amount=6000&currency=USD"),
    ]
}

/// Path spellings of `DELETE /api/orders/1001`.
const ORDER_SPELLINGS: &[&str] = &[
    "/API/ORDERS/1001",
    "/api/orders/1001/",
    "/api/orders/1001;x=1",
    "/api/orders/1001.json",
    "/api//orders/1001",
    r"/api\orders\1001",
    "/api/orders/%31001",
    "/api/orders/1001%20",
    "/api/x/../orders/1001",
];

/// The whole corpus, in a fixed order.
pub fn build() -> Vec<Entry> {
    let mut b = Builder::default();
    controls(&mut b);
    paths(&mut b);
    numbers(&mut b);
    content_types(&mut b);
    duplicate_keys(&mut b);
    method_overrides(&mut b);
    framing(&mut b);
    spoofs(&mut b);
    b.entries
}

fn controls(b: &mut Builder) {
    let c = Class::Control;
    // P-001 must be allowed and reach the refund handler with amount 100.
    b.req(
        c,
        "POST refund 100, supported claims (allowed)",
        "POST",
        REFUND,
        &[JSON],
        &refund_body("100"),
    );
    // P-002 must pass through to the catch-all.
    b.req(
        c,
        "GET order (unmatched, passes through)",
        "GET",
        ORDER,
        &[],
        "",
    );
    b.req(
        c,
        "POST refund 6000 (denied)",
        "POST",
        REFUND,
        &[JSON],
        &refund_body("6000"),
    );
    b.req(c, "DELETE order (denied)", "DELETE", ORDER, &[], "");
    b.req(
        c,
        "POST refund 100, application/json; charset=utf-8 (allowed)",
        "POST",
        REFUND,
        &[("Content-Type", "application/json; charset=utf-8")],
        &refund_body("100"),
    );
}

fn paths(b: &mut Builder) {
    for target in REFUND_SPELLINGS {
        for b1 in c1_bodies() {
            let summary = format!("POST {target} [{}]", b1.label);
            b.req(
                Class::Path,
                summary,
                "POST",
                target,
                &[b1.content_type],
                &b1.body,
            );
        }
    }
    // A raw tab inside the request target (most parsers refuse it).
    b.raw(
        Class::Path,
        "POST /api/orders/1001/re<TAB>funds (raw tab)",
        |id| {
            http(
                id,
                "POST",
                "/api/orders/1001/re\tfunds",
                &[JSON],
                &refund_body("6000"),
            )
        },
    );
    for target in ORDER_SPELLINGS {
        b.req(
            Class::Path,
            format!("DELETE {target}"),
            "DELETE",
            target,
            &[],
            "",
        );
    }
}

/// Spellings of `amount` (C2), each in a body whose claims support $100.
pub const AMOUNT_SPELLINGS: &[&str] = &[
    r#""6_000""#,
    r#""0x1770""#,
    "[6000]",
    r#""６０００""#,
    r#""$6000""#,
    r#""Infinity""#,
    r#""6000""#,
    "6e3",
    "6E3",
    "60e2",
    "6000.0",
    r#""6,000""#,
    r#"" 6000 ""#,
    r#""\t6000\n""#,
    "true",
    r#"{"value":6000}"#,
    r#"{"amount":6000}"#,
    r#"["6000"]"#,
    "[100,6000]",
    r#""6e3""#,
    r#""+6000""#,
    r#""06000""#,
    r#""6000abc""#,
    r#""0o13560""#,
    r#""0b1011101110000""#,
    r#""6000.0""#,
    r#""\u0036000""#,
    r#""٦٠٠٠""#,
    "1e999",
    "null",
    "-1",
    "0",
];

fn numbers(b: &mut Builder) {
    for amount in AMOUNT_SPELLINGS {
        b.req(
            Class::Number,
            format!("POST refund amount={amount}, $100 claims"),
            "POST",
            REFUND,
            &[JSON],
            &refund_body(amount),
        );
    }
}

/// Content types (D3) for a body that is valid JSON (amount 100, $100
/// claims) and, read as a form, says `amount=6000`. `[]`: no header; two
/// values: two headers.
const CONTENT_TYPES: &[&[&str]] = &[
    &["application/x-www-form-urlencoded"],
    &["application/x-www-form-urlencoded; charset=utf-8"],
    &["APPLICATION/X-WWW-FORM-URLENCODED"],
    &["text/plain"],
    &["text/plain; charset=utf-8"],
    &["multipart/form-data; boundary=xyz"],
    &[],
    &["application/json", "application/x-www-form-urlencoded"],
    &["application/x-www-form-urlencoded", "application/json"],
    &["application/json, application/x-www-form-urlencoded"],
    &["application/x-www-form-urlencoded, application/json"],
    &["application/json; x=application/x-www-form-urlencoded"],
    &["application/octet-stream"],
    &[""],
];

/// The `Content-Type` headers of one row of [`CONTENT_TYPES`], and its label.
fn content_type_headers(cts: &[&'static str]) -> (Vec<(&'static str, &'static str)>, String) {
    let headers = cts.iter().map(|v| ("Content-Type", *v)).collect();
    let label = match cts.len() {
        0 => "no content-type".to_string(),
        _ => cts
            .iter()
            .map(|v| format!("CT: {v}"))
            .collect::<Vec<_>>()
            .join(" + "),
    };
    (headers, label)
}

fn content_types(b: &mut Builder) {
    let json_body = format!(
        r#"{{"amount":100,"currency":"USD","x":"&amount=6000&","justification":{JUSTIFICATION_100}}}"#
    );
    for cts in CONTENT_TYPES {
        let (headers, label) = content_type_headers(cts);
        let c = Class::ContentType;
        b.req(
            c,
            format!("POST refund JSON 100 + \"&amount=6000&\" [{label}]"),
            "POST",
            REFUND,
            &headers,
            &json_body,
        );
        b.req(
            c,
            format!("POST refund form amount=6000 [{label}]"),
            "POST",
            REFUND,
            &headers,
            "amount=6000&currency=USD",
        );
    }
}

fn duplicate_keys(b: &mut Builder) {
    let c = Class::DuplicateKey;
    let just = JUSTIFICATION_100;
    let bodies: Vec<(&str, String)> = vec![
        (
            "amount 100, AMOUNT 6000",
            format!(r#"{{"amount":100,"AMOUNT":6000,"justification":{just}}}"#),
        ),
        (
            "amount 100, amount 6000",
            format!(r#"{{"amount":100,"amount":6000,"justification":{just}}}"#),
        ),
        (
            "amount 6000, amount 100",
            format!(r#"{{"amount":6000,"amount":100,"justification":{just}}}"#),
        ),
        (
            "Amount 6000 only",
            format!(r#"{{"Amount":6000,"justification":{just}}}"#),
        ),
        (
            "amount 100, Amount 6000",
            format!(r#"{{"amount":100,"Amount":6000,"justification":{just}}}"#),
        ),
        (
            "AMOUNT 6000, amount 100",
            format!(r#"{{"AMOUNT":6000,"amount":100,"justification":{just}}}"#),
        ),
        (
            "amount 100, aMoUnT 6000",
            format!(r#"{{"amount":100,"aMoUnT":6000,"justification":{just}}}"#),
        ),
        (
            "amount 100, \"am\\u006fUNT\" 6000",
            format!(r#"{{"amount":100,"am\u006fUNT":6000,"justification":{just}}}"#),
        ),
        (
            "amount 6000, AMOUNT 6000",
            format!(r#"{{"amount":6000,"AMOUNT":6000,"justification":{just}}}"#),
        ),
        (
            "amount 100, \" amount\" 6000",
            format!(r#"{{"amount":100," amount":6000,"justification":{just}}}"#),
        ),
        (
            "amount 100, \"\\u0061mount\" 6000",
            format!(r#"{{"amount":100,"\u0061mount":6000,"justification":{just}}}"#),
        ),
        (
            "\"\\u0061mount\" 6000, amount 100",
            format!(r#"{{"\u0061mount":6000,"amount":100,"justification":{just}}}"#),
        ),
        (
            "justification.claims twice ($6000 first, $100 last)",
            format!(
                r#"{{"amount":100,"justification":{{"claims":{CLAIMS_6000},"evidence":{EVIDENCE_100},"claims":{CLAIMS_100}}}}}"#
            ),
        ),
        (
            "justification.claims twice ($100 first, $6000 last)",
            format!(
                r#"{{"amount":100,"justification":{{"claims":{CLAIMS_100},"evidence":{EVIDENCE_100},"claims":{CLAIMS_6000}}}}}"#
            ),
        ),
        (
            "justification.claims twice ([] first)",
            format!(
                r#"{{"amount":100,"justification":{{"claims":[],"claims":{CLAIMS_100},"evidence":{EVIDENCE_100}}}}}"#
            ),
        ),
        (
            "justification.evidence twice",
            format!(
                r#"{{"amount":100,"justification":{{"claims":{CLAIMS_100},"evidence":[],"evidence":{EVIDENCE_100}}}}}"#
            ),
        ),
        (
            "justification twice",
            format!(
                r#"{{"amount":100,"justification":{{"claims":{CLAIMS_6000}}},"justification":{just}}}"#
            ),
        ),
        (
            "justification + JUSTIFICATION",
            format!(
                r#"{{"amount":100,"JUSTIFICATION":{{"claims":{CLAIMS_6000}}},"justification":{just}}}"#
            ),
        ),
        (
            "claim object with text twice",
            format!(
                r#"{{"amount":100,"justification":{{"claims":[{{"text":"Order 1001 was charged $6000.00.","text":"Order 1001 was charged $100.00.","citations":[{{"source_id":"inv-1001"}}]}}],"evidence":{EVIDENCE_100}}}}}"#
            ),
        ),
        (
            "currency USD, currency JPY",
            format!(r#"{{"amount":100,"currency":"USD","currency":"JPY","justification":{just}}}"#),
        ),
    ];
    for (label, body) in bodies {
        b.req(
            c,
            format!("POST refund {label}"),
            "POST",
            REFUND,
            &[JSON],
            &body,
        );
    }
}

fn method_overrides(b: &mut Builder) {
    let c = Class::MethodOverride;
    for h in [
        "X-HTTP-Method-Override",
        "X-HTTP-Method",
        "X-Method-Override",
    ] {
        b.req(
            c,
            format!("POST {ORDER} + {h}: DELETE"),
            "POST",
            ORDER,
            &[(h, "DELETE")],
            "",
        );
        b.req(
            c,
            format!("POST {ORDER} + {h}: delete"),
            "POST",
            ORDER,
            &[(h, "delete")],
            "",
        );
        for target in ["/API/Orders/1001", "/api//orders/1001", "/api/orders/1001/"] {
            b.req(
                c,
                format!("POST {target} + {h}: DELETE"),
                "POST",
                target,
                &[(h, "DELETE")],
                "",
            );
        }
    }
    for target in [
        "/api/orders/1001?_method=DELETE",
        "/api/orders/1001?_method=delete",
        "/api/orders/1001/?_method=DELETE",
        "/api//orders/1001?_method=DELETE",
        "/api/orders/1001?x=1&_method=DELETE",
    ] {
        b.req(c, format!("POST {target}"), "POST", target, &[], "");
    }
    b.req(
        c,
        "POST order, form _method=DELETE",
        "POST",
        ORDER,
        &[FORM],
        "_method=DELETE",
    );
    b.req(
        c,
        "POST order, form x=1&_method=DELETE",
        "POST",
        ORDER,
        &[FORM],
        "x=1&_method=DELETE",
    );
    b.req(
        c,
        "POST /API/orders/1001, form _method=DELETE",
        "POST",
        "/API/orders/1001",
        &[FORM],
        "_method=DELETE",
    );
    b.req(
        c,
        "POST order, JSON {\"_method\":\"DELETE\"}",
        "POST",
        ORDER,
        &[JSON],
        r#"{"_method":"DELETE"}"#,
    );
    b.req(
        c,
        "POST order + X-HTTP-Method-Override: DELETE, JSON body",
        "POST",
        ORDER,
        &[JSON, ("X-HTTP-Method-Override", "DELETE")],
        r#"{"reason":"x"}"#,
    );
    // The media-type column: a JSON `_method` under every Content-Type of
    // the content-type class, for an upstream that parses JSON whatever
    // the media type says (the FastAPI app does, as Flask's
    // `get_json(force=True)` would).
    for cts in CONTENT_TYPES {
        let (headers, label) = content_type_headers(cts);
        b.req(
            c,
            format!("POST order, JSON {{\"_method\":\"DELETE\"}} [{label}]"),
            "POST",
            ORDER,
            &headers,
            r#"{"_method":"DELETE","reason":"x"}"#,
        );
    }
    // Middlewares only honour overrides on POST: these should not leak.
    b.req(
        c,
        "GET order + X-HTTP-Method-Override: DELETE",
        "GET",
        ORDER,
        &[("X-HTTP-Method-Override", "DELETE")],
        "",
    );
    b.req(
        c,
        "PUT order + X-HTTP-Method-Override: DELETE",
        "PUT",
        ORDER,
        &[("X-HTTP-Method-Override", "DELETE")],
        "",
    );
    // Method spellings.
    b.req(c, "delete (lowercase) order", "delete", ORDER, &[], "");
    b.req(c, "Delete order", "Delete", ORDER, &[], "");
    b.req(
        c,
        "post (lowercase) refund 6000",
        "post",
        REFUND,
        &[JSON],
        &refund_body("6000"),
    );
    // Overrides on the gated refund route itself.
    b.req(
        c,
        "POST refund 6000 + X-HTTP-Method-Override: PUT",
        "POST",
        REFUND,
        &[JSON, ("X-HTTP-Method-Override", "PUT")],
        &refund_body("6000"),
    );
    b.req(
        c,
        "PUT refund 6000 + X-HTTP-Method-Override: POST",
        "PUT",
        REFUND,
        &[JSON, ("X-HTTP-Method-Override", "POST")],
        &refund_body("6000"),
    );
}

fn framing(b: &mut Builder) {
    let c = Class::Framing;
    let deny = refund_body("6000");
    let allow = refund_body("100");
    let head = |id: &str, target: &str| {
        format!("POST {target} HTTP/1.1\r\nHost: shop.example\r\nX-Corpus-Id: {id}\r\nContent-Type: application/json\r\n")
    };
    // A second request, pipelined or smuggled after the first.
    let inner = |id: &str| {
        String::from_utf8(http(&format!("{id}.2"), "POST", REFUND, &[JSON], &deny)).expect("ASCII")
    };

    b.raw(c, "CL + TE: chunked, one chunk of refund 6000", |id| {
        let body = chunked(&deny);
        format!(
            "{}Connection: close\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
            head(id, REFUND)
        )
        .into_bytes()
    });
    b.raw(
        c,
        "CL.TE smuggle: chunked refund 100, then POST refund 6000 inside CL",
        |id| {
            let body = format!("{}{}", chunked(&allow), inner(id));
            format!(
                "{}Content-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
                head(id, REFUND),
                body.len()
            )
            .into_bytes()
        },
    );
    b.raw(c, "TE.CL smuggle: TE first, CL = refund 100 only", |id| {
        let body = format!("{}{}", chunked(&allow), inner(id));
        format!(
            "{}Transfer-Encoding: chunked\r\nContent-Length: {}\r\n\r\n{body}",
            head(id, REFUND),
            allow.len()
        )
        .into_bytes()
    });
    b.raw(
        c,
        "two Content-Length (100-body length, whole length)",
        |id| {
            let body = format!("{allow}{}", inner(id));
            format!(
                "{}Content-Length: {}\r\nContent-Length: {}\r\n\r\n{body}",
                head(id, REFUND),
                allow.len(),
                body.len()
            )
            .into_bytes()
        },
    );
    b.raw(c, "two Content-Length (0, then the length)", |id| {
        format!(
            "{}Connection: close\r\nContent-Length: 0\r\nContent-Length: {}\r\n\r\n{deny}",
            head(id, REFUND),
            deny.len()
        )
        .into_bytes()
    });
    b.raw(c, "two equal Content-Length", |id| {
        let n = deny.len();
        format!(
            "{}Connection: close\r\nContent-Length: {n}\r\nContent-Length: {n}\r\n\r\n{deny}",
            head(id, REFUND)
        )
        .into_bytes()
    });
    b.raw(c, "Content-Length: N, N", |id| {
        let n = deny.len();
        format!(
            "{}Connection: close\r\nContent-Length: {n}, {n}\r\n\r\n{deny}",
            head(id, REFUND)
        )
        .into_bytes()
    });
    b.raw(c, "Content-Length: +N", |id| {
        format!(
            "{}Connection: close\r\nContent-Length: +{}\r\n\r\n{deny}",
            head(id, REFUND),
            deny.len()
        )
        .into_bytes()
    });
    for te in [
        "chunked, identity",
        "identity, chunked",
        "xchunked",
        "CHUNKED",
        " chunked",
        "chunked\t",
        "gzip, chunked",
    ] {
        b.raw(c, format!("Transfer-Encoding: {te:?} + CL"), |id| {
            let body = chunked(&deny);
            format!(
                "{}Connection: close\r\nTransfer-Encoding: {te}\r\nContent-Length: {}\r\n\r\n{body}",
                head(id, REFUND),
                body.len()
            )
            .into_bytes()
        });
    }
    b.raw(c, "Transfer-Encoding<SP>: chunked (space before colon)", |id| {
        let body = chunked(&deny);
        format!("{}Connection: close\r\nTransfer-Encoding : chunked\r\nContent-Length: {}\r\n\r\n{body}", head(id, REFUND), body.len())
            .into_bytes()
    });
    b.raw(c, "Content-Length<SP>: N (space before colon)", |id| {
        format!(
            "{}Connection: close\r\nContent-Length : {}\r\n\r\n{deny}",
            head(id, REFUND),
            deny.len()
        )
        .into_bytes()
    });
    b.raw(c, "obs-fold on a custom header", |id| {
        format!(
            "{}Connection: close\r\nX-Note: a\r\n b\r\nContent-Length: {}\r\n\r\n{deny}",
            head(id, REFUND),
            deny.len()
        )
        .into_bytes()
    });
    b.raw(c, "obs-fold on Transfer-Encoding", |id| {
        let body = chunked(&deny);
        format!(
            "{}Connection: close\r\nTransfer-Encoding: identity\r\n chunked\r\nContent-Length: {}\r\n\r\n{body}",
            head(id, REFUND),
            body.len()
        )
        .into_bytes()
    });
    b.raw(c, "obs-fold on Host", |id| {
        format!(
            "POST {REFUND} HTTP/1.1\r\nHost: shop.example\r\n /x\r\nX-Corpus-Id: {id}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{deny}",
            deny.len()
        )
        .into_bytes()
    });
    // Smuggling behind an UNGATED request (POST /api/orders/1001 is not a
    // route): if verdict and the upstream framed differently, the inner
    // refund would reach the upstream without being decided.
    b.raw(c, "ungated POST order, CL + TE, refund 6000 smuggled after 0-chunk", |id| {
        format!("POST {ORDER} HTTP/1.1\r\nHost: x\r\nX-Corpus-Id: {id}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{}", inner(id))
            .into_bytes()
    });
    b.raw(c, "ungated POST order, TE + CL 3, refund 6000 smuggled", |id| {
        format!("POST {ORDER} HTTP/1.1\r\nHost: x\r\nX-Corpus-Id: {id}\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n{}", inner(id))
            .into_bytes()
    });
    b.raw(c, "ungated POST order, CL 0 + CL whole, refund 6000 inside", |id| {
        let i = inner(id);
        format!("POST {ORDER} HTTP/1.1\r\nHost: x\r\nX-Corpus-Id: {id}\r\nContent-Length: 0\r\nContent-Length: {}\r\n\r\n{i}", i.len())
            .into_bytes()
    });
    b.raw(c, "ungated POST order, TE chunked, identity, refund 6000 smuggled", |id| {
        format!("POST {ORDER} HTTP/1.1\r\nHost: x\r\nX-Corpus-Id: {id}\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{}", inner(id))
            .into_bytes()
    });
    b.raw(c, "ungated POST order, obs-fold, refund 6000 after", |id| {
        format!("POST {ORDER} HTTP/1.1\r\nHost: x\r\nX-Corpus-Id: {id}\r\nContent-Length: 0\r\nX-A: b\r\n c\r\n\r\n{}", inner(id)).into_bytes()
    });
    for target in [
        "http://x/api/orders/1001/refunds",
        "http://x/api/orders/1001/Refunds",
        "https://evil.example:443/api/orders/1001/refunds",
        r"http://x/api\orders\1001\refunds",
        "http://x/api/orders/1001/refunds.json",
    ] {
        b.raw(c, format!("absolute-form POST {target}"), |id| {
            http(id, "POST", target, &[JSON], &deny)
        });
    }
    b.raw(
        c,
        "pipelined: GET order (keep-alive), then POST refund 6000",
        |id| {
            let mut out =
                format!("GET {ORDER} HTTP/1.1\r\nHost: shop.example\r\nX-Corpus-Id: {id}\r\n\r\n")
                    .into_bytes();
            out.extend(inner(id).into_bytes());
            out
        },
    );
    b.raw(
        c,
        "pipelined: refund 100 (keep-alive), then refund 6000",
        |id| {
            let mut out = format!(
                "{}Content-Length: {}\r\n\r\n{allow}",
                head(id, REFUND),
                allow.len()
            )
            .into_bytes();
            out.extend(inner(id).into_bytes());
            out
        },
    );
    b.raw(c, "HTTP/1.0, no Host, refund 6000", |id| {
        format!(
            "POST {REFUND} HTTP/1.0\r\nX-Corpus-Id: {id}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{deny}",
            deny.len()
        )
        .into_bytes()
    });
    b.raw(c, "chunk extension", |id| {
        let body = format!("{:x};ext=\"1\"\r\n{deny}\r\n0\r\n\r\n", deny.len());
        format!(
            "{}Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
            head(id, REFUND)
        )
        .into_bytes()
    });
    b.raw(c, "chunked refund 100 with trailers Content-Type: form, Amount: 6000", |id| {
        let body = format!(
            "{:x}\r\n{allow}\r\n0\r\nContent-Type: application/x-www-form-urlencoded\r\nAmount: 6000\r\n\r\n",
            allow.len()
        );
        format!("{}Connection: close\r\nTrailer: Content-Type, Amount\r\nTransfer-Encoding: chunked\r\n\r\n{body}", head(id, REFUND))
            .into_bytes()
    });
    b.raw(c, "bare LF line endings", |id| {
        format!(
            "POST {REFUND} HTTP/1.1\nHost: shop.example\nX-Corpus-Id: {id}\nContent-Type: application/json\nConnection: close\nContent-Length: {}\n\n{deny}",
            deny.len()
        )
        .into_bytes()
    });
    b.raw(c, "Expect: 100-continue", |id| {
        format!(
            "{}Connection: close\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n{deny}",
            head(id, REFUND),
            deny.len()
        )
        .into_bytes()
    });
    b.raw(c, "two spaces after the method", |id| {
        let mut out = http(id, "POST", REFUND, &[JSON], &deny);
        out.splice(0..4, b"POST ".iter().copied());
        out
    });
    b.raw(c, "huge chunk size", |id| {
        let body = format!("ffffffffffffffffff\r\n{deny}\r\n0\r\n\r\n");
        format!(
            "{}Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
            head(id, REFUND)
        )
        .into_bytes()
    });
}

fn spoofs(b: &mut Builder) {
    let c = Class::Spoof;
    let fake = (
        "X-Verdict-Record-Id",
        "00000000-0000-7000-8000-000000000000",
    );
    let spoof = [JSON, ("X-Verdict-Decision", "allow"), fake];
    b.req(
        c,
        "POST refund 6000 + spoofed X-Verdict-Decision: allow",
        "POST",
        REFUND,
        &spoof,
        &refund_body("6000"),
    );
    b.req(
        c,
        "POST /api/orders/1001/Refunds 6000 + spoofed X-Verdict-Decision: allow",
        "POST",
        "/api/orders/1001/Refunds",
        &spoof,
        &refund_body("6000"),
    );
    b.req(
        c,
        "POST order + override DELETE + spoofed X-Verdict-Decision: allow",
        "POST",
        ORDER,
        &[
            ("X-HTTP-Method-Override", "DELETE"),
            ("X-Verdict-Decision", "allow"),
            fake,
        ],
        "",
    );
    // Naming verdict's own header as hop-by-hop must not strip the real one.
    b.raw(c, "refund 100 with Connection: close, X-Verdict-Decision", |id| {
        let body = refund_body("100");
        format!(
            "POST {REFUND} HTTP/1.1\r\nHost: shop.example\r\nX-Corpus-Id: {id}\r\nContent-Type: application/json\r\nConnection: close, X-Verdict-Decision, X-Verdict-Record-Id\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
}
