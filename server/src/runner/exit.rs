//! Why a runner process ended ([`ExitCause`]), classified from facts the supervisor holds, never
//! from log text: whether herd asked it to stop, whether herd killed it as unresponsive, its
//! wait status, and whether the kernel's OOM killer fired in herd's cgroup meanwhile.
//!
//! OOM: the OOM killer sends SIGKILL, which looks like any other SIGKILL. cgroup v2 counts its
//! kills in `memory.events` (`oom_kill`, hierarchical), and a runner lives in herd's cgroup, so
//! a SIGKILL herd did not send while that count rose is an OOM kill. Two runners dying at the
//! same moment, one OOM-killed and one killed by hand, may both read as OOM; without cgroup v2
//! an OOM kill reads as `signal`.

use std::path::PathBuf;

/// How a runner process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCause {
    /// herd stopped it (unload, eviction, shutdown).
    Stopped,
    /// herd killed it because it stopped answering (`runner::liveness`).
    Unresponsive,
    /// The kernel's OOM killer.
    Oom,
    /// Another signal (a crash such as SIGSEGV/SIGABRT, or a kill herd did not send).
    Signal,
    /// It exited by itself with a status code.
    Exit,
}

impl ExitCause {
    /// The `cause` label of `herd_runner_restarts_total`.
    pub fn label(self) -> &'static str {
        match self {
            ExitCause::Stopped => "stopped",
            ExitCause::Unresponsive => "unresponsive",
            ExitCause::Oom => "oom",
            ExitCause::Signal => "signal",
            ExitCause::Exit => "exit",
        }
    }
}

/// What the supervisor knows when the process has been reaped.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExitFacts {
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// herd sent the stop (SIGTERM, then SIGKILL after the grace).
    pub stopped_by_herd: bool,
    /// herd found it unresponsive and killed it.
    pub unresponsive: bool,
    /// OOM kills in herd's cgroup between the spawn and the reap.
    pub oom_kills: u64,
}

/// The cause, most specific first: herd's own decisions, then the OOM killer, then signal or
/// plain exit.
pub fn classify(f: ExitFacts) -> ExitCause {
    const SIGKILL: i32 = 9;
    if f.unresponsive {
        ExitCause::Unresponsive
    } else if f.stopped_by_herd {
        ExitCause::Stopped
    } else if f.signal == Some(SIGKILL) && f.oom_kills > 0 {
        ExitCause::Oom
    } else if f.signal.is_some() {
        ExitCause::Signal
    } else {
        ExitCause::Exit
    }
}

/// `memory.events` of this process's cgroup (v2), if there is one.
fn memory_events_path() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(
        PathBuf::from("/sys/fs/cgroup")
            .join(rel.trim_start_matches('/'))
            .join("memory.events"),
    )
}

/// The `oom_kill` count of a `memory.events` file's text.
pub fn parse_oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// OOM kills so far in this process's cgroup; 0 where cgroup v2 memory accounting is absent.
pub fn oom_kills() -> u64 {
    memory_events_path()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| parse_oom_kills(&t))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_table() {
        let f = ExitFacts::default;
        let cases = [
            ("clean exit", f(), ExitCause::Exit),
            (
                "crash",
                ExitFacts {
                    signal: Some(11),
                    ..f()
                },
                ExitCause::Signal,
            ),
            (
                "kill, no oom",
                ExitFacts {
                    signal: Some(9),
                    ..f()
                },
                ExitCause::Signal,
            ),
            (
                "kill while oom count rose",
                ExitFacts {
                    signal: Some(9),
                    oom_kills: 1,
                    ..f()
                },
                ExitCause::Oom,
            ),
            (
                "SIGTERM while oom count rose",
                ExitFacts {
                    signal: Some(15),
                    oom_kills: 1,
                    ..f()
                },
                ExitCause::Signal,
            ),
            (
                "herd stopped it",
                ExitFacts {
                    signal: Some(15),
                    stopped_by_herd: true,
                    ..f()
                },
                ExitCause::Stopped,
            ),
            (
                "herd killed it as stuck",
                ExitFacts {
                    signal: Some(9),
                    stopped_by_herd: true,
                    unresponsive: true,
                    oom_kills: 3,
                },
                ExitCause::Unresponsive,
            ),
        ];
        for (name, facts, want) in cases {
            assert_eq!(classify(facts), want, "{name}");
        }
    }

    #[test]
    fn memory_events() {
        let text = "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(parse_oom_kills(text), Some(2));
        assert_eq!(parse_oom_kills("low 0\n"), None);
        // Readable or not, counting never panics.
        let _ = oom_kills();
    }
}
