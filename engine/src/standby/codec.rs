//! How records of a stream feeding an operator with a standby become the
//! bytes of its buffer queue, and back.
//!
//! Only the input stream of an operator with a standby needs a codec (the
//! bound is on [`crate::Stream::standby`]); everything else moves as typed
//! values through the rings. Decoding is checked: bytes that do not decode
//! are an error, never a panic or a wrong value.
//!
//! Integers, floats, `bool`, `char`, `String`, `Vec<u8>`, `Option`, `Box`
//! and tuples of up to 12 fields have one; `#[derive(Codec)]` writes one
//! for a struct or enum of such fields, field by field (an enum's variant
//! first, as one byte):
//!
//! ```
//! use tandem::standby::codec::Codec;
//!
//! #[derive(Clone, Debug, PartialEq, Codec)]
//! struct Click {
//!     user: u64,
//!     page: String,
//!     referrer: Option<String>,
//!     at_ms: u64,
//!     kind: Kind,
//!     weight: f32,
//! }
//!
//! #[derive(Clone, Debug, PartialEq, Codec)]
//! enum Kind {
//!     View,
//!     Buy { cents: u64 },
//!     Other(String),
//! }
//!
//! let c = Click {
//!     user: 7,
//!     page: "/a".into(),
//!     referrer: None,
//!     at_ms: 1_700_000_000_000,
//!     kind: Kind::Buy { cents: 499 },
//!     weight: 0.5,
//! };
//! let mut bytes = Vec::new();
//! c.encode(&mut bytes);
//! assert_eq!(Click::decode(&bytes).unwrap(), (c, &[][..]));
//! ```

/// Derives [`Codec`] for a struct or enum whose fields all have one (see
/// the module docs).
pub use tandem_derive::Codec;

/// A record value that can be written to and read from a buffer queue.
pub trait Codec: Sized {
    /// Appends the value's bytes to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads a value from the front of `bytes`, returning it and the bytes
    /// after it.
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError>;
}

/// Bytes that are not a value of the expected type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("buffer queue entry does not decode: {0}")]
pub struct CodecError(pub String);

fn take<const N: usize>(bytes: &[u8]) -> Result<([u8; N], &[u8]), CodecError> {
    if bytes.len() < N {
        return Err(CodecError(format!(
            "{} bytes left, {N} needed",
            bytes.len()
        )));
    }
    let (a, rest) = bytes.split_at(N);
    Ok((a.try_into().expect("N bytes"), rest))
}

macro_rules! int_codec {
    ($($t:ty),*) => {$(
        impl Codec for $t {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
                let (a, rest) = take::<{ std::mem::size_of::<$t>() }>(bytes)?;
                Ok((<$t>::from_le_bytes(a), rest))
            }
        }
    )*};
}

int_codec!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

impl Codec for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        match u8::decode(bytes)? {
            (0, rest) => Ok((false, rest)),
            (1, rest) => Ok((true, rest)),
            (b, _) => Err(CodecError(format!("{b} is not a bool"))),
        }
    }
}

/// Appends `bytes` with their length, as `Vec<u8>` encodes them — for a
/// codec whose field borrows its bytes (a small-string type, a slice)
/// and should not allocate to encode them.
#[inline]
pub fn encode_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    (bytes.len() as u64).encode(out);
    out.extend_from_slice(bytes);
}

/// Reads bytes written by [`encode_bytes`] (or a `Vec<u8>`), borrowed from
/// `bytes`: no allocation.
#[inline]
pub fn decode_bytes(bytes: &[u8]) -> Result<(&[u8], &[u8]), CodecError> {
    let (n, rest) = u64::decode(bytes)?;
    if (rest.len() as u64) < n {
        return Err(CodecError(format!(
            "a {n}-byte string with {} bytes left",
            rest.len()
        )));
    }
    Ok(rest.split_at(n as usize))
}

/// Reads a string written by [`encode_bytes`] (or a `String`), borrowed
/// from `bytes` and checked to be UTF-8: no allocation.
#[inline]
pub fn decode_str(bytes: &[u8]) -> Result<(&str, &[u8]), CodecError> {
    let (v, rest) = decode_bytes(bytes)?;
    std::str::from_utf8(v)
        .map(|s| (s, rest))
        .map_err(|e| CodecError(e.to_string()))
}

impl Codec for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_bytes(self, out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        decode_bytes(bytes).map(|(v, rest)| (v.to_vec(), rest))
    }
}

impl Codec for String {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_bytes(self.as_bytes(), out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        decode_str(bytes).map(|(s, rest)| (s.to_owned(), rest))
    }
}

/// Tuples of up to 12 fields: each field in turn.
macro_rules! tuple_codec {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Codec),+> Codec for ($($t,)+) {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                $( self.$i.encode(out); )+
            }
            #[inline]
            #[allow(non_snake_case)]
            fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
                $( let ($t, bytes) = $t::decode(bytes)?; )+
                Ok((($($t,)+), bytes))
            }
        }
    };
}

tuple_codec!(A 0);
tuple_codec!(A 0, B 1);
tuple_codec!(A 0, B 1, C 2);
tuple_codec!(A 0, B 1, C 2, D 3);
tuple_codec!(A 0, B 1, C 2, D 3, E 4);
tuple_codec!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_codec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_codec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_codec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_codec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_codec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_codec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

impl Codec for () {
    fn encode(&self, _out: &mut Vec<u8>) {}
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        Ok(((), bytes))
    }
}

impl<T: Codec> Codec for Box<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        (**self).encode(out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        T::decode(bytes).map(|(v, rest)| (Box::new(v), rest))
    }
}

impl Codec for char {
    fn encode(&self, out: &mut Vec<u8>) {
        u32::from(*self).encode(out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        let (c, rest) = u32::decode(bytes)?;
        char::from_u32(c)
            .map(|c| (c, rest))
            .ok_or_else(|| CodecError(format!("{c:#x} is not a char")))
    }
}

impl<A: Codec> Codec for Option<A> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(a) => {
                out.push(1);
                a.encode(out);
            }
        }
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        match u8::decode(bytes)? {
            (0, rest) => Ok((None, rest)),
            (1, rest) => A::decode(rest).map(|(a, r)| (Some(a), r)),
            (b, _) => Err(CodecError(format!("{b} is not an option tag"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round<T: Codec + PartialEq + std::fmt::Debug>(v: T) {
        let mut b = Vec::new();
        v.encode(&mut b);
        b.push(0xAB);
        let (w, rest) = T::decode(&b).unwrap();
        assert_eq!(w, v);
        assert_eq!(rest, [0xAB]);
    }

    #[test]
    fn values_round_trip_and_leave_the_rest() {
        round(7u64);
        round(-3i32);
        round(2.5f64);
        round(true);
        round("héllo".to_string());
        round((1u32, "x".to_string()));
        round((1u8, 2u16, Some(3u64)));
        round(None::<u32>);
    }

    #[test]
    fn truncated_or_invalid_bytes_are_errors() {
        assert!(u64::decode(&[1, 2, 3]).is_err());
        let mut b = Vec::new();
        "abc".to_string().encode(&mut b);
        assert!(String::decode(&b[..b.len() - 1]).is_err());
        assert!(bool::decode(&[2]).is_err());
        assert!(Option::<u8>::decode(&[9, 0]).is_err());
        let mut b = Vec::new();
        (u64::MAX).encode(&mut b);
        assert!(Vec::<u8>::decode(&b).is_err());
        assert!(String::decode(&[2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe]).is_err());
    }

    #[test]
    fn borrowed_bytes_and_strs_read_what_owned_ones_wrote_and_check_it() {
        let mut b = Vec::new();
        "héllo".to_string().encode(&mut b);
        encode_bytes(b"\x00\xff", &mut b);
        b.push(0xAB);
        let (s, rest) = decode_str(&b).unwrap();
        assert_eq!(s, "héllo");
        let (v, rest) = decode_bytes(rest).unwrap();
        assert_eq!((v, rest), (&b"\x00\xff"[..], &[0xABu8][..]));
        // What a `String` decodes from, a borrowed str does too, and the
        // same bytes fail both ways.
        let (owned, _) = String::decode(&b).unwrap();
        assert_eq!(owned, s);
        assert!(decode_str(&[2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe]).is_err());
        assert!(decode_bytes(&[5, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
    }
}
