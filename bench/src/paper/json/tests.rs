use super::*;

#[test]
fn a_byte_order_mark_is_named_as_the_cause() {
    let e = parse_answer(b"\xEF\xBB\xBF{\"answer_id\":1}").unwrap_err();
    assert!(e.to_string().contains("byte order mark"), "{e}");
}

#[test]
fn swar_digit_helpers_agree_with_scalar_code() {
    for n in [0u64, 7, 12_345_678, 99_999_999, 10_000_001, 31_415_926] {
        let s = format!("{n:08}");
        let w = u64::from_le_bytes(s.as_bytes().try_into().unwrap());
        assert!(all_digits(w), "{s}");
        assert_eq!(parse8(w), n);
    }
    for bad in ["1234567/", "12:45678", "a2345678", "1234 678"] {
        let w = u64::from_le_bytes(bad.as_bytes().try_into().unwrap());
        assert!(!all_digits(w), "{bad}");
    }
    for m in [0u32, 1, 0xffff, 0x8001, 0x1234] {
        assert_eq!(ones16(m), m.count_ones());
    }
}

#[test]
fn long_numbers_parse_exactly_and_twenty_digits_do_not_fit_the_fast_path() {
    for n in [
        u64::MAX / 10,
        1_700_000_000_123_456_789,
        9_999_999_999_999_999_999,
    ] {
        let line = format!("{n},");
        let mut p = Parser {
            s: "",
            b: line.as_bytes(),
            i: 0,
            scratch: String::new(),
        };
        assert_eq!(p.digits(), Some(n));
    }
    let mut p = Parser {
        s: "",
        b: b"18446744073709551615,",
        i: 0,
        scratch: String::new(),
    };
    assert_eq!(p.digits(), None, "20 digits go to the general path");
}
