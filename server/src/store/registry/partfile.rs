//! The `-partial` data file of one download and each part's way into it. With direct I/O
//! (`RegistryOptions::direct_io`), whole 4 KiB blocks inside a part are written with `O_DIRECT`
//! from a block-aligned staging buffer, so the bytes
//! never pass through the page cache (on the VMs this runs on, filling fresh page-cache pages
//! costs more CPU than hashing the same bytes, and direct writes from several parts keep the
//! disk busy instead of leaving a backlog for the final fsync). The bytes of a flush that share
//! a block with bytes outside it (its first and last partial blocks) go through the page cache.
//! Filesystems without `O_DIRECT`, or a kernel refusing a direct write, fall back to the page
//! cache for everything.
//!
//! Invariants:
//! - no block is written directly while something writes it through the page cache (which
//!   could leave a stale cached copy): direct writes cover only blocks whole inside one flush;
//!   a flush's partial first and last blocks go through the page cache, and those are the only
//!   blocks neighbouring parts (or consecutive flushes) share. A block covered differently on a
//!   later resume is no hazard: a direct write first writes back and drops cached pages of its
//!   range;
//! - every flush writes everything staged, so a cancelled flush still on the blocking pool
//!   loses nothing it received, and a part's `Completed` record is rewritten only after the
//!   bytes it counts were written;
//! - the staging buffer keeps file position `p` at an address congruent to `p` modulo the block
//!   size, so every aligned file position sits at an aligned address.

use std::fs::File;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Block size for direct I/O: a multiple of every common logical sector size (512, 4096).
pub(crate) const ALIGN: usize = 4096;
/// Bytes staged per part between writes (and state updates): at most this much per part is lost
/// to a SIGKILL (a dropped future flushes synchronously, losing nothing). Direct writes here
/// cost about the same per request up to several MiB, but a larger chunk also widens the window
/// in which a cancelled download's last flush, still on the blocking pool, lands after a
/// restarted download of the same blob has read the part records (it then fetches those bytes
/// again).
pub(crate) const WRITE_CHUNK: usize = 1 << 20;
/// State files are overwritten in place, padded to this size, so an update is one small pwrite
/// and a torn file cannot shrink.
const STATE_LEN: usize = 128;

/// Ollama's part state record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartState {
    #[serde(rename = "N")]
    pub n: usize,
    #[serde(rename = "Offset")]
    pub offset: u64,
    #[serde(rename = "Size")]
    pub size: u64,
    #[serde(rename = "Completed")]
    pub completed: u64,
}

pub(crate) fn open_nofollow(path: &Path, create: bool) -> std::io::Result<File> {
    // Readable too: the trailing hasher reads parts back from the data file.
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
}

pub(crate) fn write_state_to(file: &File, st: &PartState) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(st).map_err(std::io::Error::other)?;
    bytes.resize(STATE_LEN.max(bytes.len()), b' ');
    file.write_all_at(&bytes, 0)
}

/// A heap buffer of `len` bytes whose usable part starts on a block boundary.
pub(crate) struct Aligned {
    raw: Vec<u8>,
    base: usize,
}

impl Aligned {
    pub fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + ALIGN];
        let base = (ALIGN - raw.as_ptr() as usize % ALIGN) % ALIGN;
        Aligned { raw, base }
    }

    pub fn len(&self) -> usize {
        self.raw.len() - ALIGN
    }

    pub fn get(&self) -> &[u8] {
        &self.raw[self.base..self.base + self.len()]
    }

    pub fn get_mut(&mut self) -> &mut [u8] {
        let (b, n) = (self.base, self.len());
        &mut self.raw[b..b + n]
    }
}

/// The data file: the page-cache handle always, the `O_DIRECT` one while it works.
pub(crate) struct DataFile {
    pub buffered: File,
    direct: Option<File>,
    direct_ok: AtomicBool,
}

impl DataFile {
    /// Opens the data file; with `direct`, also an `O_DIRECT` handle where the filesystem has one.
    pub fn open(path: &Path, direct: bool) -> std::io::Result<DataFile> {
        let buffered = open_nofollow(path, false)?;
        let direct = direct
            .then(|| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(
                        (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_DIRECT).bits(),
                    )
                    .open(path)
                    .ok()
            })
            .flatten();
        Ok(DataFile::new(buffered, direct))
    }

    pub fn new(buffered: File, direct: Option<File>) -> DataFile {
        DataFile {
            buffered,
            direct_ok: AtomicBool::new(direct.is_some()),
            direct,
        }
    }

    /// The direct handle, unless the filesystem lacks one or refused a direct write.
    pub fn direct(&self) -> Option<&File> {
        self.direct
            .as_ref()
            .filter(|_| self.direct_ok.load(Ordering::Acquire))
    }

    /// Writes whole blocks at an aligned position directly; through the page cache (for good)
    /// once the kernel refuses.
    fn write_blocks(&self, data: &[u8], at: u64) -> std::io::Result<()> {
        if let Some(d) = self.direct() {
            match d.write_all_at(data, at) {
                Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {
                    tracing::debug!(error = %e, "direct write refused; using the page cache");
                    self.direct_ok.store(false, Ordering::Release);
                }
                r => return r,
            }
        }
        self.buffered.write_all_at(data, at)
    }

    /// Reads `[pos, end)` (bytes already written) into `buf`, returning the slice holding them.
    /// With the direct handle the read covers the enclosing whole blocks (bytes around the range
    /// are read and ignored), so it never fills the page cache with blocks written directly.
    pub fn read_back<'b>(
        &self,
        buf: &'b mut Aligned,
        pos: u64,
        end: u64,
    ) -> std::io::Result<&'b [u8]> {
        let n = (end - pos) as usize;
        let Some(d) = self.direct() else {
            let out = &mut buf.get_mut()[..n];
            self.buffered.read_exact_at(out, pos)?;
            return Ok(out);
        };
        let skip = (pos % ALIGN as u64) as usize;
        let want = (skip + n).div_ceil(ALIGN) * ALIGN;
        let out = &mut buf.get_mut()[..want];
        let mut got = 0;
        // A short read can only happen at end of file, which is at or after `end`.
        while got < skip + n {
            match d.read_at(&mut out[got..], pos - skip as u64 + got as u64)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                k => got += k,
            }
        }
        Ok(&out[skip..skip + n])
    }
}

/// How one flush of `len` staged bytes starting at file position `pos` is written: `head` bytes
/// through the page cache up to the next block boundary, then `body` whole blocks directly, then
/// the `tail` through the page cache. Without direct I/O everything is `head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub head: usize,
    pub body: usize,
    pub tail: usize,
}

pub(crate) fn plan(pos: u64, len: usize, direct: bool) -> Plan {
    if !direct {
        return Plan {
            head: len,
            body: 0,
            tail: 0,
        };
    }
    let to_boundary = (ALIGN - (pos % ALIGN as u64) as usize) % ALIGN;
    let head = len.min(to_boundary);
    let body = (len - head) / ALIGN * ALIGN;
    Plan {
        head,
        body,
        tail: len - head - body,
    }
}

/// A part's received bytes not yet written, kept congruent to their file position (see module
/// docs).
pub(crate) struct Staging {
    buf: Aligned,
    /// Index in `buf` of the byte at file position `pos`: `pos % ALIGN`.
    start: usize,
    len: usize,
}

impl Staging {
    fn new(pos: u64) -> Staging {
        Staging {
            // Room for a whole chunk on top of a nearly full buffer, so growing is rare.
            buf: Aligned::new(2 * WRITE_CHUNK + ALIGN),
            start: (pos % ALIGN as u64) as usize,
            len: 0,
        }
    }

    /// Appends all of `bytes`, growing the buffer if needed: a received chunk is staged whole
    /// or not at all, so a cancellation never drops part of one.
    fn push(&mut self, bytes: &[u8]) {
        let at = self.start + self.len;
        if at + bytes.len() > self.buf.len() {
            let mut bigger = Aligned::new(at + bytes.len() + WRITE_CHUNK);
            bigger.get_mut()[..at].copy_from_slice(&self.buf.get()[..at]);
            self.buf = bigger;
        }
        self.buf.get_mut()[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn staged(&self) -> &[u8] {
        &self.buf.get()[self.start..self.start + self.len]
    }

    /// Writes everything staged, per `plan`, as the bytes at file position `pos`.
    fn write(&self, file: &DataFile, pos: u64) -> std::io::Result<()> {
        let p = plan(pos, self.len, file.direct().is_some());
        let (head, rest) = self.staged().split_at(p.head);
        let (body, tail) = rest.split_at(p.body);
        file.buffered.write_all_at(head, pos)?;
        file.write_blocks(body, pos + p.head as u64)?;
        file.buffered
            .write_all_at(tail, pos + (p.head + p.body) as u64)
    }

    /// Empties the buffer for bytes that continue at file position `pos`.
    fn reset(&mut self, pos: u64) {
        self.start = (pos % ALIGN as u64) as usize;
        self.len = 0;
    }
}

/// Stages one part's bytes and persists them (data first, then the state record), feeding the
/// hasher.
pub(crate) struct PartWriter<'a> {
    file: Arc<DataFile>,
    /// This part's `-partial-<n>` record, kept open (one pwrite per update).
    state: Arc<File>,
    trail: Arc<super::hashing::Trailing>,
    pub st: PartState,
    /// `None` only while a flush has it on the blocking pool.
    staging: Option<Staging>,
    completed: &'a AtomicU64,
}

impl<'a> PartWriter<'a> {
    pub fn new(
        file: Arc<DataFile>,
        state: File,
        trail: Arc<super::hashing::Trailing>,
        st: PartState,
        completed: &'a AtomicU64,
    ) -> PartWriter<'a> {
        PartWriter {
            file,
            state: Arc::new(state),
            trail,
            staging: Some(Staging::new(st.offset + st.completed)),
            st,
            completed,
        }
    }

    /// Stages all of `bytes`; `full` says when to flush.
    pub fn push(&mut self, bytes: &[u8]) {
        if let Some(s) = &mut self.staging {
            s.push(bytes);
        }
    }

    pub fn full(&self) -> bool {
        self.staging.as_ref().is_some_and(|s| s.len >= WRITE_CHUNK)
    }

    /// Forgets staged bytes (a reply that broke the protocol: none of it is kept).
    pub fn discard(&mut self) {
        if let Some(s) = &mut self.staging {
            s.len = 0;
        }
    }

    /// Writes what is staged, then the state record, then lets the hasher take the bytes.
    pub async fn flush(&mut self) -> Result<(), Error> {
        let Some(staging) = self.staging.take() else {
            return Err(Error::Internal("part writer lost its buffer".into()));
        };
        if staging.len == 0 {
            self.staging = Some(staging);
            return Ok(());
        }
        let st = self.st;
        let (file, state, trail) = (self.file.clone(), self.state.clone(), self.trail.clone());
        let (staging, next) = tokio::task::spawn_blocking(move || {
            let mut staging = staging;
            let r = persist(&file, &state, &staging, st).and_then(|next| {
                trail.written(&file, st.n, next.completed, staging.staged())?;
                staging.reset(st.offset + next.completed);
                Ok(next)
            });
            (staging, r)
        })
        .await
        .map_err(|e| Error::Internal(format!("write task: {e}")))?;
        self.staging = Some(staging);
        let next = next?;
        self.completed
            .fetch_add(next.completed - self.st.completed, Ordering::Relaxed);
        self.st = next;
        Ok(())
    }
}

/// Writes the staged bytes and records the new watermark; returns the new state.
fn persist(
    file: &DataFile,
    state: &File,
    staging: &Staging,
    st: PartState,
) -> std::io::Result<PartState> {
    staging.write(file, st.offset + st.completed)?;
    let mut next = st;
    next.completed += staging.len as u64;
    write_state_to(state, &next)?;
    Ok(next)
}

impl Drop for PartWriter<'_> {
    /// A cancelled pull keeps every byte it received: one synchronous write of the staging
    /// buffer.
    fn drop(&mut self) {
        if let Some(s) = &self.staging {
            if s.len > 0 {
                if let Ok(next) = persist(&self.file, &self.state, s, self.st) {
                    self.st = next;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_split_at_block_boundaries() {
        let a = ALIGN as u64;
        let p = |head, body, tail| Plan { head, body, tail };
        // (pos, len, direct) -> plan
        let cases = [
            ((0, 3 * ALIGN + 5, true), p(0, 3 * ALIGN, 5)),
            ((0, 3 * ALIGN, true), p(0, 3 * ALIGN, 0)),
            ((a - 10, 10 + 2 * ALIGN, true), p(10, 2 * ALIGN, 0)),
            ((a - 10, 4, true), p(4, 0, 0)),
            ((7, ALIGN - 8, true), p(ALIGN - 8, 0, 0)),
            ((7, ALIGN, true), p(ALIGN - 7, 0, 7)),
            ((7, 2 * ALIGN, true), p(ALIGN - 7, ALIGN, 7)),
            ((2 * a, ALIGN - 1, true), p(0, 0, ALIGN - 1)),
            ((5, 3 * ALIGN, false), p(3 * ALIGN, 0, 0)),
            ((0, 0, true), p(0, 0, 0)),
        ];
        for ((pos, len, direct), want) in cases {
            let got = plan(pos, len, direct);
            assert_eq!(got, want, "pos {pos} len {len} direct {direct}");
            assert_eq!(got.head + got.body + got.tail, len);
            if got.body > 0 {
                assert_eq!(
                    (pos + got.head as u64) % a,
                    0,
                    "direct writes start aligned"
                );
                assert_eq!(got.body % ALIGN, 0, "and cover whole blocks");
            }
            if direct && got.tail > 0 {
                assert!(got.tail < ALIGN, "only a partial last block is buffered");
            }
        }
    }

    #[test]
    fn aligned_buffers_start_on_a_block() {
        for len in [1, ALIGN, WRITE_CHUNK] {
            let mut b = Aligned::new(len);
            assert_eq!(b.get().as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.get_mut().len(), len);
        }
    }

    #[test]
    fn staging_keeps_positions_congruent() {
        let mut s = Staging::new(ALIGN as u64 + 100);
        s.push(&[1; 5000]);
        assert_eq!(s.staged().as_ptr() as usize % ALIGN, 100);
        s.reset(ALIGN as u64 + 5100);
        s.push(&[1; 10]);
        assert_eq!(s.staged().as_ptr() as usize % ALIGN, 5100 % ALIGN);
        // A chunk larger than the room left is staged whole: the buffer grows, keeping
        // the staged bytes and their congruence.
        let big: Vec<u8> = (0..3 * WRITE_CHUNK).map(|i| (i % 249) as u8).collect();
        s.push(&big);
        assert_eq!(s.staged().len(), 10 + big.len());
        assert_eq!(&s.staged()[10..], &big[..]);
        assert_eq!(s.staged().as_ptr() as usize % ALIGN, 5100 % ALIGN);
    }

    /// Flushes through a real file in both modes (direct where the temp filesystem has it):
    /// every byte lands where it belongs, whatever the alignment of the part and its chunks.
    #[test]
    fn flushes_write_every_byte_in_place() {
        let total = 5 * ALIGN + 333;
        let all: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        for direct in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("data");
            let f = std::fs::File::create(&path).unwrap();
            f.set_len(total as u64).unwrap();
            let file = if direct {
                DataFile::open(&path, true).unwrap()
            } else {
                DataFile::new(open_nofollow(&path, false).unwrap(), None)
            };
            // Chunks straddling block boundaries from an unaligned start, then aligned ones.
            let mut pos = 0;
            for len in [17, ALIGN, 2 * ALIGN + 5, ALIGN - 22, 333, ALIGN] {
                let mut s = Staging::new(pos as u64);
                s.push(&all[pos..pos + len]);
                s.write(&file, pos as u64).unwrap();
                pos += len;
            }
            assert_eq!(pos, total);
            assert_eq!(std::fs::read(&path).unwrap(), all, "direct {direct}");
        }
    }
}
