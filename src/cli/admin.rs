//! The operator's commands that need no async runtime: `bub pair`, `bub access explain`,
//! `bub memory`, `bub skills`, `bub jobs`, `bub usage`. Each parses its own subcommand and
//! returns the process's exit code; `main` maps errors (a [`UsageError`] is exit 2).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;

use crate::access::{Access, Role, User, who};
use crate::chat::SessionId;
use crate::config::Settings;
use crate::logging::{self, LogTarget};
use crate::terminal::{safe, safe_line};

/// A usage error a command finds (exit 2, like a configuration error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

#[derive(Subcommand, Debug)]
pub enum PairAction {
    /// Pending requests (code, channel, user, expiry) and approved users.
    List,
    /// Admit the sender of a pending request by its code.
    Approve {
        /// `telegram` or `discord`.
        channel: String,
        /// The 8-character code the sender received.
        code: String,
        /// Approve as a guest, even as the channel's first user.
        #[arg(long, conflicts_with = "owner")]
        guest: bool,
        /// Approve as an owner (every tool, the shell).
        #[arg(long)]
        owner: bool,
    },
    /// Remove an approved user.
    Revoke {
        /// `telegram` or `discord`.
        channel: String,
        /// The user's platform id.
        user_id: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum AccessAction {
    /// The effective policy of a chat: who is admitted, the owners, pending pairings, and the
    /// tools a user gets there.
    Explain {
        /// `telegram:42`, `discord:1234`.
        chat: String,
        /// Show this user's role and tools.
        #[arg(long, value_name = "ID")]
        user: Option<String>,
        /// The user's username, if they have one (a username on the allow-list admits a guest).
        #[arg(long, value_name = "NAME", requires = "user")]
        username: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum MemoryAction {
    /// Print the global memory and every chat's.
    List,
    /// Open a memory file in $VISUAL / $EDITOR (default vi): the global one, or a session's.
    Edit {
        /// The session whose memory to edit (`telegram:42`, `cli`); the global memory if absent.
        #[arg(long)]
        session: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum SkillsAction {
    /// List the skills: name, source, location, description.
    List,
    /// Validate every SKILL.md; exits 1 when one is invalid (invalid skills are skipped).
    Check,
}

#[derive(Subcommand, Debug)]
pub enum JobsAction {
    /// List all jobs: id, next run, trigger, session, last status, message.
    List,
    /// Remove a job by id (any session).
    Remove { id: String },
}

/// `bub usage`: the ledger since a day (all of it by default), as a table or JSON.
pub async fn usage(
    settings: &Settings,
    since: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let today = chrono::Local::now().date_naive();
    let since = match since.map(str::trim) {
        None => None,
        Some(text) => Some(
            crate::cli::listing::parse_since(text, today).ok_or_else(|| {
                UsageError(format!(
                    "--since {text:?}: expected a number of days (7d) or a date (2026-11-01)"
                ))
            })?,
        ),
    };
    print_out(&crate::cli::listing::usage(settings, since, json).await?);
    Ok(ExitCode::SUCCESS)
}

/// `bub pair list|approve|revoke`.
pub async fn pair(settings: &Settings, action: &PairAction) -> anyhow::Result<ExitCode> {
    let access = Access::new(settings);
    let now = chrono::Utc::now();
    match action {
        PairAction::List => {
            print_out(&crate::cli::listing::pairs(&access, now).await);
            Ok(ExitCode::SUCCESS)
        }
        PairAction::Approve {
            channel,
            code,
            guest,
            owner,
        } => {
            let role = match (guest, owner) {
                (true, _) => Some(Role::Guest),
                (_, true) => Some(Role::Owner),
                _ => None,
            };
            let channel = channel.to_lowercase();
            let p = access.approve(&channel, code, role, now).await?;
            print_out(&safe_line(&format!(
                "approved: {} user {} as {} (effective at once)",
                p.channel,
                who(&p.user_id, p.username.as_deref()),
                p.role
            )));
            Ok(ExitCode::SUCCESS)
        }
        PairAction::Revoke { channel, user_id } => {
            let r = access.revoke(&channel.to_lowercase(), user_id).await?;
            if r.removed {
                print_out(&format!("revoked: {channel} user {user_id}"));
            } else {
                print_out(&format!("{channel} user {user_id} was not paired"));
            }
            if let Some(var) = r.still_admitted_by {
                eprintln!("bub: note: user {user_id} is still admitted by {var}");
            }
            Ok(ExitCode::from(u8::from(!r.removed)))
        }
    }
}

/// `bub access explain CHANNEL:CHAT [--user ID [--username NAME]]`.
pub async fn explain(settings: &Settings, action: &AccessAction) -> anyhow::Result<ExitCode> {
    let AccessAction::Explain {
        chat,
        user,
        username,
    } = action;
    let name = username.as_deref().map(|n| n.trim_start_matches('@'));
    let user = user.as_deref().map(|id| User {
        id,
        name,
        display: None,
    });
    let text = explanation(settings, &Access::new(settings), chat, user).await?;
    print_out(&safe(&text));
    Ok(ExitCode::SUCCESS)
}

/// `Access::explain` of `chat` (`telegram:42`) with the built-in tools: what `bub access
/// explain` prints and the console shows.
pub(crate) async fn explanation(
    settings: &Settings,
    access: &Access,
    chat: &str,
    user: Option<User<'_>>,
) -> Result<String, UsageError> {
    let names = crate::tools::builtin_names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Any channel name: `explain` names the channels it knows.
    let session = SessionId::from(chat);
    let chat = session
        .parts()
        .ok_or_else(|| UsageError("expected CHANNEL:CHAT_ID, e.g. telegram:42".to_owned()))?;
    access
        .explain(settings, &names, chat, user, chrono::Utc::now())
        .await
        .map_err(|e| UsageError(format!("{e:#}")))
}

/// `bub memory list` / `bub memory edit`.
pub async fn memory(settings: &Settings, action: &MemoryAction) -> anyhow::Result<ExitCode> {
    use crate::memory::{Memory, Scope};
    let memory = Memory::of(settings)?;
    match action {
        MemoryAction::List => {
            print_out(&crate::cli::listing::memory(&memory).await);
            Ok(ExitCode::SUCCESS)
        }
        MemoryAction::Edit { session } => {
            let scope = session.clone().map_or(Scope::Global, Scope::Chat);
            // In the database: edited in a private copy, stored back within the caps.
            let (path, copy) = match memory.path(&scope) {
                Some(path) => (path, None),
                None => {
                    let mut copy = tempfile::Builder::new().suffix(".md").tempfile()?;
                    let text: Vec<String> = memory
                        .list(&scope)
                        .await
                        .iter()
                        .map(|e| format!("- {e}"))
                        .collect();
                    std::io::Write::write_all(&mut copy, (text.join("\n") + "\n").as_bytes())?;
                    (copy.path().to_path_buf(), Some(copy))
                }
            };
            if let Some(dir) = path.parent() {
                crate::storage::create_private_dir(dir)?;
            }
            crate::storage::private_file()
                .create(true)
                .append(true)
                .open(&path)?;
            let editor = std::env::var("VISUAL")
                .or_else(|_| std::env::var("EDITOR"))
                .unwrap_or_else(|_| "vi".to_owned());
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{editor} \"$1\""))
                .arg("sh")
                .arg(&path)
                .status()
                .with_context(|| format!("starting {editor}"))?;
            if status.success() && copy.is_some() {
                memory
                    .replace(&scope, &std::fs::read_to_string(&path)?)
                    .await?;
            }
            Ok(ExitCode::from(u8::from(!status.success())))
        }
    }
}

/// `bub skills list` / `bub skills check`.
pub fn skills(settings: &Settings, action: &SkillsAction) -> ExitCode {
    let found = crate::skills::discover(&crate::skills::SkillRoots::from_settings(settings));
    if let SkillsAction::List = action {
        print_out(&safe(&found.listing()));
        return ExitCode::SUCCESS;
    }
    for skill in &found.skills {
        let row = format!("ok       {} ({})", skill.name(), skill.location);
        print_out(&safe_line(&row));
    }
    for issue in &found.issues {
        let row = format!("invalid  {}: {}", issue.location, issue.problem);
        print_out(&safe_line(&row));
    }
    ExitCode::from(u8::from(!found.issues.is_empty()))
}

/// Prints a line to stdout; a closed pipe (`bub jobs list | head`) is not an error.
pub fn print_out(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// `bub jobs list` / `bub jobs remove ID`.
pub async fn jobs(settings: &Settings, action: &JobsAction) -> anyhow::Result<ExitCode> {
    // Reading the store may set jobs aside (or a broken file); that is logged to stderr.
    logging::init(settings, LogTarget::Stderr);
    let store = crate::scheduler::store::open(&settings.home, settings.database()?.as_ref());
    let in_store = || store.location();
    match action {
        // Loading sets aside jobs that cannot run; they are listed after the others, with why.
        JobsAction::List => {
            let listing = crate::cli::listing::jobs(store.as_ref())
                .await
                .with_context(in_store)?;
            print_out(&listing);
        }
        JobsAction::Remove { id } => {
            let removed = store.remove(id).await.with_context(in_store)?;
            anyhow::ensure!(removed, "job not found: {id}");
            print_out(&format!("removed: {id}"));
        }
    }
    Ok(ExitCode::SUCCESS)
}
