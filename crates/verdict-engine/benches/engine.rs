//! Engine latency: one claim and twenty claims against five ~2 KB sources.
//! Each iteration includes indexing the sources, as `/v2/verify` does. The
//! first two send the same sources every time, as callers that repeat
//! their evidence do (the thread's parse cache holds them); the third sends
//! texts the cache has not seen (the same words, other sentences and
//! numbers), so every source is parsed afresh. The fourth reads twenty
//! claims against one 100 KB source with no sentence end anywhere (the same
//! sentences joined by commas): what a passage costs when punctuation does
//! not bound it.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use verdict_engine::{verify, Claim, Params, Source};

const SENTENCES: &[&str] = &[
    "Customers may request a refund within 30 days of delivery.",
    "Refunds are issued to the original payment method within 5 business days.",
    "Order {n} was refunded ${n}.00 on March 3, 2024.",
    "Digital gift cards are non-refundable and cannot be exchanged.",
    "A restocking fee of 15% applies to opened electronics.",
    "After 5 failed login attempts the account is locked for 30 minutes.",
    "Express delivery costs $12.99 and arrives the next business day.",
    "We ship from our warehouse in Rotterdam to most countries in Europe.",
    "Support agents cannot see customer passwords or payment details.",
    "Orders placed before 2 pm ship the same day, except on public holidays.",
];

fn source(k: usize) -> Source {
    text_of(k, |n| {
        (SENTENCES[(n + k) % SENTENCES.len()], 1000 + n * 7 + k)
    })
}

/// Source `k` in variant `v`. Taking `v` = 1, 2, ... 4 000 in turn with
/// `k` = 0..5 each, a text comes round again only 64 or more calls later
/// (320 texts, ten times what the parse cache keeps), and all use the same
/// words and fewer than a thousand numbers, so the thread's lexicon does not
/// grow without end.
fn variant(k: usize, v: usize) -> Source {
    text_of(k, |n| {
        (
            SENTENCES[(n + k + v) % SENTENCES.len()],
            1000 + (n * 7 + 13 * k + v) % 997,
        )
    })
}

/// Source `k`, ~2 KB of sentences: sentence `n` is `pick(n)`'s, with its
/// number.
fn text_of(k: usize, pick: impl Fn(usize) -> (&'static str, usize)) -> Source {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 2048 {
        let (sentence, number) = pick(n);
        text.push_str(&sentence.replace("{n}", &number.to_string()));
        text.push(' ');
        n += 1;
    }
    Source {
        id: format!("src-{k}"),
        text: Some(text),
    }
}

/// ~100 KB of the same sentences with every sentence end made a comma.
fn unbroken() -> Source {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 100 * 1024 {
        let sentence = SENTENCES[n % SENTENCES.len()].replace("{n}", &(1000 + n).to_string());
        text.push_str(sentence.trim_end_matches('.'));
        text.push_str(", ");
        n += 1;
    }
    Source {
        id: "run-on".into(),
        text: Some(text),
    }
}

fn claims(n: usize) -> Vec<Claim> {
    let texts = [
        "Customers can request a refund within 30 days of delivery.",
        "Order 1007 was refunded $1007 on 2024-03-03.",
        "A restocking fee of 20% applies to opened electronics.",
        "The account is locked for 30 minutes after five failed attempts.",
        "Express delivery costs $12.99.",
    ];
    (0..n)
        .map(|i| Claim {
            id: format!("c{i}"),
            text: texts[i % texts.len()].to_string(),
            citations: vec![],
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let sources: Vec<Source> = (0..5).map(source).collect();
    let params = Params::default();
    let one = claims(1);
    let twenty = claims(20);
    c.bench_function("verify 1 claim x 5 sources (2 KB)", |b| {
        b.iter(|| verify(black_box(&one), black_box(&sources), &params))
    });
    c.bench_function("verify 20 claims x 5 sources (2 KB)", |b| {
        b.iter(|| verify(black_box(&twenty), black_box(&sources), &params))
    });
    // Variants in turn: each text is gone from the cache (least recently
    // used) before it comes round again.
    let mut v = 0;
    c.bench_function("verify 1 claim x 5 new sources (2 KB)", |b| {
        b.iter_batched_ref(
            || {
                v = v % 4000 + 1;
                (0..5).map(|k| variant(k, v)).collect::<Vec<_>>()
            },
            |fresh| verify(black_box(&one), black_box(fresh), &params),
            BatchSize::SmallInput,
        )
    });
    let run_on = vec![unbroken()];
    c.bench_function("verify 20 claims x 1 unbroken source (100 KB)", |b| {
        b.iter(|| verify(black_box(&twenty), black_box(&run_on), &params))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
