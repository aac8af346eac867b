//! Every key the config file accepts, read off the file format itself.
//!
//! docs/configuration.md must name every key, and only keys that exist; a
//! test compares the two. Rather than a hand-kept list that can drift from
//! the structs, this module asks serde: a derived `Deserialize` for a struct
//! hands its field names to the deserializer (`deserialize_struct`), so a
//! deserializer that only records those names, and answers `None` for every
//! optional value, walks the whole `FileConfig` tree without any input.

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};

/// `section.key` for every key of the config file, plus the keys of the
/// `[[audit.witnesses]]` tables as `audit.witnesses.url` and so on.
pub fn file_keys() -> Vec<String> {
    let mut keys = Vec::new();
    // The walk ends with a `None` for every leaf, so it cannot fail on
    // values; an error would mean a field type this walker does not know.
    let _ = <super::FileConfig as serde::Deserialize>::deserialize(Recorder {
        prefix: String::new(),
        keys: &mut keys,
    });
    let _ = <super::FileWitness as serde::Deserialize>::deserialize(Recorder {
        prefix: "audit.witnesses".into(),
        keys: &mut keys,
    });
    keys.sort();
    keys
}

/// Records the fields of every struct it is asked for.
struct Recorder<'a> {
    prefix: String,
    keys: &'a mut Vec<String>,
}

#[derive(Debug)]
struct Unsupported(String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

impl de::Error for Unsupported {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Unsupported(msg.to_string())
    }
}

impl<'de> de::Deserializer<'de> for Recorder<'_> {
    type Error = Unsupported;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Unsupported> {
        Err(Unsupported(format!(
            "{}: not an optional value or a table",
            self.prefix
        )))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Unsupported> {
        visitor.visit_none()
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Unsupported> {
        if !self.prefix.is_empty() {
            for f in fields {
                self.keys.push(format!("{}.{f}", self.prefix));
            }
        }
        visitor.visit_map(Fields {
            prefix: self.prefix,
            fields: fields.iter(),
            current: None,
            keys: self.keys,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The fields of one struct, each visited once with a [`Recorder`].
struct Fields<'a> {
    prefix: String,
    fields: std::slice::Iter<'static, &'static str>,
    current: Option<&'static str>,
    keys: &'a mut Vec<String>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Unsupported;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Unsupported> {
        let Some(field) = self.fields.next() else {
            return Ok(None);
        };
        self.current = Some(field);
        seed.deserialize(de::value::StrDeserializer::<Unsupported>::new(field))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Unsupported> {
        let field = self.current.unwrap_or_default();
        let prefix = if self.prefix.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.prefix)
        };
        seed.deserialize(Recorder {
            prefix,
            keys: self.keys,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_section_and_leaf_is_found() {
        let keys = super::file_keys();
        for k in [
            "api.listen",
            "proxy.upstream",
            "review.approvals",
            "audit.witnesses",
            "audit.witnesses.url",
            "audit.witnesses.vkey",
            "authorize.unknown_action",
            "log.format",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
        }
        assert!(!keys.iter().any(|x| x == "api" || x.is_empty()), "{keys:?}");
    }
}
