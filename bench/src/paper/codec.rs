//! How the pipeline's records cross a process boundary (process
//! isolation's pipes): [`Codec`] for each type that leaves a backed-up
//! chain. `LineRef`, `Levelled` and `PaperOut` derive theirs; a flattened
//! answer's is written by hand, to decode its user name without an
//! allocation.

use super::Flat;
use compact_str::CompactString;
use tandem::standby::{Codec, CodecError};

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
