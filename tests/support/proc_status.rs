//! Memory figures of a running process, from `/proc/PID/status` (for the daemon benchmarks).

/// A `/proc/PID/status` memory field in MB (`VmRSS`, `RssAnon`, `RssFile`); 0 when unreadable.
pub fn status_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// The resident set (`VmRSS`) in MB.
pub fn rss_mb(pid: u32) -> f64 {
    status_mb(pid, "VmRSS")
}
