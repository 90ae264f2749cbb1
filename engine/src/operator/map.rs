//! `map`: one output per input.

use super::{Output, Process};
use crate::record::Record;
use std::sync::Arc;

/// Applies a function to every record's value.
pub struct Map<F>(pub(crate) Arc<F>);

impl<I, O, F> Process<I, O> for Map<F>
where
    F: Fn(I) -> O + 'static,
{
    #[inline]
    fn process(&mut self, rec: Record<I>, out: &mut Output<'_, O>) {
        out.emit((self.0)(rec.value));
    }
}
