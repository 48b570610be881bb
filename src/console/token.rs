//! The login token, `BUB_HOME/console.token`: the one secret that opens the console.
//!
//! * Created on the first start (64 hex digits from the OS's random source, mode 0600) and
//!   printed once by `bub console`. The operator types it into the login form; it is never a
//!   cookie, never in a page, never compared but in constant time.
//! * [`TokenFile`] holds the value logins are checked against, and reads the file again at most
//!   every [`RECHECK`], on the blocking pool, one read at a time: replacing the file takes effect
//!   within seconds, without a restart, and ends every session (the caller's part: a changed
//!   value is reported once).
//! * A file that is missing, unreadable or too short means no token: no login succeeds and every
//!   session ends, until a token is back.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::CONSOLE_TOKEN;

/// How often the file is read again, at most.
pub(super) const RECHECK: Duration = Duration::from_secs(2);
/// The shortest token taken from the file (a created one has 64 characters).
const SHORTEST: usize = 32;

/// The login token of `home` and whether it was created now.
pub(super) fn token(home: &Path) -> anyhow::Result<(String, bool)> {
    let path = home.join(CONSOLE_TOKEN);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().len() >= SHORTEST => return Ok((text.trim().to_owned(), false)),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    }
    crate::storage::create_private_dir(home)?;
    let token = crate::status::new_token();
    crate::storage::write_atomic(&path, format!("{token}\n").as_bytes(), Some(0o600))?;
    Ok((token, true))
}

/// The token in the file at `path` now: `None` when there is none (missing, unreadable, short).
fn read(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let token = text.trim();
    (token.len() >= SHORTEST).then(|| token.to_owned())
}

/// What [`TokenFile::current`] found.
pub(super) struct Current {
    /// The token logins are checked against (`None`: there is none).
    pub token: Option<Arc<str>>,
    /// It differs from the one before (reported once, by the read that saw it).
    pub changed: bool,
}

/// `console.token` as the console last read it.
pub(super) struct TokenFile {
    path: PathBuf,
    seen: Mutex<Seen>,
    /// Held while the file is read, so that one request reads it and the others wait for it.
    reading: tokio::sync::Mutex<()>,
}

struct Seen {
    token: Option<Arc<str>>,
    at: Instant,
}

impl TokenFile {
    /// The file at `path`, holding `token` at `now`.
    pub(super) fn new(path: PathBuf, token: String, now: Instant) -> TokenFile {
        TokenFile {
            path,
            seen: Mutex::new(Seen {
                token: Some(token.into()),
                at: now,
            }),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// The token at `now`: the one read last, or the file's when the last read is
    /// [`RECHECK`] old (read on the blocking pool).
    pub(super) async fn current(&self, now: Instant) -> Current {
        if let Some(current) = self.fresh(now) {
            return current;
        }
        let _one = self.reading.lock().await;
        // Another request may have read it while this one waited.
        if let Some(current) = self.fresh(now) {
            return current;
        }
        let path = self.path.clone();
        let read = tokio::task::spawn_blocking(move || read(&path))
            .await
            .ok()
            .flatten();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = seen.token.as_deref() != read.as_deref();
        if changed {
            seen.token = read.map(Arc::from);
        }
        seen.at = now;
        Current {
            token: seen.token.clone(),
            changed,
        }
    }

    /// The token read last, unchanged, if that read is younger than [`RECHECK`] at `now`.
    fn fresh(&self, now: Instant) -> Option<Current> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let token = seen.token.clone();
        (now.saturating_duration_since(seen.at) < RECHECK).then_some(Current {
            token,
            changed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_created_once_private() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let (first, created) = token(home.path()).unwrap();
        assert!(created);
        assert_eq!(first.len(), 64);
        let mode = std::fs::metadata(home.path().join(CONSOLE_TOKEN))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(token(home.path()).unwrap(), (first, false));
    }

    #[tokio::test]
    async fn the_file_is_read_again_only_every_few_seconds_and_a_change_is_reported_once() {
        let home = tempfile::tempdir().unwrap();
        let (first, _) = token(home.path()).unwrap();
        let path = home.path().join(CONSOLE_TOKEN);
        let start = Instant::now();
        let file = TokenFile::new(path.clone(), first.clone(), start);
        let at = |secs: u64| start + Duration::from_secs(secs);

        let second = "b".repeat(64);
        std::fs::write(&path, format!("{second}\n")).unwrap();
        let current = file.current(at(1)).await;
        assert_eq!(
            current.token.as_deref(),
            Some(first.as_str()),
            "not read yet"
        );
        assert!(!current.changed);
        let current = file.current(at(2)).await;
        assert_eq!(current.token.as_deref(), Some(second.as_str()));
        assert!(current.changed);
        let current = file.current(at(5)).await;
        assert_eq!(current.token.as_deref(), Some(second.as_str()));
        assert!(!current.changed, "reported once");

        // No file, or a token too short to be one: no token, reported as a change.
        std::fs::remove_file(&path).unwrap();
        let current = file.current(at(8)).await;
        assert!(current.token.is_none() && current.changed);
        std::fs::write(&path, "short\n").unwrap();
        let current = file.current(at(11)).await;
        assert!(current.token.is_none() && !current.changed);
        std::fs::write(&path, format!("{first}\n")).unwrap();
        let current = file.current(at(14)).await;
        assert_eq!(current.token.as_deref(), Some(first.as_str()));
        assert!(current.changed);
    }
}
