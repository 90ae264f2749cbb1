//! Fan-out of one stream to several consumers, and the consumer of a stream
//! nobody reads.

use super::Collector;
use crate::record::Record;

/// Clones every record to each consumer (the last one gets the original).
pub(crate) struct Tee<T> {
    pub(crate) outs: Vec<Box<dyn Collector<T>>>,
}

impl<T: Clone> Collector<T> for Tee<T> {
    fn collect(&mut self, rec: Record<T>) {
        if let Some((last, rest)) = self.outs.split_last_mut() {
            for o in rest {
                o.collect(rec.clone());
            }
            last.collect(rec);
        }
    }
    fn flush(&mut self) {
        self.outs.iter_mut().for_each(|o| o.flush());
    }
    fn end(&mut self) {
        self.outs.iter_mut().for_each(|o| o.end());
    }
    fn barrier(&mut self, id: u64) {
        self.outs.iter_mut().for_each(|o| o.barrier(id));
    }
    fn watermark(&mut self, wm: u64) {
        self.outs.iter_mut().for_each(|o| o.watermark(wm));
    }
    fn idle(&mut self) {
        self.outs.iter_mut().for_each(|o| o.idle());
    }
    fn open_chunk(&mut self, id: crate::operator::ChunkId) {
        self.outs.iter_mut().for_each(|o| o.open_chunk(id));
    }
    fn close_chunk(&mut self) {
        self.outs.iter_mut().for_each(|o| o.close_chunk());
    }
    fn snapshot_chain(
        &mut self,
        parts: &mut super::ChainParts,
    ) -> Result<(), crate::checkpoint::CheckpointError> {
        self.outs
            .iter_mut()
            .try_for_each(|o| o.snapshot_chain(parts))
    }
    fn follow_point(
        &mut self,
        parts: &mut super::FollowParts,
    ) -> Result<bool, crate::checkpoint::CheckpointError> {
        for o in &mut self.outs {
            if !o.follow_point(parts)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
    fn install_followed(&mut self) {
        self.outs.iter_mut().for_each(|o| o.install_followed());
    }
}

/// Discards records of a stream that has no consumer.
pub(crate) struct Null;

impl<T> Collector<T> for Null {
    fn collect(&mut self, _rec: Record<T>) {}
    fn flush(&mut self) {}
    fn end(&mut self) {}
    fn barrier(&mut self, _id: u64) {}
    fn watermark(&mut self, _wm: u64) {}
    fn idle(&mut self) {}
}
