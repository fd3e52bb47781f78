//! Tests of the blob store (blobs.rs).
use super::*;

fn store() -> (tempfile::TempDir, BlobStore) {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("blobs");
    std::fs::create_dir(&dir).unwrap();
    (t, BlobStore::new(dir))
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn write_verified_success() {
    let (_t, b) = store();
    let data = b"hello blob".repeat(100_000); // > one copy buffer
    let d = Digest::of_bytes(&data);
    let n = b.write_verified(&d, &data[..]).await.unwrap();
    assert_eq!(n, data.len() as u64);
    assert_eq!(std::fs::read(b.path(&d)).unwrap(), data);
    assert!(b.exists(&d));
    assert_eq!(b.size(&d).unwrap(), Some(data.len() as u64));
    assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
    // Writing the same content again is fine and leaves one file.
    b.write_verified(&d, &data[..]).await.unwrap();
    assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
}

#[tokio::test]
async fn write_verified_mismatch_leaves_nothing() {
    let (_t, b) = store();
    let expected = Digest::of_bytes(b"expected");
    let err = b
        .write_verified(&expected, &b"actual"[..])
        .await
        .unwrap_err();
    let got = Digest::of_bytes(b"actual");
    assert_eq!(
        err.to_string(),
        format!("digest mismatch, expected \"{expected}\", got \"{got}\"")
    );
    assert!(matches!(err, Error::DigestMismatch { .. }));
    assert!(entries(b.dir()).is_empty());
    assert!(!b.exists(&expected) && !b.exists(&got));
}

/// Yields some bytes, then fails: the temp must not survive.
struct FailingReader(usize);
impl AsyncRead for FailingReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.0 == 0 {
            return std::task::Poll::Ready(Err(std::io::Error::other("connection reset")));
        }
        self.0 -= 1;
        buf.put_slice(&[7u8; 1000]);
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn read_error_removes_temp() {
    let (_t, b) = store();
    let d = Digest::of_bytes(b"x");
    let err = b.write_verified(&d, FailingReader(5)).await.unwrap_err();
    assert!(err.to_string().contains("connection reset"), "{err}");
    assert!(entries(b.dir()).is_empty());
    let err = b.write_stream(FailingReader(0)).await.unwrap_err();
    assert!(matches!(err, Error::Io(_)));
    assert!(entries(b.dir()).is_empty());
}

#[tokio::test]
async fn cancelled_write_removes_temp() {
    let (_t, b) = store();
    let (mut tx, rx) = tokio::io::duplex(64);
    tx.write_all(b"partial data").await.unwrap();
    let d = Digest::of_bytes(b"whatever");
    // The reader never finishes (tx stays open): time out = the handler future is dropped.
    let r = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        b.write_verified(&d, rx),
    )
    .await;
    assert!(r.is_err());
    assert!(entries(b.dir()).is_empty());
    drop(tx);
}

/// Past the background-sync threshold twice: the stored blob is every byte, in order.
#[tokio::test]
async fn long_streams_sync_in_the_background_and_store_every_byte() {
    let (_t, b) = store();
    let data: Vec<u8> = (0..2 * SYNC_EVERY + 5).map(|i| (i % 253) as u8).collect();
    let (d, n) = b.write_stream(&data[..]).await.unwrap();
    assert_eq!((d.clone(), n), (Digest::of_bytes(&data), data.len() as u64));
    assert!(std::fs::read(b.path(&d)).unwrap() == data);
    assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
}

#[tokio::test]
async fn write_stream_names_by_content() {
    let (_t, b) = store();
    let (d, n) = b.write_stream(&b"converted"[..]).await.unwrap();
    assert_eq!(d, Digest::of_bytes(b"converted"));
    assert_eq!(n, 9);
    assert_eq!(std::fs::read(b.path(&d)).unwrap(), b"converted");
}

#[test]
fn write_bytes_stores_and_touches() {
    let (_t, b) = store();
    let d = b.write_bytes(b"{\"model_format\":\"gguf\"}").unwrap();
    assert_eq!(d, Digest::of_bytes(b"{\"model_format\":\"gguf\"}"));
    let old = SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::open(b.path(&d))
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert_eq!(b.write_bytes(b"{\"model_format\":\"gguf\"}").unwrap(), d);
    let m = std::fs::metadata(b.path(&d)).unwrap().modified().unwrap();
    assert!(m > old + std::time::Duration::from_secs(3600));
    assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
}

#[cfg(unix)]
#[test]
fn symlinked_blob_is_not_a_blob() {
    let (t, b) = store();
    let outside = t.path().join("secret");
    std::fs::write(&outside, b"secret").unwrap();
    let d = Digest::of_bytes(b"secret");
    std::os::unix::fs::symlink(&outside, b.path(&d)).unwrap();
    assert!(!b.exists(&d));
    assert_eq!(b.size(&d).unwrap(), None);
}

#[test]
fn legacy_names_are_renamed() {
    let (_t, b) = store();
    let d = Digest::of_bytes(b"legacy");
    std::fs::write(b.dir().join(format!("sha256:{}", d.hex())), b"legacy").unwrap();
    std::fs::write(b.dir().join("unrelated"), b"x").unwrap();
    assert_eq!(b.fix_legacy_names().unwrap(), 1);
    assert_eq!(std::fs::read(b.path(&d)).unwrap(), b"legacy");
    assert_eq!(
        entries(b.dir()),
        vec![d.blob_file_name(), "unrelated".into()]
    );
    assert_eq!(b.fix_legacy_names().unwrap(), 0);
}

#[tokio::test]
async fn commit_partial_verifies() {
    let (_t, b) = store();
    let d = Digest::of_bytes(b"downloaded");
    std::fs::write(b.partial_path(&d), b"downloaded").unwrap();
    assert_eq!(b.commit_partial(&d).await.unwrap(), 10);
    assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);

    let (_t, b) = store();
    std::fs::write(b.partial_path(&d), b"corrupted!").unwrap();
    let err = b.commit_partial(&d).await.unwrap_err();
    assert!(matches!(err, Error::DigestMismatch { .. }));
    assert!(entries(b.dir()).is_empty());
    assert!(matches!(b.commit_partial(&d).await, Err(Error::Io(_))));
}

#[tokio::test]
async fn commit_partial_hashed_trusts_only_a_matching_digest() {
    let (_t, b) = store();
    let d = Digest::of_bytes(b"downloaded");
    let write = |b: &BlobStore| {
        std::fs::write(b.partial_path(&d), b"downloaded").unwrap();
        FileId::of(&std::fs::File::open(b.partial_path(&d)).unwrap()).unwrap()
    };
    let id = write(&b);
    let other = Digest::of_bytes(b"other");
    let err = b.commit_partial_hashed(&d, &other, id).await.unwrap_err();
    assert!(matches!(err, Error::DigestMismatch { .. }));
    assert!(
        entries(b.dir()).is_empty(),
        "a mismatched partial is deleted"
    );
    let id = write(&b);
    b.commit_partial_hashed(&d, &d, id).await.unwrap();
    assert_eq!(entries(b.dir()), vec![d.blob_file_name()]);
    assert_eq!(std::fs::read(b.path(&d)).unwrap(), b"downloaded");
}

#[tokio::test]
async fn a_partial_replaced_by_another_process_is_neither_committed_nor_deleted() {
    let (_t, b) = store();
    let d = Digest::of_bytes(b"downloaded");
    let partial = b.partial_path(&d);
    std::fs::write(&partial, b"downloaded").unwrap();
    let hashed = FileId::of(&std::fs::File::open(&partial).unwrap()).unwrap();
    // Another process starts over: a new file (still incomplete) takes the path.
    let theirs = b.dir().join("theirs");
    std::fs::write(&theirs, b"down").unwrap();
    std::fs::rename(&theirs, &partial).unwrap();
    let err = b.commit_partial_hashed(&d, &d, hashed).await.unwrap_err();
    assert!(
        err.to_string().contains("replaced by another process"),
        "{err}"
    );
    assert!(!b.path(&d).exists(), "nothing committed");
    assert_eq!(
        std::fs::read(&partial).unwrap(),
        b"down",
        "theirs left alone"
    );
    // Also with a wrong digest: their file is not ours to delete.
    let other = Digest::of_bytes(b"other");
    assert!(b.commit_partial_hashed(&d, &other, hashed).await.is_err());
    assert!(partial.exists());
}

#[test]
fn partial_paths_derive_from_digest() {
    let (_t, b) = store();
    let d = Digest::of_bytes(b"p");
    assert_eq!(
        b.partial_path(&d).file_name().unwrap().to_str().unwrap(),
        format!("sha256-{}-partial", d.hex())
    );
    assert_eq!(
        b.partial_part_path(&d, 3)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap(),
        format!("sha256-{}-partial-3", d.hex())
    );
}
