//! Validating and skipping the values the answer record does not keep:
//! unknown fields, checked to the same grammar as the rest (nesting up to
//! [`MAX_DEPTH`], literals, RFC 8259 numbers).

use super::{Parser, MAX_DEPTH, R};

impl Parser<'_> {
    /// Validates and skips any JSON value.
    pub(super) fn skip_value(&mut self, depth: usize) -> R<()> {
        if depth >= MAX_DEPTH {
            return self.err("recursion limit exceeded");
        }
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                self.string_ref().map(|_| ())
            }
            Some(b'{') => self.object(|p, _| p.skip_value(depth + 1)),
            Some(b'[') => {
                self.i += 1;
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(());
                        }
                        None => return self.err("EOF while parsing a list"),
                        _ => return self.err("expected `,` or `]`"),
                    }
                }
            }
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.skip_number(),
            None => self.err("EOF while parsing a value"),
            _ => self.err("expected value"),
        }
    }

    pub(super) fn literal(&mut self, lit: &[u8]) -> R<()> {
        if self.b[self.i..].starts_with(lit) {
            self.i += lit.len();
            Ok(())
        } else if self.b.len() - self.i < lit.len() && lit.starts_with(&self.b[self.i..]) {
            self.i = self.b.len();
            self.err("EOF while parsing a value")
        } else {
            self.err("expected ident")
        }
    }

    pub(super) fn skip_number(&mut self) -> R<()> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            None => return self.err("EOF while parsing a value"),
            _ => return self.err("invalid number"),
        }
        self.fraction_exponent().map(|_| ())
    }

    /// After a number's integer part: its optional fraction and exponent.
    /// Returns whether there was either (the number is not an integer).
    pub(super) fn fraction_exponent(&mut self) -> R<bool> {
        let mut float = false;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.digits_required()?;
            float = true;
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits_required()?;
            float = true;
        }
        Ok(float)
    }

    /// One or more digits.
    pub(super) fn digits_required(&mut self) -> R<()> {
        if !matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
            return self.err("invalid number");
        }
        while matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        Ok(())
    }
}
