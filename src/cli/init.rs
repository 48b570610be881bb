//! `bub init`: writes `BUB_HOME/config.toml` from three questions — the model (and, for a
//! provider Bub does not know, its server's base URL), its key, a Telegram bot token — each
//! skipped with Enter, then says how to start.
//!
//! The file is written 0600 and never replaces an existing one unless the user says so. Answers
//! are checked as the loader checks them (a bad one is asked again); a key or token typed on a
//! terminal is not echoed. Lines are read plainly, so the questions can be answered through
//! stdin (end of input answers Enter).

use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::config::{self, ConfigError};
use crate::llm::Api;

/// A base URL for the model check: any provider name is accepted, as with `BUB_API_BASE` (an
/// unknown one is asked for its server's base URL next).
const ANY_PROVIDER: Option<&str> = Some("asked next");

/// `bub init` on the process's stdin and stdout.
pub fn run() -> anyhow::Result<ExitCode> {
    let home = config::home_from_env()?;
    let stdin = std::io::stdin();
    let hide_secrets = stdin.is_terminal();
    let mut io = Prompter {
        input: stdin.lock(),
        output: std::io::stdout().lock(),
        hide_secrets,
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
    if path.exists() {
        let answer = io.ask(&format!("{} exists. Replace it? [y/N] ", path.display()))?;
        if !answer.eq_ignore_ascii_case("y") && !answer.eq_ignore_ascii_case("yes") {
            io.say("Left as it is.")?;
            return Ok(ExitCode::SUCCESS);
        }
    }

    let mut lines = vec![
        "# Written by `bub init`. Every setting, with its default: `bub help env`.".to_owned(),
    ];
    let model = io.ask_valid(
        &format!(
            "Model, as provider:model (openrouter, openai, anthropic, gemini, ollama, ...) [{}]: ",
            config::DEFAULT_MODEL
        ),
        |raw| config::parse_model("model", raw, ANY_PROVIDER).map(|_| ()),
    )?;
    let model = match model {
        Some(model) => {
            lines.push(toml_line("model", &model));
            model
        }
        None => config::DEFAULT_MODEL.to_owned(),
    };
    let provider = model.split_once(':').map_or("", |(p, _)| p.trim());
    if config::provider_base_url(provider).is_none() {
        let base = io.ask_valid(
            &format!(
                "Base URL of the OpenAI-compatible server for {provider} (e.g. http://127.0.0.1:8080/v1): "
            ),
            |raw| config::parse_url("api_base", raw).map(|_| ()),
        )?;
        match base {
            Some(base) => lines.push(toml_line("api_base", &base)),
            None => io.say(&format!(
                "Without a base URL, {provider}: is not usable; set api_base in the file later."
            ))?,
        }
    }
    let key_var = match Api::of(provider) {
        Api::OpenAi => "api_key",
        Api::Anthropic => "anthropic_api_key",
        Api::Gemini => "gemini_api_key",
    };
    if let Some(key) = io.ask_secret(&format!(
        "API key for {provider} (a local server needs none): "
    ))? {
        lines.push(toml_line(key_var, &key));
    }
    let token = io.ask_secret("Telegram bot token from @BotFather: ")?;
    if let Some(token) = &token {
        lines.push("telegram_enabled = true".to_owned());
        lines.push(toml_line("telegram_token", token));
    }

    if !home.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home)
            .with_context(|| format!("cannot create {}", home.display()))?;
    }
    crate::storage::write_atomic(&path, lines.join("\n").as_bytes(), Some(0o600))
        .with_context(|| format!("cannot write {}", path.display()))?;
    io.say(&format!(
        "Wrote {} (readable by you only).\nStart a terminal chat in a workspace of its own: \
         mkdir -p ~/bub-work && bub -w ~/bub-work chat",
        path.display()
    ))?;
    if token.is_some() {
        io.say(
            "Serve Telegram: bub message — then write to your bot and approve the code it \
             answers with: bub pair approve telegram CODE",
        )?;
    }
    Ok(ExitCode::SUCCESS)
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
        self.input.read_line(&mut line)?;
        Ok(line.trim().to_owned())
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
