//! The console's sessions: what a login creates, kept in this process's memory (a restart logs
//! every browser out).
//!
//! * A session is a random id — the cookie's only content, never the login token — and a CSRF
//!   token of its own (the hidden field of its pages' forms), both 64 hex digits from the OS's
//!   random source. It is bound to the login token it was created with: checked under another
//!   token (`console.token` replaced) it ends.
//! * It ends after [`IDLE`] without a request, [`LIFETIME`] after the login whatever happens,
//!   on logout ([`Logins::end`]), and when the token changes ([`Logins::end_all`]).
//! * At most [`MAX`] sessions: a new login ends the one idle longest.
//! * A cookie's id is compared in constant time with every session's (no early exit, no hash
//!   of an attacker's guess to time).
//! * Time is given (`now`), never read here: the tests move it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::status::same_token;

/// A session unused this long ends.
pub(super) const IDLE: Duration = Duration::from_secs(60 * 60);
/// A session ends this long after its login, used or not.
pub(super) const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// The most sessions kept at once.
pub(super) const MAX: usize = 16;

/// A valid session, as a request's handlers see it.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// The cookie's value.
    pub id: Arc<str>,
    /// The CSRF token its forms carry.
    pub csrf: Arc<str>,
}

struct Login {
    session: Session,
    /// The login token it was created with.
    token: Arc<str>,
    created: Instant,
    seen: Instant,
}

impl Login {
    fn alive(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.seen) < IDLE
            && now.saturating_duration_since(self.created) < LIFETIME
    }
}

/// Every session of the process.
#[derive(Default)]
pub(super) struct Logins {
    logins: Vec<Login>,
}

impl Logins {
    /// A new session, bound to `token` (the login token just typed).
    pub(super) fn create(&mut self, token: Arc<str>, now: Instant) -> Session {
        self.logins.retain(|l| l.alive(now));
        if self.logins.len() >= MAX
            && let Some(idlest) = (0..self.logins.len()).min_by_key(|&i| self.logins[i].seen)
        {
            self.logins.swap_remove(idlest);
        }
        let session = Session {
            id: crate::status::new_token().into(),
            csrf: crate::status::new_token().into(),
        };
        self.logins.push(Login {
            session: session.clone(),
            token,
            created: now,
            seen: now,
        });
        session
    }

    /// The session whose cookie holds `id`, if it is alive at `now` and was created with
    /// `token` (the login token now; `None`: there is none); its idle time starts again.
    pub(super) fn check(&mut self, id: &str, token: Option<&str>, now: Instant) -> Option<Session> {
        self.logins.retain(|l| l.alive(now));
        let at = self.find(id)?;
        let login = &mut self.logins[at];
        if !token.is_some_and(|token| same_token(login.token.as_bytes(), token.as_bytes())) {
            self.logins.swap_remove(at);
            return None;
        }
        login.seen = now;
        Some(login.session.clone())
    }

    /// Ends the session whose cookie holds `id` (logout), if there is one.
    pub(super) fn end(&mut self, id: &str) {
        if let Some(at) = self.find(id) {
            self.logins.swap_remove(at);
        }
    }

    /// Ends every session (the login token changed).
    pub(super) fn end_all(&mut self) {
        self.logins.clear();
    }

    /// The index of the session with `id`, compared with every one in constant time.
    fn find(&self, id: &str) -> Option<usize> {
        let mut found = None;
        for (at, login) in self.logins.iter().enumerate() {
            let hit = same_token(login.session.id.as_bytes(), id.as_bytes());
            found = if hit { Some(at) } else { found };
        }
        found
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.logins.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn token() -> Arc<str> {
        TOKEN.into()
    }

    #[test]
    fn a_login_is_a_random_session_with_its_own_csrf_token() {
        let now = Instant::now();
        let mut logins = Logins::default();
        let one = logins.create(token(), now);
        let two = logins.create(token(), now);
        assert_eq!(one.id.len(), 64);
        assert_ne!(one.id, two.id);
        assert_ne!(one.csrf, two.csrf);
        assert_ne!(one.id, one.csrf);
        assert!(!one.id.contains(TOKEN) && !one.csrf.contains(TOKEN));
        let checked = logins.check(&one.id, Some(TOKEN), now).unwrap();
        assert_eq!(checked.csrf, one.csrf);
        assert!(
            logins.check(TOKEN, Some(TOKEN), now).is_none(),
            "the token is no id"
        );
        assert!(logins.check("", Some(TOKEN), now).is_none());
        assert!(logins.check(&one.id[..63], Some(TOKEN), now).is_none());
    }

    #[test]
    fn a_session_ends_when_idle_and_at_its_lifetime() {
        let start = Instant::now();
        let mut logins = Logins::default();
        let idle = logins.create(token(), start);
        let busy = logins.create(token(), start);
        // Used every half idle period, one lives to its lifetime; the other, unused, ends.
        let mut now = start;
        while now + IDLE / 2 < start + LIFETIME {
            now += IDLE / 2;
            assert!(logins.check(&busy.id, Some(TOKEN), now).is_some());
        }
        assert!(logins.check(&idle.id, Some(TOKEN), now).is_none());
        let end = start + LIFETIME;
        assert!(logins.check(&busy.id, Some(TOKEN), end).is_none());
        assert_eq!(logins.len(), 0);
        // Just before its idle time it is alive; at it, it is not.
        let one = logins.create(token(), end);
        let before = end + IDLE - Duration::from_secs(1);
        assert!(logins.check(&one.id, Some(TOKEN), before).is_some());
        assert!(logins.check(&one.id, Some(TOKEN), before + IDLE).is_none());
    }

    #[test]
    fn the_session_idle_longest_is_evicted_beyond_the_bound() {
        let start = Instant::now();
        let mut logins = Logins::default();
        let sessions: Vec<Session> = (0..MAX as u64)
            .map(|i| logins.create(token(), start + Duration::from_secs(i)))
            .collect();
        // The first is used again: the second is now the one idle longest.
        let later = start + Duration::from_secs(100);
        assert!(logins.check(&sessions[0].id, Some(TOKEN), later).is_some());
        let newest = logins.create(token(), later);
        assert_eq!(logins.len(), MAX);
        assert!(logins.check(&sessions[1].id, Some(TOKEN), later).is_none());
        for kept in [&sessions[0], &sessions[2], &sessions[MAX - 1], &newest] {
            assert!(logins.check(&kept.id, Some(TOKEN), later).is_some());
        }
    }

    #[test]
    fn logout_ends_one_session() {
        let now = Instant::now();
        let mut logins = Logins::default();
        let one = logins.create(token(), now);
        let two = logins.create(token(), now);
        logins.end(&one.id);
        logins.end("no such session");
        assert!(logins.check(&one.id, Some(TOKEN), now).is_none());
        assert!(logins.check(&two.id, Some(TOKEN), now).is_some());
    }

    #[test]
    fn a_session_is_bound_to_the_token_it_was_created_with() {
        let now = Instant::now();
        let mut logins = Logins::default();
        let old = logins.create(token(), now);
        let new_token = "fedcba9876543210fedcba9876543210";
        let new = logins.create(new_token.into(), now);
        assert!(logins.check(&old.id, Some(new_token), now).is_none());
        assert!(
            logins.check(&old.id, Some(TOKEN), now).is_none(),
            "ended, not only refused"
        );
        assert!(
            logins.check(&new.id, None, now).is_none(),
            "no token, no session"
        );
        let again = logins.create(token(), now);
        logins.end_all();
        assert!(logins.check(&again.id, Some(TOKEN), now).is_none());
        assert_eq!(logins.len(), 0);
    }
}
