//! Who Bub runs as in the container: started as root, the entrypoint gives the `bub` account
//! PUID/PGID, gives it BUB_HOME's files and an empty workspace, and runs Bub through `setpriv`
//! as that user with HOME=/home/bub; started as another user, or with PUID=0, it changes nothing.
//! Root is played by the fake `id` (`STUB_UID=0`), so these tests mean the same whoever runs
//! them, and the fake tools only log: nothing of the machine is changed.

use super::{Sandbox, assert_holds_until_sigterm, field, repo_file};

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const AS_ROOT: [(&str, &str); 2] = [("STUB_UID", "0"), ("STUB_GID", "0")];

/// The position of the first log line starting with `prefix`; fails if there is none.
fn line_of(log: &str, prefix: &str) -> usize {
    log.lines()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in the log:\n{log}"))
}

#[test]
fn as_root_bub_runs_as_puid_pgid_through_setpriv() {
    let sb = Sandbox::new();
    let env = [AS_ROOT[0], AS_ROOT[1], ("PUID", "1234"), ("PGID", "5678")];
    let mut ep = sb.spawn(&["--model", "a b"], &env);
    let status = ep.wait(&sb);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", sb.stderr());

    let log = sb.log();
    // The account gets the ids first (the image's `bub` is 1000:1000)...
    let groupmod = line_of(&log, "groupmod -o -g 5678 bub");
    let usermod = line_of(&log, "usermod -o -u 1234 -g 5678 bub");
    // ... BUB_HOME's files become theirs (every file here belongs to someone else), and so does
    // the empty workspace directory ...
    let home = sb.home.display().to_string();
    let chown_home = line_of(&log, "chown -h 1234:5678 ");
    let chowned = log.lines().nth(chown_home).unwrap();
    for path in [home.clone(), format!("{home}/tapes/chat.jsonl")] {
        assert!(
            chowned.split(' ').any(|p| p == path),
            "{path} not given: {chowned}"
        );
    }
    let workspace = format!("chown 1234:5678 {}", sb.workspace.display());
    assert!(log.lines().any(|l| l == workspace), "log:\n{log}");
    // ... then the entrypoint runs itself again through setpriv, as that user ...
    let entrypoint = repo_file("entrypoint.sh");
    let setpriv = line_of(&log, "setpriv ");
    let drop_line = log.lines().nth(setpriv).unwrap();
    assert!(
        drop_line.starts_with("setpriv --reuid=1234 --regid=5678 --clear-groups -- ")
            && drop_line.ends_with(&format!("{} --model a b", entrypoint.display())),
        "{drop_line}"
    );
    assert!(groupmod < usermod && usermod < setpriv && chown_home < setpriv);
    // ... and `bub message` runs as 1234:5678 with the account's HOME and the arguments.
    let message = sb.argv_lines("message");
    assert_eq!(message.len(), 1, "log:\n{log}");
    assert_eq!(field(&message[0], "uid"), "1234");
    assert_eq!(field(&message[0], "gid"), "5678");
    assert_eq!(field(&message[0], "home"), "/home/bub");
    assert_eq!(field(&message[0], "args"), "message|--model|a b|");
    assert!(sb.stderr().contains("running Bub as uid 1234, gid 5678"));
}

#[test]
fn as_root_with_the_accounts_ids_only_drops_privileges() {
    // The image's `bub` already is 1000:1000, the default PUID/PGID; the workspace is not empty.
    let sb = Sandbox::new();
    fs::write(sb.workspace.join("notes.md"), "mine\n").unwrap();
    let mut ep = sb.spawn(&[], &AS_ROOT);
    assert_eq!(ep.wait(&sb).code(), Some(0), "stderr:\n{}", sb.stderr());

    let log = sb.log();
    assert!(
        !log.contains("usermod") && !log.contains("groupmod"),
        "{log}"
    );
    let workspace = sb.workspace.display().to_string();
    assert!(
        !log.lines()
            .any(|l| l.starts_with("chown") && l.ends_with(&workspace)),
        "a workspace with files is left alone:\n{log}"
    );
    assert!(
        log.contains("setpriv --reuid=1000 --regid=1000 --clear-groups -- "),
        "{log}"
    );
    let message = sb.argv_lines("message");
    assert_eq!(field(&message[0], "uid"), "1000", "{log}");
}

#[test]
fn not_started_as_root_it_runs_as_it_is() {
    // `docker run --user`, or the entrypoint outside Docker: nothing to change, nothing to drop.
    let sb = Sandbox::new();
    let mut ep = sb.spawn(&[], &[("PUID", "1234"), ("PGID", "5678")]);
    assert_eq!(ep.wait(&sb).code(), Some(0), "stderr:\n{}", sb.stderr());
    let log = sb.log();
    for tool in ["setpriv", "usermod", "groupmod", "chown"] {
        assert!(!log.contains(tool), "{tool} was run:\n{log}");
    }
    let message = sb.argv_lines("message");
    assert_eq!(field(&message[0], "uid"), "4321", "{log}");
}

#[test]
fn puid_0_keeps_root() {
    let sb = Sandbox::new();
    let env = [AS_ROOT[0], AS_ROOT[1], ("PUID", "0")];
    let mut ep = sb.spawn(&[], &env);
    assert_eq!(ep.wait(&sb).code(), Some(0), "stderr:\n{}", sb.stderr());
    let log = sb.log();
    assert!(
        !log.contains("setpriv") && !log.contains("usermod"),
        "{log}"
    );
    assert_eq!(field(&sb.argv_lines("message")[0], "uid"), "0", "{log}");
}

#[test]
fn a_puid_that_is_not_a_number_is_a_configuration_error() {
    let sb = Sandbox::new();
    let env = [AS_ROOT[0], AS_ROOT[1], ("PUID", "alice")];
    let mut ep = sb.spawn(&[], &env);
    assert_holds_until_sigterm(&sb, &mut ep, "PUID=alice");
    assert!(sb.argv_lines("message").is_empty(), "log:\n{}", sb.log());
    assert!(!sb.log().contains("usermod"), "log:\n{}", sb.log());
}

#[test]
fn the_healthcheck_as_root_asks_as_the_user() {
    // `bub status` run as root could leave root-owned files in BUB_HOME (the usage ledger's
    // lock): the healthcheck drops to PUID/PGID too, without changing the account again.
    let sb = Sandbox::new();
    let env = [
        AS_ROOT[0],
        AS_ROOT[1],
        ("PUID", "1234"),
        ("PGID", "5678"),
        ("STUB_MESSAGE_WAIT", "1"),
    ];
    let mut ep = sb.spawn(&[], &env);
    sb.wait_for_log("message waiting");
    let (code, said) = sb.healthcheck(&env);
    assert_eq!(code, Some(0), "{said}\nlog:\n{}", sb.log());

    let log = sb.log();
    let status = sb.argv_lines("status");
    assert_eq!(status.len(), 1, "{log}");
    assert_eq!(field(&status[0], "uid"), "1234");
    assert_eq!(field(&status[0], "gid"), "5678");
    assert!(
        log.lines()
            .any(|l| l.starts_with("setpriv --reuid=1234 --regid=5678")
                && l.ends_with(" --healthcheck")),
        "{log}"
    );
    assert_eq!(log.matches("usermod").count(), 1, "only at start:\n{log}");
    ep.signal(libc::SIGTERM);
    assert_eq!(ep.wait(&sb).code(), Some(0));
}

#[test]
fn as_root_with_the_real_setpriv_the_files_bub_writes_are_the_users() {
    // The real setpriv and chown (the account is still the fake `id`'s): what the startup
    // script writes into the workspace, and BUB_HOME's root-owned tape, end up 1234:5678.
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv (the fake-tool tests above cover the logic)");
        return;
    }
    let sb = Sandbox::new();
    for real in ["setpriv", "chown"] {
        fs::remove_file(sb.sys.join(real)).unwrap();
    }
    // The user must reach the sandbox and the log; the workspace is the host user's, as a
    // bind mount of theirs is.
    let dir = sb.dir.path();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&sb.log, fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&sb.workspace, Some(1234), Some(5678)).unwrap();
    sb.write_startup("echo done > written.txt\nbub run hello\n");

    // The real ids: root, then 1234:5678 after the real setpriv.
    let env = [
        ("STUB_UID", ""),
        ("STUB_GID", ""),
        ("PUID", "1234"),
        ("PGID", "5678"),
    ];
    let mut ep = sb.spawn(&[], &env);
    assert_eq!(ep.wait(&sb).code(), Some(0), "stderr:\n{}", sb.stderr());

    let owner = |path: &Path| {
        let meta = fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (meta.uid(), meta.gid())
    };
    assert_eq!(owner(&sb.workspace.join("written.txt")), (1234, 5678));
    for path in [sb.home.clone(), sb.home.join("tapes/chat.jsonl")] {
        assert_eq!(owner(&path), (1234, 5678), "{}", path.display());
    }
    let run = sb.argv_lines("run");
    assert_eq!(run.len(), 1, "log:\n{}", sb.log());
    assert_eq!(field(&run[0], "home"), "/home/bub");
}
