//! Benchmark support for Tandem: the paper's pipeline (generator, operators,
//! job) and helpers the benchmark binaries share.

pub mod cleanup;
pub mod cli;
pub mod live;
pub mod nexmark;
pub mod paper;
pub mod paths;
pub mod progress;
pub mod report;
