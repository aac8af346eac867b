//! Unit tests of the parent module, kept in their own file so that the
//! module itself reads as code.

use super::scoring::qty_score;
use super::*;

/// The value window in [`qty_score`] finds exactly the units a scan of
/// every quantity with `numbers::backs` finds, at the tolerance edges
/// too; a non-finite source value makes it scan.
#[test]
fn value_window_finds_what_a_scan_finds() {
    let huge = format!(
        "A value of 1{} billion billion was seen. About 100 came.",
        "0".repeat(300)
    );
    let texts = [
        "It costs $100. About 90 people came. Roughly 111 left. The fee is 15%. \
         In 2024 sales rose. On March 3, 2024 we met. There were 0 errors. \
         Nearly 1,000 users joined. It was 12.99 dollars. About 0.5 percent \
         failed. We had 99 bottles, 110 cans and 91 jars. Over 1 million came.",
        huge.as_str(),
    ];
    let claims = [
        "$100",
        "about 100 people",
        "111 left",
        "90 came",
        "15%",
        "2024",
        "0 errors",
        "1000 users",
        "approximately 1100 users",
        "12.99",
        "99 and 110 and 91",
        "March 2024",
        "about 0.5 percent",
        "1 million",
        "about 900000 came",
    ];
    for (t, text) in texts.into_iter().enumerate() {
        let sources = [Source {
            id: "a".into(),
            text: Some(text.into()),
        }];
        let idx = Index::build(&sources, crate::DateOrder::Ambiguous);
        // The second text's huge amount is infinite: scans only.
        assert_eq!(idx.values_finite, t == 0);
        let allowed = vec![true; idx.sources.len()];
        for claim in claims {
            let a = analyse(claim, &idx);
            assert!(!a.qty.is_empty(), "{claim}");
            let mut lv = Levels::new(&a, &idx);
            lv.qty_bits = vec![0; idx.units.len()];
            let mut score = vec![0.0; idx.units.len()];
            for (k, cq) in a.qty.iter().enumerate() {
                qty_score(&mut lv, &allowed, k, cq, &mut score);
            }
            for (ui, u) in idx.units.iter().enumerate() {
                let mut want = 0.0;
                for (k, cq) in a.qty.iter().enumerate() {
                    let backed = idx.unit_qty(u).iter().any(|e| numbers::backs(&cq.q, e));
                    assert_eq!(
                        lv.qty_bits[ui] >> k & 1 == 1,
                        backed,
                        "{claim}: unit {ui}, qty {k}"
                    );
                    if backed {
                        want += cq.weight;
                    }
                }
                assert_eq!(score[ui], want, "{claim}: unit {ui}");
            }
        }
    }
}
