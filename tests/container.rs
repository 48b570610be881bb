//! The container deployment files: `entrypoint.sh` (the self-resume protocol, the wait after a
//! configuration error, the healthcheck) is run with bash against a stub `bub` that logs what it
//! was asked to do, and against fake `id`, `usermod`, `groupmod`, `chown` and `setpriv`
//! (`container/privileges.rs`: the drop from root to PUID/PGID, whoever runs the tests); the
//! Dockerfile, docker-compose.yml and the READMEs are checked to agree (`container/files.rs`).
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

#[path = "container/files.rs"]
mod files;
#[path = "container/privileges.rs"]
mod privileges;

/// How long any single step may take before the test fails (generous: the other test modules
/// of the one test binary load the machine meanwhile).
const DEADLINE: Duration = Duration::from_secs(30);

fn repo_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

fn read_repo_file(name: &str) -> String {
    fs::read_to_string(repo_file(name)).unwrap_or_else(|e| panic!("cannot read {name}: {e}"))
}

/// The stub `bub`: logs one `argv` line per start (pid, uid, gid, HOME, cwd, args), then per mode:
/// * `idle`: logs `idle started`, waits; on SIGTERM logs `idle got TERM` and exits 0.
///   `STUB_IDLE_EXIT=N` exits N at once; `STUB_IDLE_IGNORE_TERM=1` ignores SIGTERM.
/// * `message`: exits `STUB_EXIT` (default 0), or with `STUB_MESSAGE_WAIT=1` waits for SIGTERM
///   and logs `message got TERM`.
/// * `status`: exits `STUB_STATUS_EXIT` (default 0).
/// * anything else (`run hello`): logs and exits 0.
const STUB_BUB: &str = r#"#!/usr/bin/env bash
log="$STUB_LOG"
args=$(printf '%s|' "$@")
echo "argv pid=$$ uid=$(id -u) gid=$(id -g) home=$HOME cwd=$(pwd -P) args=$args" >> "$log"
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
status)
    exit "${STUB_STATUS_EXIT:-0}"
    ;;
*)
    echo "$1 ran" >> "$log"
    ;;
esac
"#;

/// The system tools the entrypoint uses when it runs as root, faked (one script, called by the
/// name of its link): each logs its arguments; `id` answers `STUB_UID`/`STUB_GID` for the caller
/// (when empty, the real ids) and `STUB_BUB_UID`/`STUB_BUB_GID` (default 1000) for the `bub`
/// account; `setpriv` runs the
/// command after `--` with `STUB_UID`/`STUB_GID` set to the ids it was given, as the real one
/// runs it as that user. Nothing of the machine running the tests is changed or asked.
const STUB_SYSTEM: &str = r#"#!/usr/bin/env bash
name=${0##*/}
if [[ "$name" == id ]]; then
    case "$*" in
    -u) echo "${STUB_UID:-$(command -p id -u)}" ;;
    -g) echo "${STUB_GID:-$(command -p id -g)}" ;;
    "-u bub") echo "${STUB_BUB_UID:-1000}" ;;
    "-g bub") echo "${STUB_BUB_GID:-1000}" ;;
    *) echo "id stub: unexpected arguments: $*" >&2; exit 1 ;;
    esac
    exit 0
fi
echo "$name $*" >> "$STUB_LOG"
if [[ "$name" == setpriv ]]; then
    while (($#)); do
        case "$1" in
        --reuid=*) export STUB_UID="${1#*=}" ;;
        --regid=*) export STUB_GID="${1#*=}" ;;
        --) shift; break ;;
        esac
        shift
    done
    exec "$@"
fi
"#;

/// The ids the entrypoint believes it runs with unless a test says otherwise: not root.
const USER_IDS: [(&str, &str); 2] = [("STUB_UID", "4321"), ("STUB_GID", "4321")];

/// A temporary installation: `bin/bub` (the stub), `sys/` (the fake system tools), a workspace
/// whose path has a space in it, a BUB_HOME holding a tape, the stub's log and the entrypoint's
/// stderr. The sandbox is also TMPDIR, where the entrypoint writes its state.
struct Sandbox {
    dir: tempfile::TempDir,
    bin: PathBuf,
    sys: PathBuf,
    workspace: PathBuf,
    home: PathBuf,
    log: PathBuf,
    stderr: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let bin = root.join("bin");
        let workspace = root.join("work space");
        let sys = root.join("sys");
        let home = root.join("data");
        fs::create_dir_all(&bin).unwrap();
        fs::create_dir_all(&sys).unwrap();
        fs::create_dir_all(&workspace).unwrap();
        fs::create_dir_all(home.join("tapes")).unwrap();
        fs::write(home.join("tapes/chat.jsonl"), "{}\n").unwrap();
        for (stub, text) in [
            (bin.join("bub"), STUB_BUB),
            (sys.join("system"), STUB_SYSTEM),
        ] {
            fs::write(&stub, text).unwrap();
            fs::set_permissions(stub, fs::Permissions::from_mode(0o755)).unwrap();
        }
        for tool in ["id", "usermod", "groupmod", "chown", "setpriv"] {
            std::os::unix::fs::symlink("system", sys.join(tool)).unwrap();
        }
        let log = root.join("bub.log");
        fs::write(&log, "").unwrap();
        Sandbox {
            dir,
            bin,
            sys,
            workspace,
            home,
            log,
            stderr: root.join("entrypoint.stderr"),
        }
    }

    fn write_startup(&self, body: &str) {
        fs::write(self.workspace.join("startup.sh"), body).unwrap();
    }

    /// `bash entrypoint.sh ARGS` with the stubs first on PATH, not root (`USER_IDS`), in its own
    /// process group; `env` comes last and wins.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let path = format!(
            "{}:{}:{}",
            self.bin.display(),
            self.sys.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("bash");
        cmd.arg(repo_file("entrypoint.sh"))
            .args(args)
            .env("PATH", path)
            .env("BUB_WORKSPACE_DIR", &self.workspace)
            .env("BUB_HOME", &self.home)
            .env("TMPDIR", self.dir.path())
            .env("STUB_LOG", &self.log)
            .env("ENTRYPOINT_STDERR", &self.stderr)
            .env_remove("BUB_BIN")
            .env_remove("BUB_IDLE_STOP_TIMEOUT")
            .env_remove("PUID")
            .env_remove("PGID")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .process_group(0);
        for (k, v) in USER_IDS.iter().chain(env) {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the entrypoint; its stderr goes to `self.stderr`.
    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut cmd = self.command(args, env);
        cmd.stdout(Stdio::null())
            .stderr(fs::File::create(&self.stderr).unwrap());
        Running {
            child: cmd.spawn().expect("spawn bash entrypoint.sh"),
            reaped: false,
        }
    }

    /// Runs `entrypoint.sh --healthcheck` as the image's HEALTHCHECK does (bounded): its exit
    /// code and what it printed.
    fn healthcheck(&self, env: &[(&str, &str)]) -> (Option<i32>, String) {
        let out = self.dir.path().join("health.out");
        let file = fs::File::create(&out).unwrap();
        let mut cmd = self.command(&["--healthcheck"], env);
        cmd.stderr(file.try_clone().unwrap()).stdout(file);
        let mut check = Running {
            child: cmd.spawn().expect("spawn the healthcheck"),
            reaped: false,
        };
        let status = check.wait(self);
        (status.code(), fs::read_to_string(&out).unwrap())
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
fn without_startup_script_runs_bub_message_with_the_arguments() {
    let sb = Sandbox::new();
    let mut ep = sb.spawn(&["--model", "a b"], &[("STUB_EXIT", "5")]);
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(5), "stderr:\n{}", sb.stderr());

    let lines = sb.argv_lines("message");
    assert_eq!(lines.len(), 1, "log:\n{}", sb.log());
    assert_eq!(field(&lines[0], "args"), "message|--model|a b|");
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

/// Waits until the entrypoint's stderr contains `needle`; fails after the deadline.
fn wait_for_stderr(sb: &Sandbox, needle: &str) {
    if wait_for_blocking(DEADLINE, || sb.stderr().contains(needle).then_some(())).is_none() {
        panic!("stderr never got {needle:?}; stderr:\n{}", sb.stderr());
    }
}

/// The entrypoint holds after a configuration error: it is still running after saying so and
/// `explained` (polled for first), SIGTERM ends it at once with exit 2, and it said what to do
/// exactly once.
fn assert_holds_until_sigterm(sb: &Sandbox, ep: &mut Running, explained: &str) {
    wait_for_stderr(sb, "Waiting until stopped");
    assert!(sb.stderr().contains(explained), "{}", sb.stderr());
    let (code, said) = sb.healthcheck(&[]);
    assert_eq!(code, Some(1), "unhealthy while waiting: {said}");
    assert!(said.contains("configuration error"), "{said}");
    assert!(
        ep.child.try_wait().unwrap().is_none(),
        "the entrypoint exited instead of waiting; stderr:\n{}",
        sb.stderr()
    );
    let sent = Instant::now();
    ep.signal(libc::SIGTERM);
    let status = ep.wait(sb);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(2), "stderr:\n{}", sb.stderr());
    let stderr = sb.stderr();
    assert!(stderr.contains("got SIGTERM"), "{stderr}");
    assert_eq!(
        stderr.matches("docker compose up -d").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_configuration_error_is_explained_once_and_waits_for_sigterm() {
    // `bub message` exits 2 on a configuration error: restarting it would only repeat that.
    let sb = Sandbox::new();
    let mut ep = sb.spawn(&[], &[("STUB_EXIT", "2")]);
    assert_holds_until_sigterm(&sb, &mut ep, "bub message exited 2: a configuration error");
    assert_eq!(sb.argv_lines("message").len(), 1, "log:\n{}", sb.log());
}

#[test]
fn the_healthcheck_asks_bub_status_in_message_mode() {
    let sb = Sandbox::new();
    let (code, said) = sb.healthcheck(&[]);
    assert_eq!(code, Some(1), "unhealthy before the entrypoint ran: {said}");
    assert!(said.contains("not started"), "{said}");

    let mut ep = sb.spawn(&[], &[("STUB_MESSAGE_WAIT", "1")]);
    sb.wait_for_log("message waiting");
    assert_eq!(sb.healthcheck(&[]).0, Some(0), "log:\n{}", sb.log());
    let status = sb.argv_lines("status");
    assert_eq!(status.len(), 1, "log:\n{}", sb.log());
    assert_eq!(field(&status[0], "args"), "status|--json|");
    // The daemon does not answer: unhealthy (1, whatever `bub status` exited with).
    assert_eq!(sb.healthcheck(&[("STUB_STATUS_EXIT", "3")]).0, Some(1));

    ep.signal(libc::SIGTERM);
    assert_eq!(ep.wait(&sb).code(), Some(0), "stderr:\n{}", sb.stderr());
}

#[test]
fn the_healthcheck_in_startup_mode_is_the_script_running() {
    let sb = Sandbox::new();
    sb.write_startup("sleep 30 &\necho \"script sleeping\" >> \"$STUB_LOG\"\nwait\n");
    let mut ep = sb.spawn(&[], &[]);
    sb.wait_for_log("script sleeping");
    // The state is written just after the script starts: poll, bounded.
    let healthy = wait_for_blocking(DEADLINE, || {
        (sb.healthcheck(&[]).0 == Some(0)).then_some(())
    });
    assert!(healthy.is_some(), "never healthy; stderr:\n{}", sb.stderr());
    // `bub status` answers only for `bub message`: it is not asked here.
    assert!(sb.argv_lines("status").is_empty(), "log:\n{}", sb.log());

    ep.signal(libc::SIGTERM);
    ep.wait(&sb);
    let (code, said) = sb.healthcheck(&[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("has ended"), "{said}");
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
    let path = format!("{}:/usr/bin:/bin", sb.sys.display());
    let mut ep = sb.spawn(
        &[],
        &[
            ("PATH", &path),
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
fn the_healthcheck_asks_healthz_when_bub_listens() {
    // A one-request HTTP server standing in for bub message's listener.
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port().to_string();
    let answered = std::thread::spawn(move || {
        let (mut conn, _) = server.accept().unwrap();
        let mut request = [0u8; 1024];
        let n = std::io::Read::read(&mut conn, &mut request).unwrap();
        std::io::Write::write_all(
            &mut conn,
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n",
        )
        .unwrap();
        String::from_utf8_lossy(&request[..n]).into_owned()
    });
    let sb = Sandbox::new();
    let mut ep = sb.spawn(&[], &[("STUB_MESSAGE_WAIT", "1")]);
    sb.wait_for_log("message waiting");
    let listen = format!("0.0.0.0:{port}");
    let (code, said) = sb.healthcheck(&[("BUB_HTTP_LISTEN", &listen)]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        answered
            .join()
            .unwrap()
            .starts_with("GET /healthz HTTP/1.1")
    );
    assert!(
        sb.argv_lines("status").is_empty(),
        "no bub status: {}",
        sb.log()
    );
    // Nothing answers there now: unhealthy.
    assert_eq!(sb.healthcheck(&[("BUB_HTTP_LISTEN", &port)]).0, Some(1));

    ep.signal(libc::SIGTERM);
    assert_eq!(ep.wait(&sb).code(), Some(0), "stderr:\n{}", sb.stderr());
}
