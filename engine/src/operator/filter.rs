//! `filter`: keeps the records a predicate accepts.

use super::{Output, Process};
use crate::record::Record;
use std::sync::Arc;

/// Forwards the records for which the predicate is true.
pub struct Filter<F>(pub(crate) Arc<F>);

impl<T, F> Process<T, T> for Filter<F>
where
    F: Fn(&T) -> bool + 'static,
{
    #[inline]
    fn process(&mut self, rec: Record<T>, out: &mut Output<'_, T>) {
        if (self.0)(&rec.value) {
            out.emit(rec.value);
        }
    }
}
