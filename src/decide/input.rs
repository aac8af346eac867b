//! The decision's input as it arrives from outside: claims, sources and an
//! LLM answer, read from JSON (an API body, or the parts of a proxied body
//! that a route's extractors point at) and validated into engine types.
//!
//! Both doors use these, so a claim list the API refuses is refused by the
//! proxy with the same message. Shape errors (a missing field, a wrong type)
//! come out of serde with their field path ([`DecideError::Malformed`]);
//! values that parse but cannot be accepted (an empty claim, a duplicate
//! source id) are [`DecideError::Invalid`], each naming the field.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::DecideError;
use crate::engine;
use crate::evidence::{Content, Resolved, SourceRef};

/// A claim: `{text, id?, citations?}`, or a bare string.
#[derive(Debug, Clone)]
pub struct ClaimIn {
    pub text: String,
    pub id: Option<String>,
    pub citations: Vec<CitationIn>,
}

#[derive(Debug, Clone, Deserialize)]
struct ClaimObject {
    text: String,
    id: Option<String>,
    citations: Option<Vec<CitationIn>>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct CitationIn {
    pub source_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
}

impl<'de> Deserialize<'de> for ClaimIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ClaimIn;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a claim object {text, id?, citations?} or a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ClaimIn, E> {
                Ok(ClaimIn {
                    text: v.to_string(),
                    id: None,
                    citations: Vec::new(),
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ClaimIn, A::Error> {
                let o = ClaimObject::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ClaimIn {
                    text: o.text,
                    id: o.id,
                    citations: o.citations.unwrap_or_default(),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of claims, deserialised element by element so that errors keep
/// their index (`claims[2].text`).
#[derive(Debug, Clone, Default)]
pub struct Claims(pub Vec<ClaimIn>);

impl<'de> Deserialize<'de> for Claims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Claims;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of claims")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Claims, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element::<ClaimIn>()? {
                    out.push(c);
                }
                Ok(Claims(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A source: `{source_id | id, type = "text", text | uri, checksum?}`.
#[derive(Debug, Clone, Deserialize)]
pub struct SourceIn {
    pub source_id: Option<String>,
    pub id: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub text: Option<String>,
    pub uri: Option<String>,
    pub checksum: Option<String>,
    /// Replay only (never read from the wire): the source was unavailable
    /// when the captured decision was made, for this reason.
    #[serde(skip)]
    pub unavailable: Option<String>,
    /// Replay only: the source is as a captured decision read it (`text`
    /// or `unavailable`, and the `uri` it was named by); nothing is read.
    #[serde(skip)]
    pub captured: bool,
}

impl SourceIn {
    /// A source the service reads from `uri` (a `sources_from` record).
    pub fn by_uri(id: &str, uri: String) -> SourceIn {
        SourceIn {
            source_id: Some(id.to_string()),
            id: None,
            kind: None,
            text: None,
            uri: Some(uri),
            checksum: None,
            unavailable: None,
            captured: false,
        }
    }

    /// Whether the source is sent under `id` (as `source_id` or `id`).
    pub fn is_named(&self, id: &str) -> bool {
        self.source_id.as_deref().or(self.id.as_deref()) == Some(id)
    }
}

/// An answer for output mode: a string, or `{text, citations?}`.
#[derive(Debug, Clone)]
pub struct AnswerIn {
    pub text: String,
    pub citations: Vec<CitationIn>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum AnswerShape {
    Text(String),
    Object {
        text: String,
        #[serde(default)]
        citations: Vec<CitationIn>,
    },
}

impl<'de> Deserialize<'de> for AnswerIn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match AnswerShape::deserialize(d) {
            Ok(AnswerShape::Text(text)) => Ok(AnswerIn {
                text,
                citations: vec![],
            }),
            Ok(AnswerShape::Object { text, citations }) => Ok(AnswerIn { text, citations }),
            Err(_) => Err(serde::de::Error::custom(
                "expected a string or an object {text, citations?}",
            )),
        }
    }
}

/// Reads one part of a justification (`claims`, `sources`, `answer`) from
/// JSON; a shape error names its path under `field`.
pub fn from_json<T: serde::de::DeserializeOwned>(
    field: &str,
    value: serde_json::Value,
) -> Result<T, DecideError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            DecideError::Malformed(format!("{field}: {inner}"))
        } else if path.starts_with('[') {
            DecideError::Malformed(format!("{field}{path}: {inner}"))
        } else {
            DecideError::Malformed(format!("{field}.{path}: {inner}"))
        }
    })
}

/// Validates claims and gives them ids (`c1`, `c2`, … for claims without one).
pub fn engine_claims(field: &str, claims: Vec<ClaimIn>) -> Result<Vec<engine::Claim>, DecideError> {
    if claims.is_empty() {
        return Err(DecideError::Invalid(format!("{field}: must not be empty")));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(claims.len());
    for (i, c) in claims.into_iter().enumerate() {
        if c.text.trim().is_empty() {
            return Err(DecideError::Invalid(format!(
                "{field}[{i}].text: must not be empty"
            )));
        }
        let id = c.id.unwrap_or_else(|| format!("c{}", i + 1));
        if id.is_empty() || !seen.insert(id.clone()) {
            return Err(DecideError::Invalid(format!(
                "{field}[{i}].id: {id:?} is empty or a duplicate"
            )));
        }
        for (j, cit) in c.citations.iter().enumerate() {
            if cit.source_id.is_empty() {
                return Err(DecideError::Invalid(format!(
                    "{field}[{i}].citations[{j}].source_id: must not be empty"
                )));
            }
        }
        out.push(engine::Claim {
            id,
            text: c.text,
            citations: c
                .citations
                .into_iter()
                .map(|c| engine::CallerCitation {
                    source_id: c.source_id,
                    quote: c.quote,
                })
                .collect(),
        });
    }
    Ok(out)
}

/// Validates sources: an id (`source_id` or `id`), unique; exactly one of
/// `text` or `uri`; `type` absent or `text`; a well-formed checksum.
pub fn source_refs(field: &str, sources: Vec<SourceIn>) -> Result<Vec<SourceRef>, DecideError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(sources.len());
    for (i, s) in sources.into_iter().enumerate() {
        let bad = |m: String| DecideError::Invalid(format!("{field}[{i}]{m}"));
        let id = match (s.source_id, s.id) {
            (Some(a), Some(b)) if a != b => return Err(bad(": source_id and id differ".into())),
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => return Err(bad(".source_id: missing (source_id or id)".into())),
        };
        if id.is_empty() {
            return Err(bad(".source_id: must not be empty".into()));
        }
        if !seen.insert(id.clone()) {
            return Err(bad(format!(".source_id: duplicate {id:?}")));
        }
        if let Some(kind) = &s.kind {
            if kind != "text" {
                return Err(bad(format!(".type: unsupported {kind:?} (only \"text\")")));
            }
        }
        let content = match (s.captured, s.text, s.uri, s.unavailable) {
            (false, Some(t), None, None) => Content::Inline(t),
            (false, None, Some(u), None) => Content::Uri(u),
            (true, Some(t), uri, None) => Content::Captured { uri, text: Ok(t) },
            (true, None, uri, Some(why)) => Content::Captured {
                uri,
                text: Err(why),
            },
            _ => return Err(bad(": exactly one of text or uri is required".into())),
        };
        if let Some(c) = &s.checksum {
            let ok = c
                .strip_prefix("sha256:")
                .map(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .unwrap_or(false);
            if !ok {
                return Err(bad(
                    ".checksum: must look like sha256:<64 hex digits>".into()
                ));
            }
        }
        out.push(SourceRef {
            id,
            content,
            checksum: s.checksum,
        });
    }
    Ok(out)
}

/// Engine sources from resolved ones; unavailable sources carry no text.
pub fn engine_sources(resolved: &[Resolved]) -> Vec<engine::Source> {
    resolved
        .iter()
        .map(|r| engine::Source {
            id: r.id.clone(),
            text: r.text.as_ref().ok().cloned(),
        })
        .collect()
}

/// Runs the engine off the async workers when the input is large, so a big
/// request cannot stall other connections.
pub async fn run_engine<T, F>(work_bytes: usize, f: F) -> Result<T, DecideError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    const INLINE_LIMIT: usize = 32 * 1024;
    if work_bytes <= INLINE_LIMIT {
        Ok(f())
    } else {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| DecideError::Internal(format!("engine task failed: {e}")))
    }
}
