//! Fixtures shared by the `tandem` command tests.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tandem::checkpoint::{OperatorSnapshot, Position, SnapshotStore};
use tandem::standby::bq::{BqConfig, BufferQueue};
use tandem::state::KeyedState;

/// A new buffer queue of 16 slots, a 4 KiB arena and two readers.
#[allow(dead_code)] // not every test crate uses every fixture
pub fn small_queue(path: &Path) -> BufferQueue {
    BufferQueue::create(
        path,
        BqConfig {
            slots: 16,
            arena: 4096,
            readers: 2,
        },
    )
    .unwrap()
}

/// A store in `dir` with checkpoints 1 and 2 of one operator instance
/// (`sum#0`, positions `[0:42]`) each.
#[allow(dead_code)]
pub fn store(dir: &Path) {
    let store = SnapshotStore::open(dir, 3).unwrap();
    for id in 1..=2 {
        let mut s: KeyedState<u64, u64> = KeyedState::default();
        *s.get_or_default(&id) = id;
        let snap = OperatorSnapshot {
            operator: "sum".into(),
            instance: 0,
            positions: vec![Position {
                partition: 0,
                next_seq: 42,
            }],
            bytes: s.to_snapshot_bytes().unwrap(),
        };
        store.submit(id, vec![snap]).wait().unwrap();
    }
}

/// How a run of `tandem` ended.
#[allow(dead_code)]
pub struct Run {
    /// Its exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// How long a run may take before it counts as hung.
const HUNG: Duration = Duration::from_secs(10);

/// Runs `tandem ARGS` with `RUST_BACKTRACE=1`, no standard input and its
/// standard output to `stdout` (else captured). A run that has not ended
/// after 10 s is killed and fails the test: it hung (on a FIFO, say), and
/// the test must say so rather than hang with it.
#[allow(dead_code)]
pub fn tandem_within<S: AsRef<OsStr>>(args: &[S], stdout: Option<File>) -> Run {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let args: Vec<OsString> = args.iter().map(|a| a.as_ref().to_owned()).collect();
    let tag = format!(
        "tandem-run-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let (out_path, err_path) = (
        std::env::temp_dir().join(format!("{tag}.out")),
        std::env::temp_dir().join(format!("{tag}.err")),
    );
    let out = stdout.unwrap_or_else(|| File::create(&out_path).unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(&args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > HUNG {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&out_path);
            let _ = std::fs::remove_file(&err_path);
            panic!("tandem {args:?} hung: still running after {HUNG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| {
        let text = std::fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let _ = std::fs::remove_file(p);
        text
    };
    Run {
        code: status.code(),
        stdout: read(&out_path),
        stderr: read(&err_path),
    }
}
