//! The audit record: what one decision, review resolution, policy reload or
//! key change leaves behind, and its RFC 8785 canonical bytes.
//!
//! The record is hashed as its canonical (JCS) bytes so that any verifier, in
//! any language, holding the stored text can recompute `record_hash` without
//! trusting our serializer. Optional fields are omitted, never `null`, so two
//! producers cannot disagree about absent values.

use serde::{Deserialize, Serialize};
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::OffsetDateTime;
use uuid::Uuid;

use super::merkle::{sha256, Hash};
use super::redaction::RedactionKey;

/// The `schema` value of every record this version writes.
pub const SCHEMA: &str = "verdict.audit.v1";

/// RFC 3339 UTC with exactly six fractional digits, e.g. `2026-11-22T10:44:11.000123Z`.
const AT_FORMAT: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    Decision,
    ReviewResolution,
    PolicyReload,
    KeyChange,
}

/// One audit record. Build it with [`AuditRecord::new`] and fill the fields
/// that apply; `None` fields are left out of the canonical bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    pub schema: String,
    #[serde(with = "uuid_text")]
    pub record_id: Uuid,
    pub kind: RecordKind,
    /// RFC 3339 UTC with microseconds; see [`format_at`].
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_hash: Option<String>,
    /// `sha256:<hex>` of the decision's captured input (`audit_inputs`), when
    /// inputs are captured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_hash: Option<String>,
    /// The API key name (`proxy` for proxied decisions). Covered by the
    /// record hash; reads take it from the canonical bytes ([`principal_of`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// `{type, params}` with redacted params (see [`redact`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforced: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_decide: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage_score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claims_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claims_supported: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// `ext_authz` for a decision Envoy asked for; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_id: Option<String>,
    /// Free JSON: reload errors, key change facts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// A record that cannot be written as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordError(pub String);

impl AuditRecord {
    /// A record with a fresh time-ordered id (UUID v7), stamped now.
    pub fn new(kind: RecordKind) -> AuditRecord {
        AuditRecord::new_at(kind, OffsetDateTime::now_utc())
    }

    /// A record with a fresh time-ordered id (UUID v7), stamped at `at`.
    ///
    /// v7 rather than v4: ids generated one after another sort one after
    /// another, so the `record_id` UNIQUE index grows at its right edge
    /// instead of touching a random page per record in every group commit.
    /// The id reveals its creation millisecond, which `at` already states.
    pub fn new_at(kind: RecordKind, at: OffsetDateTime) -> AuditRecord {
        AuditRecord {
            schema: SCHEMA.to_string(),
            record_id: Uuid::now_v7(),
            kind,
            at: format_at(at),
            request_id: None,
            request_hash: None,
            input_hash: None,
            principal: None,
            action: None,
            decision: None,
            reason: None,
            enforced: None,
            would_decide: None,
            coverage_score: None,
            claims_total: None,
            claims_supported: None,
            policy_revision: None,
            route: None,
            source: None,
            review_id: None,
            detail: None,
        }
    }

    /// Checks the fields JCS cannot make deterministic on its own.
    pub fn validate(&self) -> Result<(), RecordError> {
        if self.schema != SCHEMA {
            return Err(RecordError(format!(
                "schema: expected {SCHEMA:?}, got {:?}",
                self.schema
            )));
        }
        if self.record_id.is_nil() {
            return Err(RecordError("record_id: must not be nil".into()));
        }
        if !valid_at(&self.at) {
            return Err(RecordError(format!(
                "at: {:?} is not RFC 3339 UTC with microseconds",
                self.at
            )));
        }
        if let Some(c) = self.coverage_score {
            if !c.is_finite() {
                return Err(RecordError("coverage_score: must be finite".into()));
            }
        }
        Ok(())
    }

    /// The RFC 8785 canonical JSON of this record.
    pub fn canonical(&self) -> Result<String, RecordError> {
        self.validate()?;
        super::canonical::record(self)
    }
}

/// Formats a time as the record `at` string.
pub fn format_at(at: OffsetDateTime) -> String {
    let utc = at.to_offset(time::UtcOffset::UTC);
    // The format has only numeric components, so formatting cannot fail for a
    // valid date; fall back to the epoch text rather than panic.
    utc.format(AT_FORMAT)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000000Z".to_string())
}

/// Checks the shape `YYYY-MM-DDTHH:MM:SS.ffffffZ` and the field ranges.
pub fn valid_at(at: &str) -> bool {
    let b = at.as_bytes();
    if b.len() != 27 {
        return false;
    }
    let shape = b"dddd-dd-ddTdd:dd:dd.ddddddZ";
    let ok = b.iter().zip(shape.iter()).all(|(c, s)| match s {
        b'd' => c.is_ascii_digit(),
        _ => c == s,
    });
    if !ok {
        return false;
    }
    let num = |r: std::ops::Range<usize>| at.get(r).and_then(|s| s.parse::<u32>().ok());
    matches!(
        (num(5..7), num(8..10), num(11..13), num(14..16), num(17..19)),
        (
            Some(1..=12),
            Some(1..=31),
            Some(0..=23),
            Some(0..=59),
            Some(0..=60)
        )
    )
}

/// `record_hash` = SHA-256 of the canonical bytes.
pub fn record_hash(canonical: &str) -> Hash {
    sha256(canonical.as_bytes())
}

/// `sha256:<lowercase hex>`.
pub fn hash_string(h: &Hash) -> String {
    let mut buf = [0u8; 71];
    buf[..7].copy_from_slice(b"sha256:");
    // 32 bytes always fit 64 hex digits.
    let _ = hex::encode_to_slice(h, &mut buf[7..]);
    // Prefix and hex digits are ASCII; the fallback is unreachable.
    String::from_utf8(buf.to_vec()).unwrap_or_default()
}

/// Parses `sha256:<64 lowercase hex>`.
pub fn parse_hash_string(s: &str) -> Option<Hash> {
    let hex_part = s.strip_prefix("sha256:")?;
    if hex_part.len() != 64 || hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let bytes = hex::decode(hex_part).ok()?;
    bytes.try_into().ok()
}

/// Replaces the values at `paths` inside `params` by `hmac-sha256:<hex>` of
/// their canonical JSON under `key` (see [`super::redaction`]). Paths are
/// dotted, relative to the action: `params.card_number` (a leading `params.`
/// is optional). Missing paths are left alone.
pub fn redact(params: &mut serde_json::Value, paths: &[String], key: &RedactionKey) {
    for path in paths {
        let rel = path.strip_prefix("params.").unwrap_or(path);
        if rel.is_empty() {
            continue;
        }
        let pointer: String = rel
            .split('.')
            .map(|seg| format!("/{}", seg.replace('~', "~0").replace('/', "~1")))
            .collect();
        let Some(cur) = params.pointer_mut(&pointer) else {
            continue;
        };
        let canonical = serde_json_canonicalizer::to_vec(&*cur).unwrap_or_default();
        *cur = serde_json::Value::String(key.tag(&canonical));
    }
}

/// The `principal` field of stored canonical record bytes: the hashed
/// record is the only place a record's principal is read from. `None` when
/// the record has none (policy reloads, key changes) or the bytes are not a
/// record, so a damaged row never names an owner.
pub fn principal_of(canonical: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Principal {
        principal: Option<String>,
    }
    serde_json::from_str::<Principal>(canonical)
        .ok()
        .and_then(|p| p.principal)
}

/// Serde for `Uuid` as its hyphenated text, without the `uuid/serde` feature.
pub mod uuid_text {
    use serde::{Deserialize as _, Deserializer, Serializer};
    use uuid::Uuid;

    pub fn serialize<S: Serializer>(id: &Uuid, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&id.hyphenated())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Uuid, D::Error> {
        let text = String::deserialize(d)?;
        let id = Uuid::try_parse(&text).map_err(serde::de::Error::custom)?;
        if id.hyphenated().to_string() != text {
            return Err(serde::de::Error::custom(
                "uuid must be lowercase hyphenated",
            ));
        }
        Ok(id)
    }
}
