//! What a guest's turn may do with files: the one rule the registry (path arguments), the
//! `fs.glob` / `fs.grep` walks and the sandboxed shell apply.
//!
//! * **Read**: the workspace, except hidden files and folders (`.env`, `.git`, `.ssh`, `.netrc`,
//!   `.git-credentials`, `.bub`, …), keys and other secret files by name ([`is_secret_name`]),
//!   other chats' folders under `chats/` (and under `inbox/`, where earlier versions kept them),
//!   and `BUB_HOME` wherever it is.
//! * **Write**: only the chat's own folder, `chats/<channel>-<chat>/` — where its downloads
//!   land, and the only directory a guest's sandboxed shell sees. Bub reads nothing there as
//!   configuration or instructions (`.env`, `AGENTS.md`, `HEARTBEAT.md`, `startup.sh` and
//!   `.agents/skills/` are read from the workspace root), so nothing a guest writes can change
//!   Bub, the owner's next turn or what the heartbeat runs.
//!
//! A workspace set up by an earlier version has its chats' files in `inbox/<channel>-<chat>/`.
//! They stay there: each chat's guests may still read their own old folder, never write in it,
//! and never reach another chat's, old or new.
//!
//! Paths given to [`GuestFiles::read`] and [`GuestFiles::write`] are real (canonical) paths
//! already confined to the workspace; [`GuestFiles::new`] resolves its own paths, so it does
//! file I/O and runs on the blocking pool.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// The folder of the workspace that holds a folder per chat: the files the chat sent, and
/// what its guests write.
pub(crate) const CHATS_DIR: &str = "chats";

/// Where earlier versions kept the chats' folders; files there stay, closed like [`CHATS_DIR`]
/// except that a chat's own old folder is only read.
const OLD_CHATS_DIR: &str = "inbox";

/// File names (lower case) that hold keys or credentials, wherever they are.
const SECRET_NAMES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "credentials",
    "credentials.json",
    "secrets.json",
    "secrets.yaml",
    "secrets.yml",
    "service-account.json",
];

/// File extensions (lower case) of keys, certificates' private parts, keystores and env files.
const SECRET_EXTENSIONS: &[&str] = &[
    "pem", "key", "p12", "pfx", "jks", "keystore", "kdbx", "env", "ppk", "asc", "gpg",
];

/// The documented list of what guests never read, for messages and `bub access explain`.
pub(crate) const SECRET_FILES: &str = "hidden files and folders (.env, .git, .ssh, .netrc, \
    .git-credentials, …), keys and credentials (*.pem, *.key, *.p12, *.pfx, *.env, id_rsa, \
    id_ed25519, credentials.json, …)";

/// The workspace folder of the files of chat `chat` of `channel` (`chats/telegram--100123`),
/// relative to the workspace.
pub(crate) fn chat_folder(channel: &str, chat: &str) -> PathBuf {
    chat_folder_in(CHATS_DIR, channel, chat)
}

/// The folder of chat `chat` of `channel` under `dir`: the chat id made safe for a file name.
fn chat_folder_in(dir: &str, channel: &str, chat: &str) -> PathBuf {
    let chat: String = chat
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                true => c,
                false => '_',
            },
        )
        .collect();
    Path::new(dir).join(format!("{channel}-{chat}"))
}

/// A file name that holds keys or credentials: a hidden name, or one of [`SECRET_NAMES`] /
/// [`SECRET_EXTENSIONS`] (a `.pub` key is public).
pub(crate) fn is_secret_name(name: &OsStr) -> bool {
    let name = name.to_string_lossy().to_lowercase();
    if name.starts_with('.') {
        return true;
    }
    if SECRET_NAMES.contains(&name.as_str()) {
        return true;
    }
    name.rsplit_once('.')
        .is_some_and(|(_, ext)| SECRET_EXTENSIONS.contains(&ext))
}

/// What is risky about where guests' files are, for warnings at start: the workspace is the home
/// directory, or contains `BUB_HOME` (guests' tools never reach `BUB_HOME` or hidden files either
/// way, but owners' tools do, and the home directory's other files are open to guests' reading),
/// or guests are given `bash` without the sandbox (their commands are not confined at all).
pub(crate) fn startup_warnings(settings: &crate::config::Settings) -> Vec<String> {
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let workspace = real(&settings.workspace);
    let mut out = Vec::new();
    let home_dir = settings
        .user_home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
    if home_dir.is_some_and(|h| real(&h) == workspace) {
        out.push(format!(
            "the workspace {} is the home directory: guests can read its files (all but hidden \
             ones and keys); give Bub a folder of its own (-w DIR)",
            workspace.display()
        ));
    }
    let home = real(&settings.home);
    if home.starts_with(&workspace) {
        out.push(format!(
            "the workspace {} contains BUB_HOME {}: guests never reach it, but owners' tools do, \
             and an owner's sandboxed shell (BUB_SANDBOX=all) refuses to run; keep BUB_HOME \
             outside the workspace",
            workspace.display(),
            home.display()
        ));
    }
    let guest = super::Policy::for_role(super::Role::Guest, settings);
    if guest.allows("bash") && !guest.sandbox {
        out.push(
            "BUB_GUEST_TOOLS gives guests bash and BUB_SANDBOX=off: their commands run \
             unconfined, with the process's rights over every file"
                .to_owned(),
        );
    }
    out
}

/// Why a guest may not reach a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Under `BUB_HOME`: tapes, memory, access, jobs.
    BubHome,
    /// Under another chat's folder (in `chats/` or the old `inbox/`).
    OtherChat,
    /// A hidden or secret file, or one inside a hidden folder.
    Secret,
    /// A write outside the chat's own folder (its old folder included).
    NotOwnFolder,
}

impl Closed {
    /// The refusal, for the path as the caller wrote it.
    pub(crate) fn message(self, raw: &str, folder: Option<&Path>) -> String {
        match self {
            Closed::BubHome => format!("{raw}: Bub's own files (BUB_HOME) are not open to guests"),
            Closed::OtherChat => format!("{raw}: another chat's files are not open to guests"),
            Closed::Secret => format!("{raw}: {SECRET_FILES} are not open to guests"),
            Closed::NotOwnFolder => match folder {
                Some(f) => format!(
                    "{raw}: guests write only in this chat's folder, {}/",
                    f.display()
                ),
                None => format!("{raw}: guests cannot write files outside a chat"),
            },
        }
    }
}

/// The guest file rule for one session (see the module docs), with its paths resolved.
#[derive(Debug, Clone)]
pub(crate) struct GuestFiles {
    root: PathBuf,
    home: PathBuf,
    /// `chats/` and the old `inbox/`, resolved.
    chats: PathBuf,
    old_chats: PathBuf,
    /// The chat's folder, relative to the workspace (as shown) and resolved.
    folder: Option<(PathBuf, PathBuf)>,
    /// The chat's old folder (read only).
    old_folder: Option<PathBuf>,
}

impl GuestFiles {
    /// The rule for a session in `workspace` — of `chat` (channel, chat id) when it is a
    /// chat's —, `BUB_HOME` being `home`. Resolves the paths (file I/O: the blocking pool); a
    /// path that does not exist yet is taken as written.
    pub(crate) fn new(workspace: &Path, home: &Path, chat: Option<(&str, &str)>) -> Self {
        let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let root = real(workspace);
        let folder = chat
            .map(|(channel, chat)| chat_folder(channel, chat))
            .map(|rel| {
                let abs = root.join(&rel);
                (rel, real(&abs))
            });
        // The old folder's own name under the resolved `inbox/`, not resolved itself: a link
        // there to another folder opens nothing.
        let old_chats = real(&root.join(OLD_CHATS_DIR));
        let old_folder = chat
            .map(|(channel, chat)| chat_folder_in(OLD_CHATS_DIR, channel, chat))
            .and_then(|rel| rel.file_name().map(|name| old_chats.join(name)));
        Self {
            chats: real(&root.join(CHATS_DIR)),
            old_chats,
            home: real(home),
            folder,
            old_folder,
            root,
        }
    }

    /// The chat's own folder, relative to the workspace.
    pub(crate) fn folder(&self) -> Option<&Path> {
        self.folder.as_ref().map(|(rel, _)| rel.as_path())
    }

    /// The chat's own folder, resolved (absolute).
    pub(crate) fn folder_path(&self) -> Option<&Path> {
        self.folder.as_ref().map(|(_, abs)| abs.as_path())
    }

    /// A guest may read `real` (a resolved path inside the workspace).
    pub(crate) fn read(&self, real: &Path) -> Result<(), Closed> {
        if real.starts_with(&self.home) {
            return Err(Closed::BubHome);
        }
        // `chats/` (and `inbox/`) itself may be walked through to the chat's folder (walks
        // prune the others).
        let other_chat = |chats: &Path, own: Option<&Path>| {
            real.starts_with(chats) && real != chats && !own.is_some_and(|f| real.starts_with(f))
        };
        if other_chat(&self.chats, self.folder_path())
            || other_chat(&self.old_chats, self.old_folder.as_deref())
        {
            return Err(Closed::OtherChat);
        }
        let rel = real.strip_prefix(&self.root).unwrap_or(real);
        let secret = rel.components().any(|c| match c {
            Component::Normal(name) => is_secret_name(name),
            _ => false,
        });
        if secret {
            return Err(Closed::Secret);
        }
        Ok(())
    }

    /// A guest may write `real`: readable, and inside the chat's own folder.
    pub(crate) fn write(&self, real: &Path) -> Result<(), Closed> {
        self.read(real)?;
        match self.folder_path() {
            Some(folder) if real.starts_with(folder) => Ok(()),
            _ => Err(Closed::NotOwnFolder),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn risky_layouts_and_an_unsandboxed_guest_shell_are_warned_about() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let mut settings = crate::config::Settings::with_defaults(ws.join(".bub"), ws.clone());
        settings.user_home = Some(ws.clone());
        let warnings = startup_warnings(&settings);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("is the home directory"));
        assert!(warnings[1].contains("contains BUB_HOME"));
        settings.home = dir.path().join("../elsewhere");
        settings.workspace = ws.join("project");
        assert!(startup_warnings(&settings).is_empty());
        settings.guest_tools = Some(vec!["BASH".into()]);
        assert!(startup_warnings(&settings).is_empty(), "sandboxed");
        settings.sandbox = crate::config::SandboxMode::Off;
        assert!(startup_warnings(&settings)[0].contains("unconfined"));
    }

    #[test]
    fn chat_folders_come_from_the_session() {
        assert_eq!(
            chat_folder("telegram", "-100123"),
            Path::new("chats/telegram--100123")
        );
        assert_eq!(
            chat_folder("discord", "9/../x"),
            Path::new("chats/discord-9____x")
        );
    }

    #[test]
    fn secret_names() {
        for name in [
            ".env",
            ".env.local",
            ".netrc",
            ".git-credentials",
            "id_ed25519",
            "server.PEM",
            "tls.key",
            "prod.env",
            "credentials.json",
        ] {
            assert!(is_secret_name(OsStr::new(name)), "{name}");
        }
        for name in ["id_ed25519.pub", "main.rs", "notes.md", "keys.txt", "env"] {
            assert!(!is_secret_name(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn guests_read_the_workspace_but_not_secrets_home_or_other_chats() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let home = ws.join(".bub");
        let rule = GuestFiles::new(&ws, &home, Some(("telegram", "42")));
        assert_eq!(rule.folder(), Some(Path::new("chats/telegram-42")));
        assert_eq!(rule.read(&ws.join("src/main.rs")), Ok(()));
        assert_eq!(rule.read(&ws.join("chats/telegram-42/a.pdf")), Ok(()));
        assert_eq!(
            rule.read(&ws.join("chats/telegram-43/a.pdf")),
            Err(Closed::OtherChat)
        );
        assert_eq!(rule.read(&ws.join("chats")), Ok(()));
        assert_eq!(rule.read(&ws.join(".bub/tapes/x")), Err(Closed::BubHome));
        assert_eq!(rule.read(&ws.join(".env")), Err(Closed::Secret));
        assert_eq!(rule.read(&ws.join(".ssh/config")), Err(Closed::Secret));
        assert_eq!(rule.read(&ws.join("deploy/tls.pem")), Err(Closed::Secret));
        // Outside home: a BUB_HOME that is not hidden is closed all the same.
        let rule = GuestFiles::new(&ws, &ws.join("data"), Some(("telegram", "42")));
        assert_eq!(rule.read(&ws.join("data/jobs.json")), Err(Closed::BubHome));
    }

    #[test]
    fn guests_write_only_in_their_chat_folder() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let rule = GuestFiles::new(&ws, &ws.join(".bub"), Some(("telegram", "42")));
        assert_eq!(rule.write(&ws.join("chats/telegram-42/out.txt")), Ok(()));
        for closed in [
            "AGENTS.md",
            "HEARTBEAT.md",
            "startup.sh",
            "src/lib.rs",
            "chats/telegram-43/x",
            "chats/x",
            "chats",
        ] {
            assert!(rule.write(&ws.join(closed)).is_err(), "{closed}");
        }
        assert_eq!(rule.write(&ws.join(".env")), Err(Closed::Secret));
        assert_eq!(
            rule.write(&ws.join(".agents/skills/x/SKILL.md")),
            Err(Closed::Secret)
        );
        let cli = GuestFiles::new(&ws, &ws.join(".bub"), None);
        assert_eq!(cli.write(&ws.join("x")), Err(Closed::NotOwnFolder));
        assert!(
            Closed::NotOwnFolder
                .message("AGENTS.md", rule.folder())
                .contains("chats/telegram-42/")
        );
    }

    #[test]
    fn the_old_inbox_folders_stay_closed_to_other_chats_and_read_only_to_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        for folder in [
            "inbox/telegram-42",
            "inbox/telegram-43",
            "chats/telegram-43",
        ] {
            std::fs::create_dir_all(ws.join(folder)).unwrap();
        }
        let rule = GuestFiles::new(&ws, &ws.join(".bub"), Some(("telegram", "42")));
        assert_eq!(rule.read(&ws.join("inbox/telegram-42/a.pdf")), Ok(()));
        assert_eq!(rule.read(&ws.join("inbox")), Ok(()), "walked through");
        for other in [
            "inbox/telegram-43/a.pdf",
            "inbox/telegram-43",
            "inbox/telegram-420/a.pdf",
            "inbox/x",
            "chats/telegram-43/a.pdf",
        ] {
            assert_eq!(
                rule.read(&ws.join(other)),
                Err(Closed::OtherChat),
                "{other}"
            );
            assert!(rule.write(&ws.join(other)).is_err(), "{other}");
        }
        assert_eq!(
            rule.write(&ws.join("inbox/telegram-42/out.txt")),
            Err(Closed::NotOwnFolder),
            "the old folder is read, not written"
        );
        // A chat without an old folder, and a session that is not a chat: nothing old opens.
        let cli = GuestFiles::new(&ws, &ws.join(".bub"), None);
        assert_eq!(
            cli.read(&ws.join("inbox/telegram-42/a.pdf")),
            Err(Closed::OtherChat)
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_old_folder_linked_to_another_chats_opens_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("inbox/telegram-43")).unwrap();
        std::fs::write(ws.join("inbox/telegram-43/a.pdf"), "x").unwrap();
        std::os::unix::fs::symlink(ws.join("inbox/telegram-43"), ws.join("inbox/telegram-42"))
            .unwrap();
        let rule = GuestFiles::new(&ws, &ws.join(".bub"), Some(("telegram", "42")));
        let real = ws.join("inbox/telegram-42/a.pdf").canonicalize().unwrap();
        assert_eq!(rule.read(&real), Err(Closed::OtherChat));
    }
}
