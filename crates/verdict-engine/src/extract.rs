//! Output mode: an LLM answer split into checkable claims.
//!
//! An answer is prose with markdown, citation markers and filler. Scoring
//! "Hope this helps!" or "The passages do not say" as unsupported would flag
//! every honest answer, so questions, greetings, hedges, refusals and meta
//! statements are dropped, markdown is stripped (list items are kept as
//! sentences), and markers such as `[1]` or `[doc-a]` become citations bound
//! to the claim instead of words in it.

use super::text::split_sentences;
use super::{CallerCitation, Claim, Source};

/// Splits `answer` into claims `a1`, `a2`, … . A marker `[n]` cites the n-th
/// source (1-based, in the order given); `[id]` cites the source with that id.
pub fn extract_claims(answer: &str, sources: &[Source]) -> Vec<Claim> {
    let cleaned = drop_blocks(answer);
    let mut out = Vec::new();
    for (start, end) in split_sentences(&cleaned, true) {
        let Some(raw) = cleaned.get(start..end) else {
            continue;
        };
        let Some(line) = strip_block_markup(raw) else {
            continue;
        };
        let (text, citations) = take_markers(&line, sources);
        let text = strip_inline_markdown(&text);
        let text = collapse_ws(&text);
        let text = strip_passage_refs(&text);
        let text = strip_meta_prefix(&text);
        let text = strip_label(&text);
        if !is_claim(&text) {
            continue;
        }
        out.push(Claim {
            id: format!("a{}", out.len() + 1),
            text,
            citations,
        });
    }
    out
}

/// Removes fenced code blocks and table rows, which are not prose claims.
fn drop_blocks(answer: &str) -> String {
    let mut out = String::with_capacity(answer.len());
    let mut in_fence = false;
    for line in answer.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            out.push('\n');
            continue;
        }
        if in_fence
            || t.starts_with('|')
            || t.starts_with("---") && t.trim().chars().all(|c| c == '-')
        {
            out.push('\n');
            continue;
        }
        out.push_str(line);
    }
    out
}

/// Drops headings; strips list markers and blockquote signs.
fn strip_block_markup(s: &str) -> Option<String> {
    let mut t = s.trim();
    if t.starts_with('#') {
        return None;
    }
    while let Some(r) = t.strip_prefix('>') {
        t = r.trim_start();
    }
    for m in ["- ", "* ", "+ ", "• "] {
        if let Some(r) = t.strip_prefix(m) {
            t = r.trim_start();
        }
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && digits < 4 {
        if let Some(r) = t[digits..]
            .strip_prefix(". ")
            .or_else(|| t[digits..].strip_prefix(") "))
        {
            t = r.trim_start();
        }
    }
    Some(t.to_string())
}

/// Removes `[..]` markers that name a source (by 1-based index or id) and
/// returns them as citations, deduplicated, in order of first appearance.
fn take_markers(s: &str, sources: &[Source]) -> (String, Vec<CallerCitation>) {
    let mut text = String::with_capacity(s.len());
    let mut cites: Vec<CallerCitation> = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else {
            break;
        };
        let inner = &after[..close];
        // A markdown link "[text](url)" is not a marker.
        let is_link = after[close + 1..].starts_with('(');
        let mut ids: Vec<&str> = Vec::new();
        let mut all_known = !inner.trim().is_empty() && !is_link;
        for part in inner.split(',') {
            let p = part.trim();
            let by_index = p
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| sources.get(i))
                .map(|src| src.id.as_str());
            let by_id = sources
                .iter()
                .find(|src| src.id == p)
                .map(|src| src.id.as_str());
            match by_id.or(by_index) {
                Some(id) if all_known => ids.push(id),
                _ => all_known = false,
            }
        }
        text.push_str(&rest[..open]);
        if all_known {
            for id in ids {
                if !cites.iter().any(|c| c.source_id == id) {
                    cites.push(CallerCitation {
                        source_id: id.to_string(),
                        quote: None,
                    });
                }
            }
        } else {
            text.push_str(&rest[open..open + 1 + close + 1]);
        }
        rest = &after[close + 1..];
    }
    text.push_str(rest);
    (text, cites)
}

/// Strips emphasis, inline code and link targets: "[text](url)" → "text".
fn strip_inline_markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut closers = true; // false once no ')' is left: keeps this linear
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("](").filter(|_| closers) {
            match r.find(')') {
                Some(close) => {
                    rest = &r[close + 1..];
                    continue;
                }
                None => closers = false,
            }
        }
        let Some(c) = rest.chars().next() else { break };
        let drop = matches!(c, '*' | '`' | '[' | ']')
            || (c == '_' && (rest.starts_with("__") || out.ends_with('_')));
        if !drop {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

fn collapse_ws(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for w in s.split_whitespace() {
        // A marker removed before the final period leaves "text ." behind.
        let glue = w.starts_with(['.', ',', ';', '!']);
        if !out.is_empty() && !glue {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// Removes parenthesised references such as "(Passage 2)" or "(passages 1
/// and 3)": they point into the prompt, not at a fact.
fn strip_passage_refs(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut pos = 0;
    while let Some(rel) = lower[pos..].find("(passage") {
        let open = pos + rel;
        let Some(close) = s[open..].find(')') else {
            break;
        };
        out.push_str(&s[pos..open]);
        pos = open + close + 1;
    }
    out.push_str(&s[pos..]);
    collapse_ws(&out)
}

/// "Comfort Index: Sausalito scores 84" → "Sausalito scores 84": a short
/// capitalised label before a colon is a heading, not part of the claim.
fn strip_label(s: &str) -> String {
    if let Some(colon) = s.find(": ") {
        let label = &s[..colon];
        let words: Vec<&str> = label.split_whitespace().collect();
        if !words.is_empty()
            && words.len() <= 4
            && words.iter().all(|w| {
                w.chars()
                    .next()
                    .is_some_and(|c| c.is_uppercase() || c.is_ascii_digit())
            })
        {
            return capitalize(s[colon + 2..].trim_start());
        }
    }
    s.to_string()
}

/// "Based on the passages, X" → "X"; "According to passage 2, X" → "X".
fn strip_meta_prefix(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    const PREFIXES: &[&str] = &[
        "based on the",
        "based on this",
        "based on these",
        "according to the passage",
        "according to the passages",
        "according to passage",
        "according to the provided",
        "according to the given",
        "according to the context",
        "according to the information",
        "according to the source",
        "according to the document",
        "in summary",
        "in conclusion",
        "overall",
        "to summarize",
        "in short",
    ];
    // "It is important to note that X" / "Passage 2 explains that X" → "X".
    const THAT_PREFIXES: &[&str] = &[
        "it is important to note that",
        "it's important to note that",
        "it is worth noting that",
        "it should be noted that",
        "note that",
        "please note that",
    ];
    for p in THAT_PREFIXES {
        if lower.starts_with(p) {
            return capitalize(s[p.len()..].trim_start());
        }
    }
    if lower.starts_with("passage")
        || lower.starts_with("the passage")
        || lower.starts_with("both passage")
    {
        return match lower.find(" that ") {
            Some(i) => capitalize(s[i + 6..].trim_start()),
            None => String::new(),
        };
    }
    if PREFIXES.iter().any(|p| lower.starts_with(p)) {
        if let Some(comma) = s.find(',') {
            let rest = s[comma + 1..].trim_start();
            let mut cs = rest.chars();
            return match cs.next() {
                Some(f) => f.to_uppercase().chain(cs).collect(),
                None => String::new(),
            };
        }
    }
    s.to_string()
}

fn capitalize(s: &str) -> String {
    let mut cs = s.chars();
    match cs.next() {
        Some(f) => f.to_uppercase().chain(cs).collect(),
        None => String::new(),
    }
}

/// False for questions, greetings, hedges, refusals, meta statements and
/// fragments with nothing to check.
fn is_claim(s: &str) -> bool {
    let t = s.trim();
    if t.ends_with('?') || t.ends_with(':') {
        return false;
    }
    let words = t.split_whitespace().count();
    if words < 3 {
        return false;
    }
    let lower = t.to_lowercase().replace('\u{2019}', "'");
    !starts_with_filler(&lower) && !has_non_claim_phrase(&lower)
}

/// Openings of greetings, hedges, refusals and meta statements: a sentence
/// that starts with one (as a whole word) is no claim.
const FILLER_STARTS: &[&str] = &[
    "hi",
    "hello",
    "hey",
    "thanks",
    "thank you",
    "sure",
    "certainly",
    "of course",
    "great question",
    "good question",
    "i hope",
    "hope this",
    "let me know",
    "feel free",
    "i think",
    "i believe",
    "i guess",
    "i'm not sure",
    "i am not sure",
    "it seems",
    "perhaps",
    "maybe",
    "i'm sorry",
    "i am sorry",
    "sorry",
    "unfortunately",
    "as an ai",
    "i don't know",
    "i do not know",
    "i cannot",
    "i can't",
    "i'm unable",
    "i am unable",
    "please note",
    "note that",
    "here is",
    "here are",
    "here's",
    "to answer",
    "the answer to",
];

/// Whether `lower` opens with one of [`FILLER_STARTS`] as a whole word.
fn starts_with_filler(lower: &str) -> bool {
    FILLER_STARTS.iter().any(|p| {
        lower.starts_with(p) && lower[p.len()..].starts_with(|c: char| !c.is_alphanumeric())
    })
}

/// Phrases of refusals and statements about the passages or the question:
/// a sentence that holds one anywhere is no claim.
const NON_CLAIM_PHRASES: &[&str] = &[
    "not provided",
    "does not provide",
    "do not provide",
    "doesn't provide",
    "don't provide",
    "not mentioned",
    "does not mention",
    "do not mention",
    "doesn't mention",
    "no information",
    "not specified",
    "does not specify",
    "do not specify",
    "not enough information",
    "insufficient information",
    "unable to answer",
    "unable to provide",
    "unable to determine",
    "cannot be determined",
    "not possible to determine",
    "it is unclear",
    "it's unclear",
    "not clear from",
    "no specific information",
    "not contain",
    "does not contain",
    "do not contain",
    "does not include",
    "do not include",
    "does not state",
    "do not state",
    "not stated",
    "not explicitly",
    "no mention",
    "further information",
    "more information",
    "additional information",
    "cannot answer",
    "can't answer",
    "cannot provide",
    "can't provide",
    "without further",
    "without more",
    "the given passages",
    "the provided passages",
    "the passages provided",
    "the given context",
    "the provided context",
    "passage",
    "the question",
    "the answer is",
];

/// Whether `lower` contains one of [`NON_CLAIM_PHRASES`] anywhere.
fn has_non_claim_phrase(lower: &str) -> bool {
    NON_CLAIM_PHRASES.iter().any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(ids: &[&str]) -> Vec<Source> {
        ids.iter()
            .map(|id| Source {
                id: (*id).to_string(),
                text: Some(String::new()),
            })
            .collect()
    }

    #[test]
    fn extracts_claims_and_markers() {
        let sources = src(&["doc-a", "doc-b"]);
        let answer = "Hello! Great question.\n\n## Refunds\n\n- Refunds take **5 days** [1].\n- Orders ship from Berlin [doc-b].\n\nDo you need more help? I hope this helps!";
        let claims = extract_claims(answer, &sources);
        let texts: Vec<&str> = claims.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["Refunds take 5 days.", "Orders ship from Berlin."]);
        assert_eq!(claims[0].id, "a1");
        assert_eq!(claims[0].citations[0].source_id, "doc-a");
        assert_eq!(claims[1].citations[0].source_id, "doc-b");
    }

    #[test]
    fn drops_refusals_and_keeps_facts() {
        let answer = "Based on the given passages, the store opens at 9 am. However, the passages do not mention the closing time. I cannot answer that.";
        let claims = extract_claims(answer, &[]);
        let texts: Vec<&str> = claims.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["The store opens at 9 am."]);
    }

    #[test]
    fn unknown_brackets_stay_in_text() {
        let claims = extract_claims("The array [x] is sorted in place.", &src(&["s1"]));
        assert_eq!(claims[0].text, "The array x is sorted in place.");
        assert!(claims[0].citations.is_empty());
    }

    #[test]
    fn survives_odd_input() {
        for s in [
            "",
            "[",
            "]",
            "[]",
            "[1",
            "```",
            "**",
            "# ",
            "\u{0}",
            "🎉🎉🎉 [1] 🎉",
            "1. ",
            "[](",
            "a](b",
        ] {
            let _ = extract_claims(s, &src(&["a"]));
        }
    }
}
