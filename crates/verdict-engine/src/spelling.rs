//! British and American spellings of one word are one word.
//!
//! A refund "authorised" by the manager is the refund "authorized" in the
//! claim, and an order "cancelled" is one "canceled". The Snowball stemmer
//! does not know that ("authoris" and "author" are different stems), so a
//! word is mapped to its American spelling before it is stemmed. Only the
//! stem changes: the normalised form, and so every quote and offset, stays
//! as written. The map is a reviewed list, not a rule such as "-ise → -ize",
//! which would also turn "promise", "advise" and "exercise" into words that
//! do not exist.

use std::borrow::Cow;

/// Whole-word variants (British, American), lowercase.
const WORDS: &[(&str, &str)] = &[
    ("acknowledgement", "acknowledgment"),
    ("acknowledgements", "acknowledgments"),
    ("ageing", "aging"),
    ("aluminium", "aluminum"),
    ("analyse", "analyze"),
    ("analysed", "analyzed"),
    ("analyses", "analyzes"),
    ("analysing", "analyzing"),
    ("cancellation", "cancelation"),
    ("cancellations", "cancelations"),
    ("cancelled", "canceled"),
    ("cancelling", "canceling"),
    ("catalogue", "catalog"),
    ("catalogues", "catalogs"),
    ("centre", "center"),
    ("centres", "centers"),
    ("cheque", "check"),
    ("cheques", "checks"),
    ("counselled", "counseled"),
    ("counselling", "counseling"),
    ("defence", "defense"),
    ("dialogue", "dialog"),
    ("enrol", "enroll"),
    ("enrolment", "enrollment"),
    ("enrols", "enrolls"),
    ("fibre", "fiber"),
    ("fuelled", "fueled"),
    ("fulfil", "fulfill"),
    ("fulfilment", "fulfillment"),
    ("fulfils", "fulfills"),
    ("grey", "gray"),
    ("instalment", "installment"),
    ("instalments", "installments"),
    ("jewellery", "jewelry"),
    ("judgement", "judgment"),
    ("labelled", "labeled"),
    ("labelling", "labeling"),
    ("licence", "license"),
    ("licences", "licenses"),
    ("litre", "liter"),
    ("litres", "liters"),
    ("metre", "meter"),
    ("metres", "meters"),
    ("modelled", "modeled"),
    ("modelling", "modeling"),
    ("mould", "mold"),
    ("offence", "offense"),
    ("paralyse", "paralyze"),
    ("programme", "program"),
    ("programmes", "programs"),
    ("signalled", "signaled"),
    ("theatre", "theater"),
    ("totalled", "totaled"),
    ("travelled", "traveled"),
    ("traveller", "traveler"),
    ("travellers", "travelers"),
    ("travelling", "traveling"),
    ("tyre", "tire"),
    ("tyres", "tires"),
];

/// Roots spelled `-our` in British English (`colour`, `behaviour`); their
/// forms with `-s`, `-ed`, `-ing`, `-able`, `-ful`, `-ite` and `-less`
/// follow.
const OUR_ROOTS: &[&str] = &[
    "arbour",
    "ardour",
    "armour",
    "behaviour",
    "candour",
    "clamour",
    "colour",
    "demeanour",
    "endeavour",
    "favour",
    "flavour",
    "harbour",
    "honour",
    "humour",
    "labour",
    "neighbour",
    "odour",
    "parlour",
    "rancour",
    "rigour",
    "rumour",
    "savour",
    "splendour",
    "tumour",
    "valour",
    "vapour",
    "vigour",
];

/// Roots whose British `-ise` family (`-ise`, `-ised`, `-ises`, `-ising`,
/// `-isation`, `-isations`, `-iser`, `-isers`) is American `-ize`.
const ISE_ROOTS: &[&str] = &[
    "apolog",
    "author",
    "capital",
    "categor",
    "central",
    "character",
    "civil",
    "critic",
    "custom",
    "digit",
    "emphas",
    "final",
    "formal",
    "harmon",
    "hospital",
    "immun",
    "initial",
    "item",
    "jeopard",
    "legal",
    "liberal",
    "local",
    "maxim",
    "memor",
    "minim",
    "mobil",
    "modern",
    "monet",
    "neutral",
    "normal",
    "optim",
    "organ",
    "penal",
    "personal",
    "polar",
    "popular",
    "priorit",
    "real",
    "recogn",
    "sanit",
    "special",
    "stabil",
    "standard",
    "subsid",
    "summar",
    "synchron",
    "util",
    "visual",
];

const ISE_SUFFIXES: &[&str] = &[
    "isations", "isation", "ising", "isers", "iser", "ised", "ises", "ise",
];

const OUR_SUFFIXES: &[&str] = &["", "s", "ed", "ing", "able", "ful", "ite", "ites", "less"];

/// The American spelling of a lowercase word, or the word itself.
pub fn american(word: &str) -> Cow<'_, str> {
    if let Ok(i) = WORDS.binary_search_by(|(b, _)| (*b).cmp(word)) {
        return Cow::Borrowed(WORDS[i].1);
    }
    if word.contains("our") {
        for root in OUR_ROOTS {
            if let Some(rest) = word.strip_prefix(root) {
                if OUR_SUFFIXES.contains(&rest) {
                    let base = &root[..root.len() - 3];
                    return Cow::Owned(format!("{base}or{rest}"));
                }
            }
        }
    }
    if word.contains("is") {
        for suffix in ISE_SUFFIXES {
            if let Some(root) = word.strip_suffix(suffix) {
                if ISE_ROOTS.binary_search(&root).is_ok() {
                    return Cow::Owned(format!("{root}iz{}", &suffix[2..]));
                }
                break;
            }
        }
    }
    Cow::Borrowed(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_for_binary_search() {
        assert!(WORDS.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(ISE_ROOTS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn british_spellings_become_american() {
        for (gb, us) in [
            ("authorised", "authorized"),
            ("authorise", "authorize"),
            ("authorisation", "authorization"),
            ("recognised", "recognized"),
            ("organisation", "organization"),
            ("cancelled", "canceled"),
            ("colour", "color"),
            ("behaviours", "behaviors"),
            ("favoured", "favored"),
            ("centre", "center"),
            ("cheque", "check"),
            ("licence", "license"),
            ("fulfilment", "fulfillment"),
            ("prioritising", "prioritizing"),
        ] {
            assert_eq!(american(gb), us, "{gb}");
        }
        // Words that only look British stay as they are.
        for w in [
            "promise",
            "advise",
            "exercise",
            "otherwise",
            "tour",
            "four",
            "hour",
            "our",
            "pour",
            "your",
            "enterprise",
            "surprise",
            "house",
            "authorized",
            "color",
        ] {
            assert_eq!(american(w), w, "{w}");
        }
    }
}
