//! The Landlock sandbox of `bash` commands: what a sandboxed command may touch on disk.
//!
//! A sandboxed command may read, write, create and delete files only beneath the workspace and
//! a private temporary directory made for it (its `TMPDIR` and `HOME`, deleted when the call
//! returns); it may read and execute the system directories ([`SYSTEM_DIRS`]) and use a few
//! device files ([`DEVICES`]). Landlock is an allow-list, so everything else is denied:
//! `BUB_HOME` (tapes, `jobs.json`, access lists), the user's home directory, the rest of `/tmp`,
//! `/run`, `/var`, `/sys`.
//!
//! `/proc` is deliberately not granted. Other processes' secret entries (`environ`, `mem`, `fd`)
//! would stay closed anyway (Landlock refuses ptrace-style access to processes outside the
//! sandbox), but their `cmdline`s, which may carry tokens, would not. Without it `ps`, `top` and
//! `/proc/self/...` do not work; process substitution (`<(...)`) and `/dev/stdout` still do,
//! because `/dev/fd/N` leads to pipes, which Landlock does not mediate.
//!
//! Invariants:
//! * **Fail closed.** Without a usable Landlock (not built into the kernel, disabled at boot,
//!   its system calls blocked by seccomp, or an ABI older than [`MIN_ABI`]), or when the layout
//!   makes protection impossible (`BUB_HOME` or the user's home directory inside a granted
//!   directory: the workspace is `/` or the home directory, `BUB_HOME` is in the workspace or
//!   under `/opt`, ...), [`Sandbox::new`] returns an error and no command runs. When restricting
//!   the child fails, the spawn fails.
//! * The ruleset is built in the parent. Between fork and exec (`pre_exec`) the child makes only
//!   async-signal-safe system calls on integers and stack values and allocates nothing:
//!   `PR_SET_NO_NEW_PRIVS`, `landlock_restrict_self`, `capget`/`capset`. The ruleset fd is
//!   close-on-exec, so the command never holds it.
//! * No device node can be made anywhere (`mknod` of a block device would read the raw disk).
//! * The child keeps only the file-ownership capabilities (`CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
//!   `CAP_FOWNER`, `CAP_FSETID`): root can still write a workspace owned by another uid (a bind
//!   mount), but not load modules, do raw I/O or administer the system; `no_new_privs` keeps
//!   setuid binaries and root's exec rules from giving any back.
//! * Where the kernel supports it (ABI 6), signals and abstract UNIX sockets are scoped to the
//!   sandbox: a command cannot signal Bub or other processes outside it, its keeper included
//!   (without it, guests get no background commands: [`scopes_signals`]).
//!
//! Not restricted: the network (TCP; pathname UNIX sockets before ABI 9), and reading the system
//! directories as their permissions allow (as root that includes `/etc/shadow`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetError, Scope,
};

/// The oldest Landlock ABI the sandbox accepts: ABI 3 (Linux 6.2) is the first that can deny
/// `truncate(2)`; with older ones a command could empty any file it can name, `BUB_HOME`'s too.
pub(crate) const MIN_ABI: i32 = 3;

/// The first Landlock ABI that scopes signals (Linux 6.12): from it on, a sandboxed command
/// cannot signal a process outside its sandbox — its keeper ([`super::contain`]) among them.
const SIGNAL_SCOPE_ABI: i32 = 6;

/// Whether a sandboxed command here is kept from signalling processes outside its sandbox.
pub(crate) fn scopes_signals() -> bool {
    matches!(available(), Support::Available { abi } if abi >= SIGNAL_SCOPE_ABI)
}

/// Directories a sandboxed command may read and execute (those that exist).
pub(crate) const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Device files a sandboxed command may read and write (not `/dev/tty`: its stdin is
/// `/dev/null` and its output goes to pipes).
pub(crate) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Files that may be symbolic links into directories not otherwise granted; their targets are
/// readable (DNS on systemd-resolved hosts: `/etc/resolv.conf` → `/run/systemd/resolve/...`).
const LINKED_FILES: &[&str] = &["/etc/resolv.conf"];

/// `landlock_create_ruleset` flag: return the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The kernel's Landlock support, as probed by [`available`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Support {
    /// Landlock ABI `abi` (≥ [`MIN_ABI`]): sandboxed commands run.
    #[error("Landlock ABI {abi}")]
    Available { abi: i32 },
    /// The kernel is built without Landlock (`ENOSYS`).
    #[error("Landlock: not built into the kernel")]
    NotBuilt,
    /// Landlock is built in but not enabled at boot (`EOPNOTSUPP`).
    #[error("Landlock: disabled at boot; add `landlock` to the kernel's `lsm=` list")]
    Disabled,
    /// The probe failed otherwise, typically `EPERM` from a seccomp profile.
    #[error("Landlock: its system calls are refused (errno {errno}), e.g. by a seccomp profile")]
    Blocked { errno: i32 },
    /// Landlock works but its ABI is older than [`MIN_ABI`].
    #[error(
        "Landlock ABI {abi}; ABI {MIN_ABI} (Linux 6.2) or newer is needed to deny truncating \
         files outside the workspace",
        MIN_ABI = MIN_ABI
    )]
    TooOld { abi: i32 },
}

impl Support {
    /// Whether sandboxed commands can run.
    pub fn is_available(self) -> bool {
        matches!(self, Support::Available { .. })
    }

    /// Classifies the result of the version probe: the ABI, or the errno.
    pub(crate) fn from_probe(result: Result<i32, i32>) -> Self {
        match result {
            Ok(abi) if abi >= MIN_ABI => Support::Available { abi },
            Ok(abi) => Support::TooOld { abi },
            Err(libc::ENOSYS) => Support::NotBuilt,
            Err(libc::EOPNOTSUPP) => Support::Disabled,
            Err(errno) => Support::Blocked { errno },
        }
    }
}

/// The kernel's Landlock support, probed once per process.
pub fn available() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(probe)
}

fn probe() -> Support {
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call reads no memory and
    // only returns the ABI version (or fails with errno).
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        Support::from_probe(Err(errno))
    } else {
        Support::from_probe(Ok(i32::try_from(version).unwrap_or(i32::MAX)))
    }
}

/// Why a command was not run in the sandbox. Every message ends "the command was not run".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SandboxError {
    #[error("the sandbox is not available on this kernel ({0}); the command was not run")]
    Unavailable(Support),
    #[error("the sandbox cannot protect {what} ({path}): {problem}; the command was not run")]
    Unprotectable {
        what: &'static str,
        path: String,
        problem: String,
    },
    #[error("the sandbox could not be set up: {0}; the command was not run")]
    Setup(String),
}

impl From<RulesetError> for SandboxError {
    fn from(e: RulesetError) -> Self {
        SandboxError::Setup(format!("Landlock: {e}"))
    }
}

/// A Landlock ruleset ready to be applied to one command, and the command's private temporary
/// directory (deleted on drop).
#[derive(Debug)]
pub(crate) struct Sandbox {
    ruleset: OwnedFd,
    /// Owns the directory: removed on drop.
    _tmp: tempfile::TempDir,
    tmp_path: PathBuf,
    workspace: PathBuf,
}

impl Sandbox {
    /// Builds the ruleset for a command in `workspace`, refusing (fail closed) when `support`
    /// is not [`Support::Available`] or when `bub_home` or `user_home` (`None`: `$HOME`) would
    /// be readable.
    pub(crate) fn new(
        support: Support,
        workspace: &Path,
        bub_home: &Path,
        user_home: Option<&Path>,
    ) -> Result<Self, SandboxError> {
        let Support::Available { abi } = support else {
            return Err(SandboxError::Unavailable(support));
        };
        let workspace = workspace
            .canonicalize()
            .map_err(|e| SandboxError::Setup(format!("workspace {}: {e}", workspace.display())))?;
        let bub_home = canonical(bub_home);
        let user_home = user_home
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
            .filter(|p| p.is_absolute())
            .map(|p| canonical(&p));
        let system: Vec<PathBuf> = SYSTEM_DIRS
            .iter()
            .filter_map(|d| Path::new(d).canonicalize().ok())
            .collect();

        let mut granted: Vec<(String, &Path)> = vec![("the workspace".into(), &workspace)];
        granted.extend(system.iter().map(|d| {
            (
                format!("{}, which sandboxed commands may read", d.display()),
                d.as_path(),
            )
        }));
        let mut protected = vec![("BUB_HOME", bub_home.as_path())];
        if let Some(home) = &user_home {
            protected.push(("the user's home directory", home.as_path()));
        }
        check_layout(&granted, &protected)?;

        let tmp = tempfile::Builder::new()
            .prefix("bub-sandbox-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|e| SandboxError::Setup(format!("temporary directory: {e}")))?;
        let tmp_path = tmp
            .path()
            .canonicalize()
            .map_err(|e| SandboxError::Setup(format!("temporary directory: {e}")))?;
        if tmp_path.starts_with(&bub_home) {
            return Err(SandboxError::Unprotectable {
                what: "BUB_HOME",
                path: bub_home.display().to_string(),
                problem: format!(
                    "the temporary directory {} would be inside it (set TMPDIR elsewhere)",
                    tmp_path.display()
                ),
            });
        }

        let ruleset = build_ruleset(ABI::from(abi), &workspace, &tmp_path, &system)?;
        Ok(Self {
            ruleset,
            _tmp: tmp,
            tmp_path,
            workspace,
        })
    }

    /// The workspace, canonical (symbolic links resolved).
    pub(crate) fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The command's private temporary directory (canonical); removed when `self` drops.
    pub(crate) fn tmp_dir(&self) -> &Path {
        &self.tmp_path
    }

    /// Makes `command` restrict itself to this sandbox between fork and exec. `self` must stay
    /// alive until the command has been spawned (else the spawn fails: closed fd).
    pub(crate) fn confine(&self, command: &mut tokio::process::Command) {
        let ruleset = self.ruleset.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec; `restrict_child` makes only
        // async-signal-safe system calls on integers and stack values and does not allocate.
        unsafe {
            command.pre_exec(move || restrict_child(ruleset));
        }
    }
}

/// Refuses a layout in which a protected directory lies beneath (or is) a granted one.
fn check_layout(
    granted: &[(String, &Path)],
    protected: &[(&'static str, &Path)],
) -> Result<(), SandboxError> {
    for (what, path) in protected {
        for (role, dir) in granted {
            if path.starts_with(dir) {
                let problem = if path == dir {
                    format!("it is {role}")
                } else if role == "the workspace" {
                    format!("it is inside the workspace ({})", dir.display())
                } else {
                    format!("it is inside {role}")
                };
                return Err(SandboxError::Unprotectable {
                    what,
                    path: path.display().to_string(),
                    problem,
                });
            }
        }
    }
    Ok(())
}

/// `path` with symbolic links resolved as far as it exists (the missing rest appended).
fn canonical(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut current = path;
    loop {
        if let Ok(resolved) = current.canonicalize() {
            return missing
                .iter()
                .rev()
                .fold(resolved, |acc: PathBuf, part| acc.join(part));
        }
        match (current.parent(), current.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                current = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The ruleset: everything Landlock knows at `abi` is handled; the workspace and the private
/// directory get all of it but making devices, the system directories read + execute, the
/// devices read + write.
fn build_ruleset(
    abi: ABI,
    workspace: &Path,
    tmp: &Path,
    system: &[PathBuf],
) -> Result<OwnedFd, SandboxError> {
    let handled = AccessFs::from_all(abi);
    let make_devices: BitFlags<AccessFs> = AccessFs::MakeChar | AccessFs::MakeBlock;
    let read_write = handled & !make_devices;
    let read = AccessFs::from_read(abi);
    let device = AccessFs::from_file(abi) & !BitFlags::from(AccessFs::Execute);

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled)?;
    let scopes = Scope::from_all(abi);
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes)?;
    }
    let mut created = ruleset.create()?;
    for dir in [workspace, tmp] {
        created = created.add_rule(PathBeneath::new(path_fd(dir)?, read_write))?;
    }
    for dir in system {
        created = created.add_rule(PathBeneath::new(path_fd(dir)?, read))?;
    }
    for dev in DEVICES {
        if let Ok(fd) = PathFd::new(dev) {
            created = created.add_rule(PathBeneath::new(fd, device))?;
        }
    }
    for file in LINKED_FILES {
        let Ok(target) = Path::new(file).canonicalize() else {
            continue;
        };
        if target.is_file() && !system.iter().any(|d| target.starts_with(d)) {
            let access = AccessFs::ReadFile;
            created = created.add_rule(PathBeneath::new(path_fd(&target)?, access))?;
        }
    }
    let fd: Option<OwnedFd> = created.into();
    // No fd means the crate found no Landlock support after all: fail closed.
    fd.ok_or_else(|| SandboxError::Setup("Landlock created no ruleset".into()))
}

fn path_fd(path: &Path) -> Result<PathFd, SandboxError> {
    PathFd::new(path).map_err(|e| SandboxError::Setup(format!("{}: {e}", path.display())))
}

/// The child's side (after fork, before exec): no new privileges, the Landlock domain, then
/// the capabilities cut down. Async-signal-safe and allocation-free.
fn restrict_child(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0 as libc::c_uint) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    drop_capabilities()
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (two of them for 64 capabilities).
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `CAP_CHOWN` (0), `CAP_DAC_OVERRIDE` (1), `CAP_FOWNER` (3), `CAP_FSETID` (4).
const KEPT_CAPABILITIES: u32 = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 4);

/// Keeps only [`KEPT_CAPABILITIES`] (of those held) and clears the inheritable set, which also
/// clears the ambient set. With `no_new_privs`, exec cannot add any back (not even for root).
fn drop_capabilities() -> io::Result<()> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and the two `data` elements have the kernel's V3 layout and outlive the
    // calls.
    unsafe {
        if libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        let [low, high] = &mut data;
        low.effective &= KEPT_CAPABILITIES;
        low.permitted &= KEPT_CAPABILITIES;
        low.inheritable = 0;
        *high = CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        };
        if libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(
        workspace: &str,
        bub_home: &str,
        user_home: &str,
        system: &[&str],
    ) -> Result<(), SandboxError> {
        let mut granted: Vec<(String, &Path)> =
            vec![("the workspace".into(), Path::new(workspace))];
        granted.extend(system.iter().map(|d| {
            (
                format!("{d}, which sandboxed commands may read"),
                Path::new(*d),
            )
        }));
        check_layout(
            &granted,
            &[
                ("BUB_HOME", Path::new(bub_home)),
                ("the user's home directory", Path::new(user_home)),
            ],
        )
    }

    #[test]
    fn layouts_that_cannot_be_protected_are_refused() {
        let sys = ["/usr", "/etc", "/opt"];
        assert_eq!(
            layout("/home/u/proj", "/home/u/.bub", "/home/u", &sys),
            Ok(())
        );
        assert_eq!(layout("/workspace", "/data", "/root", &sys), Ok(()));

        let err = layout("/", "/home/u/.bub", "/home/u", &sys).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the sandbox cannot protect BUB_HOME (/home/u/.bub): it is inside the workspace (/); \
             the command was not run"
        );
        let err = layout("/home/u/proj", "/home/u/proj/.bub", "/home/u", &sys).unwrap_err();
        assert!(
            err.to_string()
                .contains("BUB_HOME (/home/u/proj/.bub): it is inside the workspace"),
            "{err}"
        );
        let err = layout("/home/u", "/srv/bub", "/home/u", &sys).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the sandbox cannot protect the user's home directory (/home/u): it is the workspace; \
             the command was not run"
        );
        let err = layout("/home", "/srv/bub", "/home/u", &sys).unwrap_err();
        assert!(
            err.to_string().contains(
                "the user's home directory (/home/u): it is inside the workspace (/home)"
            ),
            "{err}"
        );
        let err = layout("/srv/ws", "/opt/bub", "/home/u", &sys).unwrap_err();
        assert!(
            err.to_string().contains(
                "BUB_HOME (/opt/bub): it is inside /opt, which sandboxed commands may read"
            ),
            "{err}"
        );
    }

    #[test]
    fn probe_results_are_classified() {
        assert_eq!(Support::from_probe(Ok(7)), Support::Available { abi: 7 });
        assert_eq!(Support::from_probe(Ok(3)), Support::Available { abi: 3 });
        assert_eq!(Support::from_probe(Ok(2)), Support::TooOld { abi: 2 });
        assert_eq!(Support::from_probe(Err(libc::ENOSYS)), Support::NotBuilt);
        assert_eq!(
            Support::from_probe(Err(libc::EOPNOTSUPP)),
            Support::Disabled
        );
        assert_eq!(
            Support::from_probe(Err(libc::EPERM)),
            Support::Blocked { errno: libc::EPERM }
        );
        assert!(Support::from_probe(Ok(7)).is_available());
        assert!(!Support::NotBuilt.is_available());
    }

    #[test]
    fn unavailable_support_is_refused_before_anything_is_made() {
        let dir = tempfile::tempdir().unwrap();
        for support in [
            Support::NotBuilt,
            Support::Disabled,
            Support::Blocked { errno: 1 },
            Support::TooOld { abi: 2 },
        ] {
            let err =
                Sandbox::new(support, dir.path(), &dir.path().join("home"), None).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.starts_with("the sandbox is not available on this kernel (Landlock"),
                "{msg}"
            );
            assert!(msg.ends_with("; the command was not run"), "{msg}");
        }
    }

    #[test]
    fn canonical_resolves_the_existing_part() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(&real, real.join("link")).unwrap();
        assert_eq!(
            canonical(&real.join("link").join("not/yet")),
            real.join("not/yet")
        );
    }
}
