//! Pairing: how an unknown sender asks for access from a private chat, and the rules that keep
//! it from being abused. Pure functions over the pending list, the requests that gave way and
//! `now`, so every rule is tested without a clock or a file.
//!
//! Rules: a code is 8 characters from `A–Z` and `2–9` without the ambiguous `0 O 1 I`; it is
//! valid for [`CODE_TTL`]; a channel has at most [`MAX_PENDING`] unexpired requests, and when it
//! is full the oldest gives way to the new one, so a real user always gets a code however many
//! throw-away accounts ask before them; a sender gets at most one code per [`CODE_TTL`] (asking
//! again while their request is pending, or after it gave way, sends nothing). The requests that
//! gave way in the last hour are remembered (at most [`MAX_GAVE_WAY`] per channel) for that rule
//! and for `bub pair list`; [`FloodLog`] makes a burst one log line, not one per message.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// The alphabet of pairing codes: no `0`/`O`, no `1`/`I`.
pub(crate) const ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// Length of a pairing code.
pub(crate) const CODE_LEN: usize = 8;
/// Unexpired requests per channel; a new one beyond them makes the oldest give way.
pub(crate) const MAX_PENDING: usize = 10;
/// Requests that gave way remembered per channel (the newest), for an hour.
pub(crate) const MAX_GAVE_WAY: usize = 100;
/// How long a code is valid (and how long a sender waits for a second code message).
pub(crate) const CODE_TTL: Duration = Duration::hours(1);
/// At most one flood log line per channel this often.
pub(crate) const FLOOD_LOG_EVERY: Duration = Duration::minutes(1);

/// One pending request: who asked, where, and the code the owner approves it with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub channel: String,
    pub code: String,
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The private chat the request came from.
    pub chat_id: String,
    pub requested_at: DateTime<Utc>,
}

impl Pending {
    pub(crate) fn expires_at(&self) -> DateTime<Utc> {
        self.requested_at + CODE_TTL
    }

    pub(crate) fn is_expired(&self, now: DateTime<Utc>) -> bool {
        now >= self.expires_at()
    }
}

/// A pending request that gave way to a newer one: its code can no longer be approved, and its
/// sender gets no second code until an hour after their first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GaveWay {
    pub channel: String,
    pub user_id: String,
    pub requested_at: DateTime<Utc>,
    pub gave_way_at: DateTime<Utc>,
}

/// What a request from an unknown sender leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// A new code: tell the sender.
    New(Pending),
    /// The sender got a code within the hour (still pending, or it gave way): send nothing.
    AlreadyAsked,
}

/// A fresh random code (from the OS's CSPRNG, via uuid's v4 generator).
pub(crate) fn new_code() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes
        .iter()
        .take(CODE_LEN)
        .map(|b| char::from(ALPHABET[usize::from(b % 32)]))
        .collect()
}

/// A typed code as stored: trimmed, upper case, spaces and dashes dropped.
pub(crate) fn normalize_code(code: &str) -> String {
    code.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect::<String>()
        .to_ascii_uppercase()
}

/// Drops expired requests.
pub(crate) fn prune(pending: &mut Vec<Pending>, now: DateTime<Utc>) {
    pending.retain(|p| !p.is_expired(now));
}

/// Forgets requests that gave way more than an hour ago.
pub(crate) fn prune_gave_way(gave_way: &mut Vec<GaveWay>, now: DateTime<Utc>) {
    gave_way.retain(|g| now < g.gave_way_at + CODE_TTL);
}

/// How many of `channel`'s requests gave way in the last hour (at most [`MAX_GAVE_WAY`]).
pub(crate) fn gave_way_in_last_hour(
    gave_way: &[GaveWay],
    channel: &str,
    now: DateTime<Utc>,
) -> usize {
    gave_way
        .iter()
        .filter(|g| g.channel == channel && now < g.gave_way_at + CODE_TTL)
        .count()
}

/// Decides about the request `template` (its sender, channel and fresh code), after pruning
/// both lists. Returns the outcome and whether the channel's oldest request gave way to it.
pub(crate) fn request(
    pending: &mut Vec<Pending>,
    gave_way: &mut Vec<GaveWay>,
    template: Pending,
    now: DateTime<Utc>,
) -> (Request, bool) {
    prune(pending, now);
    prune_gave_way(gave_way, now);
    let (channel, user_id) = (&template.channel, &template.user_id);
    let asked = pending
        .iter()
        .any(|p| &p.channel == channel && &p.user_id == user_id)
        || gave_way.iter().any(|g| {
            &g.channel == channel && &g.user_id == user_id && now < g.requested_at + CODE_TTL
        });
    if asked {
        return (Request::AlreadyAsked, false);
    }
    let in_channel = pending.iter().filter(|p| &p.channel == channel).count();
    let oldest = pending
        .iter()
        .enumerate()
        .filter(|(_, p)| &p.channel == channel)
        .min_by_key(|(_, p)| p.requested_at)
        .map(|(at, _)| at);
    let displaced = match oldest {
        Some(at) if in_channel >= MAX_PENDING => {
            let old = pending.remove(at);
            gave_way.push(GaveWay {
                channel: old.channel,
                user_id: old.user_id,
                requested_at: old.requested_at,
                gave_way_at: now,
            });
            let remembered = gave_way.iter().filter(|g| &g.channel == channel).count();
            if remembered > MAX_GAVE_WAY
                && let Some(first) = gave_way.iter().position(|g| &g.channel == channel)
            {
                gave_way.remove(first);
            }
            true
        }
        _ => false,
    };
    pending.push(template.clone());
    (Request::New(template), displaced)
}

/// A running daemon's count of a channel's pairing requests between two flood log lines.
#[derive(Debug, Default)]
pub(crate) struct FloodLog {
    requests: u64,
    gave_way: u64,
    last_line: Option<DateTime<Utc>>,
}

impl FloodLog {
    /// Counts a new request (`gave_way`: the oldest gave way to it). Returns the counts to log —
    /// (requests, of which gave way) since the last line — when requests are giving way and the
    /// last line is [`FLOOD_LOG_EVERY`] old (or there was none), and starts counting again.
    pub(crate) fn note(&mut self, gave_way: bool, now: DateTime<Utc>) -> Option<(u64, u64)> {
        self.requests += 1;
        self.gave_way += u64::from(gave_way);
        let due = self.last_line.is_none_or(|t| now - t >= FLOOD_LOG_EVERY);
        if self.gave_way == 0 || !due {
            return None;
        }
        self.last_line = Some(now);
        let counts = (self.requests, self.gave_way);
        (self.requests, self.gave_way) = (0, 0);
        Some(counts)
    }
}

/// The text a sender gets with their code (and their id, which an owner lists by).
pub(crate) fn code_message(request: &Pending) -> String {
    let Pending {
        channel,
        code,
        user_id,
        ..
    } = request;
    format!(
        "I don't know you yet. To get access, ask the owner of this bot to run:\n\n\
         bub pair approve {channel} {code}\n\n\
         The code is valid for one hour. Your {channel} user id is {user_id}."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::minutes(minutes)
    }

    fn req(channel: &str, user: &str, now: DateTime<Utc>) -> Pending {
        Pending {
            channel: channel.into(),
            code: new_code(),
            user_id: user.into(),
            username: None,
            chat_id: user.into(),
            requested_at: now,
        }
    }

    #[test]
    fn codes_use_the_unambiguous_alphabet() {
        for _ in 0..200 {
            let code = new_code();
            assert_eq!(code.len(), CODE_LEN);
            assert!(code.bytes().all(|b| ALPHABET.contains(&b)), "{code}");
            assert!(!code.contains(['0', 'O', '1', 'I']), "{code}");
        }
        assert_ne!(new_code(), new_code());
        assert_eq!(normalize_code(" abcd-efgh "), "ABCDEFGH");
    }

    #[test]
    fn one_code_per_sender_per_hour_and_the_oldest_gives_way() {
        let (mut pending, mut gave_way) = (Vec::new(), Vec::new());
        macro_rules! ask {
            ($user:expr, $minute:expr) => {{
                let template = req("telegram", $user, at($minute));
                request(&mut pending, &mut gave_way, template, at($minute))
            }};
        }
        assert!(matches!(ask!("1", 0), (Request::New(p), false) if p.user_id == "1"));
        assert_eq!(ask!("1", 5), (Request::AlreadyAsked, false));
        for user in 2..=MAX_PENDING {
            assert!(matches!(
                ask!(&user.to_string(), 10),
                (Request::New(_), false)
            ));
        }
        // Full: the oldest (user 1) gives way to the newcomer, who gets a code.
        assert!(matches!(ask!("new", 20), (Request::New(p), true) if p.user_id == "new"));
        assert_eq!(pending.len(), MAX_PENDING);
        assert!(pending.iter().all(|p| p.user_id != "1"));
        assert_eq!(gave_way.len(), 1);
        assert_eq!(
            (gave_way[0].user_id.as_str(), gave_way[0].gave_way_at),
            ("1", at(20))
        );
        assert_eq!(gave_way_in_last_hour(&gave_way, "telegram", at(20)), 1);
        assert_eq!(gave_way_in_last_hour(&gave_way, "discord", at(20)), 0);
        // User 1 got a code at minute 0: no second one within the hour, even though it gave way.
        assert_eq!(ask!("1", 30), (Request::AlreadyAsked, false));
        assert_eq!(ask!("new", 30), (Request::AlreadyAsked, false));
        // After the hour user 1 may ask again; still full, so user 2 gives way.
        assert!(matches!(ask!("1", 61), (Request::New(_), true)));
        assert_eq!(gave_way_in_last_hour(&gave_way, "telegram", at(61)), 2);
        // The others' codes expired: room again. An hour after a request gave way, it is
        // forgotten.
        assert!(matches!(ask!("x", 81), (Request::New(_), false)));
        assert_eq!(gave_way_in_last_hour(&gave_way, "telegram", at(81)), 1);
        assert!(matches!(ask!("y", 121), (Request::New(_), false)));
        assert!(gave_way.is_empty());
    }

    #[test]
    fn the_limits_are_per_channel_and_the_memory_is_bounded() {
        let (mut pending, mut gave_way) = (Vec::new(), Vec::new());
        for n in 0..MAX_PENDING + MAX_GAVE_WAY + 5 {
            let template = req("telegram", &format!("t{n}"), at(0));
            request(&mut pending, &mut gave_way, template, at(0));
        }
        let template = req("discord", "d", at(0));
        assert!(matches!(
            request(&mut pending, &mut gave_way, template, at(0)),
            (Request::New(_), false)
        ));
        assert_eq!(pending.len(), MAX_PENDING + 1);
        assert_eq!(gave_way.len(), MAX_GAVE_WAY, "the newest that gave way");
        assert_eq!(gave_way[0].user_id, "t5");
        assert_eq!(pending[0].user_id, format!("t{}", MAX_GAVE_WAY + 5));
    }

    #[test]
    fn a_flood_is_one_log_line_a_minute() {
        let mut log = FloodLog::default();
        let start = at(0);
        let second = |s: i64| start + Duration::seconds(s);
        // Requests while there is room: nothing to say.
        for s in 0..10 {
            assert_eq!(log.note(false, second(s)), None);
        }
        // The first request that makes another give way: one line, with the burst so far.
        assert_eq!(log.note(true, second(10)), Some((11, 1)));
        for s in 11..60 {
            assert_eq!(log.note(true, second(s)), None, "second {s}");
        }
        // A minute later: the next line sums up what came since.
        assert_eq!(log.note(true, second(70)), Some((50, 50)));
        assert_eq!(log.note(false, second(200)), None, "nothing gave way since");
    }
}
