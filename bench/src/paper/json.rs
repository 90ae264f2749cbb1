//! A validating JSON parser specialised to the answer record.
//!
//! Why not serde_json on the hot path: on this project's 2-core reference
//! machine (2.1 GHz Xeon VM) `serde_json::from_slice` into a borrowed struct
//! costs ~980 ns for a 270-byte answer record (measured with
//! `examples/parse_speed.rs`; merely *validating* it as a `RawValue` costs
//! ~360 ns), which alone is twice the per-record budget of the throughput
//! bar. This parser reads the same grammar in one pass and fuses the text
//! statistics (characters, words) into the unescaping of the text field, so
//! no string is materialised except the user name.
//!
//! It is a real parser, not a field scraper: the whole line must be one
//! well-formed JSON object (RFC 8259: whitespace, escapes including
//! surrogate pairs, number grammar, nesting up to 128 levels in skipped
//! values, no trailing characters, valid UTF-8); fields may come in any
//! order; unknown fields are validated and skipped; a missing or duplicate
//! field or a wrong type is an error. Its verdicts match serde_json's
//! derive-based parse (`paper::parse_with_serde`) — a differential property
//! test in `paper::tests` holds the two together.

use compact_str::CompactString;
use std::fmt;

/// Why a line is not a valid answer record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset where the problem was found.
    pub at: usize,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for ParseError {}

/// The fields of an answer record, with the text reduced to statistics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    pub seq: u64,
    pub ts: u64,
    pub answer_id: u64,
    pub user_id: u32,
    pub user_name: CompactString,
    pub reputation: u32,
    pub likes: u32,
    pub favorites: u32,
    pub comments: u32,
    /// Characters (Unicode scalar values) of the unescaped text.
    pub text_chars: u32,
    /// Whitespace-separated words of the unescaped text (`split_whitespace`).
    pub text_words: u32,
}

const MAX_DEPTH: usize = 128;

mod skip;
mod swar;

use swar::*;

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    scratch: String,
}

type R<T> = Result<T, ParseError>;

/// Parses one answer record.
pub fn parse_answer(line: &[u8]) -> R<Answer> {
    let mut p = Parser {
        s: "",
        b: line,
        i: 0,
        scratch: String::new(),
    };
    // The canonical fast path validates UTF-8 only where it can occur (in
    // the two strings); the general parser validates the whole line first.
    if let Some(a) = p.canonical() {
        return Ok(a);
    }
    p.s = std::str::from_utf8(line).map_err(|e| ParseError {
        at: e.valid_up_to(),
        what: "invalid UTF-8".into(),
    })?;
    p.i = 0;
    if line.starts_with(b"\xEF\xBB\xBF") {
        return p.err(
            "a UTF-8 byte order mark (EF BB BF) before the record: JSON lines are UTF-8 without one (save the file without a BOM)",
        );
    }
    let a = p.answer()?;
    p.ws();
    if p.i != p.b.len() {
        return p.err("trailing characters");
    }
    Ok(a)
}

impl<'a> Parser<'a> {
    fn err<T>(&self, what: &str) -> R<T> {
        Err(ParseError {
            at: self.i,
            what: what.to_string(),
        })
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    #[inline]
    fn expect(&mut self, c: u8, what: &str) -> R<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else if self.i >= self.b.len() {
            self.err("EOF while parsing")
        } else {
            self.err(what)
        }
    }

    /// Iterates the members of an object whose fields are `keys`: calls `f`
    /// with the index of each member's key in `keys` (`None` for other keys,
    /// which `f` must skip), after the colon has been consumed. Every field
    /// must appear exactly once: a duplicate or a missing one is an error.
    ///
    /// Fast path: producers write keys in a fixed order, so the key after
    /// key `k` is first tried, byte for byte, as `keys[k + 1]` (quoted and
    /// unescaped); anything else takes the general path, which unescapes the
    /// key and looks it up.
    fn members<const N: usize>(
        &mut self,
        keys: [&'static str; N],
        mut f: impl FnMut(&mut Self, Option<usize>) -> R<()>,
    ) -> R<()> {
        let guess = std::cell::Cell::new(0usize);
        let mut seen = 0u32;
        self.object_with(
            |p| {
                let g = guess.get() % N;
                let k = keys[g].as_bytes();
                let rest = &p.b[p.i..];
                if rest.len() > k.len() + 1
                    && rest[0] == b'"'
                    && bytes_eq(&rest[1..=k.len()], k)
                    && rest[k.len() + 1] == b'"'
                {
                    p.i += k.len() + 2;
                    Some(g)
                } else {
                    None
                }
            },
            |p, key| {
                let idx = match key {
                    Key::Known(i) => Some(i),
                    Key::Text(t) => keys.iter().position(|k| *k == t),
                };
                if let Some(i) = idx {
                    guess.set(i + 1);
                    if seen & (1 << i) != 0 {
                        return p.err(&format!("duplicate field `{}`", keys[i]));
                    }
                    seen |= 1 << i;
                }
                f(p, idx)
            },
        )?;
        match (0..N).find(|i| seen & (1 << i) == 0) {
            Some(i) => self.err(&format!("missing field `{}`", keys[i])),
            None => Ok(()),
        }
    }

    /// Iterates the members of an object: calls `f` with each key (after the
    /// colon has been consumed).
    fn object(&mut self, mut f: impl FnMut(&mut Self, &str) -> R<()>) -> R<()> {
        self.object_with(
            |_| None,
            |p, key| match key {
                Key::Text(t) => f(p, t),
                Key::Known(_) => unreachable!("no fast keys"),
            },
        )
    }

    fn object_with(
        &mut self,
        mut fast: impl FnMut(&mut Self) -> Option<usize>,
        mut f: impl FnMut(&mut Self, Key<'_>) -> R<()>,
    ) -> R<()> {
        self.expect(b'{', "expected an object")?;
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            if let Some(k) = fast(self) {
                self.expect(b':', "expected `:`")?;
                f(self, Key::Known(k))?;
            } else {
                if self.peek() != Some(b'"') {
                    return if self.i >= self.b.len() {
                        self.err("EOF while parsing an object")
                    } else {
                        self.err("key must be a string")
                    };
                }
                self.i += 1;
                let key = self.string_ref()?;
                self.expect(b':', "expected `:`")?;
                match key {
                    Str::Line(a, b) => {
                        let line: &'a str = self.s;
                        f(self, Key::Text(&line[a..b]))?;
                    }
                    Str::Scratch => {
                        let k = std::mem::take(&mut self.scratch);
                        f(self, Key::Text(&k))?;
                    }
                }
            }
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                None => return self.err("EOF while parsing an object"),
                _ => return self.err("expected `,` or `}`"),
            }
        }
    }

    fn answer(&mut self) -> R<Answer> {
        let mut a = Answer::default();
        const KEYS: [&str; 6] = ["seq", "ts", "answer_id", "user", "stats", "text"];
        self.members(KEYS, |p, k| {
            match k {
                Some(0) => a.seq = p.u64()?,
                Some(1) => a.ts = p.u64()?,
                Some(2) => a.answer_id = p.u64()?,
                Some(3) => p.user(&mut a)?,
                Some(4) => p.stats(&mut a)?,
                Some(5) => p.text(&mut a)?,
                _ => p.skip_value(1)?,
            }
            Ok(())
        })?;
        Ok(a)
    }

    fn user(&mut self, a: &mut Answer) -> R<()> {
        self.members(["id", "name", "reputation"], |p, k| {
            match k {
                Some(0) => a.user_id = p.u32()?,
                Some(1) => {
                    if p.peek() != Some(b'"') {
                        return p.err("invalid type: expected a string");
                    }
                    p.i += 1;
                    a.user_name = match p.string_ref()? {
                        Str::Line(x, y) => CompactString::from(&p.s[x..y]),
                        Str::Scratch => CompactString::from(p.scratch.as_str()),
                    };
                }
                Some(2) => a.reputation = p.u32()?,
                _ => p.skip_value(1)?,
            }
            Ok(())
        })
    }

    fn stats(&mut self, a: &mut Answer) -> R<()> {
        self.members(["likes", "favorites", "comments"], |p, k| {
            match k {
                Some(0) => a.likes = p.u32()?,
                Some(1) => a.favorites = p.u32()?,
                Some(2) => a.comments = p.u32()?,
                _ => p.skip_value(1)?,
            }
            Ok(())
        })
    }

    fn u32(&mut self) -> R<u32> {
        let v = self.u64()?;
        u32::try_from(v).or_else(|_| self.err("invalid value: integer out of range for u32"))
    }

    /// An unsigned integer. JSON numbers with a fraction or exponent, and
    /// negative ones (even `-0`, which serde_json reads as `-0.0`), are type
    /// errors.
    #[inline]
    fn u64(&mut self) -> R<u64> {
        // Fast path: 1..=19 digits, no leading zero, no fraction/exponent.
        self.ws();
        let (b, start) = (self.b, self.i);
        let mut i = start;
        let mut v = 0u64;
        while let Some(&c) = b.get(i) {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add(d as u64);
            i += 1;
        }
        let n = i - start;
        let plain_end = !matches!(b.get(i), Some(b'.' | b'e' | b'E'));
        if (1..=19).contains(&n) && (n == 1 || b[start] != b'0') && plain_end {
            self.i = i;
            return Ok(v);
        }
        self.u64_slow()
    }

    #[cold]
    fn u64_slow(&mut self) -> R<u64> {
        let c = self.peek();
        let neg = c == Some(b'-');
        if neg {
            self.i += 1;
        }
        let start = self.i;
        let mut overflow = false;
        let rest = &self.b[self.i..];
        let n = rest
            .iter()
            .position(|c| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let v = match rest.first() {
            Some(b'0') => {
                self.i += 1;
                0
            }
            Some(b'1'..=b'9') if n <= 19 => {
                // Up to 19 digits always fit in a u64: no overflow checks.
                self.i += n;
                rest[..n]
                    .iter()
                    .fold(0u64, |v, &d| v * 10 + (d - b'0') as u64)
            }
            Some(b'1'..=b'9') => {
                self.i += n;
                let mut v = 0u64;
                for &d in &rest[..n] {
                    match v
                        .checked_mul(10)
                        .and_then(|x| x.checked_add((d - b'0') as u64))
                    {
                        Some(x) => v = x,
                        None => overflow = true,
                    }
                }
                v
            }
            None => return self.err("EOF while parsing a value"),
            _ if neg => return self.err("invalid number"),
            Some(b'"') => return self.err("invalid type: string, expected an integer"),
            Some(b'{' | b'[' | b't' | b'f' | b'n') => {
                return self.err("invalid type: expected an integer")
            }
            _ => return self.err("expected value"),
        };
        let float = self.fraction_exponent()?;
        if float || overflow {
            self.i = start;
            return self.err("invalid type: floating point, expected an integer");
        }
        if neg {
            self.i = start;
            return self.err("invalid value: negative integer, expected an unsigned one");
        }
        Ok(v)
    }

    /// After the opening quote: scans a string. Returns where its value is:
    /// a slice of the line (no escapes) or `self.scratch` (unescaped).
    fn string_ref(&mut self) -> R<Str> {
        let start = self.i;
        while let Some(w) = load8(self.b, self.i) {
            let stops = string_stops(w);
            if stops != 0 {
                self.i += (stops.trailing_zeros() / 8) as usize;
                break;
            }
            self.i += 8;
        }
        loop {
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Str::Line(start, self.i - 1));
                }
                Some(b'\\') => break,
                Some(&c) if c < 0x20 => {
                    return self
                        .err("control character (\\u0000-\\u001F) found while parsing a string")
                }
                Some(_) => self.i += 1,
                None => return self.err("EOF while parsing a string"),
            }
        }
        self.scratch.clear();
        self.scratch.push_str(&self.s[start..self.i]);
        loop {
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Str::Scratch);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = self.escape()?;
                    self.scratch.push(c);
                }
                Some(&c) if c < 0x20 => {
                    return self
                        .err("control character (\\u0000-\\u001F) found while parsing a string")
                }
                Some(_) => {
                    let from = self.i;
                    while let Some(&c) = self.b.get(self.i) {
                        if c == b'"' || c == b'\\' || c < 0x20 {
                            break;
                        }
                        self.i += 1;
                    }
                    self.scratch.push_str(&self.s[from..self.i]);
                }
                None => return self.err("EOF while parsing a string"),
            }
        }
    }

    /// After a backslash: decodes one escape.
    fn escape(&mut self) -> R<char> {
        let c = match self.b.get(self.i) {
            Some(&c) => c,
            None => return self.err("EOF while parsing a string"),
        };
        self.i += 1;
        Ok(match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                if (0xDC00..0xE000).contains(&hi) {
                    return self.err("lone leading surrogate in hex escape");
                }
                if (0xD800..0xDC00).contains(&hi) {
                    if self.b.get(self.i) != Some(&b'\\') || self.b.get(self.i + 1) != Some(&b'u') {
                        return self.err("unexpected end of hex escape");
                    }
                    self.i += 2;
                    let lo = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return self.err("lone leading surrogate in hex escape");
                    }
                    let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    char::from_u32(cp).expect("valid surrogate pair")
                } else {
                    char::from_u32(hi).expect("not a surrogate")
                }
            }
            _ => {
                self.i -= 1;
                return self.err("invalid escape");
            }
        })
    }

    fn hex4(&mut self) -> R<u32> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = match self.b.get(self.i) {
                Some(&c @ b'0'..=b'9') => c - b'0',
                Some(&c @ b'a'..=b'f') => c - b'a' + 10,
                Some(&c @ b'A'..=b'F') => c - b'A' + 10,
                None => return self.err("EOF while parsing a string"),
                _ => return self.err("invalid escape"),
            };
            v = v * 16 + d as u32;
            self.i += 1;
        }
        Ok(v)
    }

    /// The text field: validated and unescaped on the fly into character
    /// and word counts (as `str::chars().count()` and
    /// `str::split_whitespace().count()` of the unescaped text).
    fn text(&mut self, a: &mut Answer) -> R<()> {
        if self.peek() != Some(b'"') {
            return if self.i >= self.b.len() {
                self.err("EOF while parsing a value")
            } else {
                self.err("invalid type: expected a string")
            };
        }
        self.i += 1;
        let (chars, words) = self.text_body()?;
        a.text_chars = chars;
        a.text_words = words;
        Ok(())
    }

    /// After the opening quote of the text: its character and word counts.
    #[inline]
    fn text_body(&mut self) -> R<(u32, u32)> {
        let (mut chars, mut words, mut in_word) = (0u32, 0u32, false);
        macro_rules! step {
            ($ws:expr) => {{
                let ws: bool = $ws;
                chars += 1;
                if !ws && !in_word {
                    words += 1;
                }
                in_word = !ws;
            }};
        }
        loop {
            // Fastest path (x86-64): 16 bytes at a time; the plain ASCII
            // bytes before the first stop are counted in the same step.
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            while let Some(chunk) = self.b.get(self.i..self.i + 16) {
                let (stops, spaces) = classify16(chunk.try_into().expect("16 bytes"));
                let n = stops.trailing_zeros().min(16);
                let valid = if n == 16 { 0xffff } else { (1u32 << n) - 1 };
                let spaces = spaces & valid;
                let word = !spaces & valid;
                let prev_space = (spaces << 1) | (!in_word as u32);
                words += ones16(word & prev_space & 0xffff);
                if n > 0 {
                    in_word = spaces >> (n - 1) & 1 == 0;
                }
                chars += n;
                self.i += n as usize;
                if n < 16 {
                    break;
                }
            }
            // Fast path: 8 plain ASCII bytes at a time. In raw string content
            // the only ASCII whitespace is ' ' (controls must be escaped).
            while let Some(w) = load8(self.b, self.i) {
                if string_stops(w) | (w & HI) != 0 {
                    break;
                }
                let space = eq_bytes(w, b' ') >> 7; // bit 0 of each space byte
                let word = !space & LO;
                let prev_space = (space << 8) | (!in_word as u64);
                // Each byte of `starts` is 0 or 1: sum them with one multiply
                // (no POPCNT in the x86-64 baseline).
                let starts = word & prev_space;
                words += (starts.wrapping_mul(LO) >> 56) as u32;
                in_word = space >> 56 == 0;
                chars += 8;
                self.i += 8;
            }
            let c = match self.b.get(self.i) {
                Some(&c) => c,
                None => return self.err("EOF while parsing a string"),
            };
            match c {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    self.i += 1;
                    let ch = self.escape()?;
                    step!(ch.is_whitespace());
                }
                0..=0x1f => {
                    return self
                        .err("control character (\\u0000-\\u001F) found while parsing a string")
                }
                0x20..=0x7f => {
                    self.i += 1;
                    step!(c == b' ');
                }
                _ => {
                    // A multi-byte character, validated here: the canonical
                    // path does not validate the whole line up front.
                    let len = match c {
                        0xc2..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf4 => 4,
                        _ => return self.err("invalid UTF-8"),
                    };
                    let ch = self
                        .b
                        .get(self.i..self.i + len)
                        .and_then(|c| std::str::from_utf8(c).ok())
                        .and_then(|c| c.chars().next());
                    let Some(ch) = ch else {
                        return self.err("invalid UTF-8");
                    };
                    self.i += len;
                    step!(ch.is_whitespace());
                }
            }
        }
        Ok((chars, words))
    }

    /// The fast path for the canonical layout the generator (and any
    /// serializer with this field order) writes: no whitespace, fields in
    /// order, no escapes in the name. Structure is matched byte for byte, so
    /// it accepts a strict subset of what the general parser accepts and
    /// reads the same values; on any deviation it gives up (`None`) and the
    /// general parser starts over, finding the error if there is one.
    #[inline]
    fn canonical(&mut self) -> Option<Answer> {
        let mut a = Answer::default();
        self.lit(b"{\"seq\":")?;
        a.seq = self.digits()?;
        self.lit(b",\"ts\":")?;
        a.ts = self.digits()?;
        self.lit(b",\"answer_id\":")?;
        a.answer_id = self.digits()?;
        self.lit(b",\"user\":{\"id\":")?;
        a.user_id = u32::try_from(self.digits()?).ok()?;
        self.lit(b",\"name\":\"")?;
        let start = self.i;
        while let Some(w) = load8(self.b, self.i) {
            let stops = string_stops(w);
            if stops != 0 {
                self.i += (stops.trailing_zeros() / 8) as usize;
                break;
            }
            self.i += 8;
        }
        while *self.b.get(self.i)? != b'"' {
            let c = self.b[self.i];
            if c == b'\\' || c < 0x20 {
                return None;
            }
            self.i += 1;
        }
        a.user_name = utf8_name(&self.b[start..self.i])?;
        self.lit(b"\",\"reputation\":")?;
        a.reputation = u32::try_from(self.digits()?).ok()?;
        self.lit(b"},\"stats\":{\"likes\":")?;
        a.likes = u32::try_from(self.digits()?).ok()?;
        self.lit(b",\"favorites\":")?;
        a.favorites = u32::try_from(self.digits()?).ok()?;
        self.lit(b",\"comments\":")?;
        a.comments = u32::try_from(self.digits()?).ok()?;
        self.lit(b"},\"text\":\"")?;
        let (chars, words) = self.text_body().ok()?;
        a.text_chars = chars;
        a.text_words = words;
        self.lit(b"}")?;
        (self.i == self.b.len()).then_some(a)
    }

    #[inline(always)]
    fn lit<const N: usize>(&mut self, l: &[u8; N]) -> Option<()> {
        let got: &[u8; N] = self.b.get(self.i..self.i + N)?.try_into().ok()?;
        if got == l {
            self.i += N;
            Some(())
        } else {
            None
        }
    }

    /// 1 to 19 digits without a leading zero (so no overflow is possible);
    /// what follows must be checked by the caller's next literal.
    #[inline(always)]
    fn digits(&mut self) -> Option<u64> {
        let (b, start) = (self.b, self.i);
        let mut i = start;
        let mut v = 0u64;
        // Eight digits at a time while they last (SWAR), then one by one.
        while let Some(w) = load8(b, i) {
            if !all_digits(w) || i - start > 8 {
                break;
            }
            v = v * 100_000_000 + parse8(w);
            i += 8;
        }
        while let Some(&c) = b.get(i) {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add(d as u64);
            i += 1;
        }
        let n = i - start;
        if !(1..=19).contains(&n) || (n > 1 && b[start] == b'0') {
            return None;
        }
        self.i = i;
        Some(v)
    }
}

enum Key<'k> {
    /// Index into the expected keys (matched on the fast path).
    Known(usize),
    /// Any other key, unescaped.
    Text(&'k str),
}

enum Str {
    Line(usize, usize),
    Scratch,
}

#[cfg(test)]
mod tests;
