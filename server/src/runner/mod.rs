//! Runner processes as the server sees them: the protocol client over a runner's Unix socket
//! (`client`), the supervisor that spawns, watches and stops one process (`supervisor`), the
//! environment it starts in (`env`), the forwarding of its output into tracing (`output`), why
//! it ended (`exit`), and the deadlines that find a runner that stopped answering (`liveness`). Which runners exist and who may use them is
//! the scheduler's business, not this module's.

pub mod client;
pub mod env;
pub mod exit;
pub mod liveness;
pub mod output;
pub mod supervisor;

pub use client::{CompletionStream, RunnerClient};
pub use env::{create_runner_dir, runner_env};
pub use exit::ExitCause;
pub use liveness::Liveness;
pub use supervisor::{ExitInfo, Runner, SpawnConfig};
