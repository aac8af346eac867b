//! Request hygiene: refuse, before routing, whatever the gate could read
//! differently from the upstream.
//!
//! A gate is only as good as its agreement with the service behind it about
//! what a request *is*. Frameworks disagree at the edges: Tomcat and Spring
//! cut `;jsessionid=...` path parameters, ASP.NET and some Python servers
//! treat `\` as `/`, Express honours `X-HTTP-Method-Override`, Go's
//! `encoding/json` binds `AMOUNT` to `amount`, and a form parser reads
//! `&amount=6000&` inside a body the gate parsed as JSON. Rather than model
//! every upstream, the proxy is stricter than all of them: it refuses any
//! request whose path, method or body some upstream could read in a way the
//! gate did not check. Each check here is a pure function of the request
//! parts; the proxy decides whether a refusal is audited (it is when the
//! request could reach a gated route).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use http::header::CONTENT_TYPE;
use http::HeaderMap;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use unicode_normalization::UnicodeNormalization;

/// Headers that ask a framework to treat a request as another method.
pub const OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Headers that ask a framework (Symfony, IIS URL Rewrite) to route the
/// request to another path than its request line names.
pub const PATH_OVERRIDE_HEADERS: [&str; 2] = ["x-original-url", "x-rewrite-url"];

/// The path another header asks the upstream to route to, if any.
pub fn path_override(headers: &HeaderMap) -> Option<String> {
    if headers.is_empty() {
        // The raw pass-through's screen has looked already (no lookup by
        // name, which parses the name, in an empty map).
        return None;
    }
    PATH_OVERRIDE_HEADERS.iter().find_map(|name| {
        headers
            .get(*name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    })
}

/// Why a path is refused, for the 400 message. `None` means the path is
/// unambiguous.
pub fn path_problem(raw_path: &str) -> Option<&'static str> {
    const TRAILING_DOT: &str = "a segment ending in \".\" or whitespace, which some servers trim";
    // The common case, on every pass-through request: no escape, no `\`,
    // no `;` (and hyper has refused raw spaces and control bytes), so only a
    // trailing dot can be wrong. No allocation.
    if !raw_path.bytes().any(|b| matches!(b, b'%' | b'\\' | b';')) {
        let dotted = raw_path
            .split('/')
            .any(|seg| seg.ends_with('.') && seg != "." && seg != "..");
        return dotted.then_some(TRAILING_DOT);
    }
    let lower = raw_path.to_ascii_lowercase();
    if raw_path.contains('\\') || lower.contains("%5c") {
        return Some("a backslash, which some servers read as \"/\"");
    }
    if raw_path.contains(';') || lower.contains("%3b") {
        return Some("a \";\" path parameter, which some servers cut off before routing");
    }
    if lower.contains("%2f") {
        return Some("an encoded \"/\", which some servers decode before routing");
    }
    for seg in raw_path.split('/') {
        let bytes = percent_decode_bytes(seg);
        let Ok(text) = String::from_utf8(bytes) else {
            return Some("an escape that does not decode to UTF-8");
        };
        if text.chars().any(char::is_control) {
            return Some("a control character (such as NUL or a tab)");
        }
        if has_escape(&text) {
            return Some("a double-encoded escape, which some servers decode twice");
        }
        let is_dot_segment = text == "." || text == "..";
        if !is_dot_segment && (text.ends_with('.') || text.ends_with(char::is_whitespace)) {
            return Some(TRAILING_DOT);
        }
        if text.starts_with(char::is_whitespace) {
            return Some("a segment starting with whitespace, which some servers trim");
        }
    }
    None
}

/// Whether `s` still holds a `%XX` escape.
fn has_escape(s: &str) -> bool {
    let b = s.as_bytes();
    b.windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit())
}

/// `%XX` escapes decoded to bytes; malformed escapes kept as written.
fn percent_decode_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The method a request asks for besides its own, from the override headers
/// or a `_method` query parameter. `Err` when it asks for several.
pub fn override_method(headers: &HeaderMap, query: Option<&str>) -> Result<Option<String>, String> {
    let mut found: Vec<String> = Vec::new();
    for name in OVERRIDE_HEADERS.iter().filter(|_| !headers.is_empty()) {
        for v in headers.get_all(*name) {
            found.push(
                String::from_utf8_lossy(v.as_bytes())
                    .trim()
                    .to_ascii_uppercase(),
            );
        }
    }
    if let Some(q) = query {
        found.extend(urlencoded_methods(q));
    }
    found.dedup();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => Err(format!(
            "the request asks for several methods: {}",
            found.join(", ")
        )),
    }
}

/// The `_method` values of `application/x-www-form-urlencoded` text (a query
/// string or a form body), uppercase. Pairs are split on `&` and on `;`
/// (which older Rack and Python parsers also take); a key counts when it
/// [`fold`]s to `_method`.
fn urlencoded_methods(text: &str) -> Vec<String> {
    let decode =
        |s: &str| String::from_utf8_lossy(&percent_decode_bytes(&s.replace('+', " "))).into_owned();
    let mut found = Vec::new();
    for pair in text.split(['&', ';']) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        // `_method` has 7 characters, however it is spelled.
        if k.len() < 7 {
            continue;
        }
        if fold(&decode(k)) == "_method" {
            found.push(decode(v).trim().to_ascii_uppercase());
        }
    }
    found
}

/// What a body's Content-Type says about where a framework could find
/// `_method` in it, read as loosely as any upstream reads it: every
/// `Content-Type` header, anywhere in its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `x-www-form-urlencoded` or `multipart/` appears.
    Form,
    /// `json` appears (Laravel reads a body as JSON when the header holds
    /// `/json` or `+json`).
    Json,
    /// Neither, or no Content-Type.
    Other,
}

/// The [`BodyKind`] of a request.
pub fn body_kind(headers: &HeaderMap) -> BodyKind {
    let mut kind = BodyKind::Other;
    for v in headers.get_all(CONTENT_TYPE) {
        let text = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
        if text.contains("x-www-form-urlencoded") || text.contains("multipart/") {
            return BodyKind::Form;
        }
        if text.contains("json") {
            kind = BodyKind::Json;
        }
    }
    kind
}

/// Why a body of media type `media` is refused as a method override, if it
/// is: a JSON body whose top-level object has a key that [`fold`]s to
/// `_method` (Laravel, Express `method-override` with a body getter), a form
/// body with a `_method` field (Rails, Laravel, Express), or a multipart body
/// that mentions `method` at all. A body that says JSON but does not parse
/// is refused when it mentions `method` or holds a `\u` escape, since a
/// lenient parser could still find `_method` in it. `parsed` is the body
/// when the caller has parsed it already.
pub fn body_method_override(media: &str, bytes: &[u8], parsed: Option<&Value>) -> Option<String> {
    let mentions = |needle: &[u8]| {
        bytes
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
    };
    if media.contains("json") {
        let owned;
        let value = match parsed {
            Some(v) => v,
            None => match serde_json::from_slice::<Value>(bytes) {
                Ok(v) => {
                    owned = v;
                    &owned
                }
                Err(_) if mentions(b"method") || mentions(b"\\u") => {
                    return Some(
                        "the body says JSON, is not JSON, and could still name _method to a lenient parser"
                            .into(),
                    );
                }
                Err(_) => return None,
            },
        };
        let key = value
            .as_object()?
            .iter()
            .find(|(k, _)| fold(k) == "_method")?;
        let asked = match key.1 {
            Value::String(m) => m.trim().to_ascii_uppercase(),
            other => other.to_string(),
        };
        return Some(format!(
            "the body asks to be treated as {asked} with {:?} (method override), which this proxy refuses",
            key.0
        ));
    }
    if media == "application/x-www-form-urlencoded" {
        let text = String::from_utf8_lossy(bytes);
        let asked = urlencoded_methods(&text);
        return (!asked.is_empty()).then(|| {
            format!(
                "the form body asks to be treated as {} with _method (method override), which this proxy refuses",
                asked.join(", ")
            )
        });
    }
    if media.starts_with("multipart/") && mentions(b"method") {
        return Some(
            "the multipart body could carry a _method field (method override), which this proxy refuses"
                .into(),
        );
    }
    None
}

/// The text of a body that a lenient JSON reader would take for a JSON
/// object whatever its `Content-Type`: decoded the way Python's
/// `json.loads` decodes bytes (`json.detect_encoding`: a UTF-32, UTF-16 or
/// UTF-8 byte order mark, else UTF-16 or UTF-32 by the NUL bytes among the
/// first four, else UTF-8), and `{` its first character after whitespace.
/// `None` for any other body. Undecodable units become U+FFFD.
pub fn sniffed_json_object(bytes: &[u8]) -> Option<String> {
    if !has_bom_or_nul(bytes) {
        // The common case: look before copying.
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
        if *first != b'{' {
            return None;
        }
    }
    let text = lenient_text(bytes);
    text.trim_start().starts_with('{').then_some(text)
}

/// Whether a body that begins with `prefix` is one [`sniffed_json_object`]
/// would read as a JSON object: `None` while the prefix is too short to
/// tell (no character but whitespace yet, or fewer than the four bytes that
/// decide the encoding) and more of the body may follow (`complete` false).
pub fn prefix_opens_object(prefix: &[u8], complete: bool) -> Option<bool> {
    if prefix.len() < 4 && !complete {
        return None;
    }
    match lenient_text(prefix).trim_start().chars().next() {
        Some(c) => Some(c == '{'),
        None if complete => Some(false),
        None => None,
    }
}

/// A byte order mark, or a NUL among the first four bytes: not plain UTF-8.
fn has_bom_or_nul(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xEF, 0xBB, 0xBF])
        || bytes.starts_with(&[0xFE, 0xFF])
        || bytes.starts_with(&[0xFF, 0xFE])
        || bytes.iter().take(4).any(|b| *b == 0)
}

/// Bytes decoded as Python's `json.loads` decodes them
/// (`json.detect_encoding`). Undecodable units become U+FFFD.
fn lenient_text(bytes: &[u8]) -> String {
    fn units16(b: &[u8], be: bool) -> String {
        let units = b.chunks_exact(2).map(|c| {
            let pair = [c[0], c[1]];
            if be {
                u16::from_be_bytes(pair)
            } else {
                u16::from_le_bytes(pair)
            }
        });
        char::decode_utf16(units)
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect()
    }
    fn units32(b: &[u8], be: bool) -> String {
        b.chunks_exact(4)
            .map(|c| {
                let quad = [c[0], c[1], c[2], c[3]];
                let n = if be {
                    u32::from_be_bytes(quad)
                } else {
                    u32::from_le_bytes(quad)
                };
                char::from_u32(n).unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect()
    }
    match bytes {
        [0, 0, 0xFE, 0xFF, rest @ ..] => units32(rest, true),
        [0xFF, 0xFE, 0, 0, rest @ ..] => units32(rest, false),
        [0xFE, 0xFF, rest @ ..] => units16(rest, true),
        [0xFF, 0xFE, rest @ ..] => units16(rest, false),
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8_lossy(rest).into_owned(),
        [0, 0, _, _, ..] => units32(bytes, true),
        [0, _, _, _, ..] => units16(bytes, true),
        [_, 0, 0, 0, ..] => units32(bytes, false),
        [_, 0, _, _, ..] => units16(bytes, false),
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// The media type of the request body (`type/subtype`, lowercase, no
/// parameters); `Err` when the header is repeated or unreadable.
pub fn media_type(headers: &HeaderMap) -> Result<Option<String>, String> {
    let mut values = headers.get_all(CONTENT_TYPE).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("the request has more than one Content-Type header".into());
    }
    let text = first
        .to_str()
        .map_err(|_| "the Content-Type header is not ASCII".to_string())?;
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence.is_empty() || essence.contains(',') {
        return Err(format!("the Content-Type {text:?} is not one media type"));
    }
    Ok(Some(essence))
}

/// Why the parameters of the request's Content-Type are refused on a gated
/// route, if they are; `None` when there are none or they are fine. Call
/// after [`media_type`] has accepted the header.
///
/// An upstream that looks for a media type anywhere in the header reads
/// `application/json; x=application/x-www-form-urlencoded` as a form, and one
/// that honours a charset decodes the body differently from the gate (which
/// reads UTF-8). So the only parameter a gated body may carry is one
/// `charset` whose value is `utf-8` (any case, optionally quoted), and a
/// `multipart/*` body one `boundary` without `/` besides. Any other
/// parameter, a repeated one, and anything that does not parse as RFC 9110
/// parameters (`name=value` with no space around `=`) are refused.
pub fn parameter_problem(headers: &HeaderMap) -> Option<String> {
    let text = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let (essence, params) = text.split_once(';')?;
    let multipart = essence
        .trim()
        .to_ascii_lowercase()
        .starts_with("multipart/");
    let refuse = |what: String| {
        Some(format!(
            "the Content-Type {text:?} has {what}; a gated body may carry only charset=utf-8"
        ))
    };
    let (mut charset, mut boundary) = (false, false);
    let mut rest = params;
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        if rest.is_empty() {
            return None;
        }
        if let Some(r) = rest.strip_prefix(';') {
            rest = r;
            continue;
        }
        let end = rest.find(|c: char| !is_tchar(c)).unwrap_or(rest.len());
        let name = rest[..end].to_ascii_lowercase();
        let Some(after) = rest[end..].strip_prefix('=').filter(|_| !name.is_empty()) else {
            return refuse("parameters that do not parse as name=value".into());
        };
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted_string(quoted) {
                Some(v) => v,
                None => return refuse("an unterminated quoted parameter value".into()),
            }
        } else {
            let end = after.find(|c: char| !is_tchar(c)).unwrap_or(after.len());
            (after[..end].to_string(), &after[end..])
        };
        rest = after.trim_start_matches([' ', '\t']);
        if !(rest.is_empty() || rest.starts_with(';')) || value.is_empty() {
            return refuse("parameters that do not parse as name=value".into());
        }
        match name.as_str() {
            "charset" if charset => return refuse("charset twice".into()),
            "charset" if value.eq_ignore_ascii_case("utf-8") => charset = true,
            "charset" => return refuse(format!("charset {value:?}, not utf-8")),
            "boundary" if multipart && !boundary && !value.contains('/') => boundary = true,
            _ => return refuse(format!("the parameter {name}={value:?}")),
        }
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// The value of a quoted-string whose opening quote is already read, and
/// the text after its closing quote; `None` when it does not close.
fn quoted_string(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 1..])),
            '\\' => out.push(chars.next()?.1),
            c => out.push(c),
        }
    }
    None
}

/// Why a JSON body is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON at all.
    Invalid(String),
    /// JSON that two parsers could read differently.
    Ambiguous(String),
}

/// One object key that collides with another, exactly or once folded.
#[derive(Debug, Clone)]
struct Collision {
    /// JSON pointer of the object holding the keys.
    object: String,
    /// The folded key.
    folded: String,
    exact: bool,
}

/// Parses a JSON body and refuses it when some parser could read a field the
/// gate extracts differently: a key repeated exactly anywhere in the body
/// (parsers disagree on which copy wins), or keys that [`fold`] to the same
/// text (differing only in case, surrounding whitespace or invisible
/// characters) on the path to, or inside, an extracted field (forgiving
/// binders take either), or an extracted key that is missing while a
/// variant of it is present.
pub fn parse_json(bytes: &[u8], pointers: &[&str]) -> Result<Value, BodyError> {
    let collisions = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = ValueSeed {
        pointer: String::new(),
        collisions: &collisions,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| BodyError::Invalid(e.to_string()))?;
    for c in collisions.borrow().iter() {
        if c.exact {
            return Err(BodyError::Ambiguous(format!(
                "key {:?} appears twice in the object at {:?}",
                c.folded,
                display_pointer(&c.object)
            )));
        }
        for p in pointers {
            if on_path(p, &c.object, &c.folded) {
                return Err(BodyError::Ambiguous(format!(
                    "keys that differ only in case, surrounding whitespace or invisible characters ({:?}) in the object at {:?}, which the field {:?} reads",
                    c.folded,
                    display_pointer(&c.object),
                    display_pointer(p)
                )));
            }
        }
    }
    for p in pointers {
        if let Some(variant) = case_variant_of_missing(&value, p) {
            return Err(BodyError::Ambiguous(format!(
                "the field {:?} is missing but {variant:?} is present",
                display_pointer(p)
            )));
        }
    }
    Ok(value)
}

fn display_pointer(p: &str) -> &str {
    if p.is_empty() {
        "/"
    } else {
        p
    }
}

/// Whether a collision of `folded` keys in the object at `object` touches
/// the field at `pointer`: on its path, or inside it.
fn on_path(pointer: &str, object: &str, folded: &str) -> bool {
    if object == pointer || object.starts_with(&format!("{pointer}/")) || pointer.is_empty() {
        return true;
    }
    let mut prefix = String::new();
    for token in pointer.split('/').skip(1) {
        if prefix == object {
            return fold(&unescape(token)) == folded;
        }
        prefix.push('/');
        prefix.push_str(token);
    }
    false
}

/// Walks `pointer`; where a key is missing, a key of the same object that
/// folds to the same text is returned.
fn case_variant_of_missing(root: &Value, pointer: &str) -> Option<String> {
    let mut cur = root;
    for token in pointer.split('/').skip(1) {
        let key = unescape(token);
        cur = match cur {
            Value::Object(m) => match m.get(&key) {
                Some(v) => v,
                None => {
                    let f = fold(&key);
                    return m.keys().find(|k| fold(k) == f).cloned();
                }
            },
            Value::Array(a) => a.get(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    None
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A key as the most forgiving binder reads it: without leading and
/// trailing whitespace or control characters (pydantic and Python's
/// `str.strip` trim them), without invisible characters anywhere (zero-width
/// spaces, joiners, soft hyphens, the BOM: Unicode's default-ignorable code
/// points), NFKC-folded (`ａmount` is `amount`), in Unicode lowercase, with
/// the long s that Go's `EqualFold` treats as `s`.
fn fold(key: &str) -> String {
    let edge = |c: char| c.is_whitespace() || c.is_control() || is_invisible(c);
    if key.is_ascii() {
        return key.trim_matches(edge).to_ascii_lowercase();
    }
    let visible: String = key.chars().filter(|c| !is_invisible(*c)).collect();
    visible
        .nfkc()
        .collect::<String>()
        .trim_matches(edge)
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| if c == '\u{17F}' { 's' } else { c })
        .collect()
}

/// Unicode's `Default_Ignorable_Code_Point`: characters that render as
/// nothing, which some parsers and sanitizers drop.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{AD}'
            | '\u{34F}'
            | '\u{61C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Deserializes a `Value` while noting every key collision.
struct ValueSeed<'a> {
    pointer: String,
    collisions: &'a RefCell<Vec<Collision>>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let seed = ValueSeed {
                pointer: format!("{}/{}", self.pointer, out.len()),
                collisions: self.collisions,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let folded = fold(&key);
            if let Some(first) = seen.get(&folded) {
                self.collisions.borrow_mut().push(Collision {
                    object: self.pointer.clone(),
                    folded: folded.clone(),
                    exact: *first == key,
                });
            } else {
                seen.insert(folded, key.clone());
            }
            let seed = ValueSeed {
                pointer: format!("{}/{}", self.pointer, escape(&key)),
                collisions: self.collisions,
            };
            let value = map.next_value_seed(seed)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests;
