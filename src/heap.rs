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
//! * [`release_code_pages`] — the binary's code and read-only data pages that were used once
//!   (startup — the loader reads every relocation —, a burst) stay mapped in the process;
//!   dropping them from its page tables leaves them in the page cache, and what runs again is
//!   mapped back by a minor fault.
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

/// Unmaps this binary's clean pages from the process (see the module docs). Only the binary's
/// own read-only mappings holding no page of their own are touched (code, read-only data —
/// not the relocated data, whose pages the loader wrote): what they hold is the file's, so
/// nothing is lost.
pub(crate) fn release_code_pages() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    for (start, end) in clean_ranges(&smaps, &exe) {
        // SAFETY: the range is a read-only file mapping of this binary without an anonymous
        // (written) page; dropping its pages only costs a page-cache lookup when they are used
        // again.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// The read-only mappings of `exe` with no anonymous page, in a `/proc/PID/smaps` text.
fn clean_ranges(smaps: &str, exe: &std::path::Path) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut mapping: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some(kb) = line.strip_prefix("Anonymous:") {
            if let Some(range) = mapping.take()
                && kb.trim() == "0 kB"
            {
                ranges.push(range);
            }
        } else if let Some((start, end)) = first.split_once('-') {
            let perms = fields.next().unwrap_or_default();
            let path = fields.nth(3).map(std::path::Path::new);
            let range = usize::from_str_radix(start, 16)
                .ok()
                .zip(usize::from_str_radix(end, 16).ok());
            mapping = range.filter(|(start, end)| {
                start < end && matches!(perms, "r-xp" | "r--p") && path == Some(exe)
            });
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_binarys_clean_read_only_mappings_are_released() {
        let smaps = "\
55d0a000-55d0b000 r--p 00000000 fd:01 42  /usr/bin/bub
Rss:                  4 kB
Anonymous:            0 kB
55d0b000-55d0f000 r-xp 00001000 fd:01 42  /usr/bin/bub
Anonymous:            0 kB
55d0f000-55d10000 r--p 00005000 fd:01 42  /usr/bin/bub
Anonymous:            4 kB
55d10000-55d11000 rw-p 00006000 fd:01 42  /usr/bin/bub
Anonymous:            0 kB
7f00a000-7f00c000 r-xp 00000000 fd:01 7   /usr/lib/libc.so.6
Anonymous:            0 kB
7ffc0000-7ffc1000 r-xp 00000000 00:00 0   [vdso]
Anonymous:            0 kB
";
        let ranges = clean_ranges(smaps, std::path::Path::new("/usr/bin/bub"));
        assert_eq!(ranges, [(0x55d0a000, 0x55d0b000), (0x55d0b000, 0x55d0f000)]);
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
        assert_eq!(clean_ranges("", std::path::Path::new("/x")), []);
    }
}
