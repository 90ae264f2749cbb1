//! Typed side outputs (Flink's `OutputTag`): a process function emits,
//! besides its main records, records of any type to named side outputs,
//! each a stream of its own.
//!
//! A function with side outputs declares its output as [`Sided<O>`] and
//! emits with [`Output::main`] and [`Output::side`]; the stream it gives
//! splits with [`Stream::main`] and [`Stream::side_output`] — operators
//! `NAME.main` and `NAME.TAG`, chained after it, counted in the report like
//! any other. This works for every kind of function (`process`, keyed,
//! timed, two-input, window), since it is only a matter of the output type:
//! side records travel in the operator's own output, in the envelope of
//! the record that caused them, so they are exactly once under every
//! recovery as its main records are.
//!
//! ```
//! use tandem::{IterSource, JobBuilder, OutputTag, Output, Record, RuntimeConfig, Sided};
//!
//! /// Odd numbers, on a side output of their own (as text).
//! const ODD: OutputTag<String> = OutputTag::new("odd");
//!
//! let job = JobBuilder::new("sides");
//! let split = job
//!     .source("numbers", |_| IterSource((0..10u64).map(|n| (n, n))))
//!     .flat_map("split", |n: u64, out: &mut Output<'_, Sided<u64>>| {
//!         if n % 2 == 0 {
//!             out.main(n);
//!         } else {
//!             out.side(&ODD, format!("odd {n}"));
//!         }
//!     });
//! split.main().for_each("evens", |r| assert_eq!(r.value % 2, 0));
//! split
//!     .side_output(&ODD)
//!     .for_each("odds", |r| assert!(r.value.starts_with("odd ")));
//! let report = job.build()?.run(&RuntimeConfig::default())?;
//! assert_eq!(report.operator("split.main").unwrap().emitted, 5);
//! assert_eq!(report.operator("split.odd").unwrap().emitted, 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{Data, Stream};
use crate::operator::Output;
use std::any::{Any, TypeId};
use std::marker::PhantomData;

/// The name and type of a side output.
pub struct OutputTag<S> {
    name: &'static str,
    _t: PhantomData<fn() -> S>,
}

impl<S> OutputTag<S> {
    /// The tag `name`: its records are operator `NAME.name` of the
    /// operator that emits them. Two tags are one if both name and type
    /// are the same.
    pub const fn new(name: &'static str) -> Self {
        OutputTag {
            name,
            _t: PhantomData,
        }
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl<S> Clone for OutputTag<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for OutputTag<S> {}

impl<S> std::fmt::Debug for OutputTag<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OutputTag({:?}: {})",
            self.name,
            std::any::type_name::<S>()
        )
    }
}

/// What a function with side outputs emits: a main record, or a record for
/// one of its side outputs.
#[derive(Clone)]
pub enum Sided<O> {
    /// A main record.
    Main(O),
    /// A record for a side output.
    Side(SideRecord),
}

/// A record for a side output: its tag and its value, of the tag's type.
pub struct SideRecord {
    tag: &'static str,
    ty: TypeId,
    value: Box<dyn SideValue>,
}

impl Clone for SideRecord {
    fn clone(&self) -> Self {
        SideRecord {
            tag: self.tag,
            ty: self.ty,
            value: self.value.clone_box(),
        }
    }
}

impl std::fmt::Debug for SideRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SideRecord({:?})", self.tag)
    }
}

/// A side record's value, of whatever type its tag has.
trait SideValue: Send {
    fn clone_box(&self) -> Box<dyn SideValue>;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<S: Data> SideValue for S {
    fn clone_box(&self) -> Box<dyn SideValue> {
        Box::new(self.clone())
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl<S: Data> OutputTag<S> {
    /// `value` as a record for this side output.
    pub fn record(&self, value: S) -> SideRecord {
        SideRecord {
            tag: self.name,
            ty: TypeId::of::<S>(),
            value: Box::new(value),
        }
    }

    /// The value of `r` if it is this tag's.
    fn take(&self, r: SideRecord) -> Option<S> {
        if r.tag != self.name || r.ty != TypeId::of::<S>() {
            return None;
        }
        r.value.into_any().downcast::<S>().ok().map(|b| *b)
    }
}

impl<O> Output<'_, Sided<O>> {
    /// Emits a main record, in the envelope of the record being processed.
    #[inline]
    pub fn main(&mut self, value: O) {
        self.emit(Sided::Main(value));
    }

    /// Emits `value` to the side output `tag`, in the envelope of the
    /// record being processed.
    #[inline]
    pub fn side<S: Data>(&mut self, tag: &OutputTag<S>, value: S) {
        self.emit(Sided::Side(tag.record(value)));
    }
}

impl<O: Data> Stream<Sided<O>> {
    /// The main records (operator `NAME.main`, chained after this one).
    /// Asked for again, it is the same stream.
    pub fn main(&self) -> Stream<O> {
        let name = format!("{}.main", self.node_name());
        self.split(&name, |s| {
            s.flat_map(&name, |s: Sided<O>, out: &mut Output<'_, O>| {
                if let Sided::Main(v) = s {
                    out.emit(v);
                }
            })
        })
    }

    /// The stream split off as operator `name`: made by `make` the first
    /// time, the same one after. A tag of another type under a name used
    /// already is refused at build.
    fn split<S: Data>(&self, name: &str, make: impl FnOnce(&Self) -> Stream<S>) -> Stream<S> {
        let seen = self.job.borrow().splits.get(name).copied();
        match seen {
            Some((node, t)) if t == TypeId::of::<S>() => {
                Stream::new(std::rc::Rc::clone(&self.job), node)
            }
            Some(_) => {
                self.job
                    .borrow_mut()
                    .errors
                    .push(crate::error::BuildError::DuplicateName {
                        name: name.to_string(),
                    });
                make(self)
            }
            None => {
                let s = make(self);
                self.job
                    .borrow_mut()
                    .splits
                    .insert(name.to_string(), (s.node, TypeId::of::<S>()));
                s
            }
        }
    }

    /// The records of side output `tag` (operator `NAME.TAG`, chained
    /// after this one), in the envelopes of the records that caused them.
    /// Asked for again, it is the same stream.
    pub fn side_output<S: Data>(&self, tag: &OutputTag<S>) -> Stream<S> {
        let name = format!("{}.{}", self.node_name(), tag.name);
        let tag = *tag;
        self.split(&name, |s| {
            s.flat_map(&name, move |s: Sided<O>, out: &mut Output<'_, S>| {
                if let Sided::Side(r) = s {
                    if let Some(v) = tag.take(r) {
                        out.emit(v);
                    }
                }
            })
        })
    }
}
