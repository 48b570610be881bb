//! Giving memory back to the system once it is no longer needed, so a long-running daemon's
//! resident set follows what it does now, not what it once did.
//!
//! * [`tune_allocator`] — glibc's defaults let a daemon's heap creep up under steady load: up to
//!   16 arenas on two cores (one per thread that ever allocated, blocking-pool threads come and
//!   go), and a mmap threshold that rises after each large free, so buffers that grow with the
//!   conversations (a context read, a model request) are carved from the arenas and leave holes
//!   the next, slightly larger one does not fit. Two arenas and a fixed 64 KiB threshold (larger
//!   blocks are mapped and unmapped on their own) keep the resident set flat.
//! * [`trim_heap`] — glibc keeps freed memory in its arenas; `malloc_trim` returns it (after a
//!   burst of sessions was evicted).
//! * [`release_code_pages`] — the binary's code pages that ran once (startup, a burst) stay
//!   mapped in the process; dropping them from its page tables leaves them in the page cache,
//!   and code that runs again is mapped back by a minor fault.
//!   The channel manager calls it (with [`trim_heap`]) once the channels have connected and
//!   after sessions were evicted.

/// Arenas the process allocates from (glibc's default is 8 per core).
const ARENAS: i32 = 2;
/// Blocks of this size and larger get a mapping of their own, returned to the OS when freed.
const MMAP_THRESHOLD: i32 = 64 * 1024;

/// Sets the allocator's arena count and mmap threshold (see the module docs), unless the
/// operator chose them with glibc's own variables. Call before any other thread exists.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let chosen = |var: &str| std::env::var_os(var).is_some();
        if chosen("GLIBC_TUNABLES") {
            return;
        }
        // SAFETY: mallopt only changes allocator parameters; called while single-threaded.
        unsafe {
            if !chosen("MALLOC_ARENA_MAX") {
                libc::mallopt(libc::M_ARENA_MAX, ARENAS);
            }
            if !chosen("MALLOC_MMAP_THRESHOLD_") {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            }
        }
    }
}

/// Gives free heap memory back to the OS.
pub(crate) fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the OS; it has no other effect.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Unmaps this binary's executable pages from the process (see the module docs). Only
/// read-only executable mappings of the binary itself are touched: their pages are never
/// written, so nothing is lost.
pub(crate) fn release_code_pages() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for (start, end) in code_ranges(&maps, &exe) {
        // SAFETY: the range is a read-only executable file mapping of this binary; its pages
        // are never modified, so dropping them only costs a page-cache lookup when they run
        // again.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// The `r-xp` mappings of `exe` in a `/proc/PID/maps` text.
fn code_ranges(maps: &str, exe: &std::path::Path) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms) = (fields.next()?, fields.next()?);
            let path = fields.nth(3)?;
            if perms != "r-xp" || std::path::Path::new(path) != exe {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (start < end).then_some((start, end))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_binarys_executable_mappings_are_released() {
        let maps = "\
55d0a000-55d0b000 r--p 00000000 fd:01 42  /usr/bin/bub
55d0b000-55d0f000 r-xp 00001000 fd:01 42  /usr/bin/bub
55d0f000-55d10000 rw-p 00005000 fd:01 42  /usr/bin/bub
7f00a000-7f00c000 r-xp 00000000 fd:01 7   /usr/lib/libc.so.6
7ffc0000-7ffc1000 r-xp 00000000 00:00 0   [vdso]
";
        let ranges = code_ranges(maps, std::path::Path::new("/usr/bin/bub"));
        assert_eq!(ranges, [(0x55d0b000, 0x55d0f000)]);
    }

    fn rss_file_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    #[test]
    fn released_code_pages_leave_the_resident_set_and_the_code_still_runs() {
        let before = rss_file_kb();
        release_code_pages();
        let after = rss_file_kb();
        assert!(after < before, "RssFile {before} kB → {after} kB");
        // Code runs again after its pages were dropped.
        assert_eq!(code_ranges("", std::path::Path::new("/x")), []);
    }
}
