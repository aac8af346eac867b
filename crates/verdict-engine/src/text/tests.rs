//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

use super::sentences::{is_stop, next_stop, MAX_SENTENCE_BYTES};
use super::*;

fn sents(text: &str) -> Vec<&str> {
    split_sentences(text, false)
        .into_iter()
        .map(|(a, b)| &text[a..b])
        .collect()
}

#[test]
fn stop_scan_matches_a_byte_by_byte_scan() {
    let texts = [
        "",
        "abc",
        "abcdefgh",
        "abcdefghi.",
        "Refunds are issued within 5 business days! Really? Yes.\nNext",
        "caf\u{e9} na\u{ef}ve r\u{e9}sum\u{e9} \u{2026} done\u{3002}\u{ff01}\u{ff1f} end",
        "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}x.",
        "\u{2019}quoted\u{201d} and \u{20ac}12 then ? at the very end of it!",
    ];
    for t in texts {
        let b = t.as_bytes();
        for from in 0..=b.len() {
            let naive = b[from..].iter().position(|&x| is_stop(x)).map(|k| from + k);
            assert_eq!(next_stop(b, from), naive, "{t:?} from {from}");
        }
    }
}

#[test]
fn golden_sentence_splits() {
    let cases: &[(&str, &[&str])] = &[
        (
            "Hello World. My name is Jonas.",
            &["Hello World.", "My name is Jonas."],
        ),
        (
            "What is your name? My name is Jonas.",
            &["What is your name?", "My name is Jonas."],
        ),
        ("There it is! I found it.", &["There it is!", "I found it."]),
        (
            "My name is Jonas E. Smith.",
            &["My name is Jonas E. Smith."],
        ),
        ("Please turn to p. 55.", &["Please turn to p. 55."]),
        (
            "Were Jane and co. at the party?",
            &["Were Jane and co. at the party?"],
        ),
        (
            "They closed the deal with Pitt, Briggs & Co. at noon.",
            &["They closed the deal with Pitt, Briggs & Co. at noon."],
        ),
        (
            "Let's ask Mr. Smith. He knows.",
            &["Let's ask Mr. Smith.", "He knows."],
        ),
        (
            "The refund was $12.50 in total. It was paid.",
            &["The refund was $12.50 in total.", "It was paid."],
        ),
        (
            "It costs 3.5 million. See https://example.com/a.b for more.",
            &[
                "It costs 3.5 million.",
                "See https://example.com/a.b for more.",
            ],
        ),
        (
            "She lives in the U.S. and works there.",
            &["She lives in the U.S. and works there."],
        ),
        (
            "Use tools, e.g. hammers. Then rest.",
            &["Use tools, e.g. hammers.", "Then rest."],
        ),
        (
            "J. R. R. Tolkien wrote it.",
            &["J. R. R. Tolkien wrote it."],
        ),
        (
            "Items:\n- first item\n- second item",
            &["Items:", "- first item", "- second item"],
        ),
        (
            "Steps:\n1. Open it\n2. Close it",
            &["Steps:", "1. Open it", "2. Close it"],
        ),
        ("# Title\nSome text here.", &["# Title", "Some text here."]),
        ("Para one\n\nPara two.", &["Para one", "Para two."]),
        (
            "He said \"Stop.\" Then he left.",
            &["He said \"Stop.\"", "Then he left."],
        ),
        (
            "Version 2.0.1 shipped on 2024-03-03. Done.",
            &["Version 2.0.1 shipped on 2024-03-03.", "Done."],
        ),
        ("", &[]),
        ("...", &[]),
    ];
    for (text, want) in cases {
        assert_eq!(&sents(text), want, "splitting {text:?}");
    }
}

#[test]
fn tokens_keep_numbers_and_contractions() {
    let st = stemmer();
    let toks = tokenize("Don't refund $1,000.50 or 12% on 2024-03-03, Bob's.", &st);
    let vocab = st.vocab();
    let norms: Vec<&str> = toks.iter().map(|t| vocab.norm(t.norm_id)).collect();
    assert_eq!(
        norms,
        [
            "do",
            "not",
            "refund",
            "$1,000.50",
            "or",
            "12%",
            "on",
            "2024-03-03",
            "bob"
        ]
    );
}

#[test]
fn tokens_spans_are_char_boundaries() {
    let st = stemmer();
    let text = "Caf\u{e9}\u{301} 🎉 日本語 x\r\ny";
    for t in tokenize(text, &st) {
        assert!(text.get(t.start..t.end).is_some());
    }
}

#[test]
fn a_warm_lexicon_gives_the_ids_a_fresh_vocabulary_would() {
    let ids = |text: &str| {
        let st = stemmer();
        let toks = tokenize(text, &st);
        let vocab = st.vocab();
        toks.iter()
            .map(|t| {
                let (norm, stem) = (vocab.norm(t.norm_id), vocab.stem(t.stem_id));
                (t.norm_id, t.stem_id, norm.to_string(), stem.to_string())
            })
            .collect::<Vec<_>>()
    };
    // The first request fills this thread's lexicon; the second starts with
    // words it has not seen in a different order.
    let first = ids("Refunds were refunded; the refund of $40 was issued twice.");
    let second = ids("Issued: $40 refund. Refunds were refunded twice.");
    assert_eq!(first[0], (0, 0, "refunds".into(), "refund".into()));
    assert_eq!(second[0], (0, 0, "issued".into(), "issu".into()));
    assert_eq!(second[1], (1, 1, "$40".into(), "$40".into()));
    assert_eq!(second[2].1, 2);
    // "refunds" and "refund" share the stem "refund".
    assert_eq!(second[3].1, second[2].1);
    assert!(second.iter().all(|(n, s, _, _)| *n < 8 && *s < 8));
}

#[test]
fn a_run_with_no_sentence_end_is_cut_into_bounded_pieces() {
    // 3 000 words and a few multi-byte ones, with no terminator: the
    // pieces are at most MAX_SENTENCE_BYTES long, end on whole words, and
    // keep every word in order.
    let words: Vec<String> = (0..3000)
        .map(|i| {
            if i % 97 == 0 {
                format!("caf\u{e9}{i}")
            } else {
                format!("w{i}")
            }
        })
        .collect();
    let text = words.join(" ");
    let pieces = sents(&text);
    assert!(pieces.len() > 1, "{}", pieces.len());
    assert!(pieces.iter().all(|p| p.len() <= MAX_SENTENCE_BYTES));
    let rejoined: Vec<&str> = pieces.iter().flat_map(|p| p.split_whitespace()).collect();
    assert_eq!(
        rejoined,
        words.iter().map(String::as_str).collect::<Vec<_>>()
    );
    // One unbroken "word" longer than the bound is cut at a char boundary.
    let blob = "\u{e9}".repeat(MAX_SENTENCE_BYTES);
    let pieces = sents(&blob);
    assert_eq!(pieces.concat(), blob);
    assert!(pieces.iter().all(|p| p.len() <= MAX_SENTENCE_BYTES));
    // Sentences under the bound are untouched.
    let short = "The refund was issued. The order shipped on May 2.";
    assert_eq!(
        sents(short),
        ["The refund was issued.", "The order shipped on May 2."]
    );
}
