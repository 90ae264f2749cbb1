//! A restart right at the end of the input: a commit fails for the
//! checkpoint whose barrier the sources injected as they ended, the job
//! restarts from it, and the output is still exactly the clean one.
//!
//! What went wrong here (found by `chaos`): a keyed instance that passed
//! that barrier archives its frozen state between polls and acknowledges
//! after; its task then ended at once, and its end reached the supervisor
//! first — so the checkpoint counted the instance as one that had ended
//! before the barrier, kept none of its state, and the restart skipped its
//! end-of-stream summaries (26 k lines lost, exit status 0).

mod common;

use std::path::Path;
use std::process::Command;

fn paper(dir: &Path, tag: &str, args: &[&str]) -> Vec<String> {
    let out = dir.join(format!("{tag}.jsonl"));
    let o = Command::new(env!("CARGO_BIN_EXE_paper"))
        .args(["--records", "100000", "--seed", "3201", "--rate", "250000"])
        .args(["--output", out.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    common::assert_success(&o, tag);
    common::sorted_lines(&out)
}

#[test]
fn a_restart_from_the_checkpoint_taken_as_the_input_ends_loses_nothing() {
    let dir = std::env::temp_dir().join(format!("tandem-end-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let clean = paper(&dir, "clean", &[]);
    // The input takes ~400 ms: the first commit after each of these
    // offsets is one of the last checkpoints', often the one the sources
    // injected as they ended.
    for ms in [370, 385, 395, 400, 405, 410, 420] {
        let lines = paper(
            &dir,
            "faulted",
            &[
                "--strategy",
                "restart-all",
                "--checkpoint-interval-ms",
                "20",
                "--fault-schedule",
                &format!("commit@sink:+{ms}ms"),
            ],
        );
        assert_eq!(lines.len(), clean.len(), "+{ms} ms: line count");
        assert!(lines == clean, "+{ms} ms: output differs");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
