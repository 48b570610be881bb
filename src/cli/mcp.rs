//! `bub mcp`: the MCP servers of `BUB_HOME/mcp.json` — list them with their state and tools,
//! add or remove one, test one (connect, list its tools, exit 0 or 1).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Subcommand;
use serde_json::{Value, json};

use super::admin::UsageError;
use crate::config::Settings;
use crate::config::mcp;
use crate::redact::Redactor;
use crate::terminal::safe_line;
use crate::tools::mcp::{Mcp, ServerReport};

#[derive(Subcommand, Debug)]
pub enum McpAction {
    /// Every server: what it runs or reaches, whether it answers, and its tools (each server
    /// is started to find out, then stopped).
    List,
    /// Add (or replace) a server: `bub mcp add NAME -- COMMAND ARGS…` for a local one (stdio),
    /// `bub mcp add NAME --url URL` for a remote one (streamable HTTP).
    Add {
        /// The server's name: its tools are `mcp.NAME.TOOL`.
        name: String,
        /// A streamable HTTP server's URL.
        #[arg(long, conflicts_with_all = ["env", "cwd", "sandbox"])]
        url: Option<String>,
        /// An HTTP header sent with every request (repeatable), e.g. "Authorization: Bearer …".
        #[arg(long = "header", value_name = "NAME: VALUE", requires = "url")]
        headers: Vec<String>,
        /// A variable the local server gets (repeatable); it gets none of Bub's secrets.
        #[arg(long, value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Where the local server runs (default: the workspace).
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// Run the local server under the Landlock rules of a guest's shell.
        #[arg(long)]
        sandbox: bool,
        /// The local server's command and its arguments, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Remove a server.
    Remove { name: String },
    /// Connect to a server and list its tools; exits 1 when it does not answer.
    Test { name: String },
}

/// Runs `bub mcp ACTION`.
pub async fn run(settings: &Settings, action: McpAction) -> anyhow::Result<ExitCode> {
    let home = &settings.home;
    match action {
        McpAction::Add {
            name,
            url,
            headers,
            env,
            cwd,
            sandbox,
            command,
        } => {
            let entry = entry(url, &headers, &env, cwd, sandbox, command)?;
            mcp::add(home, &name, entry).map_err(|e| UsageError(format!("{e:#}")))?;
            println!(
                "added {name} to {}; `bub mcp test {name}` checks it (a running daemon uses it \
                 after a restart)",
                home.join(mcp::FILE).display()
            );
            Ok(ExitCode::SUCCESS)
        }
        McpAction::Remove { name } => {
            mcp::remove(home, &name)?;
            println!("removed {name}");
            Ok(ExitCode::SUCCESS)
        }
        McpAction::List => {
            let servers = Mcp::new(settings, Arc::new(Redactor::from_settings(settings)));
            let reports = servers.report(None).await;
            servers.shutdown().await;
            if reports.is_empty() {
                println!(
                    "no MCP servers (add one with `bub mcp add NAME -- COMMAND` or edit {})",
                    home.join(mcp::FILE).display()
                );
            }
            for report in &reports {
                print!("{}", describe(report, false));
            }
            Ok(ExitCode::SUCCESS)
        }
        McpAction::Test { name } => {
            let servers = Mcp::new(settings, Arc::new(Redactor::from_settings(settings)));
            let reports = servers.report(Some(&name)).await;
            servers.shutdown().await;
            let Some(report) = reports.first() else {
                anyhow::bail!("no MCP server named {name} in {}", mcp::FILE);
            };
            print!("{}", describe(report, true));
            Ok(ExitCode::from(u8::from(report.error.is_some())))
        }
    }
}

/// The `mcp.json` entry of `bub mcp add`'s arguments.
fn entry(
    url: Option<String>,
    headers: &[String],
    env: &[String],
    cwd: Option<String>,
    sandbox: bool,
    command: Vec<String>,
) -> Result<Value, UsageError> {
    let split = |items: &[String], sep: char, what: &str| {
        items
            .iter()
            .map(|item| match item.split_once(sep) {
                Some((k, v)) if !k.trim().is_empty() => {
                    Ok((k.trim().to_owned(), v.trim().to_owned()))
                }
                _ => Err(UsageError(format!(
                    "{what} {item:?}: expected KEY{sep}VALUE"
                ))),
            })
            .collect::<Result<BTreeMap<String, String>, _>>()
    };
    match (url, command.split_first()) {
        (Some(url), None) => {
            let mut entry = json!({"url": url});
            let headers = split(headers, ':', "--header")?;
            if !headers.is_empty() {
                entry["headers"] = json!(headers);
            }
            Ok(entry)
        }
        (None, Some((program, args))) => {
            let mut entry = json!({"command": program, "args": args});
            let env = split(env, '=', "--env")?;
            if !env.is_empty() {
                entry["env"] = json!(env);
            }
            if let Some(cwd) = cwd {
                entry["cwd"] = json!(cwd);
            }
            if sandbox {
                entry["sandbox"] = json!(true);
            }
            Ok(entry)
        }
        _ => Err(UsageError(
            "give the server's command after `--` (bub mcp add NAME -- COMMAND ARGS…) or \
             --url URL, not both"
                .into(),
        )),
    }
}

/// A server's lines: name and target, then its state and tools (`all`: one line per tool).
fn describe(report: &ServerReport, all: bool) -> String {
    let mut out = format!("{}  {}\n", report.name, safe_line(&report.target));
    match &report.error {
        Some(error) => out.push_str(&format!("  error: {}\n", safe_line(error))),
        None if all => {
            out.push_str(&format!("  ok: {} tools\n", report.tools.len()));
            for tool in &report.tools {
                out.push_str(&format!("  mcp.{}.{}\n", report.name, safe_line(tool)));
            }
        }
        None => out.push_str(&format!(
            "  ok: {} tools: {}\n",
            report.tools.len(),
            safe_line(&report.tools.join(", "))
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_arguments_become_an_entry() {
        let stdio = entry(
            None,
            &[],
            &["TOKEN=abc".into()],
            None,
            true,
            vec!["npx".into(), "-y".into(), "server".into()],
        )
        .unwrap();
        assert_eq!(
            stdio,
            json!({"command": "npx", "args": ["-y", "server"], "env": {"TOKEN": "abc"}, "sandbox": true})
        );
        let http = entry(
            Some("https://x/mcp".into()),
            &["Authorization: Bearer t".into()],
            &[],
            None,
            false,
            vec![],
        )
        .unwrap();
        assert_eq!(
            http,
            json!({"url": "https://x/mcp", "headers": {"Authorization": "Bearer t"}})
        );
        assert!(entry(None, &[], &[], None, false, vec![]).is_err());
        assert!(
            entry(
                None,
                &[],
                &["NOEQUALS".into()],
                None,
                false,
                vec!["x".into()]
            )
            .is_err()
        );
    }
}
