//! sha256 of a download computed while its parts land, so verification costs no second pass over
//! the blob. The hash position trails the contiguous prefix of bytes already on disk: a chunk that
//! starts exactly at the position is hashed from memory as it is written; bytes that parts further
//! ahead wrote are read back (`DataFile::read_back`: direct reads of whole blocks when the
//! download writes directly, else the page cache) once the prefix reaches them; whatever is left
//! when the last part ends is read back by `finish`.
//!
//! Invariants:
//! - only bytes already written to the data file are hashed, each exactly once, in file order, so
//!   the digest is the digest of the file (regions are written once: a part only ever appends at
//!   its own `Completed` watermark);
//! - `persisted[n]` is stored (Release) only after part `n`'s bytes up to it were written, and
//!   read (Acquire) before they are read back;
//! - a writer never waits for another's read-back unless its own chunk is next in line, and one
//!   call reads back at most `CATCH_UP_BUDGET`, so hashing never stalls a part's network stream
//!   for long.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use sha2::{Digest as _, Sha256};

use super::partfile::{Aligned, DataFile, ALIGN};
use crate::store::Digest;

/// Read-back block size.
const READ_BLOCK: usize = 4 << 20;
/// Most bytes one `written` call reads back before returning to its own stream.
const CATCH_UP_BUDGET: u64 = 32 << 20;

pub(crate) struct Trailing {
    /// `(offset, size)` of each part, in file order, contiguous from 0.
    parts: Vec<(u64, u64)>,
    /// Bytes of each part on disk (always a prefix of the part).
    persisted: Vec<AtomicU64>,
    /// Mirror of `State::pos` for the lock-free "is my chunk next?" test.
    pos: AtomicU64,
    state: Mutex<State>,
}

struct State {
    hasher: Sha256,
    pos: u64,
    /// Index of the part containing `pos` (== parts.len() at the end).
    part: usize,
    /// Read-back buffer, allocated on first use.
    buf: Option<Aligned>,
}

impl Trailing {
    /// `parts`: `(offset, size, completed)` of each part as found on disk.
    pub fn new(parts: impl IntoIterator<Item = (u64, u64, u64)>) -> Trailing {
        let (parts, persisted): (Vec<_>, Vec<_>) = parts
            .into_iter()
            .map(|(o, s, c)| ((o, s), AtomicU64::new(c.min(s))))
            .unzip();
        debug_assert!(parts.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        Trailing {
            parts,
            persisted,
            pos: AtomicU64::new(0),
            state: Mutex::new(State {
                hasher: Sha256::new(),
                pos: 0,
                part: 0,
                buf: None,
            }),
        }
    }

    /// Part `n` now has `completed` bytes on disk, the last `data.len()` of which are `data`.
    /// Hashes `data` from memory when it is next in line, then reads back what else is contiguous
    /// (bounded), unless another writer is already doing so.
    pub fn written(
        &self,
        file: &DataFile,
        n: usize,
        completed: u64,
        data: &[u8],
    ) -> std::io::Result<()> {
        self.persisted[n].store(completed, Ordering::Release);
        let start = self.parts[n].0 + completed - data.len() as u64;
        let mut st = if self.pos.load(Ordering::Acquire) == start {
            self.state.lock().unwrap_or_else(|e| e.into_inner())
        } else {
            match self.state.try_lock() {
                Ok(st) => st,
                Err(_) => return Ok(()),
            }
        };
        if st.pos == start {
            st.hasher.update(data);
            st.pos += data.len() as u64;
        }
        let r = self.catch_up(&mut st, file, CATCH_UP_BUDGET);
        self.pos.store(st.pos, Ordering::Release);
        r
    }

    /// Hashes the rest of the file (every part must be complete) and returns its digest; `None`
    /// if some part is not fully on disk.
    pub fn finish(&self, file: &DataFile) -> std::io::Result<Option<Digest>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.catch_up(&mut st, file, u64::MAX)?;
        if st.part < self.parts.len() {
            return Ok(None);
        }
        let hasher = std::mem::take(&mut st.hasher);
        Ok(Some(Digest::from_sha256(hasher.finalize().into())))
    }

    /// Bytes hashed so far.
    #[cfg(test)]
    fn hashed(&self) -> u64 {
        self.state.lock().unwrap().pos
    }

    fn catch_up(&self, st: &mut State, file: &DataFile, mut budget: u64) -> std::io::Result<()> {
        loop {
            while let Some(&(o, s)) = self.parts.get(st.part) {
                if st.pos < o + s {
                    break;
                }
                st.part += 1;
            }
            let Some(&(o, _)) = self.parts.get(st.part) else {
                return Ok(());
            };
            let avail = o + self.persisted[st.part].load(Ordering::Acquire);
            if avail <= st.pos || budget == 0 {
                return Ok(());
            }
            let n = (avail - st.pos).min(READ_BLOCK as u64).min(budget);
            let State {
                hasher, pos, buf, ..
            } = &mut *st;
            // Room for the enclosing whole blocks of a direct read.
            let buf = buf.get_or_insert_with(|| Aligned::new(READ_BLOCK + 2 * ALIGN));
            hasher.update(file.read_back(buf, *pos, *pos + n)?);
            *pos += n;
            budget -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt as _;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// A data file of `len` bytes read back through the page cache, and the same with a direct
    /// handle (when the temp filesystem has `O_DIRECT`; tests writes go through the page cache,
    /// which a direct read flushes first).
    fn files(len: u64) -> Vec<(tempfile::TempDir, DataFile)> {
        [false, true]
            .into_iter()
            .map(|direct| {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("data");
                std::fs::File::create(&path).unwrap().set_len(len).unwrap();
                let f = if direct {
                    DataFile::open(&path, true).unwrap()
                } else {
                    DataFile::new(
                        super::super::partfile::open_nofollow(&path, false).unwrap(),
                        None,
                    )
                };
                (dir, f)
            })
            .collect()
    }

    /// Writes `order` (part, len) chunks into a temp file the way part writers do, and checks the
    /// digest equals the file's whatever the interleaving, with and without direct reads.
    /// Returns how many bytes were hashed before `finish`.
    fn run(parts: &[(u64, u64)], order: &[(usize, u64)]) -> u64 {
        let all = data(parts.iter().map(|p| p.1).sum::<u64>() as usize);
        let mut hashed = Vec::new();
        for (_dir, f) in files(all.len() as u64) {
            let t = Trailing::new(parts.iter().map(|&(o, s)| (o, s, 0)));
            let mut done = vec![0u64; parts.len()];
            for &(n, len) in order {
                let at = (parts[n].0 + done[n]) as usize;
                let chunk = &all[at..at + len as usize];
                f.buffered.write_all_at(chunk, at as u64).unwrap();
                done[n] += len;
                t.written(&f, n, done[n], chunk).unwrap();
            }
            hashed.push(t.hashed());
            let d = t.finish(&f).unwrap().expect("complete");
            assert_eq!(d, Digest::of_bytes(&all));
        }
        assert_eq!(hashed[0], hashed[1]);
        hashed[0]
    }

    #[test]
    fn in_order_hashes_everything_while_writing() {
        let parts = [(0, 10), (10, 10), (20, 5)];
        let order = [(0, 4), (0, 6), (1, 10), (2, 2), (2, 3)];
        assert_eq!(run(&parts, &order), 25, "nothing left for finish");
    }

    #[test]
    fn out_of_order_parts_are_read_back() {
        let parts = [(0, 10), (10, 10), (20, 5)];
        // Later parts first: nothing is hashable until part 0 lands, then all of it is.
        let order = [(2, 5), (1, 3), (1, 7), (0, 9), (0, 1)];
        assert_eq!(run(&parts, &order), 25);
        // Interleaved, ending with the first part unfinished until the very end.
        let order = [(1, 10), (0, 5), (2, 5), (0, 5)];
        run(&parts, &order);
    }

    #[test]
    fn read_back_spans_unaligned_blocks() {
        // Part boundaries and chunks off block boundaries; parts 1 and 2 land before part 0.
        let a = ALIGN as u64;
        let parts = [(0, a + 7), (a + 7, 3 * a + 11), (4 * a + 18, 5)];
        let order = [(1, a), (2, 5), (1, 2 * a + 11), (0, 9), (0, a - 2)];
        assert_eq!(run(&parts, &order), 4 * a + 23);
    }

    #[test]
    fn catch_up_is_bounded_per_call_and_finish_completes() {
        let big = CATCH_UP_BUDGET * 2 + 3;
        let parts = [(0, 1), (1, big)];
        assert_eq!(
            run(&parts, &[(1, big), (0, 1)]),
            1 + CATCH_UP_BUDGET,
            "one call reads back at most the budget"
        );
    }

    #[test]
    fn resumed_parts_are_hashed_from_disk() {
        let all = data(30);
        for (_dir, f) in files(30) {
            f.buffered.write_all_at(&all[..25], 0).unwrap();
            // Part 0 complete from an earlier run, part 1 half done.
            let t = Trailing::new([(0, 20, 20), (20, 10, 5)]);
            f.buffered.write_all_at(&all[25..], 25).unwrap();
            t.written(&f, 1, 10, &all[25..]).unwrap();
            assert_eq!(t.finish(&f).unwrap(), Some(Digest::of_bytes(&all)));
        }
    }

    #[test]
    fn incomplete_download_has_no_digest() {
        for (_dir, f) in files(10) {
            let t = Trailing::new([(0, 5, 5), (5, 5, 4)]);
            assert_eq!(t.finish(&f).unwrap(), None);
        }
    }
}
