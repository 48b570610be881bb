//! The `bash` tool in the Landlock sandbox: what a sandboxed command can read, write, see of
//! the environment, and that it fails closed where the kernel cannot confine it.

use super::*;
use bub::tools::sandbox;

/// A workspace, a BUB_HOME and a user home side by side in one temporary directory, each with
/// a file whose content must not leak.
struct Layout {
    root: tempfile::TempDir,
}

impl Layout {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        for dir in ["ws", "bub-home", "user"] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
        }
        std::fs::write(
            root.path().join("bub-home/jobs.json"),
            "{\"jobs\": \"JOBS-CONTENT\"}",
        )
        .unwrap();
        std::fs::write(root.path().join("user/.bashrc"), "export BASHRC=CONTENT\n").unwrap();
        std::fs::write(root.path().join("ws/.env"), "GH_TOKEN=owner-token\n").unwrap();
        Self { root }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.root.path().join(rel)
    }

    async fn run(&self, cmd: &str, sandboxed: bool) -> Result<String, bub::tools::ToolError> {
        let (ws, home, user) = (self.path("ws"), self.path("bub-home"), self.path("user"));
        let launch = Launch {
            workspace: &ws,
            session_id: "telegram:guest",
            home: &home,
            user_home: Some(&user),
            sandboxed,
            folder: None,
        };
        run_bash(bash_args(cmd, 20), launch).await
    }
}

/// When this kernel has no usable Landlock, checks that the sandboxed call was refused with the
/// fail-closed message and returns false (the caller then stops: nothing else to check).
fn landlock_or_refused(result: &Result<String, bub::tools::ToolError>) -> bool {
    if sandbox::available().is_available() {
        return true;
    }
    let err = result.as_ref().expect_err("ran without the sandbox");
    assert!(
        err.message()
            .starts_with("the sandbox is not available on this kernel (Landlock")
            && err.message().ends_with("the command was not run"),
        "{err}"
    );
    eprintln!(
        "Landlock unavailable ({}): refusal checked",
        sandbox::available()
    );
    false
}

#[tokio::test]
async fn sandbox_denies_bub_home_and_the_users_home() {
    let l = Layout::new();
    let jobs = l.path("bub-home/jobs.json");
    let bashrc = l.path("user/.bashrc");
    let read_jobs = format!("cat {}", jobs.display());
    let read_bashrc = format!("cat {}", bashrc.display());
    let list_home = format!("ls {}", l.path("bub-home").display());

    // Without the sandbox all of it is readable.
    assert!(
        l.run(&read_jobs, false)
            .await
            .unwrap()
            .contains("JOBS-CONTENT")
    );
    assert!(
        l.run(&read_bashrc, false)
            .await
            .unwrap()
            .contains("BASHRC=CONTENT")
    );
    assert_eq!(l.run(&list_home, false).await.unwrap(), "jobs.json");

    let result = l.run(&read_jobs, true).await;
    if !landlock_or_refused(&result) {
        return;
    }
    let err = result.unwrap_err();
    assert!(err.message().starts_with("exit=1:"), "{err}");
    assert!(err.message().contains("Permission denied"), "{err}");
    assert!(!err.message().contains("JOBS-CONTENT"), "{err}");

    let err = l.run(&read_bashrc, true).await.unwrap_err();
    assert!(err.message().contains("Permission denied"), "{err}");
    assert!(!err.message().contains("BASHRC=CONTENT"), "{err}");
    let err = l.run(&list_home, true).await.unwrap_err();
    assert!(err.message().contains("Permission denied"), "{err}");
    assert!(!err.message().contains("jobs.json\n"), "{err}");
    // Other processes' /proc entries are out of reach too (/proc is not granted).
    let err = l.run("cat /proc/1/cmdline", true).await.unwrap_err();
    assert!(err.message().contains("Permission denied"), "{err}");
    // Nor can BUB_HOME's files be emptied or removed.
    let err = l
        .run(
            &format!("truncate -s 0 {0}; rm -f {0}", jobs.display()),
            true,
        )
        .await
        .unwrap_err();
    assert!(err.message().contains("Permission denied"), "{err}");
    assert!(
        std::fs::read_to_string(&jobs)
            .unwrap()
            .contains("JOBS-CONTENT")
    );
}

#[tokio::test]
async fn sandbox_confines_writes_to_the_workspace_and_tmpdir() {
    let l = Layout::new();
    let beside = l.path("beside.txt");
    let in_tmp = std::env::temp_dir().join(format!("bub-sandbox-test-{}", uuid::Uuid::new_v4()));
    let write_beside = format!("echo x > {}", beside.display());
    let write_tmp = format!("echo x > {}", in_tmp.display());

    let result = l.run(&write_beside, true).await;
    if !landlock_or_refused(&result) {
        return;
    }
    let err = result.unwrap_err();
    assert!(err.message().contains("Permission denied"), "{err}");
    assert!(!beside.exists(), "file written next to the workspace");
    let err = l.run(&write_tmp, true).await.unwrap_err();
    assert!(err.message().contains("Permission denied"), "{err}");
    assert!(!in_tmp.exists(), "file written in {}", in_tmp.display());

    // Inside the workspace (cwd) and the private TMPDIR everything works.
    let out = l
        .run(
            "echo inside > inside.txt && mkdir -p d/e && mv inside.txt d/e/ && \
             echo scratch > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" d/e/inside.txt && \
             echo \"$HOME|$TMPDIR\" && cat <(echo substituted) && echo ok > /dev/null",
            true,
        )
        .await
        .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["scratch", "inside"], "{out}");
    let (home, tmpdir) = lines[2].split_once('|').unwrap();
    assert_eq!(home, tmpdir, "{out}");
    assert!(tmpdir.contains("bub-sandbox-"), "{out}");
    assert_eq!(lines[3], "substituted", "{out}");
    assert_eq!(
        std::fs::read_to_string(l.path("ws/d/e/inside.txt")).unwrap(),
        "inside\n"
    );
    assert!(
        !Path::new(tmpdir).exists(),
        "the private TMPDIR outlived the call"
    );

    // The same writes succeed without the sandbox.
    l.run(&write_beside, false).await.unwrap();
    assert!(beside.exists());
    l.run(&write_tmp, false).await.unwrap();
    assert!(in_tmp.exists());
    std::fs::remove_file(&in_tmp).unwrap();
}

#[tokio::test]
async fn sandbox_env_is_minimal_and_skips_the_workspace_env() {
    let l = Layout::new();
    let out = l.run("printenv", false).await.unwrap();
    assert!(out.contains("GH_TOKEN=owner-token"), "{out}");

    let result = l.run("printenv", true).await;
    if !landlock_or_refused(&result) {
        return;
    }
    let out = result.unwrap();
    let mut names: Vec<&str> = out
        .lines()
        .filter_map(|line| line.split_once('=').map(|(k, _)| k))
        .collect();
    names.sort();
    let allowed = [
        "BUB_SESSION_ID",
        "HOME",
        "LANG",
        "LANGUAGE",
        "OLDPWD",
        "PATH",
        "PWD",
        "SHLVL",
        "TERM",
        "TMPDIR",
        "TZ",
        "_",
    ];
    for name in &names {
        assert!(
            allowed.contains(name) || name.starts_with("LC_"),
            "unexpected variable {name} in {out}"
        );
    }
    assert!(out.contains("BUB_SESSION_ID=telegram:guest"), "{out}");
    assert!(!out.contains("owner-token"), "{out}");
}

#[tokio::test]
async fn sandbox_timeout_still_kills_the_process_group() {
    let l = Layout::new();
    let ws = l.path("ws");
    let (home, user) = (l.path("bub-home"), l.path("user"));
    let launch = Launch {
        workspace: &ws,
        session_id: "s",
        home: &home,
        user_home: Some(&user),
        sandboxed: true,
        folder: None,
    };
    let result = run_bash(bash_args("sleep 30 & echo $! > pid; wait", 2), launch).await;
    if !landlock_or_refused(&result) {
        return;
    }
    let err = result.unwrap_err();
    assert!(err.message().starts_with("timeout: "), "{err}");
    assert_background_killed(&ws);
}

#[tokio::test]
async fn sandbox_refuses_layouts_it_cannot_protect() {
    let l = Layout::new();
    let ws = l.path("ws");
    let marker = ws.join("marker");
    let cmd = format!("touch {}", marker.display());
    let nested_home = ws.join(".bub");
    let (bub_home, user) = (l.path("bub-home"), l.path("user"));
    let cases = [
        // BUB_HOME inside the workspace.
        (
            Launch {
                workspace: &ws,
                session_id: "s",
                home: &nested_home,
                user_home: Some(&user),
                sandboxed: true,
                folder: None,
            },
            "BUB_HOME",
        ),
        // The workspace is the user's home directory.
        (
            Launch {
                workspace: &ws,
                session_id: "s",
                home: &bub_home,
                user_home: Some(&ws),
                sandboxed: true,
                folder: None,
            },
            "the user's home directory",
        ),
    ];
    for (launch, what) in cases {
        let err = run_bash(bash_args(&cmd, 20), launch)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("; the command was not run"), "{err}");
        if sandbox::available().is_available() {
            assert!(
                err.starts_with(&format!("the sandbox cannot protect {what} (")),
                "{err}"
            );
        }
        assert!(!marker.exists(), "the command ran: {err}");
    }
}

#[tokio::test]
async fn sandbox_drops_capabilities_other_than_file_ownership() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: no capabilities to drop");
        return;
    }
    let l = Layout::new();
    // Raising priority needs CAP_SYS_NICE; nice reports the failure and still runs `true`.
    let cmd = "nice -n -5 true && echo done";
    let out = l.run(cmd, false).await.unwrap();
    if out != "done" {
        eprintln!("this root has no CAP_SYS_NICE: {out}");
        return;
    }
    let result = l.run(cmd, true).await;
    if !landlock_or_refused(&result) {
        return;
    }
    let out = result.unwrap();
    assert!(out.contains("cannot set niceness"), "{out}");
    // Files owned by another user in the workspace stay writable (CAP_DAC_OVERRIDE kept).
    let file = l.path("ws/owned-by-nobody");
    std::fs::write(&file, "").unwrap();
    let c = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: chown/chmod on a path we just created.
    unsafe {
        assert_eq!(libc::chown(c.as_ptr(), 65534, 65534), 0);
        assert_eq!(libc::chmod(c.as_ptr(), 0o600), 0);
    }
    l.run("echo written > owned-by-nobody", true).await.unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "written\n");
}
