//! The `tandem` tool's numeric flags (`bq inspect --entries`, `check
//! --show`) at 0, 1, the maximum and random values: never a crash, each
//! run within 10 s (`tandem_within` fails a run that hangs).

mod common;

use common::{small_queue, tandem_within};

#[test]
fn numeric_flags_at_any_value_never_crash_the_tool() {
    let dir = std::env::temp_dir().join(format!("tandem-tool-numbers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let q = dir.join("q.bq");
    let w = small_queue(&q);
    for i in 0..10u64 {
        w.push(i, &[i as u8; 20]).unwrap();
    }
    drop(w);
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    std::fs::write(
        &a,
        "{\"type\":\"x\",\"seq\":1}\n{\"type\":\"x\",\"seq\":2}\n",
    )
    .unwrap();
    std::fs::write(
        &b,
        "{\"type\":\"x\",\"seq\":1}\n{\"type\":\"x\",\"seq\":3}\n",
    )
    .unwrap();
    let mut state = 0x70_01u64;
    let mut values = vec!["0".to_string(), "1".into(), u64::MAX.to_string()];
    for _ in 0..10 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        values.push((z ^ (z >> 31)).to_string());
    }
    for v in &values {
        for args in [
            vec![
                "bq".into(),
                "inspect".into(),
                q.display().to_string(),
                "--entries".into(),
                v.clone(),
            ],
            vec![
                "check".into(),
                a.display().to_string(),
                b.display().to_string(),
                "--show".into(),
                v.clone(),
            ],
        ] {
            let r = tandem_within(&args, None);
            let code = r
                .code
                .unwrap_or_else(|| panic!("{args:?}: killed by a signal"));
            assert!(
                (0..=2).contains(&code),
                "{args:?}: exit {code}\n{}",
                r.stderr
            );
            assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}
