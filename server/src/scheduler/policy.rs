//! Placement decisions, as pure functions over (request, loaded set, limits): no I/O, no clocks,
//! no logging. The actor applies the resulting [`Plan`].

use super::memory::Budget;
use super::KeepAlive;
use runner_protocol::LoadOptions;
use std::time::Duration;

/// Identifies one runner process for the scheduler's life (never reused).
pub type RunnerId = u64;

/// What the policy sees of a loaded (or loading) runner.
#[derive(Debug, Clone)]
pub struct LoadedView<'a> {
    pub id: RunnerId,
    pub options: &'a LoadOptions,
    /// Still starting: counts against limits, cannot serve yet.
    pub loading: bool,
    /// Leases held now.
    pub refcount: usize,
    /// Predicted (or measured) bytes.
    pub memory: u64,
    /// Time left on its keep-alive timer; `None` = forever. Orders idle runners for eviction.
    pub expires_in: Option<Duration>,
    /// Named in `HERD_PIN`: never evicted to make room for another model.
    pub pinned: bool,
}

impl LoadedView<'_> {
    fn capacity(&self) -> usize {
        self.options.parallel.max(1) as usize
    }

    fn idle(&self) -> bool {
        !self.loading && self.refcount == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most runners loaded at once (already resolved: never 0).
    pub max_loaded: usize,
    /// Bytes all runners together may use; `None` = no memory accounting.
    pub memory_budget: Option<Budget>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Lease this runner now.
    Reuse(RunnerId),
    /// Start a new runner.
    Load,
    /// Stop these idle runners, then start a new one.
    EvictThenLoad(Vec<RunnerId>),
    /// A compatible runner exists but is at capacity or still loading.
    WaitBusy,
    /// A load is needed but cannot start yet (another load is running, or the runners that
    /// would have to go are busy). Later requests must not start loads ahead of this one.
    WaitForRoom,
    /// No eviction can ever make room: pinned runners alone fill the limits.
    Refuse,
    /// The model alone needs more than a hard budget: Ollama's "requires more system memory".
    NeverFits { required: u64, available: u64 },
}

/// The keep-alive a runner gets from a request's (or the default) `requested`: a pinned model
/// stays loaded (forever, whatever the request says, 0 included); otherwise `HERD_MAX_KEEP_ALIVE`
/// caps it, forever included.
pub fn effective_keep_alive(
    requested: KeepAlive,
    max: Option<Duration>,
    pinned: bool,
) -> KeepAlive {
    if pinned {
        return KeepAlive::Forever;
    }
    match (requested, max) {
        (k, None) => k,
        (KeepAlive::Forever, Some(m)) => KeepAlive::For(m),
        (KeepAlive::For(d), Some(m)) => KeepAlive::For(d.min(m)),
    }
}

/// Ollama's `needsReload`: a loaded runner serves a request only if every load-time option
/// matches, except that a request leaving `gpu_layers` to the engine (negative) accepts any.
pub fn needs_reload(loaded: &LoadOptions, requested: &LoadOptions) -> bool {
    let mut want = requested.clone();
    if want.gpu_layers < 0 {
        want.gpu_layers = loaded.gpu_layers;
    }
    *loaded != want
}

/// Idle runners in the order they should be evicted: soonest keep-alive expiry first (forever
/// last), then by model path for determinism.
fn eviction_order<'a>(loaded: &[&'a LoadedView<'a>]) -> Vec<&'a LoadedView<'a>> {
    let mut idle: Vec<_> = loaded
        .iter()
        .copied()
        .filter(|l| l.idle() && !l.pinned)
        .collect();
    idle.sort_by(|a, b| {
        let key = |l: &LoadedView| (l.expires_in.is_none(), l.expires_in);
        key(a)
            .cmp(&key(b))
            .then_with(|| a.options.model.cmp(&b.options.model))
            .then_with(|| a.id.cmp(&b.id))
    });
    idle
}

/// Decides how to serve a request for a model loaded with `requested` options, predicted to
/// need `memory` bytes.
pub fn plan(requested: &LoadOptions, memory: u64, loaded: &[LoadedView], limits: &Limits) -> Plan {
    let same_model: Vec<&LoadedView> = loaded
        .iter()
        .filter(|l| l.options.model == requested.model)
        .collect();
    if let Some(l) = same_model
        .iter()
        .find(|l| !needs_reload(l.options, requested))
    {
        return if !l.loading && l.refcount < l.capacity() {
            Plan::Reuse(l.id)
        } else {
            Plan::WaitBusy
        };
    }
    if let Some(b) = limits.memory_budget.filter(|b| b.hard && memory > b.bytes) {
        return Plan::NeverFits {
            required: memory,
            available: b.bytes,
        };
    }
    if loaded.iter().any(|l| l.loading) {
        return Plan::WaitForRoom;
    }
    // The same model with other options is replaced, as Ollama reloads in place.
    let mut evict: Vec<RunnerId> = Vec::new();
    for l in &same_model {
        if !l.idle() {
            return Plan::WaitForRoom;
        }
        evict.push(l.id);
    }
    let mut remaining: Vec<&LoadedView> =
        loaded.iter().filter(|l| !evict.contains(&l.id)).collect();
    let fits = |rem: &[&LoadedView]| {
        let used: u64 = rem.iter().map(|l| l.memory).sum();
        rem.len() < limits.max_loaded.max(1)
            && match limits.memory_budget {
                // Alone, a model within a hard budget (or any, under a soft one) is tried: the
                // runner reports a real OOM if it is one.
                Some(budget) => rem.is_empty() || used.saturating_add(memory) <= budget.bytes,
                None => true,
            }
    };
    let candidates = eviction_order(&remaining);
    let mut candidates = candidates.into_iter();
    while !fits(&remaining) {
        let Some(victim) = candidates.next() else {
            // Busy runners free up eventually; pinned ones never do.
            let pinned: Vec<&LoadedView> = remaining.iter().copied().filter(|l| l.pinned).collect();
            return if fits(&pinned) {
                Plan::WaitForRoom
            } else {
                Plan::Refuse
            };
        };
        evict.push(victim.id);
        remaining.retain(|l| l.id != victim.id);
    }
    if evict.is_empty() {
        Plan::Load
    } else {
        Plan::EvictThenLoad(evict)
    }
}

/// Ollama's retry after a load ran out of memory while other models were loaded (its
/// `oomRetryAttempted` and `evictAllAndWait`): the load is tried once more after every other
/// unpinned runner is gone. Busy ones are waited for; like any `WaitForRoom`, later loads stay
/// behind this one.
pub fn plan_after_oom(requested: &LoadOptions, loaded: &[LoadedView]) -> Plan {
    if let Some(l) = loaded
        .iter()
        .find(|l| l.options.model == requested.model && !needs_reload(l.options, requested))
    {
        return if !l.loading && l.refcount < l.capacity() {
            Plan::Reuse(l.id)
        } else {
            Plan::WaitBusy
        };
    }
    let others: Vec<&LoadedView> = loaded.iter().filter(|l| !l.pinned).collect();
    if loaded.iter().any(|l| l.loading) || others.iter().any(|l| !l.idle()) {
        return Plan::WaitForRoom;
    }
    if others.is_empty() {
        Plan::Load
    } else {
        Plan::EvictThenLoad(others.iter().map(|l| l.id).collect())
    }
}

/// Whether a load that failed with `OutOfMemory` is worth one more try: some other runner
/// that may be evicted is loaded (Ollama retries only then; alone, the model fails at once).
pub fn retry_after_oom(already_retried: bool, loaded: &[LoadedView]) -> bool {
    !already_retried && loaded.iter().any(|l| !l.pinned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_protocol::{FlashAttention, KvCacheType};
    use std::path::PathBuf;

    fn opts(model: &str) -> LoadOptions {
        LoadOptions {
            model: PathBuf::from(model),
            ..Default::default()
        }
    }

    #[test]
    fn needs_reload_table() {
        let base = opts("/m/a");
        let with = |f: fn(&mut LoadOptions)| {
            let mut o = base.clone();
            f(&mut o);
            o
        };
        let cases: Vec<(&str, LoadOptions, LoadOptions, bool)> = vec![
            ("identical", base.clone(), base.clone(), false),
            (
                "ctx differs",
                base.clone(),
                with(|o| o.ctx_size = 8192),
                true,
            ),
            (
                "parallel differs",
                base.clone(),
                with(|o| o.parallel = 2),
                true,
            ),
            ("batch differs", base.clone(), with(|o| o.batch = 256), true),
            (
                "ubatch differs",
                base.clone(),
                with(|o| o.ubatch = 256),
                true,
            ),
            (
                "threads differ",
                base.clone(),
                with(|o| o.threads = 4),
                true,
            ),
            ("mmap differs", base.clone(), with(|o| o.mmap = false), true),
            (
                "main gpu differs",
                base.clone(),
                with(|o| o.main_gpu = Some(1)),
                true,
            ),
            (
                "flash attention differs",
                base.clone(),
                with(|o| o.flash_attention = FlashAttention::On),
                true,
            ),
            (
                "kv type differs",
                base.clone(),
                with(|o| o.kv_cache_type = KvCacheType::Q8_0),
                true,
            ),
            (
                "embedding differs",
                base.clone(),
                with(|o| o.embedding = true),
                true,
            ),
            (
                "explicit gpu layers differ",
                with(|o| o.gpu_layers = 10),
                with(|o| o.gpu_layers = 20),
                true,
            ),
            (
                "auto gpu layers accept explicit",
                with(|o| o.gpu_layers = 10),
                with(|o| o.gpu_layers = -1),
                false,
            ),
            (
                "explicit gpu layers vs auto loaded",
                base.clone(),
                with(|o| o.gpu_layers = 10),
                true,
            ),
        ];
        for (name, loaded, requested, want) in cases {
            assert_eq!(needs_reload(&loaded, &requested), want, "{name}");
        }
    }

    struct L {
        id: RunnerId,
        opts: LoadOptions,
        loading: bool,
        refs: usize,
        mem: u64,
        exp: Option<u64>,
        pinned: bool,
    }

    fn l(id: RunnerId, model: &str, refs: usize, exp: Option<u64>) -> L {
        L {
            id,
            opts: opts(model),
            loading: false,
            refs,
            mem: 100,
            exp,
            pinned: false,
        }
    }

    fn views(ls: &[L]) -> Vec<LoadedView<'_>> {
        ls.iter()
            .map(|x| LoadedView {
                id: x.id,
                options: &x.opts,
                loading: x.loading,
                refcount: x.refs,
                memory: x.mem,
                expires_in: x.exp.map(Duration::from_secs),
                pinned: x.pinned,
            })
            .collect()
    }

    /// (name, requested options, memory, loaded set, limits, expected plan)
    type Case = (&'static str, LoadOptions, u64, Vec<L>, Limits, Plan);

    const THREE: Limits = Limits {
        max_loaded: 3,
        memory_budget: None,
    };

    #[test]
    fn keep_alive_table() {
        let s = Duration::from_secs;
        let f = KeepAlive::For;
        let cases = [
            ("no cap", f(s(300)), None, false, f(s(300))),
            (
                "no cap, forever",
                KeepAlive::Forever,
                None,
                false,
                KeepAlive::Forever,
            ),
            ("under the cap", f(s(1)), Some(s(2)), false, f(s(1))),
            ("over the cap", f(s(300)), Some(s(2)), false, f(s(2))),
            (
                "forever is capped",
                KeepAlive::Forever,
                Some(s(2)),
                false,
                f(s(2)),
            ),
            ("zero stays zero", f(s(0)), Some(s(2)), false, f(s(0))),
            (
                "pinned ignores zero",
                f(s(0)),
                Some(s(2)),
                true,
                KeepAlive::Forever,
            ),
            (
                "pinned outranks the cap",
                f(s(9)),
                Some(s(2)),
                true,
                KeepAlive::Forever,
            ),
        ];
        for (name, req, max, pinned, want) in cases {
            assert_eq!(effective_keep_alive(req, max, pinned), want, "{name}");
        }
    }

    #[test]
    fn plan_table() {
        let parallel2 = |mut x: L| {
            x.opts.parallel = 2;
            x
        };
        let loading = |mut x: L| {
            x.loading = true;
            x
        };
        let ctx8k = |mut x: L| {
            x.opts.ctx_size = 8192;
            x
        };
        let big = |mut x: L| {
            x.mem = 600;
            x
        };
        let pin = |mut x: L| {
            x.pinned = true;
            x
        };
        let budget = |bytes| Limits {
            max_loaded: 3,
            memory_budget: Some(Budget { bytes, hard: false }),
        };
        let hard = |bytes| Limits {
            max_loaded: 3,
            memory_budget: Some(Budget { bytes, hard: true }),
        };
        let never = |required, available| Plan::NeverFits {
            required,
            available,
        };
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("nothing loaded", opts("/a"), 100, vec![], THREE, Plan::Load),
            ("idle match", opts("/a"), 100, vec![l(1, "/a", 0, Some(5))], THREE, Plan::Reuse(1)),
            ("busy match, one slot", opts("/a"), 100, vec![l(1, "/a", 1, None)], THREE, Plan::WaitBusy),
            ("busy match, free slot", { let mut o = opts("/a"); o.parallel = 2; o }, 100,
                vec![parallel2(l(1, "/a", 1, None))], THREE, Plan::Reuse(1)),
            ("match still loading", opts("/a"), 100, vec![loading(l(1, "/a", 0, None))], THREE, Plan::WaitBusy),
            ("another model loading", opts("/b"), 100, vec![loading(l(1, "/a", 0, None))], THREE, Plan::WaitForRoom),
            ("room for another", opts("/b"), 100, vec![l(1, "/a", 1, None)], THREE, Plan::Load),
            ("options changed, idle: reload in place", opts("/a"), 100,
                vec![ctx8k(l(1, "/a", 0, Some(5)))], THREE, Plan::EvictThenLoad(vec![1])),
            ("options changed, busy: wait", opts("/a"), 100,
                vec![ctx8k(l(1, "/a", 1, None))], THREE, Plan::WaitForRoom),
            ("full: evict soonest expiry", opts("/d"), 100,
                vec![l(1, "/a", 0, Some(50)), l(2, "/b", 0, Some(10)), l(3, "/c", 0, None)], THREE,
                Plan::EvictThenLoad(vec![2])),
            ("full: forever goes last", opts("/d"), 100,
                vec![l(1, "/a", 0, None), l(2, "/b", 1, Some(1)), l(3, "/c", 0, Some(900))], THREE,
                Plan::EvictThenLoad(vec![3])),
            ("full: ties broken by path", opts("/d"), 100,
                vec![l(1, "/c", 0, Some(5)), l(2, "/b", 0, Some(5)), l(3, "/a", 1, None)], THREE,
                Plan::EvictThenLoad(vec![2])),
            ("full and all busy", opts("/d"), 100,
                vec![l(1, "/a", 1, None), l(2, "/b", 1, None), l(3, "/c", 2, None)], THREE, Plan::WaitForRoom),
            ("max_loaded 1", opts("/b"), 100, vec![l(1, "/a", 0, None)],
                Limits { max_loaded: 1, memory_budget: None }, Plan::EvictThenLoad(vec![1])),
            ("fits the budget", opts("/b"), 100, vec![l(1, "/a", 1, None)], budget(200), Plan::Load),
            ("over budget: evict idle", opts("/c"), 100,
                vec![l(1, "/a", 0, Some(9)), l(2, "/b", 0, Some(3))], budget(250), Plan::EvictThenLoad(vec![2])),
            ("over budget: evict two", opts("/c"), 100,
                vec![l(1, "/a", 0, Some(9)), l(2, "/b", 0, Some(3))], budget(150), Plan::EvictThenLoad(vec![2, 1])),
            ("over budget, busy: wait", opts("/c"), 100,
                vec![big(l(1, "/a", 1, None))], budget(650), Plan::WaitForRoom),
            ("too big even alone: try", opts("/c"), 10_000, vec![], budget(650), Plan::Load),
            ("too big: evict all then try", opts("/c"), 10_000,
                vec![l(1, "/a", 0, Some(1))], budget(650), Plan::EvictThenLoad(vec![1])),
            ("pinned idle is not evicted: the next idle goes", opts("/d"), 100,
                vec![pin(l(1, "/a", 0, Some(1))), l(2, "/b", 0, Some(50)), l(3, "/c", 0, Some(9))], THREE,
                Plan::EvictThenLoad(vec![3])),
            ("max_loaded 1, pinned loaded: refuse", opts("/b"), 100, vec![pin(l(1, "/a", 0, None))],
                Limits { max_loaded: 1, memory_budget: None }, Plan::Refuse),
            ("pinned plus busy: wait for the busy one", opts("/c"), 100,
                vec![pin(l(1, "/a", 0, None)), l(2, "/b", 1, None)],
                Limits { max_loaded: 2, memory_budget: None }, Plan::WaitForRoom),
            ("pinned fill the budget: refuse", opts("/c"), 100,
                vec![pin(big(l(1, "/a", 0, None))), l(2, "/b", 0, Some(1))], budget(650), Plan::Refuse),
            ("pinned model itself reloads in place", opts("/a"), 100,
                vec![pin(ctx8k(l(1, "/a", 0, None)))], THREE, Plan::EvictThenLoad(vec![1])),
            ("room left beside a pinned model", opts("/b"), 100, vec![pin(l(1, "/a", 0, None))],
                THREE, Plan::Load),
            ("hard budget: too big alone never fits", opts("/c"), 700, vec![], hard(650), never(700, 650)),
            ("hard budget: too big is refused without evicting", opts("/c"), 700,
                vec![l(1, "/a", 0, Some(1))], hard(650), never(700, 650)),
            ("hard budget: exactly the budget loads alone", opts("/c"), 650,
                vec![l(1, "/a", 0, Some(1))], hard(650), Plan::EvictThenLoad(vec![1])),
            ("hard budget: the LRU idle goes, the busy one stays", opts("/d"), 300,
                vec![big(l(1, "/a", 1, None)), l(2, "/b", 0, Some(9)), l(3, "/c", 0, Some(2))], hard(1000),
                Plan::EvictThenLoad(vec![3])),
            ("hard budget: only busy ones to evict: wait", opts("/c"), 500,
                vec![big(l(1, "/a", 1, None))], hard(1000), Plan::WaitForRoom),
            ("hard budget: a loaded model is reused whatever its size", opts("/a"), 9000,
                vec![l(1, "/a", 0, None)], hard(650), Plan::Reuse(1)),
            ("hard budget: pinned leave too little: refuse", opts("/c"), 500,
                vec![pin(big(l(1, "/a", 0, None)))], hard(1000), Plan::Refuse),
        ];
        for (name, req, mem, loaded, limits, want) in cases {
            assert_eq!(plan(&req, mem, &views(&loaded), &limits), want, "{name}");
        }
    }
    #[test]
    fn after_oom_table() {
        let loading = |mut x: L| {
            x.loading = true;
            x
        };
        let pin = |mut x: L| {
            x.pinned = true;
            x
        };
        #[rustfmt::skip]
        let cases: Vec<(&str, Vec<L>, Plan)> = vec![
            ("nothing left: load", vec![], Plan::Load),
            ("every other idle one goes, whatever its keep-alive", 
                vec![l(1, "/a", 0, None), l(2, "/b", 0, Some(900))], Plan::EvictThenLoad(vec![1, 2])),
            ("a busy one is waited for", vec![l(1, "/a", 0, None), l(2, "/b", 1, None)], Plan::WaitForRoom),
            ("another load is waited for", vec![loading(l(1, "/b", 0, None))], Plan::WaitForRoom),
            ("pinned ones stay", vec![pin(l(1, "/a", 0, None)), l(2, "/b", 0, None)],
                Plan::EvictThenLoad(vec![2])),
            ("only pinned ones: load beside them", vec![pin(l(1, "/a", 0, None))], Plan::Load),
            ("loaded meanwhile: reuse", vec![l(1, "/b", 0, None), l(2, "/x", 0, None)], Plan::Reuse(2)),
            ("loading meanwhile: wait for it", vec![loading(l(2, "/x", 0, None))], Plan::WaitBusy),
        ];
        for (name, loaded, want) in cases {
            assert_eq!(plan_after_oom(&opts("/x"), &views(&loaded)), want, "{name}");
        }
        let retry = |done, ls: Vec<L>| retry_after_oom(done, &views(&ls));
        assert!(
            retry(false, vec![l(1, "/a", 1, None)]),
            "a busy other one is worth waiting for"
        );
        assert!(!retry(true, vec![l(1, "/a", 0, None)]), "only once");
        assert!(!retry(false, vec![]), "alone: fail at once");
        assert!(
            !retry(false, vec![pin(l(1, "/a", 0, None))]),
            "only pinned ones: nothing to free"
        );
    }
}
