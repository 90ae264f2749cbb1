//! The paper pipeline's hand-written JSON record parser on arbitrary bytes:
//! it must return an error, never panic, and agree with the serde_json
//! reference (`parse_with_serde`) on accept/reject and on every value —
//! but for one deliberate difference: the hand-written parser requires the
//! whole line to be UTF-8 (RFC 8259), where serde_json does not check the
//! strings of fields it skips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tandem_bench::paper::{parse, parse_with_serde};

fuzz_target!(|line: &[u8]| {
    let ours = parse(line);
    let theirs = parse_with_serde(line);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(
            a,
            b,
            "the parsers read different values from {:?}",
            String::from_utf8_lossy(line)
        ),
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) if e.what == "invalid UTF-8" && std::str::from_utf8(line).is_err() => {}
        _ => panic!(
            "the parsers disagree on {:?}: hand-written {ours:?}, serde {theirs:?}",
            String::from_utf8_lossy(line)
        ),
    }
});
