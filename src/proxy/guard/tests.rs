//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

use super::*;
use serde_json::json;

#[test]
fn paths_an_upstream_reads_differently_are_refused() {
    for bad in [
        "/api\\orders\\1\\refunds",
        "/api/orders/1/refunds;jsessionid=abc",
        "/api;x=1/orders/1/refunds",
        "/api/x/..;/orders/1/refunds",
        "/api%5Corders%5C1%5Crefunds",
        "/api/orders/1/refunds%3bx",
        "/api/orders/1/refunds.",
        "/api/orders/1/refunds%20",
        "/api/orders/1/refunds%09",
        "/api/orders/1%00/refunds",
        "/api/orders%2F1/refunds",
        "/api/orders/1/%2572efunds",
        "/api/orders/1/%FF",
        "/api/%20orders/1/refunds",
    ] {
        assert!(path_problem(bad).is_some(), "{bad}");
    }
    for good in [
        "/",
        "/api/orders/1/refunds",
        "/api/orders/1/%72efunds",
        "/api/orders/1/refunds.json",
        "/api//orders/./1/../1/refunds/",
        "/api/orders/caf%C3%A9",
        "/a%20b/c",
        "/100%25",
    ] {
        assert_eq!(path_problem(good), None, "{good}");
    }
}

#[test]
fn method_overrides_are_found() {
    let mut h = HeaderMap::new();
    assert_eq!(override_method(&h, Some("a=1")), Ok(None));
    for (query, want) in [
        ("a=1&_method=delete", "DELETE"),
        ("%5Fmethod=PUT", "PUT"),
        ("_METHOD=PUT", "PUT"),
        ("a=1;%20_method=PATCH", "PATCH"),
    ] {
        assert_eq!(
            override_method(&h, Some(query)),
            Ok(Some(want.into())),
            "{query}"
        );
    }
    h.insert("x-http-method-override", "DELETE".parse().unwrap());
    assert_eq!(override_method(&h, None), Ok(Some("DELETE".into())));
    h.insert("x-method-override", "PATCH".parse().unwrap());
    assert!(override_method(&h, None).is_err());
}

#[test]
fn bodies_that_ask_for_another_method() {
    let json = |b: &str| body_method_override("application/json", b.as_bytes(), None);
    for bad in [
        r#"{"_method":"DELETE"}"#,
        r#"{"reason":"x","_METHOD":"delete"}"#,
        r#"{" _method ":"DELETE"}"#,
        r#"{"_\u006dethod":"DELETE"}"#,
        r#"{"_method":["DELETE"]}"#,
        // Not JSON, but a lenient parser could read `_method`.
        r#"{"_method":"DELETE",}"#,
        r#"{'_m\u0065thod':'DELETE'}"#,
    ] {
        assert!(json(bad).is_some(), "{bad}");
    }
    for good in [
        r#"{"reason":"x"}"#,
        r#"{"note":{"_method":"DELETE"}}"#,
        r#"[{"_method":"DELETE"}]"#,
        r#"{"method":"card"}"#,
        "",
        "not json",
    ] {
        assert_eq!(json(good), None, "{good}");
    }
    // The parsed body is used when given.
    let v = serde_json::json!({"_Method": "PUT"});
    assert!(body_method_override("application/vnd.api+json", b"", Some(&v)).is_some());

    let form =
        |b: &str| body_method_override("application/x-www-form-urlencoded", b.as_bytes(), None);
    for bad in [
        "_method=DELETE",
        "x=1&_method=delete",
        "x=1;_method=DELETE",
        "%5Fmethod=PUT",
        "_METHOD=PUT",
    ] {
        assert!(form(bad).is_some(), "{bad}");
    }
    assert_eq!(form("x=1&method=card"), None);
    let multipart =
        "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--b--";
    assert!(body_method_override("multipart/form-data", multipart.as_bytes(), None).is_some());
    assert_eq!(
        body_method_override("text/plain", b"_method=DELETE", None),
        None
    );

    let kind = |vals: &[&str]| {
        let mut h = HeaderMap::new();
        for v in vals {
            h.append(CONTENT_TYPE, v.parse().unwrap());
        }
        body_kind(&h)
    };
    assert_eq!(kind(&[]), BodyKind::Other);
    assert_eq!(kind(&["text/plain"]), BodyKind::Other);
    assert_eq!(kind(&["application/json"]), BodyKind::Json);
    assert_eq!(
        kind(&["Application/Problem+JSON; charset=utf-8"]),
        BodyKind::Json
    );
    assert_eq!(
        kind(&["application/json; x=application/x-www-form-urlencoded"]),
        BodyKind::Form
    );
    assert_eq!(
        kind(&["application/json", "multipart/form-data"]),
        BodyKind::Form
    );
}

#[test]
fn bodies_a_lenient_reader_takes_for_json_objects() {
    let body = r#" {"_method":"DELETE"}"#;
    let utf16le: Vec<u8> = body.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let utf16be: Vec<u8> = body.encode_utf16().flat_map(u16::to_be_bytes).collect();
    let mut bom16 = vec![0xFF, 0xFE];
    bom16.extend_from_slice(&utf16le);
    let utf32le: Vec<u8> = body
        .chars()
        .flat_map(|c| (c as u32).to_le_bytes())
        .collect();
    let mut bom8 = vec![0xEF, 0xBB, 0xBF];
    bom8.extend_from_slice(body.as_bytes());
    for (name, bytes) in [
        ("utf-8", body.as_bytes().to_vec()),
        ("utf-8 bom", bom8),
        ("utf-16le", utf16le),
        ("utf-16be", utf16be),
        ("utf-16 bom", bom16),
        ("utf-32le", utf32le),
    ] {
        let text = sniffed_json_object(&bytes).unwrap_or_else(|| panic!("{name}"));
        assert!(
            body_method_override("application/json", text.as_bytes(), None).is_some(),
            "{name}"
        );
    }
    for other in [&b"amount=6000"[..], b"[1]", b"", b"  ", b"hello {"] {
        assert_eq!(sniffed_json_object(other), None, "{other:?}");
    }
}

#[test]
fn a_prefix_tells_an_object_once_it_shows_a_character() {
    assert_eq!(prefix_opens_object(b"", false), None);
    assert_eq!(prefix_opens_object(b"{", false), None, "fewer than 4 bytes");
    assert_eq!(prefix_opens_object(b"{", true), Some(true));
    assert_eq!(prefix_opens_object(b"    ", false), None, "only whitespace");
    assert_eq!(prefix_opens_object(b"  \n {\"a", false), Some(true));
    assert_eq!(prefix_opens_object(b"PK\x03\x04", false), Some(false));
    assert_eq!(prefix_opens_object(b"", true), Some(false));
    let utf16: Vec<u8> = " {".encode_utf16().flat_map(u16::to_le_bytes).collect();
    assert_eq!(prefix_opens_object(&utf16, false), Some(true));
}

#[test]
fn media_types() {
    let mut h = HeaderMap::new();
    assert_eq!(media_type(&h), Ok(None));
    h.insert(
        CONTENT_TYPE,
        "Application/JSON; charset=utf-8".parse().unwrap(),
    );
    assert_eq!(media_type(&h), Ok(Some("application/json".into())));
    h.append(CONTENT_TYPE, "text/plain".parse().unwrap());
    assert!(media_type(&h).is_err());
}

#[test]
fn content_type_parameters_other_than_utf8_charset_are_refused() {
    let problem = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, v.parse().unwrap());
        parameter_problem(&h)
    };
    for good in [
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "application/json; charset=\"utf-8\"",
        "application/json ; charset=Utf-8 ;",
        "multipart/form-data; boundary=----abc123",
        "multipart/form-data; charset=utf-8; boundary=\"a b\"",
    ] {
        assert_eq!(problem(good), None, "{good}");
    }
    for bad in [
        "application/json; x=application/x-www-form-urlencoded",
        "application/json; x=\"application/x-www-form-urlencoded\"",
        "application/json; charset=utf-8; x=1",
        "application/json; charset=latin1",
        "application/json; charset=utf-8; charset=utf-8",
        "application/json; charset=utf-8, application/x-www-form-urlencoded",
        "application/json; charset = utf-8",
        "application/json; charset=",
        "application/json; charset=\"utf-8",
        "application/json; application/x-www-form-urlencoded",
        "application/json; boundary=x",
        "multipart/form-data; boundary=a/b",
        "multipart/form-data; boundary=a; boundary=b",
    ] {
        assert!(problem(bad).is_some(), "{bad}");
    }
}

#[test]
fn keys_that_differ_by_whitespace_or_invisible_characters() {
    let ptrs = ["/amount", "/justification/claims"];
    let ok = |b: &str| parse_json(b.as_bytes(), &ptrs);
    for body in [
        // A trimmed copy shadows the extracted key, either order.
        r#"{"amount":5," amount":9000}"#,
        r#"{"amount ":9000,"amount":5}"#,
        r#"{"amount":5,"\tAMOUNT\n":9000}"#,
        r#"{"amount":5,"\u001famount":9000}"#,
        r#"{"amount":5,"\u00a0amount\u3000":9000}"#,
        // Invisible characters anywhere in the key.
        r#"{"amount":5,"am\u200bount":9000}"#,
        r#"{"amount":5,"\ufeffamount":9000}"#,
        r#"{"amount":5,"amo\u00adunt":9000}"#,
        // NFKC: full-width letters.
        r#"{"amount":5,"\uff41mount":9000}"#,
        // On the path to an extracted field.
        r#"{"amount":5,"justification":{"claims":[]," claims":[1]}}"#,
        // The extracted key is missing and only a variant is there.
        r#"{" amount":9000}"#,
        r#"{"amount\u200b":9000}"#,
    ] {
        assert!(matches!(ok(body), Err(BodyError::Ambiguous(_))), "{body}");
    }
    // Variants elsewhere, and keys with inner spaces, are fine.
    assert!(ok(r#"{"amount":5,"meta":{"k":1," k":2}}"#).is_ok());
    assert!(ok(r#"{"amount":5,"am ount":9000}"#).is_ok());
    assert_eq!(fold(" Amount\u{200B}\t"), "amount");
    assert_eq!(fold("\u{FF21}mount"), "amount");
}

#[test]
fn duplicate_and_case_variant_keys() {
    let ptrs = ["/amount", "/justification/claims"];
    let ok = |b: &str| parse_json(b.as_bytes(), &ptrs);
    assert_eq!(
        ok(r#"{"amount":100,"justification":{"claims":[]}}"#),
        Ok(json!({"amount":100,"justification":{"claims":[]}}))
    );
    // Exact duplicates anywhere.
    for body in [
        r#"{"amount":100,"amount":6000}"#,
        r#"{"amount":100,"note":{"a":1,"a":2}}"#,
        r#"[{"x":1,"x":1}]"#,
    ] {
        assert!(matches!(ok(body), Err(BodyError::Ambiguous(_))), "{body}");
    }
    // Case variants on the path of, or inside, an extracted field.
    for body in [
        r#"{"amount":100,"AMOUNT":6000}"#,
        r#"{"amount":100,"Amount":6000}"#,
        r#"{"amount":100,"justification":{"claims":[],"CLAIMS":[1]}}"#,
        r#"{"amount":100,"justification":{"claims":[{"text":"a","TEXT":"b"}]}}"#,
        r#"{"amount":100,"Justification":{},"justification":{"claims":[]}}"#,
        r#"{"Amount":6000}"#,
        r#"{"amount":1,"justification":{"Claims":[]}}"#,
    ] {
        assert!(matches!(ok(body), Err(BodyError::Ambiguous(_))), "{body}");
    }
    // Case variants elsewhere are fine.
    assert!(ok(r#"{"amount":1,"meta":{"k":1,"K":2}}"#).is_ok());
    assert!(matches!(ok("{"), Err(BodyError::Invalid(_))));
    assert!(matches!(ok("{} x"), Err(BodyError::Invalid(_))));
    // The long s folds to s, as in Go's EqualFold.
    assert!(matches!(
        parse_json(r#"{"cost":1,"co\u017ft":2}"#.as_bytes(), &["/cost"]),
        Err(BodyError::Ambiguous(_))
    ));
    // Deep nesting is an error, not a stack overflow.
    let deep = "[".repeat(100_000);
    assert!(matches!(ok(&deep), Err(BodyError::Invalid(_))));
}
