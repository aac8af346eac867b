//! The parse cache returns what a fresh parse returns, never another text's
//! parse (even when two texts hash alike), never a parse held in another
//! lexicon's ids, keeps a text only when it comes again, and stays within
//! its bounds.

use super::*;

/// Runs `f` with the thread's cache empty, then empties it again and lifts
/// the hooks, so tests on one thread do not see each other's entries.
fn isolated<R>(f: impl FnOnce() -> R) -> R {
    hooks::clear();
    let out = f();
    hooks::clear();
    hooks::FORCED_HASH.with(|h| h.set(None));
    hooks::DISABLED.with(|d| d.set(false));
    out
}

/// `text` parsed in a fresh request that first tokenises `before`, through
/// the cache or not: (the parse, the request's forms by local id, then its
/// stems by local id).
fn parse_after(before: &str, text: &str, cached: bool) -> (Parsed, Vec<String>) {
    let stems = text::stemmer();
    let _ = text::tokenize(before, &stems);
    let parsed = if cached {
        parse(text, &stems)
    } else {
        fresh(text, &stems)
    };
    let vocab = stems.vocab();
    let forms = (0u32..)
        .map(|i| vocab.norm(i).to_string())
        .take_while(|f| !f.is_empty());
    let stems = (0u32..)
        .map(|i| vocab.stem(i).to_string())
        .take_while(|s| !s.is_empty());
    (parsed, forms.chain(stems).collect())
}

fn same(a: &(Parsed, Vec<String>), b: &(Parsed, Vec<String>)) -> bool {
    format!("{:?}", a.0) == format!("{:?}", b.0) && a.1 == b.1
}

/// Parses `text` twice, each in a request of its own, so that the cache
/// keeps it; returns the second parse.
fn keep(text: &str) -> (Parsed, Vec<String>) {
    let _ = parse_after("", text, true);
    parse_after("", text, true)
}

const INVOICE: &str = "Invoice INV-20931, issued 03/05/2024 to Harlow Dental. \
    Total due: $1,450.55 (non-refundable). Don't pay twice; the nonessential \
    fee is non12345 and 12345 is the order. Mr. Bell's card was charged. \
    Delivery in 5days, a refund in 12hours; non12hours is a word.";

#[test]
fn a_hit_is_the_fresh_parse_with_the_same_ids() {
    isolated(|| {
        let befores = ["", "The order 12345 was paid twice.", "non12345 fee card"];
        for before in befores {
            hooks::clear();
            let fresh = parse_after(before, INVOICE, false);
            let hits = hooks::hits();
            let miss = keep(INVOICE);
            assert_eq!(hooks::hits(), hits, "the first two parses miss");
            assert_eq!(hooks::state().0, 1, "the second is kept");
            let hit = parse_after(before, INVOICE, true);
            assert_eq!(hooks::hits(), hits + 1, "the third parse is a hit");
            assert!(same(&fresh, &hit), "after {before:?}");
            assert!(same(&parse_after("", INVOICE, false), &miss));
        }
    });
}

#[test]
fn a_repeated_text_in_one_request_hits_and_keeps_its_ids() {
    isolated(|| {
        let hits = hooks::hits();
        let stems = text::stemmer();
        let a = parse(INVOICE, &stems);
        let b = parse(INVOICE, &stems);
        let c = parse(INVOICE, &stems);
        assert_eq!(
            hooks::hits(),
            hits + 1,
            "kept at the second, read at the third"
        );
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(format!("{a:?}"), format!("{c:?}"));
    });
}

#[test]
fn equal_hashes_never_return_another_texts_parse() {
    isolated(|| {
        hooks::FORCED_HASH.with(|h| h.set(Some(7)));
        let other = "Refunds are issued within 5 business days of 2024-03-05.";
        let hits = hooks::hits();
        let a = keep(INVOICE);
        // Its hash was seen, so the other text is kept at once.
        let b = parse_after("", other, true);
        assert_eq!(hooks::hits(), hits, "same hash, other text: a miss");
        assert_eq!(hooks::state().0, 2, "both kept under one hash");
        let b_again = parse_after("", other, true);
        let a_again = parse_after("", INVOICE, true);
        assert_eq!(hooks::hits(), hits + 2);
        assert!(same(&a, &a_again));
        assert!(same(&b, &b_again));
        assert!(same(&b, &parse_after("", other, false)));
        // A prefix and the text with one byte changed hash alike too.
        let prefix = &INVOICE[..INVOICE.len() - 1];
        let changed = INVOICE.replace("1,450.55", "1,450.56");
        for t in [prefix, changed.as_str()] {
            let hits = hooks::hits();
            assert!(same(&parse_after("", t, true), &parse_after("", t, false)));
            assert_eq!(hooks::hits(), hits);
        }
    });
}

/// Words none of the other texts here has, more than they have: a request
/// that tokenises them first gives a new lexicon as many forms as an entry
/// of another lexicon names, with other ids.
fn strangers() -> String {
    (0..200).map(|i| format!("zq{i} ")).collect()
}

#[test]
fn entries_of_another_lexicon_are_not_read() {
    isolated(|| {
        let _ = keep(INVOICE);
        // While `outer` holds the thread's lexicon, a request gets a new one:
        // the entry made in the other's ids must not be read.
        let outer = text::stemmer();
        let _ = text::tokenize("something else entirely", &outer);
        let hits = hooks::hits();
        let nested = parse_after(&strangers(), INVOICE, true);
        assert_eq!(hooks::hits(), hits, "another lexicon: a miss");
        assert!(same(&nested, &parse_after(&strangers(), INVOICE, false)));
        assert_eq!(hooks::state().0, 1, "the new lexicon's entry replaced it");
        drop(outer);
        // The nested request's lexicon is now the thread's: its entry hits.
        let again = parse_after(&strangers(), INVOICE, true);
        assert_eq!(hooks::hits(), hits + 1);
        assert!(same(&nested, &again));
    });
}

#[test]
fn a_lexicon_dropped_past_its_cap_takes_its_entries_out_of_use() {
    isolated(|| {
        let before = keep(INVOICE);
        // A request of more distinct forms than a lexicon keeps: its lexicon
        // is dropped when it ends (the text is too long to be kept itself).
        let many: String = (0..40_000).map(|i| format!("w{i} ")).collect();
        assert!(many.len() > MAX_TEXT);
        let _ = parse_after("", &many, true);
        let hits = hooks::hits();
        let after = parse_after(&strangers(), INVOICE, true);
        assert_eq!(hooks::hits(), hits, "a new lexicon: a miss");
        assert!(same(&after, &parse_after(&strangers(), INVOICE, false)));
        assert!(same(&before, &parse_after("", INVOICE, true)));
    });
}

#[test]
fn the_cache_stays_within_its_bounds() {
    isolated(|| {
        let check = || {
            let (entries, bytes, recounted, longest) = hooks::state();
            assert!(entries <= ENTRIES, "{entries} entries");
            assert!(bytes <= BYTES, "{bytes} bytes");
            assert_eq!(bytes, recounted);
            assert!(longest <= MAX_TEXT);
        };
        // Many short texts: the entry count binds.
        for i in 0..3 * ENTRIES {
            let _ = keep(&format!("Order {i} shipped on May {}.", i % 28 + 1));
            check();
        }
        assert_eq!(hooks::state().0, ENTRIES);
        // The most recently used entry survives the next evictions.
        let kept = "Order 0 is the one kept.";
        let _ = keep(kept);
        for i in 0..ENTRIES - 1 {
            let _ = parse_after("", kept, true);
            let _ = keep(&format!("Filler {i}."));
        }
        let hits = hooks::hits();
        let _ = parse_after("", kept, true);
        assert_eq!(hooks::hits(), hits + 1, "the used entry was kept");
        // Long texts: the byte budget binds.
        for i in 0..40 {
            let text = format!("Sentence {i} of a long page, with words. ").repeat(1400);
            assert!(text.len() <= MAX_TEXT);
            let _ = keep(&text);
            check();
        }
        assert!(hooks::state().0 < ENTRIES, "bytes, not entries, bind here");
        // A text over the limit is parsed but not kept.
        let long = "x".repeat(MAX_TEXT + 1);
        let (entries, bytes, ..) = hooks::state();
        let _ = keep(&long);
        assert_eq!(hooks::state().0, entries);
        assert_eq!(hooks::state().1, bytes);
        check();
    });
}

#[test]
fn the_disabled_cache_neither_keeps_nor_reads() {
    isolated(|| {
        hooks::DISABLED.with(|d| d.set(true));
        let hits = hooks::hits();
        for _ in 0..3 {
            let _ = parse_after("", INVOICE, true);
        }
        assert_eq!(hooks::hits(), hits);
        assert_eq!(hooks::state().0, 0);
    });
}

#[test]
fn a_text_parsed_once_is_not_kept() {
    isolated(|| {
        let text = |i: usize| format!("Order {i} shipped on May {}.", i % 28 + 1);
        for i in 0..=ONCE {
            let _ = parse_after("", &text(i), true);
        }
        assert_eq!(hooks::state().0, 0, "each text parsed once");
        // Text 0 is out of the last ONCE misses: parsed again, it is still
        // not kept; text ONCE, parsed again, is.
        let _ = parse_after("", &text(0), true);
        assert_eq!(hooks::state().0, 0);
        let _ = parse_after("", &text(ONCE), true);
        assert_eq!(hooks::state().0, 1);
    });
}
