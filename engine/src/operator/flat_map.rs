//! `flat_map`: any number of outputs per input, emitted into the [`Output`]
//! (so no intermediate collection is allocated, and a record that cannot be
//! handled can be sent to the dead-letter file with a reason).

use super::{Output, Process};
use crate::record::Record;
use std::sync::Arc;

/// Calls the function with each record's value and the output.
pub struct FlatMap<F>(pub(crate) Arc<F>);

impl<I, O, F> Process<I, O> for FlatMap<F>
where
    F: Fn(I, &mut Output<'_, O>) + 'static,
{
    #[inline]
    fn process(&mut self, rec: Record<I>, out: &mut Output<'_, O>) {
        (self.0)(rec.value, out);
    }
}
