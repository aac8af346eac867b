//! POST /v2/verify over HTTP: the compact and verbose shapes, citation
//! offsets, determinism, source order, and sources read by uri inside and
//! outside the operator's fences.
#![allow(clippy::unwrap_used)] // tests may panic on setup failures

use crate::support;

use serde_json::{json, Value};
use support::{MockUpstream, TestServer, APP_KEY};

const REFUND_EV: &str = "Order 7781 was placed on 2024-03-03. The customer returned the blender on March 9, 2024, and a refund of $120.00 was approved by the store manager. 😀 Ünïcödé café ✓.";
const SHIP_EV: &str =
    "Shipping: parcel 55 left the warehouse on Monday and was delivered on Wednesday.";

async fn verify(s: &TestServer, body: &Value) -> Value {
    let r = s
        .post_json("/v2/verify", &body.to_string(), Some(APP_KEY))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

#[tokio::test]
async fn compact_and_verbose_shapes() {
    let s = TestServer::start().await;
    let mut body = json!({"claims": ["A refund of $120.00 was approved by the store manager.", {"id": "x", "text": "A refund of $100 was approved."}],
                          "sources": [{"source_id": "r", "text": REFUND_EV}, {"id": "s", "text": SHIP_EV}]});
    let c = verify(&s, &body).await;
    assert_eq!(
        keys(&c),
        [
            "checks",
            "coverage_score",
            "metrics",
            "request_hash",
            "request_id",
            "verdict"
        ]
    );
    assert_eq!(keys(&c["checks"][0]), ["claim_id", "coverage", "status"]);
    assert_eq!(c["checks"][0]["claim_id"], "c1");
    assert_eq!(c["checks"][1]["claim_id"], "x");
    assert_eq!(c["checks"][0]["status"], "supported", "{c}");
    assert_eq!(c["checks"][1]["status"], "unsupported", "{c}");
    assert_eq!(c["verdict"], "unsupported");
    assert_eq!(c["metrics"]["claims_total"], 2);
    assert_eq!(c["metrics"]["claims_supported"], 1);
    assert_eq!(c["metrics"]["sources_total"], 2);
    body["response"] = json!({"mode": "verbose"});
    let v = verify(&s, &body).await;
    assert_eq!(
        keys(&v["checks"][0]),
        [
            "citations",
            "claim_id",
            "claim_text",
            "coverage",
            "evidence",
            "reasons",
            "status"
        ]
    );
    assert!(
        v["checks"][1]["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "amount_mismatch"),
        "{v}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn citation_offsets_are_code_points_into_the_source() {
    let s = TestServer::start().await;
    let body = json!({"claims": ["The customer returned the blender on March 9, 2024.", "A refund of $120.00 was approved by the store manager."],
                      "sources": [{"source_id": "r", "text": REFUND_EV}], "response": {"mode": "verbose"}});
    let v = verify(&s, &body).await;
    let chars: Vec<char> = REFUND_EV.chars().collect();
    let mut seen = 0;
    for check in v["checks"].as_array().unwrap() {
        for c in check["citations"].as_array().unwrap() {
            let (start, end) = (
                c["start"].as_u64().unwrap() as usize,
                c["end"].as_u64().unwrap() as usize,
            );
            let slice: String = chars[start..end].iter().collect();
            assert_eq!(slice, c["quote"].as_str().unwrap());
            seen += 1;
        }
    }
    assert!(seen >= 2, "{v}");
    s.shutdown().await;
}

#[tokio::test]
async fn same_input_same_bytes_and_source_order_does_not_matter() {
    let s = TestServer::start().await;
    let claims = json!([
        "The parcel was delivered on Wednesday.",
        "A refund of $120.00 was approved.",
        "The parcel was lost."
    ]);
    let a = json!({"claims": claims, "sources": [{"source_id": "r", "text": REFUND_EV}, {"source_id": "s", "text": SHIP_EV}], "response": {"mode": "verbose"}});
    let b = json!({"claims": claims, "sources": [{"source_id": "s", "text": SHIP_EV}, {"source_id": "r", "text": REFUND_EV}], "response": {"mode": "verbose"}});
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("request_id");
        v["metrics"].as_object_mut().unwrap().remove("latency_ms");
        v
    };
    let first = strip(verify(&s, &a).await);
    let second = strip(verify(&s, &a).await);
    assert_eq!(first.to_string(), second.to_string());
    let shuffled = strip(verify(&s, &b).await);
    for (x, y) in first["checks"]
        .as_array()
        .unwrap()
        .iter()
        .zip(shuffled["checks"].as_array().unwrap())
    {
        assert_eq!(
            (&x["status"], &x["coverage"]),
            (&y["status"], &y["coverage"])
        );
    }
    s.shutdown().await;
}

#[tokio::test]
async fn uri_sources_inside_and_outside_the_fences() {
    let up = MockUpstream::start().await;
    let root = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join("policy.txt"),
        "Refunds are issued within 14 days of delivery.",
    )
    .unwrap();
    let root_path = root.path().to_path_buf();
    let origin = up.url();
    let s = TestServer::start_with(|c| {
        c.evidence.roots = vec![root_path.clone()];
        c.evidence.allow_origins = vec![origin.clone()];
    })
    .await;
    let claim = "Refunds are issued within 14 days of delivery.";
    let file_uri = format!("file://{}/policy.txt", root.path().display());
    let cases = [
        (file_uri.clone(), "supported"),
        (format!("{}/evidence", up.url()), "supported"),
        (format!("{}/redirect-in", up.url()), "supported"),
        (
            format!("file://{}/../policy.txt", root.path().display()),
            "unsupported",
        ),
        ("file:///etc/hostname".to_string(), "unsupported"),
        (format!("{}/redirect-out", up.url()), "unsupported"),
        ("http://127.0.0.2:9/evidence".to_string(), "unsupported"),
        (
            "http://169.254.169.254/latest/meta-data".to_string(),
            "unsupported",
        ),
    ];
    for (uri, status) in cases {
        let body = json!({"claims": [claim], "sources": [{"source_id": "p", "uri": uri}], "response": {"mode": "verbose"}});
        let v = verify(&s, &body).await;
        assert_eq!(v["checks"][0]["status"], status, "{uri}: {v}");
        if status == "unsupported" {
            assert!(
                v["checks"][0]["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == "source_unavailable"),
                "{uri}: {v}"
            );
        }
    }
    // A wrong checksum makes a source unavailable, a right one is fine.
    let sum = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(claim.as_bytes()))
    );
    let v = verify(
        &s,
        &json!({"claims": [claim], "sources": [{"id": "p", "text": claim, "checksum": sum}]}),
    )
    .await;
    assert_eq!(v["checks"][0]["status"], "supported");
    let bad = format!("sha256:{}", "0".repeat(64));
    let v = verify(
        &s,
        &json!({"claims": [claim], "sources": [{"id": "p", "text": claim, "checksum": bad}]}),
    )
    .await;
    assert_eq!(v["checks"][0]["status"], "unsupported");
    s.shutdown().await;
}

#[tokio::test]
async fn evidence_date_order_reads_numeric_dates_one_way() {
    let body = |claim: &str| {
        json!({"claims": [{"text": claim}],
               "sources": [{"source_id": "s", "text": "The refund was issued on 03/05/2024."}]})
    };
    let status = |v: Value| v["checks"][0]["status"].as_str().unwrap().to_string();
    let march = "The refund was issued on March 5, 2024.";
    let may = "The refund was issued on 3 May 2024.";
    let ambiguous = TestServer::start().await;
    assert_ne!(status(verify(&ambiguous, &body(may)).await), "supported");
    ambiguous.shutdown().await;
    let day_first = TestServer::start_with(|c| {
        c.evidence.date_order = verdict::engine::DateOrder::Dmy;
    })
    .await;
    assert_eq!(status(verify(&day_first, &body(may)).await), "supported");
    assert_eq!(
        status(verify(&day_first, &body(march)).await),
        "unsupported"
    );
    day_first.shutdown().await;
    let err = verdict::config::Config::from_toml(
        "c.toml",
        "[evidence]\ndate_order = \"ymd\"\n",
        &verdict::config::Overrides::default(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("evidence.date_order"), "{err}");
}
