//! The process's file-descriptor budget (`RLIMIT_NOFILE`): every connection, accepted or made,
//! every open tape and journal costs one descriptor, and running out stops everything at once —
//! Telegram's poll, the model's calls and `/healthz` alike.
//!
//! systemd starts a service with a soft limit of 1,024 and a hard limit far above it (524,288):
//! the soft limit exists for programs that still use `select(2)`, which Bub never does. So the
//! long-running commands (`bub message`, `bub idle`, `bub console`) raise the soft limit to the
//! hard one at start ([`raise`]), and each listener caps its connections at a share of what is
//! left ([`soft`] is read when it starts serving, `net::server`). Raising is idempotent; a
//! process that cannot raise it keeps what it had and says so.

use std::io;

/// `RLIMIT_NOFILE`: the limit the kernel enforces (`soft`) and the ceiling an unprivileged
/// process may raise it to (`hard`). `u64::MAX` is "unlimited".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoFile {
    pub soft: u64,
    pub hard: u64,
}

/// This process's limit now.
pub fn current() -> io::Result<NoFile> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(NoFile {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// The soft limit now (1,024, the usual default, when it cannot be read).
pub fn soft() -> u64 {
    current().map_or(1024, |limit| limit.soft)
}

/// Raises the soft limit to the hard limit and logs one line with both values, before and
/// after; returns the limit in force afterwards (`None`, logged, when it cannot be read).
/// Failing leaves the limit as it was (a warning): the listeners then cap their connections
/// lower.
pub fn raise() -> Option<NoFile> {
    let before = match current() {
        Ok(before) => before,
        Err(e) => {
            tracing::warn!(error = %e, "nofile.limit: cannot read RLIMIT_NOFILE");
            return None;
        }
    };
    let limit = libc::rlimit {
        rlim_cur: before.hard,
        rlim_max: before.hard,
    };
    // SAFETY: setrlimit reads the struct we own.
    let raised = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0;
    let error = (!raised).then(io::Error::last_os_error);
    let after = current().unwrap_or(before);
    match error {
        None => tracing::info!(
            soft_before = before.soft,
            soft_after = after.soft,
            hard = after.hard,
            "nofile.limit"
        ),
        Some(e) => tracing::warn!(
            soft_before = before.soft,
            soft_after = after.soft,
            hard = after.hard,
            error = %e,
            "nofile.limit: the soft limit could not be raised"
        ),
    }
    Some(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child of [`a_low_soft_limit_is_raised_to_the_hard_limit`].
    const CHILD: &str = "BUB_TEST_NOFILE_CHILD";

    #[test]
    fn raising_is_idempotent_and_ends_at_the_hard_limit() {
        let first = raise().unwrap();
        assert_eq!(first.soft, first.hard);
        assert_eq!(raise().unwrap(), first);
        assert_eq!(current().unwrap(), first);
        assert_eq!(soft(), first.soft);
    }

    /// This test binary again, in a child whose soft limit is 64 (hard: ours): the child runs
    /// [`raised_in_the_child`], which raises it and checks.
    #[test]
    fn a_low_soft_limit_is_raised_to_the_hard_limit() {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe().unwrap();
        let mut child = std::process::Command::new(exe);
        child
            .args(["--exact", "net::fd_limit::tests::raised_in_the_child"])
            .args(["--nocapture", "--test-threads=1"])
            .env(CHILD, "1");
        // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
        unsafe {
            child.pre_exec(|| {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                limit.rlim_cur = 64;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = child.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{said}");
        assert!(said.contains("1 passed"), "the child ran its test: {said}");
        assert!(said.contains("child: soft 64 -> "), "{said}");
    }

    /// Only does something in the child of [`a_low_soft_limit_is_raised_to_the_hard_limit`].
    #[test]
    fn raised_in_the_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let before = current().unwrap();
        assert_eq!(before.soft, 64);
        let after = raise().unwrap();
        println!("child: soft {} -> {}", before.soft, after.soft);
        assert_eq!(after.soft, before.hard);
        assert!(after.soft > 64);
        assert_eq!(raise().unwrap(), after, "idempotent");
    }
}
