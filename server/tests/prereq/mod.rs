//! What a test does when something it needs is missing (a built runner, a fetched model, the
//! registry binary, root for a tmpfs): it FAILS, naming what is missing, unless
//! `HERD_ALLOW_SKIP=1` says skipping is fine (a partial local run). `scripts/setup` installs
//! everything the tests need, so CI never skips in silence.
#![allow(dead_code)]

/// Reports `what` is missing: a panic, or with `HERD_ALLOW_SKIP=1` a SKIP line (the caller then
/// returns).
pub fn missing(what: impl std::fmt::Display) {
    if std::env::var("HERD_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!("SKIP: {what}");
    } else {
        panic!(
            "prerequisite missing: {what} (scripts/setup and scripts/fetch-test-models provide \
             it; set HERD_ALLOW_SKIP=1 to skip instead)"
        );
    }
}
