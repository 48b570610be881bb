//! File tools: `fs.read`, `fs.write`, `fs.edit` here, `fs.glob` and `fs.grep` in [`search`].
//!
//! Paths: `~` is expanded, relative paths are joined to the workspace, absolute paths are
//! allowed. Invariants: text is never re-joined — reads and edits keep the file's own line
//! endings, so an edit changes exactly the replaced bytes; binary files (NUL in the first
//! 8 KiB, or invalid UTF-8) are refused rather than shown.
//!
//! Bounded: file work runs on the blocking pool and the call waits for it at most
//! [`Files::timeout`] (`BUB_FS_TIMEOUT_SECONDS`); past it the call fails and the stuck thread is
//! left behind, never waited for. FIFOs, sockets and devices are refused before they are opened
//! (opening a FIFO blocks until its other end is opened), so the deadline is the backstop for a
//! hung mount only.

mod search;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::Reach;
use super::{Tool, ToolContext, ToolError};
use crate::access::files::GuestFiles;
use crate::redact::Redactor;

/// How a tool uses a path argument, for the guest file rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathUse {
    Read,
    Write,
    /// Read and sent to a chat: it must not hold one of Bub's secrets either.
    Send,
}

pub use search::{GlobArgs, GrepArgs, glob, grep};

/// Maximum bytes `fs.read` returns in one call (a note tells how to read on).
pub const READ_CAP: usize = 256 * 1024;
/// Bytes sniffed for a NUL to decide a file is binary.
pub(crate) const BINARY_SNIFF: usize = 8 * 1024;

/// Where an fs call works: the workspace relative paths resolve against, how long its file
/// work may take before the call gives up, and for a guest's turn what its walks leave out.
#[derive(Debug, Clone)]
pub struct Files<'a> {
    pub workspace: &'a Path,
    /// `BUB_FS_TIMEOUT_SECONDS`.
    pub timeout: Duration,
    /// A guest's turn: the walks of `fs.glob` and `fs.grep` skip what the guest file rule
    /// closes, and `fs.grep` skips files holding one of Bub's secrets (no match/no-match
    /// answers about a secret).
    pub(crate) guest: Option<Guest>,
}

/// A guest's turn, as the fs walks need it: the session (for its chat folder), `BUB_HOME` and
/// Bub's secrets.
#[derive(Debug, Clone)]
pub(crate) struct Guest {
    pub session: crate::chat::SessionId,
    pub home: PathBuf,
    pub redactor: Arc<Redactor>,
}

impl Guest {
    /// The guest file rule in `workspace` (resolves paths: the blocking pool).
    pub(crate) fn rule(&self, workspace: &Path) -> GuestFiles {
        GuestFiles::new(workspace, &self.home, self.session.chat())
    }
}

impl<'a> Files<'a> {
    /// The files of the call in `ctx`: its session's workspace, the configured timeout, and
    /// the guest rule when the turn's policy confines files.
    pub(crate) fn of(ctx: &'a ToolContext) -> Self {
        let guest = ctx.turn.policy.confines_files().then(|| Guest {
            session: ctx.session().clone(),
            home: ctx.process.home.clone(),
            redactor: ctx.process.redactor.clone(),
        });
        Self {
            workspace: ctx.workspace(),
            timeout: ctx.process.fs_timeout,
            guest,
        }
    }
}

impl<'a> From<&'a Path> for Files<'a> {
    /// `workspace` with the default timeout.
    fn from(workspace: &'a Path) -> Self {
        Self {
            workspace,
            timeout: crate::time::secs(crate::config::DEFAULT_FS_TIMEOUT_SECONDS),
            guest: None,
        }
    }
}

/// Arguments of `fs.read`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct ReadArgs {
    /// file path
    pub path: String,
    /// first line (0-based)
    #[schemars(range(min = 0))]
    pub offset: Option<i64>,
    /// number of lines
    #[schemars(range(min = 1))]
    pub limit: Option<i64>,
}

/// Arguments of `fs.write`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// file path
    pub path: String,
    /// the whole new content
    pub content: String,
}

/// Arguments of `fs.edit`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct EditArgs {
    /// file path
    pub path: String,
    /// exact text to replace
    pub old: String,
    /// replacement text
    pub new: String,
    /// search from this line (0-based)
    #[schemars(range(min = 0))]
    pub start_line: Option<i64>,
    /// replace every occurrence
    pub replace_all: Option<bool>,
}

const READ_DETAIL: &str =
    "Returns lines [offset, offset+limit) of a text file, with the file's own line endings.
Args: path (relative to the workspace, ~ expanded, absolute allowed); offset: 0-based first line
(default 0); limit: number of lines (default: to the end). Output is capped at 256 KiB; a note
then tells the offset to continue from. Binary files, FIFOs, sockets and devices are refused.";

const WRITE_DETAIL: &str =
    "Writes `content` to `path` (replacing the file), creating parent directories.
Returns `wrote: <path> (<n> bytes)`.";

const EDIT_DETAIL: &str =
    "Replaces the exact text `old` with `new` in `path`, searching from line `start_line` (0-based,
default 0) on. `old` must occur exactly once there unless replace_all=true; when it occurs more
than once, include more surrounding lines in `old` to make it unique. Line endings and the rest
of the file are kept byte for byte. Returns `edited: <path>`.";

/// `fs.read`, `fs.write`, `fs.edit`, `fs.glob`, `fs.grep`.
pub(crate) fn tools() -> Vec<Tool> {
    let mut tools = vec![
        Tool::reaching(
            "fs.read",
            "Read file content",
            READ_DETAIL,
            |a: &ReadArgs| Reach::path(Some(&a.path), PathUse::Read),
            |args, ctx: ToolContext| async move { read(args, Files::of(&ctx)).await },
        ),
        Tool::reaching(
            "fs.write",
            "Write file content",
            WRITE_DETAIL,
            |a: &WriteArgs| Reach::path(Some(&a.path), PathUse::Write),
            |args, ctx: ToolContext| async move { write(args, Files::of(&ctx)).await },
        ),
        Tool::reaching(
            "fs.edit",
            "Edit file content",
            EDIT_DETAIL,
            |a: &EditArgs| Reach::path(Some(&a.path), PathUse::Write),
            |args, ctx: ToolContext| async move { edit(args, Files::of(&ctx)).await },
        ),
    ];
    tools.extend(search::tools());
    tools
}

/// `~` / `~/x` → the home directory (other paths unchanged).
pub(crate) fn expand_tilde(raw: &str) -> PathBuf {
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    if raw == "~" {
        if let Some(h) = home() {
            return h;
        }
    } else if let Some(rest) = raw.strip_prefix("~/")
        && let Some(h) = home()
    {
        return h.join(rest);
    }
    PathBuf::from(raw)
}

/// The path a tool argument names: `~` expanded, relative → joined to `workspace`, `.`
/// components dropped.
pub(crate) fn resolve_path(workspace: &Path, raw: &str) -> PathBuf {
    let p = expand_tilde(raw);
    let joined = if p.is_absolute() {
        p
    } else {
        workspace.join(p)
    };
    joined
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// The real path `raw` names, which must lie inside `workspace`: `..`, absolute paths, `~` and
/// symlinks that lead out of it are refused, as is a path through a dangling symlink. Used by
/// the registry for turns whose policy confines files.
pub(crate) fn confine(workspace: &Path, raw: &str) -> Result<PathBuf, ToolError> {
    let outside = || {
        ToolError::new(format!(
            "{raw}: outside the workspace (only files inside it are allowed here)"
        ))
    };
    let root = workspace
        .canonicalize()
        .map_err(|e| ToolError::new(format!("workspace {}: {e}", workspace.display())))?;
    let path = resolve_path(workspace, raw);
    // The longest prefix that exists (a dangling symlink exists too), resolved; the rest must
    // be plain names.
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    while existing.symlink_metadata().is_err() {
        let (Some(parent), Some(last)) = (existing.parent(), existing.components().next_back())
        else {
            return Err(outside());
        };
        match last {
            Component::Normal(name) => rest.push(name),
            _ => return Err(outside()),
        }
        existing = parent;
    }
    let mut real = existing.canonicalize().map_err(|_| outside())?;
    real.extend(rest.iter().rev());
    if real.starts_with(&root) {
        Ok(real)
    } else {
        Err(outside())
    }
}

fn io_error(path: &Path, e: std::io::Error) -> ToolError {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            ToolError::new(format!("file not found: {}", path.display()))
        }
        _ => ToolError::new(format!("{}: {e}", path.display())),
    }
}

/// Opens `path` with `opts`, refusing anything but a regular file before it is opened: opening
/// a FIFO blocks until its other end is opened, and opening a device may act on it. A missing
/// file is left to `opts` (created, or not found). `O_NONBLOCK` covers a file swapped for a FIFO
/// between the check and the open; on a regular file it changes nothing.
fn open_regular(path: &Path, opts: &mut OpenOptions) -> Result<File, ToolError> {
    match std::fs::metadata(path) {
        Ok(meta) => check_regular(path, &meta)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(path, e)),
    }
    let file = opts
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    check_regular(path, &file.metadata().map_err(|e| io_error(path, e))?)?;
    Ok(file)
}

/// An error unless `meta` is a regular file's.
fn check_regular(path: &Path, meta: &std::fs::Metadata) -> Result<(), ToolError> {
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        return Err(ToolError::new(format!(
            "is a directory: {}",
            path.display()
        )));
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "a special file"
    };
    Err(ToolError::new(format!(
        "{} is {kind}, not a regular file; fs tools only read and write regular files",
        path.display()
    )))
}

/// Replaces the content of `path` (created, with its parent directories, when missing).
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ToolError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| ToolError::new(format!("{}: {e}", parent.display())))?;
    }
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    open_regular(path, &mut opts)?
        .write_all(bytes)
        .map_err(|e| ToolError::new(format!("{}: {e}", path.display())))
}

fn binary(path: &Path, size: u64) -> ToolError {
    ToolError::new(format!(
        "binary file: {} ({size} bytes); not shown",
        path.display()
    ))
}

fn non_negative(name: &str, v: Option<i64>) -> Result<usize, ToolError> {
    match v {
        None => Ok(0),
        Some(n) if n >= 0 => Ok(n as usize),
        Some(n) => Err(ToolError::invalid(format!("{name} must be >= 0, got {n}"))),
    }
}

/// Runs `f` on the blocking pool and waits for it at most `timeout`. Past it the call fails with
/// [`timed_out`] for `path`; the thread, which cannot be cancelled, finishes on its own and
/// nothing waits for it (its result is dropped).
async fn blocking<T: Send + 'static>(
    path: &Path,
    timeout: Duration,
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(f)).await {
        Ok(joined) => joined.map_err(|e| ToolError::new(format!("task failed: {e}")))?,
        Err(_) => {
            tracing::warn!(timeout_ms = timeout.as_millis() as u64, "fs.timeout");
            Err(timed_out(path, timeout))
        }
    }
}

/// The error of file work on `path` that took longer than `timeout`.
fn timed_out(path: &Path, timeout: Duration) -> ToolError {
    ToolError::new(format!(
        "{}: no answer from the file system within {timeout:?} (a hung mount?); gave up \
         (BUB_FS_TIMEOUT_SECONDS)",
        path.display()
    ))
}

/// Checks a guest turn's path arguments, on the blocking pool within the fs timeout: each must
/// name a path inside the workspace (see [`confine`]) that the guest file rule
/// ([`GuestFiles`]) lets it read or write, and a file sent to a chat must not hold one of Bub's
/// secrets. A path whose check does not finish in time (a hung mount) is refused.
pub(crate) async fn check_guest_paths(
    ctx: &ToolContext,
    paths: Vec<(String, PathUse)>,
) -> Result<(), ToolError> {
    let files = Files::of(ctx);
    let Some(guest) = files.guest else {
        return Ok(()); // not a guest's turn: nothing to bound
    };
    let workspace = files.workspace.to_path_buf();
    blocking(files.workspace, files.timeout, move || {
        let rule = guest.rule(&workspace);
        for (raw, usage) in &paths {
            let real = confine(&workspace, raw)?;
            let allowed = match usage {
                PathUse::Read | PathUse::Send => rule.read(&real),
                PathUse::Write => rule.write(&real),
            };
            allowed.map_err(|closed| ToolError::new(closed.message(raw, rule.folder())))?;
            if *usage == PathUse::Send
                && real.is_file()
                && File::open(&real)
                    .and_then(|f| guest.redactor.found_in(f))
                    .unwrap_or(true)
            {
                return Err(ToolError::new(format!(
                    "{raw}: holds one of Bub's own secrets (or cannot be read); not sent"
                )));
            }
        }
        Ok(())
    })
    .await
}

/// `fs.read`.
pub async fn read(args: ReadArgs, files: impl Into<Files<'_>>) -> Result<String, ToolError> {
    let files = files.into();
    let offset = non_negative("offset", args.offset)?;
    let limit = match args.limit {
        None => None,
        Some(n) if n >= 1 => Some(n as usize),
        Some(n) => return Err(ToolError::invalid(format!("limit must be >= 1, got {n}"))),
    };
    let path = resolve_path(files.workspace, &args.path);
    let shown = path.clone();
    blocking(&shown, files.timeout, move || {
        read_lines(&path, offset, limit, READ_CAP)
    })
    .await
}

/// Lines `[offset, offset+limit)` of `path`, at most `cap` bytes (plus a continuation note).
fn read_lines(
    path: &Path,
    offset: usize,
    limit: Option<usize>,
    cap: usize,
) -> Result<String, ToolError> {
    let mut file = open_regular(path, OpenOptions::new().read(true))?;
    let size = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut sniff = Vec::with_capacity(BINARY_SNIFF);
    (&mut file)
        .take(BINARY_SNIFF as u64)
        .read_to_end(&mut sniff)
        .map_err(|e| io_error(path, e))?;
    if sniff.contains(&0) {
        return Err(binary(path, size));
    }
    file.seek(SeekFrom::Start(0))
        .map_err(|e| io_error(path, e))?;

    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let end = limit.map(|l| offset.saturating_add(l));
    let mut out = String::new();
    let mut line = Vec::new();
    let mut idx = 0usize;
    let mut note = None;
    while end.is_none_or(|e| idx < e) {
        line.clear();
        let room = if idx >= offset {
            cap - out.len() + 1
        } else {
            0
        };
        let len = read_line_capped(&mut reader, &mut line, room).map_err(|e| io_error(path, e))?;
        if len == 0 {
            break;
        }
        if idx >= offset {
            if len > cap - out.len() {
                if out.is_empty() {
                    // A single line longer than the cap: show its head.
                    line.truncate(cap);
                    let valid = match std::str::from_utf8(&line) {
                        Ok(s) => s.len(),
                        Err(e) if e.error_len().is_none() => e.valid_up_to(),
                        Err(_) => return Err(binary(path, size)),
                    };
                    out.push_str(std::str::from_utf8(&line[..valid]).unwrap_or_default());
                    note = Some(format!(
                        "[truncated: line {idx} is longer than {} KiB and was cut; continue with offset={}]",
                        cap / 1024,
                        idx + 1
                    ));
                } else {
                    note = Some(format!(
                        "[truncated at {} KiB: lines {offset}..{} shown; continue with offset={idx}]",
                        cap / 1024,
                        idx - 1
                    ));
                }
                break;
            }
            let text = std::str::from_utf8(&line).map_err(|_| binary(path, size))?;
            out.push_str(text);
        }
        idx += 1;
    }
    if let Some(note) = note {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("… ");
        out.push_str(&note);
    }
    Ok(out)
}

/// Reads one line (through `\n`), keeping at most `keep` of its bytes in `buf`; returns the
/// line's full length (0 at end of file).
fn read_line_capped<R: BufRead>(
    r: &mut R,
    buf: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(total);
        }
        let (n, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let take = keep.saturating_sub(buf.len()).min(n);
        buf.extend_from_slice(&chunk[..take]);
        r.consume(n);
        total += n;
        if done {
            return Ok(total);
        }
    }
}

/// `fs.write`.
pub async fn write(args: WriteArgs, files: impl Into<Files<'_>>) -> Result<String, ToolError> {
    let files = files.into();
    let path = resolve_path(files.workspace, &args.path);
    let shown = path.clone();
    let len = args.content.len();
    blocking(&shown, files.timeout, move || {
        write_file(&path, args.content.as_bytes())
    })
    .await?;
    Ok(format!("wrote: {} ({len} bytes)", shown.display()))
}

/// `fs.edit`.
pub async fn edit(args: EditArgs, files: impl Into<Files<'_>>) -> Result<String, ToolError> {
    let files = files.into();
    let start_line = non_negative("start_line", args.start_line)?;
    let path = resolve_path(files.workspace, &args.path);
    if args.old.is_empty() {
        return Err(ToolError::invalid("old must not be empty"));
    }
    let shown = path.clone();
    let count = blocking(&shown, files.timeout, move || {
        edit_file(&path, &args, start_line)
    })
    .await?;
    Ok(if count > 1 {
        format!("edited: {} ({count} replacements)", shown.display())
    } else {
        format!("edited: {}", shown.display())
    })
}

/// The blocking part of `fs.edit`: read, replace, write back; returns the replacement count.
fn edit_file(path: &Path, args: &EditArgs, start_line: usize) -> Result<usize, ToolError> {
    let mut bytes = Vec::new();
    open_regular(path, OpenOptions::new().read(true))?
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    let size = bytes.len() as u64;
    if bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0) {
        return Err(binary(path, size));
    }
    let text = String::from_utf8(bytes).map_err(|_| binary(path, size))?;
    let edited = replace_from_line(
        &text,
        &args.old,
        &args.new,
        start_line,
        args.replace_all.unwrap_or(false),
    )
    .map_err(|e| match e {
        EditError::NotFound => ToolError::new(format!(
            "'{}' not found in {} from line {start_line}",
            preview(&args.old),
            path.display()
        )),
        EditError::Ambiguous(n) => ToolError::new(format!(
            "'{}' occurs {n} times in {}; add context or set replace_all=true",
            preview(&args.old),
            path.display()
        )),
    })?;
    write_file(path, edited.text.as_bytes())?;
    Ok(edited.count)
}

/// Why [`replace_from_line`] refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EditError {
    NotFound,
    /// `old` occurs this many times and `replace_all` was false.
    Ambiguous(usize),
}

/// The result of [`replace_from_line`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Edited {
    pub text: String,
    pub count: usize,
}

/// Replaces `old` with `new` in `text` from the start of line `start_line` (0-based) on; the
/// text before that line is untouched.
pub(crate) fn replace_from_line(
    text: &str,
    old: &str,
    new: &str,
    start_line: usize,
    replace_all: bool,
) -> Result<Edited, EditError> {
    let start = if start_line == 0 {
        0
    } else {
        match text.match_indices('\n').nth(start_line - 1) {
            Some((i, _)) => i + 1,
            None => return Err(EditError::NotFound),
        }
    };
    let (prefix, rest) = text.split_at(start);
    let count = rest.matches(old).count();
    match count {
        0 => Err(EditError::NotFound),
        1 => Ok(Edited {
            text: format!("{prefix}{}", rest.replacen(old, new, 1)),
            count,
        }),
        n if replace_all => Ok(Edited {
            text: format!("{prefix}{}", rest.replace(old, new)),
            count: n,
        }),
        n => Err(EditError::Ambiguous(n)),
    }
}

/// `s` cut to 120 characters for error messages.
fn preview(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(120).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_joins_relative_and_keeps_absolute() {
        let ws = Path::new("/ws");
        assert_eq!(resolve_path(ws, "a/./b.txt"), PathBuf::from("/ws/a/b.txt"));
        assert_eq!(resolve_path(ws, "/etc/x"), PathBuf::from("/etc/x"));
        if let Some(home) = std::env::var_os("HOME") {
            assert_eq!(resolve_path(ws, "~/x"), PathBuf::from(home).join("x"));
        }
    }

    #[test]
    fn replace_respects_start_line_and_keeps_bytes() {
        let text = "a = 1\r\nb = 1\r\nc = 1";
        let e = replace_from_line(text, "= 1", "= 2", 2, false).unwrap();
        assert_eq!(e.text, "a = 1\r\nb = 1\r\nc = 2");
        assert_eq!(
            replace_from_line(text, "= 1", "= 2", 0, false),
            Err(EditError::Ambiguous(3))
        );
        let e = replace_from_line(text, "= 1", "= 2", 1, true).unwrap();
        assert_eq!((e.text.as_str(), e.count), ("a = 1\r\nb = 2\r\nc = 2", 2));
        assert_eq!(
            replace_from_line(text, "a", "z", 1, false),
            Err(EditError::NotFound)
        );
        assert_eq!(
            replace_from_line(text, "c", "z", 9, false),
            Err(EditError::NotFound)
        );
    }

    #[tokio::test]
    async fn stuck_file_work_fails_at_its_deadline_and_is_not_waited_for() {
        // A closure that blocks until released: what open() on a hung mount does.
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let started = std::time::Instant::now();
        let err = blocking(
            Path::new("/mnt/hung/f"),
            Duration::from_millis(50),
            move || {
                let _ = stuck.recv();
                Ok(())
            },
        )
        .await
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            err.message(),
            "/mnt/hung/f: no answer from the file system within 50ms (a hung mount?); gave up \
             (BUB_FS_TIMEOUT_SECONDS)"
        );
        // The deadline is per call: the next call succeeds.
        let out = blocking(Path::new("/x"), Duration::from_millis(50), || Ok(7)).await;
        assert_eq!(out, Ok(7));
        drop(release); // lets the abandoned thread end (the runtime's shutdown waits for it)
    }

    #[test]
    fn read_lines_caps_output_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        std::fs::write(&p, "aaaa\nbbbb\ncccc\n").unwrap();
        let out = read_lines(&p, 0, None, 12).unwrap();
        assert_eq!(
            out,
            "aaaa\nbbbb\n… [truncated at 0 KiB: lines 0..1 shown; continue with offset=2]"
        );
        let out = read_lines(&p, 1, Some(1), 3).unwrap();
        assert_eq!(
            out,
            "bbb\n… [truncated: line 1 is longer than 0 KiB and was cut; continue with offset=2]"
        );
        assert_eq!(read_lines(&p, 0, None, 15).unwrap(), "aaaa\nbbbb\ncccc\n");
    }
}
