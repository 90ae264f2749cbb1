//! Per-record parse cost: the hand parser vs serde_json, on the same input.
use tandem_bench::paper::{parse, parse_with_serde, Input};
fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let input = Input::generate(n, 42, 0, 1);
    let t = std::time::Instant::now();
    let mut s = 0u64;
    let passes: u64 = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    for _ in 0..passes {
        for i in 0..n {
            s += if which == "serde" {
                parse_with_serde(input.line(i)).unwrap().score
            } else {
                parse(input.line(i)).unwrap().score
            };
        }
    }
    println!(
        "{which} {:.0} ns/rec {s}",
        t.elapsed().as_nanos() as f64 / (passes * n) as f64
    );
}
