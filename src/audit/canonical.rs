//! RFC 8785 (JCS) canonical bytes written directly, without the generic
//! canonicalizer's per-property buffers.
//!
//! It exists because canonicalizing a record is the hot, per-decision part of
//! the audit path: `serde_json_canonicalizer` re-parses every object key and
//! buffers every property value on the heap, which cost ~16 us for a 555-byte
//! decision record, a quarter of the whole audit cost per record. The record's
//! own keys are fixed ASCII names, so their canonical order is known at compile
//! time; only the free JSON inside (`action`, `detail`) needs sorting. Strings
//! are escaped by serde_json, whose escapes are exactly JCS's (§3.2.2.2), and
//! numbers go through `ryu-js`, ECMAScript's `Number.prototype.toString`, as in
//! the generic canonicalizer. Tests compare both byte for byte on random
//! records, so the stored bytes (and every `record_hash`) are unchanged.

use serde_json::Value;

use super::record::{AuditRecord, RecordError, RecordKind};

fn bad(msg: &str) -> RecordError {
    RecordError(format!("cannot canonicalize: {msg}"))
}

/// Appends a JSON string literal with JCS escaping.
pub fn string(out: &mut Vec<u8>, s: &str) -> Result<(), RecordError> {
    serde_json::to_writer(&mut *out, s).map_err(|e| bad(&e.to_string()))
}

/// Appends a number as ECMAScript formats an IEEE double; NaN and the
/// infinities have no JSON form.
pub fn number(out: &mut Vec<u8>, v: f64) -> Result<(), RecordError> {
    if !v.is_finite() {
        return Err(bad("NaN and +/-Infinity are not permitted in JSON"));
    }
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format_finite(v).as_bytes());
    Ok(())
}

/// Appends canonical JSON for an arbitrary value: object members sorted by
/// their names as UTF-16 code units (RFC 8785 §3.2.3), every number as a
/// double. Depth is bounded by the parser that produced the value.
pub fn value(out: &mut Vec<u8>, v: &Value) -> Result<(), RecordError> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            let f = n
                .as_f64()
                .ok_or_else(|| bad("number is not representable"))?;
            number(out, f)?;
        }
        Value::String(s) => string(out, s)?,
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            // serde_json's map is already sorted by bytes, which equals UTF-16
            // order except around surrogate pairs; sort to be exact.
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push(b'{');
            for (i, (k, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, k)?;
                out.push(b':');
                value(out, item)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// Writes the members of one object in the order they are given, which the
/// caller guarantees to be canonical (plain ASCII names, sorted). Records use
/// it, and so do captured decision inputs (`decide::capture`).
pub struct Members<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> Members<'o> {
    /// An object that starts at the end of `out`.
    pub fn new(out: &'o mut Vec<u8>) -> Members<'o> {
        Members { out, first: true }
    }

    /// Writes the name of the next member; its value goes to [`Members::out`].
    pub fn key(&mut self, name: &str) {
        self.out
            .extend_from_slice(if self.first { b"{\"" } else { b",\"" });
        self.first = false;
        // Record field names are plain ASCII identifiers: no escapes.
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// Writes `name` and `v` with `write`, or nothing when `v` is absent.
    fn member<T>(
        &mut self,
        name: &str,
        v: Option<T>,
        write: impl FnOnce(&mut Vec<u8>, T) -> Result<(), RecordError>,
    ) -> Result<(), RecordError> {
        match v {
            None => Ok(()),
            Some(v) => {
                self.key(name);
                write(self.out, v)
            }
        }
    }

    pub fn str(&mut self, name: &str, v: Option<&str>) -> Result<(), RecordError> {
        self.member(name, v, string)
    }

    pub fn num(&mut self, name: &str, v: Option<f64>) -> Result<(), RecordError> {
        self.member(name, v, number)
    }

    pub fn json(&mut self, name: &str, v: Option<&Value>) -> Result<(), RecordError> {
        self.member(name, v, value)
    }

    pub fn bool(&mut self, name: &str, v: Option<bool>) {
        if let Some(b) = v {
            self.key(name);
            self.out
                .extend_from_slice(if b { b"true" } else { b"false" });
        }
    }

    /// The buffer, for a value written after [`Members::key`].
    pub fn out(&mut self) -> &mut Vec<u8> {
        self.out
    }

    pub fn finish(self) {
        self.out
            .extend_from_slice(if self.first { b"{}" } else { b"}" });
    }
}

fn kind_name(kind: RecordKind) -> &'static str {
    match kind {
        RecordKind::Decision => "decision",
        RecordKind::ReviewResolution => "review_resolution",
        RecordKind::PolicyReload => "policy_reload",
        RecordKind::KeyChange => "key_change",
    }
}

/// The canonical bytes of a record (not validated here; see
/// [`AuditRecord::canonical`]).
pub fn record(r: &AuditRecord) -> Result<String, RecordError> {
    // Destructured so that a new field fails to compile here instead of
    // silently going missing from the hashed bytes.
    let AuditRecord {
        schema,
        record_id,
        kind,
        at,
        request_id,
        request_hash,
        input_hash,
        principal,
        action,
        decision,
        reason,
        enforced,
        would_decide,
        coverage_score,
        claims_total,
        claims_supported,
        policy_revision,
        route,
        source,
        review_id,
        detail,
    } = r;
    let mut out = Vec::with_capacity(640);
    let mut m = Members {
        out: &mut out,
        first: true,
    };
    // Keys in canonical order (ASCII, so byte order is UTF-16 order).
    m.json("action", action.as_ref())?;
    m.str("at", Some(at))?;
    // JCS numbers are doubles; `as` is the same conversion the generic
    // canonicalizer applies to integers.
    m.num("claims_supported", claims_supported.map(|n| n as f64))?;
    m.num("claims_total", claims_total.map(|n| n as f64))?;
    m.num("coverage_score", *coverage_score)?;
    m.str("decision", decision.as_deref())?;
    m.json("detail", detail.as_ref())?;
    m.bool("enforced", *enforced);
    m.str("input_hash", input_hash.as_deref())?;
    m.str("kind", Some(kind_name(*kind)))?;
    m.str("policy_revision", policy_revision.as_deref())?;
    m.str("principal", principal.as_deref())?;
    m.str("reason", reason.as_deref())?;
    let mut id = uuid::Uuid::encode_buffer();
    m.str(
        "record_id",
        Some(record_id.hyphenated().encode_lower(&mut id)),
    )?;
    m.str("request_hash", request_hash.as_deref())?;
    m.str("request_id", request_id.as_deref())?;
    m.str("review_id", review_id.as_deref())?;
    m.str("route", route.as_deref())?;
    m.str("schema", Some(schema))?;
    m.str("source", source.as_deref())?;
    m.str("would_decide", would_decide.as_deref())?;
    m.finish();
    // Every piece appended above is UTF-8 (str slices and ASCII).
    String::from_utf8(out).map_err(|e| bad(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn generic(r: &AuditRecord) -> String {
        serde_json_canonicalizer::to_string(r).unwrap()
    }

    fn full() -> AuditRecord {
        let mut r = AuditRecord::new(RecordKind::Decision);
        r.request_id = Some("req-1".into());
        r.request_hash = Some("sha256:00".into());
        r.input_hash = Some("sha256:01".into());
        r.principal = Some("refund-app".into());
        r.action =
            Some(json!({"type": "refund.create", "params": {"b": 1, "a": [1.5, null, true]}}));
        r.decision = Some("allow".into());
        r.reason = Some("coverage_sufficient".into());
        r.enforced = Some(false);
        r.would_decide = Some("deny".into());
        r.coverage_score = Some(0.9231);
        r.claims_total = Some(3);
        r.claims_supported = Some(2);
        r.policy_revision = Some("sha256:0f".into());
        r.route = Some("create-refund".into());
        r.source = Some("ext_authz".into());
        r.review_id = Some("rev-1".into());
        r.detail = Some(json!({"z": {}, "": [], "\u{e9}": "\u{1f600}"}));
        r
    }

    #[test]
    fn every_field_and_kind_matches_the_generic_canonicalizer() {
        for kind in [
            RecordKind::Decision,
            RecordKind::ReviewResolution,
            RecordKind::PolicyReload,
            RecordKind::KeyChange,
        ] {
            let mut r = full();
            r.kind = kind;
            assert_eq!(record(&r).unwrap(), generic(&r));
        }
        let bare = AuditRecord::new(RecordKind::KeyChange);
        assert_eq!(record(&bare).unwrap(), generic(&bare));
    }

    #[test]
    fn keys_sort_by_utf16_not_by_bytes() {
        // U+FF61 sorts before U+1F600 in UTF-8 bytes' order too, but the
        // surrogate pair of U+1F600 (0xD83D) sorts before 0xFF61 in UTF-16.
        let mut r = AuditRecord::new(RecordKind::PolicyReload);
        r.detail = Some(json!({"\u{ff61}": 1, "\u{1f600}": 2, "a": 3}));
        let c = record(&r).unwrap();
        assert_eq!(c, generic(&r));
        let smile = c.find('\u{1f600}').unwrap();
        let half = c.find('\u{ff61}').unwrap();
        assert!(smile < half, "{c}");
    }

    #[test]
    fn numbers_follow_ecmascript() {
        let mut r = AuditRecord::new(RecordKind::Decision);
        r.detail = Some(json!([1e21, 1e-7, 0.1, -0.0, 100, 9007199254740993u64, -5]));
        r.coverage_score = Some(1.0);
        let c = record(&r).unwrap();
        assert_eq!(c, generic(&r));
        assert!(
            c.contains("[1e+21,1e-7,0.1,0,100,9007199254740992,-5]"),
            "{c}"
        );
        assert!(c.contains("\"coverage_score\":1,"), "{c}");
    }

    #[test]
    fn non_finite_scores_are_refused() {
        let mut r = AuditRecord::new(RecordKind::Decision);
        r.coverage_score = Some(f64::NAN);
        assert!(record(&r).is_err());
        r.coverage_score = Some(f64::INFINITY);
        assert!(record(&r).is_err());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            (-1e30f64..1e30).prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn random_records_match_the_generic_canonicalizer(
            texts in proptest::collection::vec(proptest::option::of(".{0,16}"), 8),
            action in proptest::option::of(arb_json()),
            detail in proptest::option::of(arb_json()),
            score in proptest::option::of(-1e9f64..1e9),
            counts in (proptest::option::of(any::<u64>()), proptest::option::of(0u64..100)),
            enforced in proptest::option::of(any::<bool>()),
        ) {
            let mut r = AuditRecord::new(RecordKind::Decision);
            r.request_id = texts[0].clone();
            r.request_hash = texts[1].clone();
            r.principal = texts[2].clone();
            r.decision = texts[3].clone();
            r.reason = texts[4].clone();
            r.would_decide = texts[5].clone();
            r.policy_revision = texts[6].clone();
            r.route = texts[7].clone();
            r.review_id = texts[0].clone();
            r.action = action;
            r.detail = detail;
            r.coverage_score = score;
            r.claims_total = counts.0;
            r.claims_supported = counts.1;
            r.enforced = enforced;
            prop_assert_eq!(record(&r).unwrap(), generic(&r));
        }
    }
}
