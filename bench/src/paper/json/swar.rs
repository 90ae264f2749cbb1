//! The parser's byte-level helpers: classifying 8 or 16 bytes at once
//! (SWAR, and SSE2 where the target has it), eight digits in one step,
//! the all-ASCII name check, short comparisons without `memcmp`.

use compact_str::CompactString;

// SWAR ("SIMD within a register"): classify 8 bytes at once. Each helper
// returns a word with bit 7 of a byte set exactly where the byte matches
// (no false positives, unlike the classic `haszero` trick).
pub(super) const LO: u64 = 0x0101_0101_0101_0101;
pub(super) const HI: u64 = 0x8080_8080_8080_8080;
pub(super) const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

#[inline(always)]
pub(super) fn zero_bytes(y: u64) -> u64 {
    !(((y & LOW7).wrapping_add(LOW7)) | y | LOW7)
}

#[inline(always)]
pub(super) fn eq_bytes(x: u64, c: u8) -> u64 {
    zero_bytes(x ^ (LO * c as u64))
}

/// Bytes below 0x20 (control characters), among bytes below 0x80.
#[inline(always)]
pub(super) fn ctrl_bytes(x: u64) -> u64 {
    !(((x & LOW7).wrapping_add(LO * 0x60)) | x | LOW7)
}

/// Bytes that end a run of plain string content: `"`, `\`, controls.
#[inline(always)]
pub(super) fn string_stops(x: u64) -> u64 {
    eq_bytes(x, b'"') | eq_bytes(x, b'\\') | ctrl_bytes(x)
}

/// SSE2 (part of the x86-64 baseline) classification of 16 string bytes:
/// `(stops, spaces)` bit masks, bit `k` for byte `k`. A stop is `"`, `\\`, a
/// control byte or a non-ASCII byte (the signed compare with 0x20 catches
/// both ranges).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
pub(super) fn classify16(chunk: &[u8; 16]) -> (u32, u32) {
    // SAFETY: `classify16_sse2` only requires SSE2, which this cfg guarantees
    // is enabled for the whole build (it is part of the x86-64 baseline).
    unsafe { classify16_sse2(chunk) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
pub(super) fn classify16_sse2(chunk: &[u8; 16]) -> (u32, u32) {
    use std::arch::x86_64::*;
    let lo = u64::from_le_bytes(chunk[..8].try_into().expect("8 bytes"));
    let hi = u64::from_le_bytes(chunk[8..].try_into().expect("8 bytes"));
    let v = _mm_set_epi64x(hi as i64, lo as i64);
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let bslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    let low = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
    let stops = _mm_or_si128(_mm_or_si128(quote, bslash), low);
    let spaces = _mm_cmpeq_epi8(v, _mm_set1_epi8(b' ' as i8));
    (
        _mm_movemask_epi8(stops) as u32,
        _mm_movemask_epi8(spaces) as u32,
    )
}

/// Whether all 8 bytes of `w` are ASCII digits.
#[inline(always)]
pub(super) fn all_digits(w: u64) -> bool {
    let hi = w & 0xf0f0_f0f0_f0f0_f0f0;
    let carry = (w.wrapping_add(0x0606_0606_0606_0606) & 0xf0f0_f0f0_f0f0_f0f0) >> 4;
    (hi | carry) == 0x3333_3333_3333_3333
}

/// The value of 8 ASCII digits (first digit in the lowest byte).
#[inline(always)]
pub(super) fn parse8(w: u64) -> u64 {
    let v = w - 0x3030_3030_3030_3030;
    let v = (v * 10 + (v >> 8)) & 0x00ff_00ff_00ff_00ff; // pairs
    let v = (v * 100 + (v >> 16)) & 0x0000_ffff_0000_ffff; // quads
    (v * 10_000 + (v >> 32)) & 0xffff_ffff
}

/// Bits set in a 16-bit mask (a table lookup per byte: the x86-64
/// baseline has no POPCNT instruction).
#[inline(always)]
pub(super) fn ones16(m: u32) -> u32 {
    const T: [u8; 256] = {
        let mut t = [0u8; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = (i as u32).count_ones() as u8;
            i += 1;
        }
        t
    };
    (T[(m & 0xff) as usize] + T[((m >> 8) & 0xff) as usize]) as u32
}

/// A name from raw string bytes (no escapes): validated as UTF-8, with the
/// all-ASCII case (the common one) checked word-at-a-time instead.
#[inline]
pub(super) fn utf8_name(bytes: &[u8]) -> Option<CompactString> {
    if bytes.is_ascii() {
        // SAFETY: every byte is ASCII, and ASCII is valid UTF-8.
        Some(unsafe { CompactString::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok().map(CompactString::from)
    }
}

/// Equality of two short byte strings without a `memcmp` call.
#[inline(always)]
pub(super) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

#[inline(always)]
pub(super) fn load8(b: &[u8], i: usize) -> Option<u64> {
    b.get(i..i + 8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
}
