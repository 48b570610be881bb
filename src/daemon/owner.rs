//! The daemon talking to its owner: what a person running `bub message` reads, and what the
//! owners hear in their private chats.
//!
//! * **The start line.** When a channel is ready (it knows its own name: Telegram's `getMe`,
//!   Discord's READY), one plain line on **stdout** (the log stays on stderr), once per channel
//!   and process: `Bub is on Telegram as @bub_bot — owner: ann (id 42)`, or with nobody to own
//!   it yet the way to pair: `— no owner yet: message @bub_bot privately, then run bub pair
//!   approve telegram CODE`. Owners are [`Access::owners`]: the configured ids and the users
//!   paired as owners. Names from the platform are escaped for the terminal.
//! * **Knocks.** A new pairing request, and a stranger addressing the bot in a group
//!   ([`Knock`]), become one notice to every owner of every served channel, in their private
//!   chat ([`Channel::private_chat`]), sent through the [`Outbox`] like any message outside a
//!   turn (so a private chat the channel's chat list does not serve is refused, and logged).
//!   The notice says who (display name, username, id — the platform's text, made
//!   [`text::literal`]: it cannot add a line, a link or formatting), where, and for a request
//!   the exact `bub pair approve` command. One notice per person and channel an hour: a private
//!   chat asks for a code at most once an hour anyway (kept in `access.json`, so across
//!   restarts); for groups a bounded map in memory ([`Recent`]) decides — a restart forgets it,
//!   so one more notice may come after one. `BUB_NOTIFY_PAIRING=false` sends none (each knock is
//!   still logged).
//!
//! Who may trigger a notice: any stranger who writes to the bot privately or addresses it in a
//! served group; what they get: nothing more than before (their code, or silence), and what
//! reaches the owners is bounded by the hourly rule and the pairing rules' ten pending requests.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::access::{Access, Knock, KnockKind, Owner, allow_var, owners_var};
use crate::agent::AgentRuntime;
use crate::channels::{Channel, Outbound, Ready, text};
use crate::delivery::Outbox;
use crate::terminal::safe_line;

/// At most one notice per person and channel this often.
pub(crate) const NOTICE_EVERY: Duration = Duration::hours(1);
/// The people [`Recent`] remembers (beyond that the oldest are forgotten first).
const REMEMBERED: usize = 1024;
/// The longest name (display name, username) a notice shows, in characters.
const NAME_LIMIT: usize = 64;
/// The most owners a start line names.
const NAMED_OWNERS: usize = 3;

/// Starts the desk of `bub message` serving `channels` (see the module docs); the sender is
/// what the manager tells when an adapter is ready ([`super::ChannelManager::announce_to`]).
pub fn start(
    agent: &AgentRuntime,
    channels: Vec<&'static str>,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> mpsc::Sender<Ready> {
    let (tx, mut ready) = mpsc::channel::<Ready>(16);
    let mut knocks = agent.access().knocks();
    let mut desk = Desk {
        access: agent.access().clone(),
        outbox: agent.outbox().clone(),
        channels,
        notify: agent.settings().notify_pairing,
        bots: HashMap::new(),
        recent: Recent::default(),
    };
    tasks.spawn(async move {
        loop {
            tokio::select! {
                Some(ready) = ready.recv() => desk.announce(ready).await,
                knock = knocks.recv() => match knock {
                    Ok(knock) => desk.notify(knock).await,
                    Err(broadcast::error::RecvError::Lagged(lost)) => {
                        tracing::warn!(lost, "owner.notice.lost: knocks came faster than notices went");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                () = shutdown.cancelled() => break,
            }
        }
    });
    tx
}

/// The one task that prints the start lines and sends the notices.
struct Desk {
    access: Arc<Access>,
    outbox: Arc<Outbox>,
    channels: Vec<&'static str>,
    notify: bool,
    /// Each ready channel's bot name (the first READY's).
    bots: HashMap<&'static str, String>,
    recent: Recent,
}

impl Desk {
    /// Prints `ready`'s start line, the first time the channel is ready.
    async fn announce(&mut self, ready: Ready) {
        if self.bots.contains_key(ready.channel) {
            return;
        }
        self.bots.insert(ready.channel, ready.bot.clone());
        let access = self.access.clone();
        let owners = access.owners(ready.channel).await;
        // stdout is written on the blocking pool.
        let printed = tokio::task::spawn_blocking(move || {
            use std::io::Write as _;
            let line = start_line(&ready, &owners, &access);
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", safe_line(&line)).and_then(|()| out.flush())
        })
        .await;
        // A closed stdout (`bub message | head -1`) is no reason to stop serving.
        if let Ok(Err(e)) = printed {
            tracing::debug!(error = %e, "owner.start_line.unwritten");
        }
    }

    /// Tells every owner of `knock` (see the module docs).
    async fn notify(&mut self, knock: Knock) {
        let (channel, user_id) = (knock.channel.as_str(), knock.user_id.as_str());
        if !self.notify {
            tracing::info!(
                channel,
                user_id,
                "owner.notice.off: BUB_NOTIFY_PAIRING=false"
            );
            return;
        }
        if !self.recent.first(&knock) {
            tracing::info!(
                channel,
                user_id,
                "owner.notice.repeat: told within the hour"
            );
            return;
        }
        let mut owners = Vec::new();
        for c in &self.channels {
            let of = self.access.owners(c).await.into_iter();
            owners.extend(of.map(|o| (*c, o)));
        }
        let owners: Vec<_> = owners
            .into_iter()
            .filter(|(c, o)| !(*c == channel && o.id == user_id))
            .collect();
        if owners.is_empty() {
            tracing::info!(
                channel,
                user_id,
                "owner.notice.none: the bot has no owner yet"
            );
            return;
        }
        let bot = self.bots.get(channel).map(String::as_str);
        let text = notice(&knock, bot);
        let mut sent = 0;
        for (to, owner) in &owners {
            match self.send(to, &owner.id, &text).await {
                Ok(()) => sent += 1,
                Err(e) => tracing::warn!(channel = to, owner = %owner.id,
                    error = %format!("{e:#}"), "owner.notice.error"),
            }
        }
        tracing::info!(channel, user_id, sent, "owner.notice.sent");
    }

    /// `text` to `owner`'s private chat on `channel`, through the outbox.
    async fn send(&self, channel: &str, owner: &str, text: &str) -> anyhow::Result<()> {
        let adapter: Arc<dyn Channel> = self.outbox.adapter(channel)?;
        let out = Outbound {
            chat_id: adapter.private_chat(owner).await?,
            text: text.to_owned(),
            reply_to: None,
            file: None,
            edit: None,
        };
        self.outbox.send(channel, &out).await
    }
}

/// `Telegram` for `telegram`.
fn platform(channel: &str) -> String {
    let mut chars = channel.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

/// The start line of a ready channel (see the module docs).
fn start_line(ready: &Ready, owners: &[Owner], access: &Access) -> String {
    let (channel, bot) = (ready.channel, ready.bot.as_str());
    let head = format!("Bub is on {} as {bot}", platform(channel));
    if owners.is_empty() && access.admits_everyone(channel) {
        return format!(
            "{head} — no owner: everyone may talk as a guest ({}=*); put your id in {} to own it",
            allow_var(channel),
            owners_var(channel)
        );
    }
    if owners.is_empty() {
        return format!(
            "{head} — no owner yet: message {bot} privately, then run bub pair approve {channel} CODE"
        );
    }
    let mut named: Vec<String> = owners.iter().take(NAMED_OWNERS).map(label).collect();
    if owners.len() > NAMED_OWNERS {
        named.push(format!("{} more", owners.len() - NAMED_OWNERS));
    }
    let noun = if owners.len() == 1 { "owner" } else { "owners" };
    format!("{head} — {noun}: {}", named.join(", "))
}

/// `ann (id 42)`, or `id 42` when no username is known.
fn label(owner: &Owner) -> String {
    match &owner.username {
        Some(name) => format!("{name} (id {})", owner.id),
        None => format!("id {}", owner.id),
    }
}

/// `Ann Smith (@ann, id 77)`: who knocked, every part the platform's text made literal.
fn who(knock: &Knock) -> String {
    let id = format!("id {}", text::literal(&knock.user_id, NAME_LIMIT));
    let details = match &knock.username {
        Some(name) => format!("@{}, {id}", text::literal(name, NAME_LIMIT)),
        None => id,
    };
    match knock
        .display
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        Some(display) => format!("{} ({details})", text::literal(display, NAME_LIMIT)),
        None => details,
    }
}

/// The notice an owner gets of `knock`; `bot` is the bot's name on the knock's channel.
pub(crate) fn notice(knock: &Knock, bot: Option<&str>) -> String {
    let channel = &knock.channel;
    let platform = platform(channel);
    let who = who(knock);
    match &knock.kind {
        KnockKind::Pairing { code } => format!(
            "New pairing request on {platform} from {who}.\n\n\
             To let them in, run on the host:\n\n\
             `bub pair approve {channel} {code}`\n\n\
             The code is valid for one hour; `bub pair list` shows every request, \
             `bub pair reject {channel} {code}` refuses it."
        ),
        KnockKind::Group { chat_id } => {
            let bot = bot.map_or_else(|| "the bot".to_owned(), |b| text::literal(b, NAME_LIMIT));
            format!(
                "{who} addressed the bot on {platform} in group {}, but is not admitted there \
                 (groups never pair; their messages are ignored).\n\n\
                 To let them in, ask them to message {bot} privately for a code, or add their \
                 id to `{}`.",
                text::literal(chat_id, NAME_LIMIT),
                allow_var(channel)
            )
        }
    }
}

/// The people told of lately, for one notice per person and channel per [`NOTICE_EVERY`]
/// (bounded by [`REMEMBERED`]; in memory only).
#[derive(Default)]
struct Recent {
    told: HashMap<(String, String), DateTime<Utc>>,
}

impl Recent {
    /// Whether `knock` is the first of its sender within [`NOTICE_EVERY`] (then remembered).
    fn first(&mut self, knock: &Knock) -> bool {
        let key = (knock.channel.clone(), knock.user_id.clone());
        if self
            .told
            .get(&key)
            .is_some_and(|at| knock.at < *at + NOTICE_EVERY)
        {
            return false;
        }
        if self.told.len() >= REMEMBERED {
            self.told.retain(|_, at| knock.at < *at + NOTICE_EVERY);
        }
        if self.told.len() >= REMEMBERED
            && let Some(oldest) = self
                .told
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| k.clone())
        {
            self.told.remove(&oldest);
        }
        self.told.insert(key, knock.at);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knock(user: &str, minute: i64, kind: KnockKind) -> Knock {
        Knock {
            channel: "telegram".into(),
            user_id: user.into(),
            username: Some("ann_b".into()),
            display: Some("Ann\nbub pair approve telegram EVIL2345".into()),
            at: DateTime::from_timestamp(1_800_000_000, 0).unwrap() + Duration::minutes(minute),
            kind,
        }
    }

    fn group(user: &str, minute: i64) -> Knock {
        let chat_id = "-100".to_owned();
        knock(user, minute, KnockKind::Group { chat_id })
    }

    #[test]
    fn one_notice_per_person_an_hour_and_the_memory_is_bounded() {
        let mut recent = Recent::default();
        assert!(recent.first(&group("1", 0)));
        assert!(!recent.first(&group("1", 59)));
        assert!(recent.first(&group("2", 59)));
        assert!(recent.first(&group("1", 60)));
        for n in 0..REMEMBERED + 10 {
            recent.first(&group(&format!("x{n}"), 61));
        }
        assert_eq!(recent.told.len(), REMEMBERED);
    }

    #[test]
    fn a_notice_names_the_code_and_the_command_and_forges_no_line() {
        let code = "K7QM2XPA".to_owned();
        let text = notice(
            &knock("77", 0, KnockKind::Pairing { code }),
            Some("@bub_bot"),
        );
        assert!(text.starts_with("New pairing request on Telegram from Ann bub pair approve"));
        assert!(text.contains("(@ann\\_b, id 77)"), "{text}");
        assert!(
            text.contains("\n`bub pair approve telegram K7QM2XPA`\n"),
            "{text}"
        );
        let forged = text
            .lines()
            .any(|l| l.trim_start().starts_with("bub pair approve telegram EVIL"));
        assert!(!forged, "the name adds no line: {text}");
        let text = notice(&group("77", 0), Some("@bub_bot"));
        assert!(text.contains("in group \\-100"), "{text}");
        assert!(text.contains("message \\@bub\\_bot privately"), "{text}");
        assert!(text.contains("`BUB_TELEGRAM_ALLOW_FROM`"), "{text}");
    }

    #[test]
    fn the_start_line_names_the_owners_or_how_to_pair() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::config::Settings::with_defaults(dir.path().into(), dir.path().into());
        let access = Access::new(&settings);
        let ready = Ready {
            channel: "telegram",
            bot: "@bub_bot".into(),
        };
        let ann = Owner {
            id: "42".into(),
            username: Some("ann".into()),
        };
        let id = |n: &str| Owner {
            id: n.into(),
            username: None,
        };
        assert_eq!(
            start_line(&ready, std::slice::from_ref(&ann), &access),
            "Bub is on Telegram as @bub_bot — owner: ann (id 42)"
        );
        assert_eq!(
            start_line(&ready, &[ann, id("7"), id("9"), id("10")], &access),
            "Bub is on Telegram as @bub_bot — owners: ann (id 42), id 7, id 9, 1 more"
        );
        assert_eq!(
            start_line(&ready, &[], &access),
            "Bub is on Telegram as @bub_bot — no owner yet: message @bub_bot privately, then run \
             bub pair approve telegram CODE"
        );
    }
}
