//! `/api/ps`'s view of the actor: the loaded runners, longest remaining keep-alive first.

use super::Actor;
use crate::scheduler::RunningModel;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

impl Actor {
    pub(super) fn ps(&self) -> Vec<RunningModel> {
        let now = Instant::now();
        let wall = SystemTime::now();
        let mut out: Vec<(Option<Duration>, RunningModel)> = self
            .entries
            .values()
            .filter_map(|e| {
                let r = e.runner.as_ref()?;
                let left = e.expires_in(now);
                let info = r.info();
                Some((
                    left,
                    RunningModel {
                        name: e.name.clone(),
                        digest: e.digest.clone(),
                        model: e.options.model.clone(),
                        size: e.memory(),
                        size_vram: info.memory_device_bytes,
                        context_length: e.options.ctx_size,
                        expires_at: left.and_then(|d| wall.checked_add(d)),
                        pid: r.pid(),
                        active: e.refcount,
                        // As spawned: with the placement's `main_gpu`.
                        options: runner_protocol::LoadOptions {
                            main_gpu: e.main_gpu,
                            ..e.options.clone()
                        },
                        placement: info.placement.clone(),
                    },
                ))
            })
            .collect();
        // Longest remaining keep-alive first; forever before any finite time.
        out.sort_by(|(a, ma), (b, mb)| {
            let key = |x: &Option<Duration>| (x.is_some(), std::cmp::Reverse(*x));
            key(a).cmp(&key(b)).then_with(|| ma.name.cmp(&mb.name))
        });
        out.into_iter().map(|(_, m)| m).collect()
    }
}
