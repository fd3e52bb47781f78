//! The grammar gate (`grammar::gate`), in a process of its own since it is process-wide: off it
//! never waits; on, a wait ends at the first launch after the count it was given, when the
//! engine hurries it, or after the limit when none of these comes.

use runner_core::grammar::gate;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn a_wait_ends_at_the_next_launch_or_the_limit() {
    // Off: no wait, and launches are not even counted.
    let t = Instant::now();
    gate::wait_past(gate::now(), || false);
    gate::launched();
    assert_eq!(gate::now(), 0);
    assert!(t.elapsed() < gate::LIMIT);

    gate::enable();
    // No launch comes: the limit ends the wait.
    let t = Instant::now();
    gate::wait_past(gate::now(), || false);
    assert!(t.elapsed() >= gate::LIMIT, "{:?}", t.elapsed());

    // A launch after the count was taken: no wait at all.
    let seen = gate::now();
    gate::launched();
    let t = Instant::now();
    gate::wait_past(seen, || false);
    assert!(t.elapsed() < gate::LIMIT, "{:?}", t.elapsed());
    assert_eq!(gate::now(), seen + 1);

    // A waiter is released by a launch from another thread, before the limit: the launch
    // comes only once the waiter has started waiting (it reports first). A loaded machine may
    // hold the launching thread past the limit once; five such tries in a row would not.
    let released = (0..5).any(|_| {
        let seen = gate::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = thread::spawn(move || {
            tx.send(()).unwrap();
            let t = Instant::now();
            gate::wait_past(seen, || false);
            t.elapsed()
        });
        rx.recv().unwrap();
        thread::sleep(Duration::from_micros(300));
        gate::launched();
        waiter.join().unwrap() < gate::LIMIT
    });
    assert!(
        released,
        "no waiter was released by a launch before the limit"
    );

    // A hurried waiter (the engine wants its mask before the next launch) goes on at `wake`,
    // with no launch.
    let hurried = (0..5).any(|_| {
        let flag = Arc::new(AtomicBool::new(false));
        let seen = gate::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let f = flag.clone();
        let waiter = thread::spawn(move || {
            tx.send(()).unwrap();
            let t = Instant::now();
            gate::wait_past(seen, || f.load(Ordering::Acquire));
            t.elapsed()
        });
        rx.recv().unwrap();
        thread::sleep(Duration::from_micros(300));
        flag.store(true, Ordering::Release);
        gate::wake();
        waiter.join().unwrap() < gate::LIMIT && gate::now() == seen
    });
    assert!(hurried, "no hurried waiter went on before the limit");
}
