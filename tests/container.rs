//! The container deployment files: `entrypoint.sh` (the self-resume protocol) is run with bash
//! against a stub `bub` that logs what it was asked to do; the Dockerfile, docker-compose.yml and
//! the README's Deployment section are checked to agree with each other and with Cargo.toml.
//! No Docker daemon and no network are needed. Every wait is bounded by a deadline, and every
//! entrypoint runs in its own process group, which is killed when the test ends.

use crate::support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use support::wait::wait_for_blocking;

/// How long any single step may take before the test fails (generous: the other test modules
/// of the one test binary load the machine meanwhile).
const DEADLINE: Duration = Duration::from_secs(30);

fn repo_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn read_repo_file(name: &str) -> String {
    fs::read_to_string(repo_file(name)).unwrap_or_else(|e| panic!("cannot read {name}: {e}"))
}

/// The stub `bub`: logs one `argv` line per start (pid, cwd, args), then per mode:
/// * `idle`: logs `idle started`, waits; on SIGTERM logs `idle got TERM` and exits 0.
///   `STUB_IDLE_EXIT=N` exits N at once; `STUB_IDLE_IGNORE_TERM=1` ignores SIGTERM.
/// * `message`: exits `STUB_EXIT` (default 0), or with `STUB_MESSAGE_WAIT=1` waits for SIGTERM
///   and logs `message got TERM`.
/// * anything else (`run hello`): logs and exits 0.
const STUB_BUB: &str = r#"#!/usr/bin/env bash
log="$STUB_LOG"
args=$(printf '%s|' "$@")
echo "argv pid=$$ cwd=$(pwd -P) args=$args" >> "$log"
case "${1:-}" in
idle)
    if [[ -n "${STUB_IDLE_EXIT:-}" ]]; then
        echo "idle exiting $STUB_IDLE_EXIT" >> "$log"
        exit "$STUB_IDLE_EXIT"
    fi
    if [[ -n "${STUB_IDLE_IGNORE_TERM:-}" ]]; then
        trap 'echo "idle ignored TERM" >> "$log"' TERM
    else
        trap 'echo "idle got TERM" >> "$log"; kill "$sleeper" 2>/dev/null; exit 0' TERM
    fi
    sleep 30 &
    sleeper=$!
    echo "idle started" >> "$log"
    while :; do wait "$sleeper" && break; done
    ;;
message)
    if [[ -n "${STUB_MESSAGE_WAIT:-}" ]]; then
        trap 'echo "message got TERM" >> "$log"; kill "$sleeper" 2>/dev/null; exit 0' TERM
        sleep 30 &
        sleeper=$!
        echo "message waiting" >> "$log"
        wait "$sleeper"
        exit 1
    fi
    exit "${STUB_EXIT:-0}"
    ;;
*)
    echo "$1 ran" >> "$log"
    ;;
esac
"#;

/// A temporary installation: `bin/bub` (the stub), a workspace whose path has a space in it,
/// the stub's log and the entrypoint's stderr.
struct Sandbox {
    dir: tempfile::TempDir,
    bin: PathBuf,
    workspace: PathBuf,
    log: PathBuf,
    stderr: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let bin = root.join("bin");
        let workspace = root.join("work space");
        fs::create_dir_all(&bin).unwrap();
        fs::create_dir_all(&workspace).unwrap();
        let stub = bin.join("bub");
        fs::write(&stub, STUB_BUB).unwrap();
        fs::set_permissions(stub, fs::Permissions::from_mode(0o755)).unwrap();
        let log = root.join("bub.log");
        fs::write(&log, "").unwrap();
        Sandbox {
            dir,
            bin,
            workspace,
            log,
            stderr: root.join("entrypoint.stderr"),
        }
    }

    fn write_startup(&self, body: &str) {
        fs::write(self.workspace.join("startup.sh"), body).unwrap();
    }

    /// Starts `bash entrypoint.sh ARGS` with the stub first on PATH, in its own process group.
    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Running {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("bash");
        cmd.arg(repo_file("entrypoint.sh"))
            .args(args)
            .env("PATH", path)
            .env("BUB_WORKSPACE_DIR", &self.workspace)
            .env("STUB_LOG", &self.log)
            .env("ENTRYPOINT_STDERR", &self.stderr)
            .env_remove("BUB_BIN")
            .env_remove("BUB_IDLE_STOP_TIMEOUT")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&self.stderr).unwrap())
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Running {
            child: cmd.spawn().expect("spawn bash entrypoint.sh"),
            reaped: false,
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Polls the stub log until it contains `needle`; fails after the deadline.
    fn wait_for_log(&self, needle: &str) {
        if wait_for_blocking(DEADLINE, || self.log().contains(needle).then_some(())).is_none() {
            panic!(
                "log never got {needle:?}; log:\n{}\nstderr:\n{}",
                self.log(),
                self.stderr()
            );
        }
    }

    /// The `argv` lines of the stub whose args start with `first|`.
    fn argv_lines(&self, first: &str) -> Vec<String> {
        let prefix = format!("args={first}|");
        self.log()
            .lines()
            .filter(|l| l.starts_with("argv ") && l.contains(&prefix))
            .map(str::to_owned)
            .collect()
    }
}

/// Shell lines for a startup script: wait (bounded) until the idle stub has installed its
/// SIGTERM trap, so that stopping it is never racing its start-up.
const AWAIT_IDLE: &str = r#"for _ in $(seq 200); do
    grep -q "idle started" "$STUB_LOG" && break
    sleep 0.05
done
"#;

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let start = line
        .find(&format!("{name}="))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
        + name.len()
        + 1;
    let rest = &line[start..];
    // `cwd` contains a space; it is followed by ` args=`.
    match name {
        "cwd" => &rest[..rest.find(" args=").unwrap()],
        "args" => rest,
        _ => rest.split(' ').next().unwrap(),
    }
}

/// The entrypoint process. Dropping it kills its whole process group (leftovers of a failed
/// test included) and reaps it.
struct Running {
    child: Child,
    reaped: bool,
}

impl Running {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0, "kill failed");
    }

    /// Waits for the exit, polling, at most `DEADLINE`.
    fn wait(&mut self, sandbox: &Sandbox) -> ExitStatus {
        let status = wait_for_blocking(DEADLINE, || self.child.try_wait().unwrap());
        let Some(status) = status else {
            panic!(
                "the entrypoint did not exit within {DEADLINE:?}; log:\n{}\nstderr:\n{}",
                sandbox.log(),
                sandbox.stderr()
            );
        };
        self.reaped = true;
        status
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this test created (pgid = the child's pid).
        unsafe {
            libc::kill(-self.pid(), libc::SIGKILL);
        }
        if !self.reaped {
            let _ = self.child.wait();
        }
    }
}

#[test]
fn without_startup_script_execs_bub_message_with_the_arguments() {
    let sb = Sandbox::new();
    let mut ep = sb.spawn(&["--model", "a b"], &[("STUB_EXIT", "5")]);
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(5), "stderr:\n{}", sb.stderr());

    let lines = sb.argv_lines("message");
    assert_eq!(lines.len(), 1, "log:\n{}", sb.log());
    assert_eq!(field(&lines[0], "args"), "message|--model|a b|");
    // exec: bub message *is* the entrypoint process, so tini's signals reach it directly.
    assert_eq!(field(&lines[0], "pid"), ep.pid().to_string());
    assert!(sb.argv_lines("idle").is_empty(), "no idle in message mode");
    assert!(
        sb.stderr().contains("running bub message"),
        "{}",
        sb.stderr()
    );
}

#[test]
fn without_startup_script_sigterm_reaches_bub_message() {
    let sb = Sandbox::new();
    let mut ep = sb.spawn(&[], &[("STUB_MESSAGE_WAIT", "1")]);
    sb.wait_for_log("message waiting");
    ep.signal(libc::SIGTERM);
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", sb.stderr());
    assert!(sb.log().contains("message got TERM"), "log:\n{}", sb.log());
}

#[test]
fn startup_script_runs_in_the_workspace_with_idle_alongside() {
    let sb = Sandbox::new();
    sb.write_startup(&format!(
        r#"{AWAIT_IDLE}echo "script cwd=$(pwd -P) args=$*" >> "$STUB_LOG"
bub run hello
exit 7
"#
    ));
    let mut ep = sb.spawn(&["x"], &[]);
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(7), "stderr:\n{}", sb.stderr());

    let log = sb.log();
    let ws = sb.workspace.display().to_string();
    assert!(
        log.contains(&format!("script cwd={ws} args=x")),
        "log:\n{log}"
    );
    let run = sb.argv_lines("run");
    assert_eq!(run.len(), 1, "log:\n{log}");
    assert_eq!(field(&run[0], "args"), "run|hello|");
    assert_eq!(field(&run[0], "cwd"), ws);
    let idle = sb.argv_lines("idle");
    assert_eq!(idle.len(), 1, "log:\n{log}");
    assert_eq!(field(&idle[0], "args"), "idle|");
    // Stopped and waited for before the entrypoint exited.
    assert!(log.contains("idle got TERM"), "log:\n{log}");
    let stderr = sb.stderr();
    assert!(stderr.contains("startup.sh found"), "{stderr}");
    assert!(stderr.contains("exited with status 7"), "{stderr}");
}

#[test]
fn sigterm_reaches_the_startup_script_and_idle() {
    let sb = Sandbox::new();
    sb.write_startup(
        r#"trap 'echo "script got TERM" >> "$STUB_LOG"; kill "$s" 2>/dev/null; exit 3' TERM
sleep 30 &
s=$!
echo "script sleeping" >> "$STUB_LOG"
wait "$s"
echo "script woke up" >> "$STUB_LOG"
"#,
    );
    let mut ep = sb.spawn(&[], &[]);
    sb.wait_for_log("script sleeping");
    sb.wait_for_log("idle started");
    let sent = Instant::now();
    ep.signal(libc::SIGTERM);
    let status = ep.wait(&sb);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(3), "stderr:\n{}", sb.stderr());
    let log = sb.log();
    assert!(log.contains("script got TERM"), "log:\n{log}");
    assert!(log.contains("idle got TERM"), "log:\n{log}");
    assert!(!log.contains("script woke up"), "log:\n{log}");
    assert!(sb.stderr().contains("got SIGTERM"), "{}", sb.stderr());
}

#[test]
fn sigint_is_forwarded_as_sigterm() {
    // Bash starts background jobs with SIGINT ignored, so INT is passed on as TERM.
    let sb = Sandbox::new();
    sb.write_startup("sleep 30 &\necho \"script sleeping\" >> \"$STUB_LOG\"\nwait\n");
    let mut ep = sb.spawn(&[], &[]);
    sb.wait_for_log("script sleeping");
    sb.wait_for_log("idle started");
    ep.signal(libc::SIGINT);
    let status = ep.wait(&sb);
    // Killed by the forwarded SIGTERM: bash reports 128 + 15.
    assert_eq!(status.code(), Some(143), "stderr:\n{}", sb.stderr());
    assert!(sb.log().contains("idle got TERM"), "log:\n{}", sb.log());
}

#[test]
fn idle_dying_early_is_logged_and_the_script_goes_on() {
    let sb = Sandbox::new();
    // The script waits (bounded) until the entrypoint has reported idle's exit.
    sb.write_startup(
        r#"for _ in $(seq 200); do
    grep -q "bub idle exited early" "$ENTRYPOINT_STDERR" && break
    sleep 0.05
done
echo "script done" >> "$STUB_LOG"
exit 4
"#,
    );
    let mut ep = sb.spawn(&[], &[("STUB_IDLE_EXIT", "9")]);
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(4), "stderr:\n{}", sb.stderr());
    assert!(sb.log().contains("script done"), "log:\n{}", sb.log());
    assert!(
        sb.stderr().contains("bub idle exited early (status 9)"),
        "{}",
        sb.stderr()
    );
}

#[test]
fn idle_ignoring_sigterm_is_killed_after_the_timeout() {
    let sb = Sandbox::new();
    sb.write_startup(&format!("{AWAIT_IDLE}exit 0\n"));
    let mut ep = sb.spawn(
        &[],
        &[
            ("STUB_IDLE_IGNORE_TERM", "1"),
            ("BUB_IDLE_STOP_TIMEOUT", "1"),
        ],
    );
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", sb.stderr());
    assert!(status.signal().is_none());
    assert!(sb.stderr().contains("sending SIGKILL"), "{}", sb.stderr());
}

#[test]
fn bub_bin_overrides_the_binary_and_is_on_the_scripts_path() {
    let sb = Sandbox::new();
    sb.write_startup(&format!("{AWAIT_IDLE}bub run hello\n"));
    // Not on PATH: only BUB_BIN points at it.
    let mut ep = sb.spawn(
        &[],
        &[
            ("PATH", "/usr/bin:/bin"),
            ("BUB_BIN", sb.bin.join("bub").to_str().unwrap()),
        ],
    );
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", sb.stderr());
    assert_eq!(sb.argv_lines("run").len(), 1, "log:\n{}", sb.log());
    assert_eq!(sb.argv_lines("idle").len(), 1, "log:\n{}", sb.log());
}

#[test]
fn missing_bub_fails_clearly() {
    let sb = Sandbox::new();
    let mut ep = sb.spawn(&[], &[("BUB_BIN", "/nonexistent/bub")]);
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(127));
    assert!(sb.stderr().contains("cannot find"), "{}", sb.stderr());
}

#[test]
fn shell_scripts_parse() {
    for script in ["entrypoint.sh", "docker/startup.sh.example"] {
        let out = Command::new("bash")
            .arg("-n")
            .arg(repo_file(script))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bash -n {script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The `## Deployment` section of README.md.
fn readme_deployment() -> String {
    let readme = read_repo_file("README.md");
    let start = readme
        .find("\n## Deployment\n")
        .expect("README.md has a ## Deployment section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_owned()
}

fn cargo_rust_version() -> String {
    let manifest = read_repo_file("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("rust-version"))
        .expect("Cargo.toml sets rust-version");
    line.split('=')
        .nth(1)
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_owned()
}

#[test]
fn dockerfile_compose_and_readme_agree() {
    let dockerfile = read_repo_file("Dockerfile");
    let lines: Vec<&str> = dockerfile.lines().map(str::trim).collect();
    let has = |l: &str| lines.contains(&l);

    let builder = format!(
        "FROM rust:{}-slim-bookworm AS builder",
        cargo_rust_version()
    );
    assert!(has(&builder), "Dockerfile lacks {builder:?}");
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(has("FROM debian:bookworm-slim"));
    assert!(has("ENV BUB_HOME=/data"));
    assert!(has("VOLUME /data"));
    assert!(has("WORKDIR /workspace"));
    assert!(
        dockerfile.contains("install -m 0755 /build/target/release/bub /usr/local/bin/bub"),
        "the builder copies the binary out of the target cache"
    );
    assert!(has(
        "COPY --from=builder /usr/local/bin/bub /usr/local/bin/bub"
    ));
    assert!(has(
        "COPY --chmod=0755 entrypoint.sh /usr/local/bin/bub-entrypoint"
    ));
    assert!(has(
        r#"ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/bub-entrypoint"]"#
    ));
    for pkg in [
        "tini",
        "bash",
        "git",
        "curl",
        "ca-certificates",
        "ripgrep",
        "gh",
    ] {
        assert!(
            dockerfile.split_whitespace().any(|w| w == pkg),
            "runtime installs {pkg}"
        );
    }
    // Cargo refuses a manifest whose [[bench]] sources are missing.
    if read_repo_file("Cargo.toml").contains("[[bench]]") {
        assert!(has("COPY benches ./benches"), "benches are copied");
    }
    assert!(has("COPY src ./src"));
    // The built-in skills are compiled into the binary (include_dir!).
    assert!(has("COPY skills ./skills"), "built-in skills are copied");

    let ignore = read_repo_file(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for p in ["target", ".git", ".env"] {
        assert!(ignored.contains(&p), ".dockerignore lacks {p}");
    }
    assert!(
        ignored.contains(&"!skills/**"),
        "SKILL.md files are not caught by `*.md`"
    );
    for needed in ["src", "entrypoint.sh", "Cargo.lock", "benches", "skills"] {
        assert!(
            !ignored.contains(&needed),
            ".dockerignore excludes {needed}"
        );
    }

    let compose = read_repo_file("docker-compose.yml");
    for needle in [
        "build: .",
        "image: bub:latest",
        "env_file: .env",
        "BUB_HOME: /data",
        "restart: unless-stopped",
        "- ${BUB_WORKSPACE_PATH:-./workspace}:/workspace",
        "- ${BUB_DATA_PATH:-./data}:/data",
        "- ${BUB_AGENTS_HOME:-~/.agents}:/root/.agents",
    ] {
        assert!(
            compose.contains(needle),
            "docker-compose.yml lacks {needle:?}"
        );
    }

    let section = readme_deployment();
    for needle in [
        "docker compose up -d --build",
        "startup.sh",
        "bub idle",
        "docker/README.md",
        "/workspace",
        "/data",
        "cargo install --path .",
        "ExecStart=",
    ] {
        assert!(
            section.contains(needle),
            "README Deployment lacks {needle:?}"
        );
    }
    let notes = read_repo_file("docker/README.md");
    for needle in [
        "startup.sh",
        "bub idle",
        "docker compose up -d",
        "docker compose logs",
    ] {
        assert!(notes.contains(needle), "docker/README.md lacks {needle:?}");
    }
}
