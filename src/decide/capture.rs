//! A decision's input as `[audit] capture_inputs` keeps it, and back.
//!
//! The captured form is what the engine decided on, after each door read
//! its request: the action (type and params, the policy's `redact` fields
//! replaced by their HMAC, as in the record), the claims or the answer as
//! sent, every source as the engine read it (its text, or why it was
//! unavailable: a replay never fetches), and the requirements the request
//! asked for. It is stored as RFC 8785 canonical JSON, and the decision's
//! record states its sha256 as `input_hash`. [`decode`] turns it back into
//! an [`Input`] that `decide::authorize` decides exactly as it did the first
//! time, under the same policy set and config.

use serde::{Deserialize, Serialize};

use super::input::{AnswerIn, CitationIn, ClaimIn, SourceIn};
use super::{DecideError, Input};
use crate::audit::canonical::Members;
use crate::audit::record::{hash_string, record_hash, RecordError};
use crate::engine::decide::{citations_from, citations_str, mode_from, mode_str, Requested};
use crate::evidence::Resolved;

/// The version of the captured form this build writes and reads.
const VERSION: u32 = 1;

/// The largest input kept (its canonical bytes). A bigger one (many large
/// `uri` sources) is decided and recorded as usual but not captured: the
/// record names no `input_hash`, and replay counts it as not captured. It
/// keeps one request from bloating a group commit that other decisions
/// wait on.
pub const MAX_BYTES: usize = 8 << 20;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Captured {
    v: u32,
    action: Action,
    #[serde(skip_serializing_if = "Option::is_none")]
    claims: Option<Vec<Claim>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<Answer>,
    sources: Vec<Source>,
    requested: Asked,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Action {
    #[serde(rename = "type")]
    kind: String,
    params: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Claim {
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    citations: Vec<CitationIn>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    citations: Vec<CitationIn>,
}

/// A source as the engine read it: exactly one of `text` and `unavailable`,
/// and the `uri` and `checksum` the caller named it by, if any (an action's
/// `evidence` provenance reads them).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unavailable: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum: Option<String>,
}

/// The requirements the request asked for, before floors.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Asked {
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_coverage: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    citations: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deny_if_any_unsupported: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_limit: Option<usize>,
}

/// What one decision read, borrowed from the decision path.
pub struct Parts<'a> {
    pub action_type: &'a str,
    /// The params as the record holds them (`redact` fields replaced).
    pub params: &'a serde_json::Value,
    pub claims: Option<&'a [ClaimIn]>,
    pub answer: Option<&'a AnswerIn>,
    pub sources: &'a [Resolved],
    pub requested: &'a Requested,
}

/// The canonical captured input, or `None` when it is larger than
/// [`MAX_BYTES`] (the input is then not kept).
///
/// Written member by member in canonical order (only `action.params` is
/// free JSON to sort), like audit records and for the same reason: this
/// runs once per decision, and the generic canonicalizer buffers every
/// property. A test compares it with the generic one byte for byte.
pub fn encode(p: &Parts<'_>) -> Result<Option<String>, DecideError> {
    let canonical = write(p)
        .map_err(|e| DecideError::Internal(format!("the input cannot be captured: {e}")))?;
    if canonical.len() > MAX_BYTES {
        tracing::warn!(
            bytes = canonical.len(),
            "decision input too large to capture; it will not be replayable"
        );
        return Ok(None);
    }
    Ok(Some(canonical))
}

fn citations(out: &mut Vec<u8>, c: &[CitationIn]) -> Result<(), RecordError> {
    out.push(b'[');
    for (i, c) in c.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut m = Members::new(out);
        m.str("quote", c.quote.as_deref())?;
        m.str("source_id", Some(&c.source_id))?;
        m.finish();
    }
    out.push(b']');
    Ok(())
}

fn write(p: &Parts<'_>) -> Result<String, RecordError> {
    let text_bytes: usize = p
        .sources
        .iter()
        .map(|s| s.text.as_ref().map_or(0, String::len))
        .sum();
    let mut out = Vec::with_capacity(256 + text_bytes);
    let mut m = Members::new(&mut out);
    m.key("action");
    {
        let mut a = Members::new(m.out());
        a.json("params", Some(p.params))?;
        a.str("type", Some(p.action_type))?;
        a.finish();
    }
    if let Some(answer) = p.answer {
        m.key("answer");
        let mut a = Members::new(m.out());
        if !answer.citations.is_empty() {
            a.key("citations");
            citations(a.out(), &answer.citations)?;
        }
        a.str("text", Some(&answer.text))?;
        a.finish();
    }
    if let Some(claims) = p.claims {
        m.key("claims");
        let out = m.out();
        out.push(b'[');
        for (i, c) in claims.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let mut o = Members::new(out);
            if !c.citations.is_empty() {
                o.key("citations");
                citations(o.out(), &c.citations)?;
            }
            o.str("id", c.id.as_deref())?;
            o.str("text", Some(&c.text))?;
            o.finish();
        }
        out.push(b']');
    }
    m.key("requested");
    {
        let r = p.requested;
        let mut o = Members::new(m.out());
        o.str("citations", r.citations.map(citations_str))?;
        o.str("decision_mode", r.decision_mode.map(mode_str))?;
        o.bool("deny_if_any_unsupported", r.deny_if_any_unsupported);
        o.num("evidence_limit", r.evidence_limit.map(|n| n as f64))?;
        o.num("min_coverage", r.min_coverage)?;
        o.finish();
    }
    m.key("sources");
    {
        let out = m.out();
        out.push(b'[');
        for (i, s) in p.sources.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let mut o = Members::new(out);
            o.str("checksum", s.checksum.as_deref())?;
            o.str("id", Some(&s.id))?;
            match &s.text {
                Ok(t) => o.str("text", Some(t))?,
                Err(why) => o.str("unavailable", Some(why))?,
            }
            o.str("uri", s.uri.as_deref())?;
            o.finish();
        }
        out.push(b']');
    }
    m.num("v", Some(f64::from(VERSION)))?;
    m.finish();
    String::from_utf8(out).map_err(|e| RecordError(e.to_string()))
}

/// `sha256:<hex>` of a captured input's bytes, as `input_hash` states it.
pub fn hash(canonical: &str) -> String {
    hash_string(&record_hash(canonical))
}

/// The input a captured decision was made on.
pub fn decode(canonical: &str) -> Result<Input, String> {
    let c: Captured = serde_json::from_str(canonical).map_err(|e| e.to_string())?;
    if c.v != VERSION {
        return Err(format!(
            "captured input version {} (this build reads {VERSION})",
            c.v
        ));
    }
    let mode = match c.requested.decision_mode.as_deref() {
        None => None,
        Some(s) => Some(mode_from(s).ok_or(format!("requested.decision_mode: {s:?}"))?),
    };
    let citations = match c.requested.citations.as_deref() {
        None => None,
        Some(s) => Some(citations_from(s).ok_or(format!("requested.citations: {s:?}"))?),
    };
    let mut sources = Vec::with_capacity(c.sources.len());
    for s in c.sources {
        if s.text.is_some() == s.unavailable.is_some() {
            return Err(format!(
                "sources: {:?} needs exactly one of text and unavailable",
                s.id
            ));
        }
        sources.push(SourceIn {
            source_id: Some(s.id),
            id: None,
            kind: None,
            text: s.text,
            uri: s.uri,
            checksum: s.checksum,
            unavailable: s.unavailable,
            captured: true,
        });
    }
    Ok(Input {
        action_type: c.action.kind,
        params: c.action.params,
        claims: c.claims.map(|claims| {
            claims
                .into_iter()
                .map(|c| ClaimIn {
                    text: c.text,
                    id: c.id,
                    citations: c.citations,
                })
                .collect()
        }),
        answer: c.answer.map(|a| AnswerIn {
            text: a.text,
            citations: a.citations,
        }),
        sources,
        requested: Requested {
            decision_mode: mode,
            min_coverage: c.requested.min_coverage,
            citations,
            deny_if_any_unsupported: c.requested.deny_if_any_unsupported,
            evidence_limit: c.requested.evidence_limit,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Citations, DecisionMode};
    use serde_json::json;

    fn claim(text: &str, cite: Option<&str>) -> ClaimIn {
        ClaimIn {
            text: text.into(),
            id: None,
            citations: cite
                .map(|s| {
                    vec![CitationIn {
                        source_id: s.into(),
                        quote: Some("q".into()),
                    }]
                })
                .unwrap_or_default(),
        }
    }

    /// The captured form through the generic canonicalizer.
    fn generic(p: &Parts<'_>) -> String {
        let captured = Captured {
            v: VERSION,
            action: Action {
                kind: p.action_type.to_string(),
                params: p.params.as_object().cloned().unwrap_or_default(),
            },
            claims: p.claims.map(|claims| {
                claims
                    .iter()
                    .map(|c| Claim {
                        text: c.text.clone(),
                        id: c.id.clone(),
                        citations: c.citations.clone(),
                    })
                    .collect()
            }),
            answer: p.answer.map(|a| Answer {
                text: a.text.clone(),
                citations: a.citations.clone(),
            }),
            sources: p
                .sources
                .iter()
                .map(|r| Source {
                    id: r.id.clone(),
                    text: r.text.as_ref().ok().cloned(),
                    unavailable: r.text.as_ref().err().cloned(),
                    uri: r.uri.clone(),
                    checksum: r.checksum.clone(),
                })
                .collect(),
            requested: Asked {
                decision_mode: p.requested.decision_mode.map(|m| mode_str(m).to_string()),
                min_coverage: p.requested.min_coverage,
                citations: p.requested.citations.map(|c| citations_str(c).to_string()),
                deny_if_any_unsupported: p.requested.deny_if_any_unsupported,
                evidence_limit: p.requested.evidence_limit,
            },
        };
        serde_json_canonicalizer::to_string(&captured).unwrap()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        #[test]
        fn the_written_bytes_are_the_generic_canonicalizers(
            texts in proptest::collection::vec(".{0,12}", 6),
            amount in -1e12f64..1e12,
            flags in proptest::collection::vec(proptest::prelude::any::<bool>(), 6),
            limit in 0usize..100,
        ) {
            let params = json!({"amount": amount, texts[0].clone(): [1, null, {"\u{e9}": texts[1]}]});
            let claims: Vec<ClaimIn> = (0..2)
                .map(|i| ClaimIn {
                    text: texts[2 + i].clone(),
                    id: flags[i].then(|| texts[4].clone()),
                    citations: if flags[2 + i] {
                        vec![CitationIn { source_id: texts[5].clone(), quote: flags[4].then(|| texts[0].clone()) }]
                    } else {
                        vec![]
                    },
                })
                .collect();
            let answer = AnswerIn { text: texts[3].clone(), citations: claims[0].citations.clone() };
            let sources = vec![
                Resolved { id: texts[1].clone(), text: Ok(texts[2].clone()), uri: None, checksum: None },
                Resolved {
                    id: texts[4].clone(),
                    text: Err(texts[5].clone()),
                    uri: flags[0].then(|| texts[3].clone()),
                    checksum: flags[1].then(|| texts[0].clone()),
                },
            ];
            let requested = Requested {
                decision_mode: flags[5].then_some(DecisionMode::Balanced),
                min_coverage: flags[0].then_some(amount.abs() / 1e12),
                citations: flags[1].then_some(Citations::Required),
                deny_if_any_unsupported: flags[2].then_some(flags[3]),
                evidence_limit: flags[4].then_some(limit),
            };
            let parts = Parts {
                action_type: &texts[0],
                params: &params,
                claims: flags[5].then_some(claims.as_slice()),
                answer: (!flags[5]).then_some(&answer),
                sources: &sources,
                requested: &requested,
            };
            proptest::prop_assert_eq!(encode(&parts).unwrap(), Some(generic(&parts)));
        }
    }

    #[test]
    fn an_input_survives_the_round_trip_and_hashes_its_bytes() {
        let params = json!({"amount": 120.5, "email": "hmac-sha256:ab"});
        let claims = vec![claim("Order 1 was paid.", Some("s1")), claim("B", None)];
        let sources = vec![
            Resolved {
                id: "s1".into(),
                text: Ok("Order 1 was paid.".into()),
                uri: Some("https://billing.example/orders/1".into()),
                checksum: Some(format!("sha256:{}", "ab".repeat(32))),
            },
            Resolved {
                id: "s2".into(),
                text: Err("file is outside evidence.roots".into()),
                uri: None,
                checksum: None,
            },
        ];
        let requested = Requested {
            decision_mode: Some(DecisionMode::Strict),
            min_coverage: Some(0.1 + 0.2),
            citations: Some(Citations::Required),
            deny_if_any_unsupported: None,
            evidence_limit: Some(3),
        };
        let canonical = encode(&Parts {
            action_type: "refund.create",
            params: &params,
            claims: Some(&claims),
            answer: None,
            sources: &sources,
            requested: &requested,
        })
        .unwrap()
        .unwrap();
        assert_eq!(
            canonical,
            serde_json_canonicalizer::to_string(
                &serde_json::from_str::<serde_json::Value>(&canonical).unwrap()
            )
            .unwrap(),
            "stored bytes are canonical"
        );
        let back = decode(&canonical).unwrap();
        assert_eq!(back.action_type, "refund.create");
        assert_eq!(serde_json::Value::Object(back.params.clone()), params);
        assert_eq!(back.requested, requested);
        let c = back.claims.unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].citations[0].source_id, "s1");
        assert_eq!(
            back.sources[1].unavailable.as_deref(),
            Some("file is outside evidence.roots")
        );
        assert_eq!(back.sources[0].text.as_deref(), Some("Order 1 was paid."));
        assert_eq!(
            back.sources[0].uri.as_deref(),
            Some("https://billing.example/orders/1")
        );
        assert!(back.sources.iter().all(|s| s.captured));
        // Re-encoding the decoded input gives the same bytes.
        let resolved: Vec<Resolved> = back
            .sources
            .iter()
            .map(|s| Resolved {
                id: s.source_id.clone().unwrap(),
                text: s.text.clone().ok_or_else(|| s.unavailable.clone().unwrap()),
                uri: s.uri.clone(),
                checksum: s.checksum.clone(),
            })
            .collect();
        let back_params = serde_json::Value::Object(back.params.clone());
        let again = encode(&Parts {
            action_type: &back.action_type,
            params: &back_params,
            claims: Some(&c),
            answer: None,
            sources: &resolved,
            requested: &back.requested,
        })
        .unwrap();
        assert_eq!(again, Some(canonical));
    }

    #[test]
    fn an_input_over_the_cap_is_not_kept() {
        let params = json!({});
        let requested = Requested::default();
        let parts = |text: String| {
            let sources = vec![Resolved {
                id: "s".into(),
                text: Ok(text),
                uri: None,
                checksum: None,
            }];
            encode(&Parts {
                action_type: "x",
                params: &params,
                claims: None,
                answer: None,
                sources: &sources,
                requested: &requested,
            })
            .unwrap()
        };
        // The rest of the input is well under 200 bytes.
        assert!(parts("a".repeat(MAX_BYTES - 200)).is_some());
        assert!(parts("a".repeat(MAX_BYTES)).is_none());
    }

    #[test]
    fn a_foreign_or_damaged_capture_is_refused() {
        assert!(decode("{").is_err());
        let v2 = r#"{"action":{"params":{},"type":"x"},"requested":{},"sources":[],"v":2}"#;
        assert!(decode(v2).unwrap_err().contains("version 2"));
        let both = r#"{"action":{"params":{},"type":"x"},"requested":{},"sources":[{"id":"s","text":"t","unavailable":"u"}],"v":1}"#;
        assert!(decode(both).is_err());
        let unknown =
            r#"{"action":{"params":{},"type":"x"},"requested":{},"sources":[],"v":1,"extra":1}"#;
        assert!(decode(unknown).is_err());
    }
}
