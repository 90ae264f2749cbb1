use tandem_bench::paper::{parse, Input};
fn main() {
    let n = 1_000_000;
    let input = Input::generate(n, 42, 0, 2);
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let mut s = 0u64;
        for i in 0..n { s += parse(input.line(i)).unwrap().score; }
        println!("parse {:.0} ns/rec {}", t.elapsed().as_nanos() as f64 / n as f64, s);
    }
    let t = std::time::Instant::now();
    let mut s = 0u64;
    for i in 0..n { let v: serde_json::Value = serde_json::from_slice(input.line(i)).unwrap(); s += v["seq"].as_u64().unwrap(); }
    println!("value {:.0} ns/rec {}", t.elapsed().as_nanos() as f64 / n as f64, s);
}
