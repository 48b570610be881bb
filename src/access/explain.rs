//! `bub access explain CHANNEL:CHAT [--user ID [--username NAME]]`: the effective access of one
//! chat in plain words — who is admitted, the owners, pending pairings, and the exact tools a user
//! gets there. A user's verdict is [`Access::admission`], the decision the channel gates make.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::{
    Access, Lists, Policy, Role, TurnOrigin, User, Via, allow_var, chats_var, owners_var, who,
};
use crate::config::Settings;

impl Access {
    /// The report (see the module docs). `tools` are the registry's command names.
    pub async fn explain(
        &self,
        settings: &Settings,
        tools: &[&str],
        (channel, chat_id): (&str, &str),
        user: Option<User<'_>>,
        now: DateTime<Utc>,
    ) -> anyhow::Result<String> {
        let lists = self.known(channel)?;
        let file = self.file().await;
        let mut out = String::new();
        let _ = writeln!(out, "chat {channel}:{chat_id}");
        let _ = writeln!(out, "  chat: {}", chat_rule(lists, channel, chat_id));
        let _ = writeln!(
            out,
            "  senders ({}): {}",
            allow_var(channel),
            senders(lists)
        );
        let owners = if !lists.owners.is_empty() {
            lists.owners.join(", ")
        } else if !lists.ids.is_empty() {
            format!(
                "none configured: the ids on {} are owners ({})",
                allow_var(channel),
                lists.ids.join(", ")
            )
        } else {
            "none configured: the first user approved by pairing becomes one".to_owned()
        };
        let _ = writeln!(out, "  owners ({}): {owners}", owners_var(channel));
        let paired: Vec<String> = file
            .users
            .iter()
            .filter(|p| p.channel == channel)
            .map(|p| {
                format!(
                    "{} {} (approved {})",
                    who(&p.user_id, p.username.as_deref()),
                    p.role,
                    p.approved_at.format("%Y-%m-%d %H:%M UTC")
                )
            })
            .collect();
        let _ = writeln!(out, "  paired: {}", list_or_none(&paired));
        let pending: Vec<String> = self
            .pending(now)
            .await
            .into_iter()
            .filter(|p| p.channel == channel)
            .map(|p| {
                format!(
                    "{} from {} (expires {})",
                    p.code,
                    who(&p.user_id, p.username.as_deref()),
                    p.expires_at().format("%H:%M UTC")
                )
            })
            .collect();
        let _ = writeln!(out, "  pending: {}", list_or_none(&pending));
        if let Some(note) = self.flood_note(channel, &file, now) {
            let _ = writeln!(out, "  flood: {note}");
        }
        match user {
            Some(user) => {
                let name = who(user.id, user.name);
                match self.admission(channel, user).await {
                    Some(admission) => {
                        let _ = writeln!(
                            out,
                            "user {name}: {} ({})",
                            admission.role,
                            why(admission.via, channel)
                        );
                        describe_policy(
                            &mut out,
                            admission.role,
                            settings,
                            tools,
                            (channel, chat_id),
                        );
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "user {name}: not admitted (a private message gets a pairing code; groups ignore them)"
                        );
                    }
                }
            }
            None => {
                for role in [Role::Owner, Role::Guest] {
                    let _ = writeln!(out, "{role}s get:");
                    describe_policy(&mut out, role, settings, tools, (channel, chat_id));
                }
            }
        }
        Ok(out.trim_end().to_owned())
    }
}

/// Whether the chat is served, by the channel's chat list.
fn chat_rule(lists: &Lists, channel: &str, chat_id: &str) -> String {
    let var = chats_var(channel);
    if lists.chats.is_empty() {
        format!("served ({var} is empty: every chat)")
    } else if lists.lists_chat(chat_id) {
        format!("served (listed in {var})")
    } else if lists.threads {
        format!("not listed in {var} (served only if it is a thread of a listed channel)")
    } else {
        format!("NOT served (not in {var}): no messages in or out")
    }
}

/// Why an admitted user has their role, in words.
fn why(via: Via, channel: &str) -> String {
    let (allow, owners) = (allow_var(channel), owners_var(channel));
    match via {
        Via::Owners => format!("listed in {owners}"),
        Via::Paired => "approved by pairing".to_owned(),
        Via::Id => format!("their id is on {allow}"),
        Via::Username => format!(
            "their username is on {allow}: usernames admit guests only; owners need ids \
             ({owners} or an id on the list)"
        ),
        Via::Everyone => format!("{allow} is `*`"),
    }
}

fn senders(lists: &Lists) -> String {
    let mut parts: Vec<String> = lists.ids.clone();
    if !lists.usernames.is_empty() {
        parts.push(format!(
            "usernames {} (as guests only)",
            lists.usernames.join(", ")
        ));
    }
    if lists.everyone {
        parts.push("* (everyone; as guests unless listed as owners)".to_owned());
    }
    if parts.is_empty() {
        "empty: nobody (users pair from a private chat)".to_owned()
    } else {
        parts.join(", ")
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join("; ")
    }
}

fn describe_policy(
    out: &mut String,
    role: Role,
    settings: &Settings,
    tools: &[&str],
    (channel, chat_id): (&str, &str),
) {
    let policy = &Policy::for_role(role, settings);
    let allowed = policy.allowed(tools.iter().copied());
    let _ = writeln!(out, "  tools ({}): {}", allowed.len(), allowed.join(", "));
    let folder =
        crate::config::is_platform(channel).then(|| super::files::chat_folder(channel, chat_id));
    let folder = folder.as_ref().map(|f| f.display());
    let files = match (policy.confines_files(), &folder) {
        (false, _) => "anywhere the process may".to_owned(),
        (true, Some(folder)) => format!(
            "reads the workspace except {}, other chats' folders and BUB_HOME; writes only in \
             {folder}/",
            super::files::SECRET_FILES
        ),
        (true, None) => "reads the workspace except secrets and BUB_HOME; writes nothing".into(),
    };
    let _ = writeln!(out, "  files: {files}");
    let messages = if policy.own_chat_only() {
        format!("only to {channel}:{chat_id}")
    } else {
        "to any chat the allow-lists admit".to_owned()
    };
    let _ = writeln!(out, "  messages: {messages}");
    let shell = match (policy.allows("bash"), policy.sandbox, &folder) {
        (false, ..) => "no shell (no bash, no comma shell)".to_owned(),
        (true, true, Some(folder)) if policy.confines_files() => {
            format!("bash in the Landlock sandbox ({folder}/ and a private tmp only)")
        }
        (true, true, _) => "bash in the Landlock sandbox (workspace and a private tmp only)".into(),
        (true, false, _) => "bash unsandboxed".to_owned(),
    };
    let _ = writeln!(out, "  shell: {shell}");
    let (tape, memory) = match policy.searched() {
        crate::tape::Searched::Everything => (
            "tape.search over messages and tool results",
            "this chat's and the global memory",
        ),
        crate::tape::Searched::Conversation => (
            "tape.search over the messages only (not tool results); no tape.reset",
            "this chat's only; what it keeps is marked as its words ([guest …])",
        ),
    };
    let _ = writeln!(out, "  tape: {tape}");
    let _ = writeln!(out, "  memory: {memory}");
    if policy.allows("schedule.add") {
        let jobs = policy.jobs();
        let remove = if jobs.own_jobs_only {
            "remove only the jobs they created"
        } else {
            "remove any job of the chat"
        };
        let runs = if Policy::for_turn(role, TurnOrigin::Scheduled, settings).allows("schedule.add")
        {
            "a job's run may schedule more"
        } else {
            "a job's run cannot schedule more"
        };
        let _ = writeln!(
            out,
            "  jobs: {} of theirs per chat, messages up to {} bytes, runs at least {} s apart; \
             {remove}; {runs}",
            jobs.per_session, jobs.message_bytes, jobs.min_interval_seconds
        );
    }
}
