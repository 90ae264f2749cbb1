//! Probes: the seam through which fault injectors (and tracers) reach the
//! data path, without the engine knowing about them.
//!
//! A [`ProbeFactory`] in the [`super::RuntimeConfig`] is asked, once per
//! operator instance as it is built, for a [`RecordProbe`]. Instances that
//! get none pay one predictable branch per record; an instance that gets one
//! calls it before each record and obeys its [`ProbeAction`]. The
//! `tandem-fault-inject` crate implements this trait; the engine never
//! imports it.

use crate::record::TupleId;
use std::time::Duration;

/// What a probe asks of the operator about to process a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeAction {
    /// Process the record normally.
    Continue,
    /// Panic inside the operator (as its own code would), with this message.
    Panic(String),
    /// Stop the operator's thread for this long, then process the record.
    Stall(Duration),
    /// The operator's input channel breaks: the record is not processed and
    /// the operator fails.
    CutInput,
}

/// Consulted before every record of one operator instance.
pub trait RecordProbe: 'static {
    /// Called before the instance processes the record `id`.
    fn before(&mut self, id: TupleId) -> ProbeAction;
}

/// Hands out probes to operator instances as they are built.
pub trait ProbeFactory: Send + Sync + 'static {
    /// The probe for instance `instance` of `operator`, if it needs one.
    fn probe(&self, operator: &str, instance: usize) -> Option<Box<dyn RecordProbe>>;
}
