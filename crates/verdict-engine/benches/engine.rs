//! Engine latency: one claim and twenty claims against five ~2 KB sources.
//! Each iteration includes indexing the sources, as `/v2/verify` does.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
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
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 2048 {
        let s =
            SENTENCES[(n + k) % SENTENCES.len()].replace("{n}", &(1000 + n * 7 + k).to_string());
        text.push_str(&s);
        text.push(' ');
        n += 1;
    }
    Source {
        id: format!("src-{k}"),
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
