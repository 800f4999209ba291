//! The raw system calls htb-xdp needs beyond what xsk-rs and aya wrap. One of the two
//! modules allowed to use `unsafe`; each block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// `SOL_XDP` (linux/socket.h).
const SOL_XDP: libc::c_int = 283;
/// `XDP_MAX_TX_SKB_BUDGET` (linux/if_xdp.h, 6.17+): descriptors one copy-mode `sendto` sends.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// Lets one copy-mode TX kick send up to `budget` frames instead of 32. Fails with `ENOPROTOOPT`
/// on kernels before 6.17, which callers treat as "keep the default".
pub(crate) fn set_max_tx_budget(fd: RawFd, budget: u32) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller for the duration of the call; the
    // option value is a valid `u32` on the stack whose size is passed alongside.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            XDP_MAX_TX_SKB_BUDGET,
            (&raw const budget).cast::<libc::c_void>(),
            size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Locks the process's memory: every page resident now, and every page once it is first
/// touched (`mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)`), so that none is reclaimed and
/// faulted back in on the packet path. `MCL_ONFAULT` keeps memory that is reserved but never
/// touched (thread stacks, allocator arenas) out of the resident set.
pub(crate) fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only and touches no memory of ours.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) };
    if rc == 0 {
        MEMORY_LOCKED.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether [`lock_memory`] succeeded (and the lock is in force, but for [`trim_heap`]'s
/// moment without it).
static MEMORY_LOCKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn memory_locked() -> bool {
    MEMORY_LOCKED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Gives the allocator's free pages back to the kernel: glibc's `malloc_trim(0)`, which
/// `madvise(MADV_DONTNEED)`s every whole free page of every arena, not only the heap's top.
/// The kernel refuses that advice on locked pages (`EINVAL`), and glibc ignores the refusal, so
/// where [`lock_memory`] is in force the lock is lifted for the trim (`munlockall`) and put
/// back after it with the same flags (`MCL_ONFAULT`: only the pages still present are locked
/// again). Returns whether any memory was released, as `malloc_trim` says.
pub(crate) fn trim_heap() -> io::Result<bool> {
    let locked = memory_locked();
    if locked {
        // SAFETY: munlockall takes no arguments and touches no memory of ours.
        if unsafe { libc::munlockall() } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: malloc_trim only walks the allocator's own free lists under its arena locks; the
    // pad argument is a plain integer.
    let released = unsafe { libc::malloc_trim(0) } != 0;
    if locked {
        lock_memory()?;
    }
    Ok(released)
}

/// Sets this thread's timer slack: how late the kernel may fire its timers to batch wake-ups.
/// The default (50 µs) would blur the shaper's ns-precision wake-ups.
pub(crate) fn set_timer_slack(slack: Duration) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(slack.as_nanos())
        .unwrap_or(libc::c_ulong::MAX)
        .max(1);
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the calling thread SCHED_FIFO at `priority` (1-99): it then runs ahead of every normal
/// process, as the kernel's qdiscs do in softirq. The loop sleeps when idle, so this only
/// matters under overload.
pub(crate) fn set_realtime(priority: u8) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority.clamp(1, 99)),
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid `sched_param` for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pins the calling thread to CPU `cpu` (a worker then keeps its caches and its queues'
/// interrupts' CPU).
pub(crate) fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: an all-zero `cpu_set_t` is a valid empty set; CPU_SET writes bit `cpu`, which is
    // within the set (checked above); pid 0 is the calling thread and the size is the set's.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`: no timeout), with
/// nanosecond resolution (`poll` only takes milliseconds). Returns how many fds are ready;
/// `EINTR` counts as a timeout.
pub(crate) fn wait_readable(
    fds: &mut [libc::pollfd],
    timeout: Option<Duration>,
) -> io::Result<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid, exclusively borrowed slice of `pollfd` whose length is passed;
    // `ts_ptr` is null or points to a `timespec` that outlives the call; a null signal mask
    // keeps the current one.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if rc >= 0 {
        return Ok(rc as usize);
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::Interrupted {
        Ok(0)
    } else {
        Err(err)
    }
}

/// The kernel's page size: the largest UMEM chunk AF_XDP takes (`xdp_umem_reg`).
pub(crate) fn page_size() -> u32 {
    // SAFETY: sysconf reads a constant of the running kernel; it takes no pointers.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).unwrap_or(4096)
}

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`): what a control job
/// itself cost, without the time the host or a higher-priority task took the CPU away.
pub(crate) fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the XDP program's `bpf_ktime_get_ns`, which
/// the data plane's heartbeat is compared against (`std::time::Instant` hides its value).
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The CPU the calling thread runs on now (`sched_getcpu`), if the kernel says.
pub(crate) fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments and only reads the caller's CPU (vDSO or
    // getcpu(2)); it fails only where the kernel cannot say, which is -1.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// `clock`'s reading in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed `timespec` on the stack; both clocks
    // passed here exist on every Linux htbd runs on, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(clock, &raw mut ts) };
    debug_assert_eq!(rc, 0);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    use super::*;

    #[test]
    fn current_cpu_is_the_one_the_kernel_last_ran_the_thread_on() {
        // Field 39 of /proc/thread-self/stat is the CPU the thread last ran on; read between
        // two sched_getcpu calls that agree, it names the same CPU (the thread may move
        // between reads, so try until one read is bracketed).
        for _ in 0..1000 {
            let before = current_cpu().expect("Linux says which CPU");
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            let after = current_cpu();
            if after != Some(before) {
                continue;
            }
            // The command name (field 2) is in parentheses and may hold spaces.
            let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
            assert_eq!(fields[39 - 3], before.to_string(), "{stat}");
            return;
        }
        panic!("the thread moved between every pair of reads");
    }

    #[test]
    fn monotonic_ns_advances_with_the_clock() {
        // Instant is CLOCK_MONOTONIC too: each read of monotonic_ns is bracketed by two
        // Instants, so the interval between the reads lies between the inner and the outer
        // brackets' however long the thread is preempted (a bound on a loaded VM, not a
        // tolerance).
        let t0 = Instant::now();
        let a = monotonic_ns();
        let t1 = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let t2 = Instant::now();
        let b = monotonic_ns();
        let t3 = Instant::now();
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap();
        let (inner, outer) = (ns(t2 - t1), ns(t3 - t0));
        assert!(
            b > a && inner <= b - a && b - a <= outer,
            "{a} {b}: {inner} ns <= {} ns <= {outer} ns",
            b - a
        );
    }

    #[test]
    fn wait_readable_times_out_and_wakes() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut fds = [libc::pollfd {
            fd: b.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        set_timer_slack(Duration::from_nanos(1)).unwrap();
        let start = Instant::now();
        assert_eq!(
            wait_readable(&mut fds, Some(Duration::from_micros(300))).unwrap(),
            0
        );
        let waited = start.elapsed();
        assert!(waited >= Duration::from_micros(300), "{waited:?}");
        a.write_all(b"x").unwrap();
        assert_eq!(wait_readable(&mut fds, None).unwrap(), 1);
        assert_ne!(fds[0].revents & libc::POLLIN, 0);
    }

    #[test]
    fn tx_budget_on_a_non_xdp_socket_fails_cleanly() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(set_max_tx_budget(a.as_raw_fd(), 512).is_err());
    }
}
