//! How the pipeline's records cross a process boundary (process
//! isolation's pipes): [`Codec`] for each type that leaves a backed-up
//! chain.

use super::{Flat, Levelled, LineRef, PaperOut};
use compact_str::CompactString;
use tandem::standby::{Codec, CodecError};

impl Codec for LineRef {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
    }
    fn decode(bytes: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        u64::decode(bytes).map(|(v, r)| (LineRef(v), r))
    }
}

impl Codec for Flat {
    fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.seq, self.ts, self.answer_id, self.score] {
            v.encode(out);
        }
        for v in [
            self.user_id,
            self.reputation,
            self.likes,
            self.favorites,
            self.comments,
            self.text_len,
            self.word_count,
        ] {
            v.encode(out);
        }
        tandem::standby::encode_bytes(self.user_name.as_bytes(), out);
    }
    fn decode(b: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        let (seq, b) = u64::decode(b)?;
        let (ts, b) = u64::decode(b)?;
        let (answer_id, b) = u64::decode(b)?;
        let (score, b) = u64::decode(b)?;
        let mut v = [0u32; 7];
        let mut b = b;
        for x in &mut v {
            let (y, r) = u32::decode(b)?;
            *x = y;
            b = r;
        }
        let (name, b) = tandem::standby::decode_str(b)?;
        let [user_id, reputation, likes, favorites, comments, text_len, word_count] = v;
        Ok((
            Flat {
                seq,
                ts,
                answer_id,
                user_id,
                user_name: CompactString::new(name),
                reputation,
                likes,
                favorites,
                comments,
                text_len,
                word_count,
                score,
            },
            b,
        ))
    }
}

impl Codec for Levelled {
    fn encode(&self, out: &mut Vec<u8>) {
        self.flat.encode(out);
        self.level.encode(out);
    }
    fn decode(b: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        let (flat, b) = Flat::decode(b)?;
        let (level, b) = u8::decode(b)?;
        Ok((Levelled { flat, level }, b))
    }
}

impl Codec for PaperOut {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            PaperOut::Record(l) => {
                out.push(0);
                l.encode(out);
            }
            PaperOut::Summary {
                user_id,
                count,
                likes_sum,
            } => {
                out.push(1);
                user_id.encode(out);
                count.encode(out);
                likes_sum.encode(out);
            }
        }
    }
    fn decode(b: &[u8]) -> Result<(Self, &[u8]), CodecError> {
        match u8::decode(b)? {
            (0, b) => {
                let (l, b) = Levelled::decode(b)?;
                Ok((PaperOut::Record(l), b))
            }
            (1, b) => {
                let (user_id, b) = u32::decode(b)?;
                let (count, b) = u64::decode(b)?;
                let (likes_sum, b) = u64::decode(b)?;
                Ok((
                    PaperOut::Summary {
                        user_id,
                        count,
                        likes_sum,
                    },
                    b,
                ))
            }
            (t, _) => Err(CodecError(format!("paper output tag {t}"))),
        }
    }
}
