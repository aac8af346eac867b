//! Differential check of the hand-written RFC 8785 writer: any JSON text
//! that parses must canonicalize to exactly the bytes the generic
//! `serde_json_canonicalizer` produces (or both must refuse it). The writer's
//! output is hashed into request hashes and audit records, so a single
//! differing byte would make a record unverifiable by other implementations.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verdict::audit::canonical;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut ours = Vec::new();
    let mine = canonical::value(&mut ours, &value);
    let theirs = serde_json_canonicalizer::to_vec(&value);
    match (mine, theirs) {
        (Ok(()), Ok(t)) => assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&t),
            "canonical forms differ"
        ),
        (Err(_), Err(_)) => {}
        (m, t) => panic!("one side refused: ours {m:?}, generic {:?}", t.err()),
    }
});
