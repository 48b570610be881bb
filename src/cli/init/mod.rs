//! `bub init`: writes `BUB_HOME/config.toml` from a few questions — the model (and, for a
//! provider Bub does not know, its server's base URL), its key, a Telegram bot token, the
//! workspace — so that `bub chat`, `bub run` and `bub message` work next; then prints those
//! commands.
//!
//! The file is written 0600 and never replaces an existing one unless the user says so. Answers
//! are checked as the loader checks them (a bad one is asked again): a provider that needs a key
//! ([`crate::llm::needs_key`]) gets one, of a key's shape; a token has a bot token's shape
//! ([`config::check_bot_token`]). The key is tried with one tiny request and the token with
//! `getMe` ([`probe`]), each when the user agrees; a check that cannot reach its server says
//! "not checked" and goes on. The workspace (default `~/bub-work`) is created and written as
//! `workspace_path`. A key or token typed on a terminal is not echoed. Lines are read plainly,
//! so the questions can be answered through stdin (end of input answers Enter; a required
//! answer missing at the end of input writes nothing).

mod probe;

use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};

#[cfg(feature = "telegram")]
use crate::channels::telegram::TokenCheck;
use crate::config::{self, ConfigError};
use crate::llm::Api;
use probe::ModelCheck;

/// A base URL for the model check: any provider name is accepted, as with `BUB_API_BASE` (an
/// unknown one is asked for its server's base URL next).
const ANY_PROVIDER: Option<&str> = Some("asked next");

/// The workspace offered.
const DEFAULT_WORKSPACE: &str = "~/bub-work";

/// `bub init` on the process's stdin and stdout.
pub fn run() -> anyhow::Result<ExitCode> {
    let home = config::home_from_env()?;
    let stdin = std::io::stdin();
    let hide_secrets = stdin.is_terminal();
    let mut io = Prompter {
        input: stdin.lock(),
        output: std::io::stdout().lock(),
        hide_secrets,
        ended: false,
    };
    init(&home, &mut io)
}

/// Asks the questions on `io` and writes `home/config.toml`.
fn init(home: &Path, io: &mut Prompter<impl BufRead, impl Write>) -> anyhow::Result<ExitCode> {
    let path = home.join("config.toml");
    io.say(&format!(
        "This writes {}. Press Enter to skip a question.",
        path.display()
    ))?;
    if path.exists()
        && !io.confirm(
            &format!("{} exists. Replace it? [y/N] ", path.display()),
            false,
        )?
    {
        io.say("Left as it is.")?;
        return Ok(ExitCode::SUCCESS);
    }

    let mut lines = vec![
        "# Written by `bub init`. Every setting, with its default: `bub help env`.".to_owned(),
    ];
    lines.extend(model_lines(io)?);
    #[cfg(feature = "telegram")]
    let bot = telegram_lines(io, &mut lines)?;
    // A build without Telegram does not ask for a bot.
    #[cfg(not(feature = "telegram"))]
    let bot: Option<String> = None;
    let workspace = workspace(io)?;
    lines.push(toml_line(
        "workspace_path",
        &workspace.display().to_string(),
    ));

    if !home.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home)
            .with_context(|| format!("cannot create {}", home.display()))?;
    }
    lines.push(String::new());
    crate::storage::write_atomic(&path, lines.join("\n").as_bytes(), Some(0o600))
        .with_context(|| format!("cannot write {}", path.display()))?;
    io.say(&format!(
        "Wrote {} (readable by you only).\n\nNext:\n  bub chat      talk with Bub in this terminal, working in {}",
        path.display(),
        workspace.display()
    ))?;
    match bot {
        Some(name) => io.say(&format!(
            "  bub message   serve Telegram: write to {name}, then approve the code it answers \
             with: bub pair approve telegram CODE"
        ))?,
        None => io.say("  bub run \"hello\"   one question, the answer printed")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The model's lines: `model`, `api_base` for a provider Bub does not know, the key. Asked
/// again from the model when the model check is refused, from the key when the key is.
fn model_lines(io: &mut Prompter<impl BufRead, impl Write>) -> anyhow::Result<Vec<String>> {
    loop {
        let mut lines = Vec::new();
        let answer = io.ask_valid(
            &format!(
                "Model, as provider:model (openrouter, openai, anthropic, gemini, ollama, ...) [{}]: ",
                config::DEFAULT_MODEL
            ),
            |raw| config::parse_model("model", raw, ANY_PROVIDER).map(|_| ()),
        )?;
        let text = match answer {
            Some(model) => {
                lines.push(toml_line("model", &model));
                model
            }
            None => config::DEFAULT_MODEL.to_owned(),
        };
        let model = config::parse_model("model", &text, ANY_PROVIDER)?;
        let provider = model.provider.clone();
        // The base URL the file gives (`None`: an unknown provider without one).
        let mut file_base = config::provider_base_url(&provider).map(str::to_owned);
        if file_base.is_none() {
            let base = io.ask_valid(
                &format!(
                    "Base URL of the OpenAI-compatible server for {provider} (e.g. http://127.0.0.1:8080/v1): "
                ),
                |raw| config::parse_url("api_base", raw).map(|_| ()),
            )?;
            match &base {
                Some(base) => lines.push(toml_line("api_base", base)),
                None => io.say(&format!(
                    "Without a base URL, {provider}: is not usable; set api_base in the file later."
                ))?,
            }
            file_base = base;
        }
        // A hosted provider needs a key; a server on this machine or the local network does not.
        let needs_key = file_base
            .as_deref()
            .is_some_and(|base| crate::llm::needs_key(&provider, base));
        let key_var = match Api::of(&provider) {
            Api::OpenAi => "api_key",
            Api::Anthropic => "anthropic_api_key",
            Api::Gemini => "gemini_api_key",
        };
        let base = probe::model_base(&provider, file_base.as_deref());
        loop {
            let key = ask_key(io, &provider, key_var, needs_key)?;
            let check = match &base {
                Some(base)
                    if io.confirm(
                        &format!("Test {model} now with one short request to {base}? [Y/n] "),
                        true,
                    )? =>
                {
                    probe::model(&model, base, key.as_deref())
                }
                _ => {
                    io.say("Model not checked.")?;
                    return Ok(with_key(lines, key_var, key));
                }
            };
            match check {
                ModelCheck::Answered(text) => {
                    let text = one_line(text.trim());
                    let text = crate::terminal::safe_line(&text);
                    io.say(&format!("The model answered: {text}"))?;
                }
                ModelCheck::Unreachable(why) => {
                    let host = host_of(base.as_deref());
                    io.say(&format!("Could not reach {host}, not checked ({why})."))?;
                }
                ModelCheck::NotChecked(why) => io.say(&format!("Model not checked: {why}"))?,
                ModelCheck::KeyRejected(why) if io.ended => {
                    bail!("the key was not accepted ({why}): nothing was written")
                }
                ModelCheck::KeyRejected(why) => {
                    io.say(&format!(
                        "The key was not accepted ({why}). Enter it again."
                    ))?;
                    continue;
                }
                ModelCheck::Refused(why) if io.ended => {
                    bail!("the model call failed ({why}): nothing was written")
                }
                ModelCheck::Refused(why) => {
                    io.say(&format!(
                        "The model call failed: {why}\nChoose the model again."
                    ))?;
                    break;
                }
            }
            return Ok(with_key(lines, key_var, key));
        }
    }
}

/// `lines` with the key's line, if there is a key.
fn with_key(mut lines: Vec<String>, key_var: &str, key: Option<String>) -> Vec<String> {
    if let Some(key) = key {
        lines.push(toml_line(key_var, &key));
    }
    lines
}

/// The key for `provider`: required when `needed` (an empty answer is refused; the end of the
/// input stops `bub init` without writing), of a key's shape.
fn ask_key(
    io: &mut Prompter<impl BufRead, impl Write>,
    provider: &str,
    key_var: &str,
    needed: bool,
) -> anyhow::Result<Option<String>> {
    let question = match needed {
        true => format!("API key for {provider} (required): "),
        false => format!("API key for {provider} (a local server needs none): "),
    };
    loop {
        match io.ask_secret(&question)? {
            None if needed && io.ended => {
                bail!("the input ended without an API key for {provider}: nothing was written")
            }
            None if needed => io.say(&format!(
                "{provider} needs a key: paste it (it is stored in the file, readable by you only)."
            ))?,
            None => return Ok(None),
            Some(key) => match config::check_api_key(key_var, &key, needed) {
                Ok(()) => return Ok(Some(key)),
                Err(e) => io.say(&e.message)?,
            },
        }
    }
}

/// The Telegram lines (`telegram_enabled`, `telegram_token`) when a token is given, checked
/// with `getMe` when the user agrees; the bot's `@name` (or "your bot") for the next steps.
#[cfg(feature = "telegram")]
fn telegram_lines(
    io: &mut Prompter<impl BufRead, impl Write>,
    lines: &mut Vec<String>,
) -> anyhow::Result<Option<String>> {
    const VAR: &str = "telegram_token";
    loop {
        let Some(token) = io.ask_secret("Telegram bot token from @BotFather: ")? else {
            return Ok(None);
        };
        if let Err(e) = config::check_bot_token("telegram", VAR, &token) {
            io.say(&e.message)?;
            continue;
        }
        let mut name = "your bot".to_owned();
        if io.confirm("Check the token with Telegram (getMe)? [Y/n] ", true)? {
            match probe::telegram_token(&token) {
                TokenCheck::Accepted(username) => {
                    name = format!("@{}", crate::terminal::safe_line(&username));
                    io.say(&format!("Telegram knows this bot as {name}."))?;
                }
                TokenCheck::Rejected => {
                    io.say("Telegram does not know this token (401/404). Enter it again.")?;
                    continue;
                }
                TokenCheck::Unreachable(why) => {
                    io.say(&format!("Could not reach Telegram, not checked ({why})."))?;
                }
                TokenCheck::NotChecked(why) => io.say(&format!("Token not checked: {why}"))?,
            }
        }
        lines.push("telegram_enabled = true".to_owned());
        lines.push(toml_line(VAR, &token));
        return Ok(Some(name));
    }
}

/// The workspace: asked (default [`DEFAULT_WORKSPACE`]), `~` expanded, created.
fn workspace(io: &mut Prompter<impl BufRead, impl Write>) -> anyhow::Result<std::path::PathBuf> {
    loop {
        let answer = io.ask(&format!(
            "Workspace, the folder Bub works in [{DEFAULT_WORKSPACE}]: "
        ))?;
        let raw = if answer.is_empty() {
            DEFAULT_WORKSPACE
        } else {
            &answer
        };
        let path = match config::user_path("workspace_path", raw) {
            Ok(path) => path,
            Err(e) => {
                io.say(&e.message)?;
                continue;
            }
        };
        match std::fs::create_dir_all(&path) {
            Ok(()) if path.is_dir() => return Ok(path),
            Ok(()) => io.say(&format!("{} is not a directory.", path.display()))?,
            Err(e) => io.say(&format!("Cannot create {}: {e}", path.display()))?,
        }
        if io.ended {
            bail!("the input ended without a usable workspace: nothing was written");
        }
    }
}

/// The host of `url`, for "could not reach".
fn host_of(url: Option<&str>) -> String {
    url.and_then(|u| reqwest::Url::parse(u).ok())
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "the model's server".to_owned())
}

/// The first line of `text`, at most 80 characters.
fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(80).collect()
}

/// `key = "value"`: a JSON string is a valid TOML basic string.
fn toml_line(key: &str, value: &str) -> String {
    format!("{key} = {}", serde_json::Value::from(value))
}

/// Questions on a line-based input.
struct Prompter<R, W> {
    input: R,
    output: W,
    /// The input is a terminal: keys and tokens are read without echo.
    hide_secrets: bool,
    /// The input has ended (every further answer is empty).
    ended: bool,
}

impl<R: BufRead, W: Write> Prompter<R, W> {
    fn say(&mut self, text: &str) -> anyhow::Result<()> {
        writeln!(self.output, "{text}")?;
        Ok(())
    }

    /// The trimmed answer; end of input is an empty one.
    fn ask(&mut self, question: &str) -> anyhow::Result<String> {
        write!(self.output, "{question}")?;
        self.output.flush()?;
        let mut line = String::new();
        if self.input.read_line(&mut line)? == 0 {
            self.ended = true;
        }
        Ok(line.trim().to_owned())
    }

    /// A yes or no; Enter (and the end of the input) is `default`.
    fn confirm(&mut self, question: &str, default: bool) -> anyhow::Result<bool> {
        let answer = self.ask(question)?.to_ascii_lowercase();
        Ok(match answer.as_str() {
            "y" | "yes" => true,
            "n" | "no" => false,
            _ => default,
        })
    }

    /// An answer `check` accepts (asked again after its error), or `None` when skipped.
    fn ask_valid(
        &mut self,
        question: &str,
        check: impl Fn(&str) -> Result<(), ConfigError>,
    ) -> anyhow::Result<Option<String>> {
        loop {
            let answer = self.ask(question)?;
            if answer.is_empty() {
                return Ok(None);
            }
            match check(&answer) {
                Ok(()) => return Ok(Some(answer)),
                Err(e) => self.say(&e.message)?,
            }
        }
    }

    /// A key or token: not echoed on a terminal; `None` when skipped.
    fn ask_secret(&mut self, question: &str) -> anyhow::Result<Option<String>> {
        let echo = self.hide_secrets.then(EchoOff::new).flatten();
        let answer = self.ask(question);
        if echo.is_some() {
            drop(echo);
            writeln!(self.output)?;
        }
        let answer = answer?;
        Ok((!answer.is_empty()).then_some(answer))
    }
}

/// Terminal echo off on stdin until dropped.
struct EchoOff(libc::termios);

impl EchoOff {
    fn new() -> Option<Self> {
        // SAFETY: tcgetattr/tcsetattr on stdin with a termios owned here.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut saved) != 0 {
                return None;
            }
            let mut quiet = saved;
            quiet.c_lflag &= !libc::ECHO;
            (libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &quiet) == 0).then_some(Self(saved))
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: restores the attributes read in `new`.
        unsafe {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &self.0);
        }
    }
}
