//! Sentence splitting: where a period, a line break or a block start ends a
//! sentence, and the abbreviations after which a period does not.

use super::*;

// === sentences ===

/// Abbreviations after which a period does not end a sentence (lowercase
/// ASCII). A `match` on the bytes (length, then contents) rather than a scan
/// of the list with a case-insensitive compare: it runs at every period.
fn is_listed_abbreviation(lower: &[u8]) -> bool {
    matches!(
        lower,
        b"mr"
            | b"mrs"
            | b"ms"
            | b"dr"
            | b"prof"
            | b"sr"
            | b"jr"
            | b"st"
            | b"mt"
            | b"vs"
            | b"etc"
            | b"e.g"
            | b"i.e"
            | b"eg"
            | b"ie"
            | b"inc"
            | b"ltd"
            | b"co"
            | b"corp"
            | b"no"
            | b"nos"
            | b"vol"
            | b"fig"
            | b"approx"
            | b"dept"
            | b"est"
            | b"gen"
            | b"gov"
            | b"sen"
            | b"rep"
            | b"rev"
            | b"jan"
            | b"feb"
            | b"mar"
            | b"apr"
            | b"jun"
            | b"jul"
            | b"aug"
            | b"sep"
            | b"sept"
            | b"oct"
            | b"nov"
            | b"dec"
            | b"u.s"
            | b"u.k"
            | b"a.m"
            | b"p.m"
            | b"ph.d"
            | b"cf"
            | b"al"
            | b"op"
            | b"ca"
            | b"lt"
            | b"col"
            | b"capt"
            | b"sgt"
            | b"p"
            | b"pp"
            | b"univ"
            | b"assn"
            | b"bros"
            | b"ave"
            | b"blvd"
            | b"rd"
            | b"hon"
            | b"pres"
    )
}

/// True when the line starts like a list item or heading, which always starts
/// a new sentence.
fn is_block_start(line: &str) -> bool {
    // Spaces and tabs only: trimming newlines too would rescan every
    // following blank line (quadratic on a body of newlines).
    let t = line.trim_start_matches([' ', '\t']);
    if t.starts_with("- ")
        || t.starts_with("* ")
        || t.starts_with("+ ")
        || t.starts_with('#')
        || t.starts_with("• ")
    {
        return true;
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0
        && digits < 4
        && matches!(t.as_bytes().get(digits), Some(b'.') | Some(b')'))
        && matches!(t.as_bytes().get(digits + 1), Some(b' ') | Some(b'\t'))
}

/// Can this byte start a newline or a sentence terminator? ASCII `\n . ! ?`,
/// or the lead byte of `…` (E2), `。` (E3), `！`/`？` (EF). Continuation
/// bytes never equal these.
pub(super) fn is_stop(b: u8) -> bool {
    matches!(b, b'\n' | b'.' | b'!' | b'?' | 0xE2 | 0xE3 | 0xEF)
}

/// Offset of the first [`is_stop`] byte at or after `from`. Eight bytes at a
/// time: a word with no byte `\n . ! ?` and no byte above 0x7F cannot hold
/// one and is skipped whole, so most of any prose costs a few operations
/// per eight bytes instead of a test per byte (this scan was about a tenth
/// of indexing).
pub(super) fn next_stop(bytes: &[u8], from: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // Exact: nonzero if and only if some byte of `v` is zero.
    let has_zero = |v: u64| v.wrapping_sub(LO) & !v & HI != 0;
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let v = u64::from_le_bytes(word);
        if v & HI != 0
            || has_zero(v ^ (LO * u64::from(b'\n')))
            || has_zero(v ^ (LO * u64::from(b'.')))
            || has_zero(v ^ (LO * u64::from(b'!')))
            || has_zero(v ^ (LO * u64::from(b'?')))
        {
            // A candidate; non-ASCII bytes other than E2/E3/EF are not stops.
            if let Some(k) = chunk.iter().position(|&x| is_stop(x)) {
                return Some(i + k);
            }
        }
        i += 8;
    }
    let k = bytes.get(i..)?.iter().position(|&x| is_stop(x))?;
    Some(i + k)
}

/// Splits `text` into sentences, returned as trimmed byte ranges into `text`.
///
/// Rules: a blank line, or a newline followed by a list item or heading,
/// always breaks (single newlines do too when `newline_breaks`). `.`, `!`, `?`
/// and `…` (plus closing quotes or brackets) break when followed by whitespace
/// and then an uppercase letter, digit, quote or bracket, unless the period
/// closes an abbreviation, a single-letter initial or a multi-dot acronym.
/// Decimals and URLs never break because their periods are not followed by
/// whitespace. A run longer than [`MAX_SENTENCE_BYTES`] with no break is cut
/// at whitespace into pieces no longer than that.
pub fn split_sentences(text: &str, newline_breaks: bool) -> Vec<(usize, usize)> {
    // Byte offsets where a new sentence starts; sized for ~60-byte sentences
    // so typical text does not regrow it.
    let mut cuts: Vec<usize> = Vec::with_capacity(text.len() / 48 + 2);
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut line_start = 0;
    // Byte positions only advance by whole characters, so `i`, `j` and `k`
    // are always char boundaries.
    while i < bytes.len() {
        let Some(stop) = next_stop(bytes, i) else {
            break;
        };
        i = stop;
        let b = i;
        let Some(c) = char_at(text, b) else {
            break;
        };
        if c == '\n' {
            if newline_breaks || newline_ends_sentence(text, line_start, b) {
                cuts.push(b + 1);
            }
            line_start = b + 1;
            i += 1;
            continue;
        }
        if matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？') {
            i = cut_after_terminator(text, b, c, line_start, &mut cuts);
            continue;
        }
        // A lead byte E2/E3/EF of some other character.
        i += c.len_utf8();
    }
    trimmed_ranges(text, cuts)
}

/// Whether the newline at byte `b` (its line starting at `line_start`) ends a sentence by itself.
#[inline]
fn newline_ends_sentence(text: &str, line_start: usize, b: usize) -> bool {
    let rest = &text[b + 1..];
    let blank = rest.trim_start_matches([' ', '\t', '\r']).starts_with('\n');
    let this_line = &text[line_start..b];
    blank
        || is_block_start(rest)
        || this_line.trim_start().starts_with('#')
        || this_line.trim_end().ends_with(':')
}

/// Pushes the cut the terminator `c` at byte `b` makes, if any; returns the byte to go on from.
#[inline]
fn cut_after_terminator(
    text: &str,
    b: usize,
    c: char,
    line_start: usize,
    cuts: &mut Vec<usize>,
) -> usize {
    let j = after_terminator_run(text, b + c.len_utf8());
    let next = char_at(text, j);
    if matches!(c, '。' | '！' | '？') {
        cuts.push(j);
        return j;
    }
    // "diet.These": a period glued between a lowercase letter and an
    // uppercase one is a missing space, not an abbreviation.
    let single = j == b + 1; // nothing swallowed after a one-byte '.'
    if c == '.' && single && next.is_some_and(char::is_uppercase) && two_lowercase_before(text, b) {
        cuts.push(j);
        return j;
    }
    // need whitespace next
    if !next.is_some_and(char::is_whitespace) {
        return j;
    }
    let mut k = j;
    while let Some(ck) = char_at(text, k).filter(|ck| ck.is_whitespace()) {
        k += ck.len_utf8();
    }
    let Some(nextc) = char_at(text, k) else {
        return k;
    };
    if can_start_sentence(nextc)
        && !after_list_marker(text, line_start, b)
        && !(c == '.' && single && is_abbreviation_before(text, b))
    {
        cuts.push(k);
    }
    k
}

/// The byte after the run of terminators and closing quotes or brackets that starts at `j`.
#[inline]
fn after_terminator_run(text: &str, mut j: usize) -> usize {
    // swallow runs of terminators and closing quotes/brackets
    while let Some(cj) = char_at(text, j).filter(|&cj| {
        matches!(
            cj,
            '.' | '!' | '?' | '…' | '"' | '\'' | ')' | ']' | '”' | '’' | '*'
        )
    }) {
        j += cj.len_utf8();
    }
    j
}

/// Whether the two characters before byte `b` are lowercase letters.
fn two_lowercase_before(text: &str, b: usize) -> bool {
    let mut back = text[..b].chars().rev();
    back.next().is_some_and(char::is_lowercase) && back.next().is_some_and(char::is_lowercase)
}

/// Whether `c`, the first character after a terminator and whitespace, can start a sentence.
fn can_start_sentence(c: char) -> bool {
    c.is_uppercase()
        || c.is_ascii_digit()
        || matches!(
            c,
            '"' | '\'' | '(' | '[' | '“' | '‘' | '*' | '#' | '-' | '•'
        )
        || !c.is_alphabetic() && !c.is_ascii_punctuation()
}

/// Whether the text from `line_start` to the terminator at `b` is a list number ("1.", "12)").
fn after_list_marker(text: &str, line_start: usize, b: usize) -> bool {
    // Only a short prefix can be a list marker; never rescan a
    // long line (that would be quadratic on hostile input).
    let marker = if b - line_start < 8 {
        text[line_start..b].trim()
    } else {
        ""
    };
    !marker.is_empty() && marker.len() < 4 && marker.bytes().all(|x| x.is_ascii_digit())
}

/// The trimmed, non-empty ranges between consecutive `cuts` (and the end of `text`).
fn trimmed_ranges(text: &str, mut cuts: Vec<usize>) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut prev = 0;
    cuts.push(text.len());
    for cut in cuts {
        if cut <= prev {
            continue;
        }
        push_bounded(text, prev, cut, &mut out);
        prev = cut;
    }
    out
}

/// The longest sentence, in bytes. A longer run with no sentence end (a
/// table flattened onto one line, a run-on answer) is cut at the last
/// whitespace before this length, so that the checks that read a sentence
/// word by word cost a bounded amount per sentence, however the text is
/// punctuated. Real sentences are far shorter.
pub(crate) const MAX_SENTENCE_BYTES: usize = 4096;

/// [`push_trimmed`] for `start..end`, in pieces of at most
/// [`MAX_SENTENCE_BYTES`].
fn push_bounded(text: &str, mut start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    while end - start > MAX_SENTENCE_BYTES {
        let mut limit = start + MAX_SENTENCE_BYTES;
        while !text.is_char_boundary(limit) {
            limit -= 1;
        }
        let cut = text
            .get(start..limit)
            .and_then(|seg| seg.rfind(char::is_whitespace))
            .map(|k| start + k)
            .filter(|&c| c > start)
            .unwrap_or(limit);
        push_trimmed(text, start, cut, out);
        start = cut;
    }
    push_trimmed(text, start, end, out);
}

fn push_trimmed(text: &str, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let Some(seg) = text.get(start..end) else {
        return;
    };
    let lead = seg.len() - seg.trim_start().len();
    let trimmed = seg.trim();
    if trimmed.is_empty() || !trimmed.chars().any(char::is_alphanumeric) {
        return;
    }
    out.push((start + lead, start + lead + trimmed.len()));
}

/// Is the word ending just before the period at byte `dot` an abbreviation,
/// an initial, or part of a dotted acronym?
fn is_abbreviation_before(text: &str, dot: usize) -> bool {
    // Abbreviations are short: look back at most 32 bytes, so a long run of
    // dotted text stays linear.
    let mut from = dot.saturating_sub(32);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let before = &text[from..dot];
    let word_start = before
        .char_indices()
        .rev()
        .find(|&(_, c)| c.is_whitespace() || c == '(' || c == '"')
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &before[word_start..];
    if word.is_empty() {
        return false;
    }
    // The list is lowercase ASCII: an ASCII word matches exactly when it
    // does ignoring ASCII case (no lowercased copy); only other words take
    // the full Unicode lowercasing.
    let listed = if word.is_ascii() {
        // No listed abbreviation is longer than 8 bytes.
        let mut low = [0u8; 8];
        match low.get_mut(..word.len()) {
            Some(low) => {
                low.copy_from_slice(word.as_bytes());
                low.make_ascii_lowercase();
                is_listed_abbreviation(low)
            }
            None => false,
        }
    } else {
        is_listed_abbreviation(word.to_lowercase().as_bytes())
    };
    if listed {
        return true;
    }
    let mut cs = word.chars();
    // single-letter initial: "J."
    if let (Some(first), None) = (cs.next(), cs.next()) {
        return first.is_alphabetic() && first.is_uppercase();
    }
    // dotted acronym "U.S" / "e.g" already has an inner period
    word.contains('.')
        && word.chars().filter(|c| c.is_alphabetic()).count() <= 4
        && word.split('.').all(|p| p.chars().count() <= 2)
}
