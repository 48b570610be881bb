//! A throwaway PostgreSQL cluster for the tests: started once per test binary from the
//! machine's server binaries (`initdb`, `postgres`; Debian's `/usr/lib/postgresql/*/bin`, or
//! `BUB_TEST_PG_BIN`), in a temporary directory, on a free loopback port, with `fsync` off
//! (`synchronous_commit` stays on: the tests tell the two pools apart by it). Each test gets a database of its own ([`database`]). `initdb` refuses to run as root, so as
//! root the cluster runs as the `postgres` user. A watchdog stops the server and removes the
//! directory when the test binary exits, however it exits.
//!
//! Shared by the library's unit tests (`src/db`) and the integration tests (`tests/support`):
//! one file, included in both. Without PostgreSQL on the machine the tests that need it fail,
//! saying what to install — they never pass silently.
#![allow(dead_code, unreachable_pub)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The running cluster.
pub struct Cluster {
    pub port: u16,
    bin: PathBuf,
    dir: PathBuf,
    /// The user the server runs as, when the tests run as root.
    user: Option<(u32, u32)>,
}

/// A fresh, empty database on the cluster: its `postgres://` URL.
pub fn database() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let cluster = cluster();
    let name = format!(
        "t{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let status = cluster
        .command("createdb")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &cluster.port.to_string(),
            "-U",
            "postgres",
            &name,
        ])
        .status()
        .expect("running createdb");
    assert!(status.success(), "createdb {name} failed");
    cluster.url(&name)
}

/// The cluster of this test binary, started on first use.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(start)
}

impl Cluster {
    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{name}?sslmode=disable",
            self.port
        )
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.env_remove("PGPASSWORD").current_dir(&self.dir);
        cmd
    }
}

// The server and its watchdog outlive every test: the watchdog stops the server once this
// process is gone, so neither is waited for.
#[allow(clippy::zombie_processes)]
fn start() -> Cluster {
    let bin = server_bin();
    let user = is_root().then(postgres_user);
    let dir = std::env::temp_dir().join(format!("bub-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the cluster directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown of the cluster dir");
    }
    let port = free_port();
    let cluster = Cluster {
        port,
        bin,
        dir: dir.clone(),
        user,
    };
    let data = dir.join("data");
    let out = cluster
        .command("initdb")
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ])
        .arg("-D")
        .arg(&data)
        .stdin(Stdio::null())
        .output()
        .expect("running initdb");
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(dir.join("server.log"), Some(uid), Some(gid)).unwrap();
    }
    let server = cluster
        .command("postgres")
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-k"])
        .arg(&dir)
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=300",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("starting postgres");
    watchdog(server.id(), &dir);
    wait_ready(&cluster);
    cluster
}

/// Stops the server (SIGQUIT: immediate shutdown) and removes `dir` once this process is gone.
#[allow(clippy::zombie_processes)]
fn watchdog(server: u32, dir: &Path) {
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; kill -QUIT {server} 2>/dev/null; \
         sleep 1; kill -KILL {server} 2>/dev/null; rm -rf '{dir}'",
        me = std::process::id(),
        dir = dir.display()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("starting the cluster's watchdog");
}

fn wait_ready(cluster: &Cluster) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let ready = cluster
            .command("pg_isready")
            .args(["-q", "-h", "127.0.0.1", "-p", &cluster.port.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return;
        }
        if std::time::Instant::now() > deadline {
            let log = std::fs::read_to_string(cluster.dir.join("server.log")).unwrap_or_default();
            panic!("PostgreSQL did not start within 30 s:\n{log}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Where `initdb` and `postgres` are.
fn server_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("BUB_TEST_PG_BIN") {
        return dir.into();
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    found.pop().expect(
        "these tests need PostgreSQL's server binaries (Debian: apt-get install postgresql; \
         or set BUB_TEST_PG_BIN to the directory holding initdb)",
    )
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of the `postgres` user (as root, the server runs as it).
fn postgres_user() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"postgres") && f.len() > 3)
        .and_then(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .expect("as root, these tests run PostgreSQL as the postgres user, which does not exist")
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
