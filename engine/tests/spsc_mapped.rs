//! File-backed SPSC rings: two independent mappings of one file exchange
//! data, and a malformed file is rejected with an error, never a panic.
#![cfg(not(loom))]

use std::{
    fs,
    io::{Seek, SeekFrom, Write},
    path::PathBuf,
    sync::atomic::{AtomicUsize, Ordering},
    thread,
};

use crossbeam_utils::Backoff;
use tandem::queue::spsc::{MapError, MappedConsumer, MappedProducer, Side};

/// A unique path in the temp dir, removed on drop.
struct TempPath(PathBuf);
impl TempPath {
    fn new(name: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "tandem-spsc-{}-{n}-{name}.ring",
            std::process::id()
        ));
        let _ = fs::remove_file(&path);
        Self(path)
    }
}
impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

#[test]
fn two_mappings_of_one_file_exchange_data_across_threads() {
    const ITEMS: u64 = 1_000_000;
    let path = TempPath::new("exchange");
    let tx = MappedProducer::<[u64; 2]>::create(&path.0, 64).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&path.0).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let consumer_path = path.0.clone();
    // The consumer maps the file itself, on its own thread: a separate
    // mapping (different virtual addresses) of the same pages.
    let consumer = thread::spawn(move || {
        let mut rx = MappedConsumer::<[u64; 2]>::open(&consumer_path).unwrap();
        assert_eq!(rx.capacity(), 64);
        let backoff = Backoff::new();
        let mut expected = 0u64;
        loop {
            let abandoned = rx.is_abandoned();
            let n = rx.pop_batch(32, |[seq, check]| {
                assert_eq!(seq, expected);
                assert_eq!(check, !seq);
                expected += 1;
            });
            if n > 0 {
                backoff.reset();
            } else if abandoned {
                break;
            } else {
                backoff.snooze();
            }
        }
        expected
    });
    let producer = thread::spawn(move || {
        let mut tx = tx;
        let backoff = Backoff::new();
        let mut it = (0..ITEMS).map(|i| [i, !i]).peekable();
        while it.peek().is_some() {
            if tx.push_iter(&mut it) == 0 {
                backoff.snooze();
            } else {
                backoff.reset();
            }
        }
    });
    producer.join().unwrap();
    assert_eq!(consumer.join().unwrap(), ITEMS);
}

#[test]
fn consumer_created_ring_is_opened_by_the_producer() {
    let path = TempPath::new("reverse");
    let mut rx = MappedConsumer::<u32>::create(&path.0, 5).unwrap();
    let mut tx = MappedProducer::<u32>::open(&path.0).unwrap();
    assert_eq!(tx.capacity(), 8);
    tx.push(7).unwrap();
    assert_eq!(rx.pop(), Some(7));
    drop(tx);
    assert!(rx.is_abandoned());
}

#[test]
fn create_refuses_an_existing_file() {
    let path = TempPath::new("exists");
    fs::write(&path.0, b"precious").unwrap();
    let err = MappedProducer::<u64>::create(&path.0, 8).unwrap_err();
    assert!(
        matches!(&err, MapError::Io(e) if e.kind() == std::io::ErrorKind::AlreadyExists),
        "{err:?}"
    );
    assert_eq!(
        fs::read(&path.0).unwrap(),
        b"precious",
        "must not clobber or remove it"
    );
}

#[test]
fn each_side_can_be_attached_only_once() {
    let path = TempPath::new("sides");
    let _tx = MappedProducer::<u64>::create(&path.0, 8).unwrap();
    assert!(matches!(
        MappedProducer::<u64>::open(&path.0),
        Err(MapError::SideTaken(Side::Producer))
    ));
    let rx = MappedConsumer::<u64>::open(&path.0).unwrap();
    drop(rx);
    assert!(
        matches!(
            MappedConsumer::<u64>::open(&path.0),
            Err(MapError::SideTaken(Side::Consumer))
        ),
        "an abandoned side cannot be re-attached"
    );
}

#[test]
fn wrong_element_size_is_an_error() {
    let path = TempPath::new("elem");
    let _tx = MappedProducer::<u64>::create(&path.0, 8).unwrap();
    let err = MappedConsumer::<u32>::open(&path.0).unwrap_err();
    assert!(
        matches!(
            err,
            MapError::ElementLayout {
                found_size: 8,
                expected_size: 4,
                ..
            }
        ),
        "{err:?}"
    );
    let err = MappedConsumer::<[u64; 2]>::open(&path.0).unwrap_err();
    assert!(
        matches!(
            err,
            MapError::ElementLayout {
                found_size: 8,
                expected_size: 16,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn bad_magic_is_an_error() {
    let path = TempPath::new("magic");
    drop(MappedProducer::<u64>::create(&path.0, 8).unwrap());
    let mut file = fs::OpenOptions::new().write(true).open(&path.0).unwrap();
    file.write_all(b"NOTARING").unwrap();
    drop(file);
    let err = MappedConsumer::<u64>::open(&path.0).unwrap_err();
    assert!(
        matches!(err, MapError::BadMagic { found } if found == u64::from_ne_bytes(*b"NOTARING")),
        "{err:?}"
    );
    assert!(err.to_string().contains("not a tandem SPSC ring"));
}

#[test]
fn bad_version_and_capacity_are_errors() {
    let path = TempPath::new("version");
    drop(MappedConsumer::<u64>::create(&path.0, 8).unwrap());
    let mut file = fs::OpenOptions::new().write(true).open(&path.0).unwrap();
    file.seek(SeekFrom::Start(8)).unwrap();
    file.write_all(&99u32.to_ne_bytes()).unwrap();
    let err = MappedProducer::<u64>::open(&path.0).unwrap_err();
    assert!(
        matches!(
            err,
            MapError::UnsupportedVersion {
                found: 99,
                expected: 1
            }
        ),
        "{err:?}"
    );

    file.seek(SeekFrom::Start(8)).unwrap();
    file.write_all(&1u32.to_ne_bytes()).unwrap();
    for bad in [0u64, 3, 1 << 40, u64::MAX] {
        file.seek(SeekFrom::Start(16)).unwrap();
        file.write_all(&bad.to_ne_bytes()).unwrap();
        let err = MappedProducer::<u64>::open(&path.0).unwrap_err();
        assert!(
            matches!(err, MapError::BadCapacity { found } if found == bad)
                || matches!(err, MapError::TooSmall { .. }),
            "capacity {bad}: {err:?}"
        );
    }
}

#[test]
fn short_files_are_errors() {
    let path = TempPath::new("short");
    for len in [0usize, 7, 100] {
        fs::write(&path.0, vec![0u8; len]).unwrap();
        let err = MappedConsumer::<u64>::open(&path.0).unwrap_err();
        assert!(matches!(err, MapError::TooSmall { .. }), "{len}: {err:?}");
    }
    // A valid header whose slots were cut off.
    fs::remove_file(&path.0).unwrap();
    drop(MappedProducer::<u64>::create(&path.0, 1024).unwrap());
    let file = fs::OpenOptions::new().write(true).open(&path.0).unwrap();
    file.set_len(4096).unwrap();
    let err = MappedConsumer::<u64>::open(&path.0).unwrap_err();
    assert!(
        matches!(err, MapError::TooSmall { len: 4096, .. }),
        "{err:?}"
    );
}

#[test]
fn missing_file_is_an_io_error() {
    let path = TempPath::new("missing");
    let err = MappedConsumer::<u64>::open(&path.0).unwrap_err();
    assert!(
        matches!(&err, MapError::Io(e) if e.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
}
