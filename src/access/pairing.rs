//! Pairing: how an unknown sender asks for access from a private chat, and the rules that keep
//! it from being abused. Pure functions over the pending list and `now`, so every rule is tested
//! without a clock or a file.
//!
//! Rules: a code is 8 characters from `A–Z` and `2–9` without the ambiguous `0 O 1 I`; it is
//! valid for [`CODE_TTL`]; a channel has at most [`MAX_PENDING`] unexpired requests; a sender
//! gets at most one code message per [`CODE_TTL`] (asking again while a request is pending
//! sends nothing).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// The alphabet of pairing codes: no `0`/`O`, no `1`/`I`.
pub(crate) const ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// Length of a pairing code.
pub(crate) const CODE_LEN: usize = 8;
/// Unexpired requests per channel; more strangers get no code until one expires or is handled.
pub(crate) const MAX_PENDING: usize = 3;
/// How long a code is valid (and how long a sender waits for a second code message).
pub(crate) const CODE_TTL: Duration = Duration::hours(1);

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
    pub fn expires_at(&self) -> DateTime<Utc> {
        self.requested_at + CODE_TTL
    }

    pub(crate) fn is_expired(&self, now: DateTime<Utc>) -> bool {
        now >= self.expires_at()
    }
}

/// What a request from an unknown sender leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// A new code: tell the sender.
    New(Pending),
    /// The sender already has an unexpired code: send nothing.
    AlreadyPending,
    /// The channel has [`MAX_PENDING`] unexpired requests: send nothing.
    Full,
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

/// Decides about a request of `user_id` on `channel` (expired requests are pruned first).
/// `code` is the code a new request gets.
pub(crate) fn request(
    pending: &mut Vec<Pending>,
    template: Pending,
    now: DateTime<Utc>,
) -> Request {
    prune(pending, now);
    let same_sender = |p: &Pending| p.channel == template.channel && p.user_id == template.user_id;
    if pending.iter().any(same_sender) {
        return Request::AlreadyPending;
    }
    let in_channel = pending
        .iter()
        .filter(|p| p.channel == template.channel)
        .count();
    if in_channel >= MAX_PENDING {
        return Request::Full;
    }
    pending.push(template.clone());
    Request::New(template)
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
    fn one_code_per_sender_per_hour_and_three_per_channel() {
        let mut pending = Vec::new();
        let first = req("telegram", "1", at(0));
        assert_eq!(
            request(&mut pending, first.clone(), at(0)),
            Request::New(first)
        );
        assert_eq!(
            request(&mut pending, req("telegram", "1", at(5)), at(5)),
            Request::AlreadyPending
        );
        for user in ["2", "3"] {
            assert!(matches!(
                request(&mut pending, req("telegram", user, at(10)), at(10)),
                Request::New(_)
            ));
        }
        assert_eq!(
            request(&mut pending, req("telegram", "4", at(20)), at(20)),
            Request::Full
        );
        assert!(
            matches!(
                request(&mut pending, req("discord", "4", at(20)), at(20)),
                Request::New(_)
            ),
            "the limit is per channel"
        );
        // User 1's code expired after an hour: they may ask again, and there is room.
        assert!(matches!(
            request(&mut pending, req("telegram", "1", at(61)), at(61)),
            Request::New(_)
        ));
        assert_eq!(pending.iter().filter(|p| p.user_id == "1").count(), 1);
    }
}
