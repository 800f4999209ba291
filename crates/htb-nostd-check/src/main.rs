//! A `#![no_std]`, `#![no_main]` program that shapes traffic with htb-core and exits 0 when
//! the results are right. It links no `std`: if htb-core (or a dependency) pulled `std` in,
//! its `panic_impl` would collide with the handler below and the link would fail.
//!
//! Memory comes from a safe static bump allocator; libc's C runtime calls `main`.

#![no_std]
#![no_main]

use core::panic::PanicInfo;

use htb_core::{ClassId, ClassSpec, Instant, Rate, Scheduler, SchedulerConfig};
use static_alloc::Bump;

#[global_allocator]
static ALLOCATOR: Bump<[u8; 1 << 22]> = Bump::uninit();

#[panic_handler]
fn panic(_: &PanicInfo<'_>) -> ! {
    // No std, no unwinding: a panic (an htb-core bug) ends the process with a failure code.
    loop {}
}

/// Shapes a backlogged 10 Mbit/s leaf for one virtual second; returns 0 if it sent 10 Mbit
/// (± 0.1 %), else a code naming the failed check.
fn run() -> i32 {
    let mut htb: Scheduler<u32> = Scheduler::new(SchedulerConfig::default());
    let root = ClassId::new(1, 1);
    let leaf = ClassId::new(1, 0x10);
    let t0 = Instant::ZERO;
    let Ok(_) = htb.add_class(t0, root, None, &ClassSpec::new(Rate::from_mbit(100))) else { return 2 };
    let spec = ClassSpec::new(Rate::from_mbit(10)).with_burst(1600).with_cburst(1600);
    let Ok(_) = htb.add_class(t0, leaf, Some(root), &spec) else { return 3 };
    let mut now = t0;
    let mut sent = 0u64;
    while now.as_nanos() < 1_000_000_000 {
        while htb.class_stats(leaf).map_or(0, |s| s.queue.backlog_packets) < 8 {
            if htb.enqueue(now, leaf, 1000).is_err() {
                return 4;
            }
        }
        match htb.dequeue(now) {
            Some(len) => sent += u64::from(len),
            None => match htb.next_wakeup() {
                Some(next) => now = next,
                None => return 5,
            },
        }
    }
    if htb.check().is_err() {
        return 6;
    }
    let bits = sent * 8;
    if !(9_990_000..=10_010_000 + 16_000).contains(&bits) {
        return 7;
    }
    0
}

/// The C runtime's entry point.
// `no_mangle` is the only way to give a `no_main` program an entry point; it is the sole
// unsafe-attribute use in this proof crate (none exists in htb-core itself).
#[unsafe(no_mangle)]
extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    run()
}
