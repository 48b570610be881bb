//! Containment: no process outlives the command that started it, `setsid` included.
//!
//! Every child Bub starts for a command — a `bash` call, a background command, a stdio MCP
//! server — is spawned through [`keep`]: between fork and exec the child becomes the command's
//! **keeper**, a child subreaper (`PR_SET_CHILD_SUBREAPER`) that forks the real command and
//! waits. Whatever the command starts stays below its keeper: a process that calls `setsid`,
//! changes its process group, double-forks or is `nohup`ed is re-parented to the keeper when its
//! parent exits, never to init. The keeper ends them all when
//!
//! * the command exits (what it left running goes with it),
//! * it is told to ([`Keeper::end`]: `SIGTERM`; `SIGINT` and `SIGHUP` too) — a timeout,
//!   `bash.kill`, `/stop`, `tape.reset`, Bub's stop — or
//! * Bub is gone (its parent changed; checked every second),
//!
//! by killing the command's process group (while the command lives) and every child it has,
//! round after round as grandchildren are re-parented to it, until it has no child left; then it
//! exits as the command did (its code, or its signal). In Bub's own binary the keeper execs a
//! fresh image of it ([`keeper_main`]), so a long-lived keeper (an MCP server's) holds no copy
//! of Bub's memory; elsewhere (a test binary) it keeps in the forked image. The `Child` Bub
//! holds is the keeper, but its pipes and exit status are the command's. [`Keeper::ask`]
//! (`SIGUSR1`) forwards a polite `SIGTERM` to the command's group (an MCP server's graceful
//! stop) and ends nothing.
//!
//! Invariants:
//! * Between fork and exec only async-signal-safe system calls on integers and stack buffers;
//!   nothing allocates (Bub is multi-threaded). [`keep`] must be the first `pre_exec` of the
//!   command: what follows it (the sandbox, signal resets) applies to the command alone.
//! * The keeper closes every descriptor it inherited (the command's pipes, std's exec-error
//!   pipe), so the caller sees end-of-file when the command's processes close theirs, and a
//!   failed exec is still reported by `spawn`.
//! * The keeper is outside the command's Landlock domain (the sandbox is applied after the
//!   fork): with signal scoping (Landlock ABI 6) a sandboxed command cannot kill its keeper.
//! * The caller never sends `SIGKILL` to a keeper (that would orphan what it keeps): a
//!   [`Keeper`] ends it on drop, and a command is never spawned with `kill_on_drop`.
//! * [`support`] says whether the kernel gives what containment needs (a subreaper, `/proc` to
//!   find its children); without `/proc` the keeper still ends the command's process group, but
//!   not what left it, and guests get no background commands.

use std::ffi::CStr;
use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, pid_t};

/// What the keeper waits for: a child ended, end the command, ask it to stop.
const WAITED: [c_int; 5] = [
    libc::SIGCHLD,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGUSR1,
];

/// Makes `command` a contained one (see the module docs). Call it before any other `pre_exec`.
pub(crate) fn keep(command: &mut tokio::process::Command) {
    let bub = std::process::id() as pid_t;
    // SAFETY: `become_keeper` makes only async-signal-safe system calls on integers and stack
    // buffers and allocates nothing; in the keeper it never returns.
    unsafe {
        command.pre_exec(move || become_keeper(bub));
    }
}

/// The keeper of a spawned command: ends it (and all it started) when dropped, unless it was
/// [`Keeper::reaped`].
#[derive(Debug)]
pub(crate) struct Keeper {
    pid: Option<pid_t>,
}

impl Keeper {
    /// The keeper of `child` (spawned with [`keep`]).
    pub(crate) fn of(child: &tokio::process::Child) -> Self {
        Self {
            pid: child.id().and_then(|id| pid_t::try_from(id).ok()),
        }
    }

    /// Ends the command and everything it started (the keeper exits when all are gone).
    pub(crate) fn end(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Asks the command to stop: `SIGTERM` to its process group (an MCP server's close).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn ask(&self) {
        self.signal(libc::SIGUSR1);
    }

    /// The keeper was waited for: its pid may be another process's now, never signal it.
    pub(crate) fn reaped(&mut self) {
        self.pid = None;
    }

    fn signal(&self, signal: c_int) {
        if let Some(pid) = self.pid {
            // SAFETY: kill only sends a signal; a keeper that has exited yields ESRCH.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.end();
    }
}

/// Whether containment is complete here (`Err`: what is missing), probed once.
pub(crate) fn support() -> Result<(), &'static str> {
    static SUPPORT: OnceLock<Result<(), &'static str>> = OnceLock::new();
    *SUPPORT.get_or_init(|| {
        let mut flag: c_int = 0;
        // SAFETY: PR_GET_CHILD_SUBREAPER writes one int to the pointer given.
        let subreaper = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut flag) };
        if subreaper != 0 {
            return Err("the kernel refuses PR_SET_CHILD_SUBREAPER");
        }
        // What the keeper reads of each process, read here of this one (a scan of every
        // process costs a read per process, at every start).
        // SAFETY: it reads /proc/<pid>/stat into stack buffers.
        let seen = unsafe { parent_of(libc::getpid()) }.is_some();
        match seen {
            true => Ok(()),
            false => Err("/proc is not mounted: a process that left its group cannot be found"),
        }
    })
}

/// The set of [`WAITED`] signals.
unsafe fn waited() -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in WAITED {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// In the forked child: forks the command (which returns to run the rest of `pre_exec` and
/// exec) and keeps it; the keeper never returns.
unsafe fn become_keeper(bub: pid_t) -> io::Result<()> {
    unsafe {
        let waited = waited();
        let mut before: libc::sigset_t = std::mem::zeroed();
        if libc::sigprocmask(libc::SIG_BLOCK, &waited, &mut before) != 0
            || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0
        {
            return Err(io::Error::last_os_error());
        }
        let keeper = libc::getpid();
        let command = libc::fork();
        if command < 0 {
            return Err(io::Error::last_os_error());
        }
        if command == 0 {
            // The command: its own process group, the signal mask it had, and gone with its
            // keeper.
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != keeper {
                libc::_exit(127);
            }
            return Ok(());
        }
        // The command's group exists before the keeper may signal it.
        libc::setpgid(command, command);
        close_all();
        if EXEC.load(Ordering::Relaxed) {
            exec_keeper(command, bub);
        }
        watch(command, bub, &waited)
    }
}

/// Closes every descriptor (the keeper needs none it inherited).
unsafe fn close_all() {
    unsafe {
        if libc::close_range(0, libc::c_uint::MAX, 0) == 0 {
            return;
        }
        // Before Linux 5.9: one by one, up to the limit.
        let mut limit: libc::rlimit = std::mem::zeroed();
        let last = match libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) {
            0 => limit.rlim_cur.min(1 << 20) as c_int,
            _ => 1024,
        };
        for fd in 0..last {
            libc::close(fd);
        }
    }
}

/// Runs the keeper as a fresh image of Bub's binary (`/proc/self/exe` as [`KEEPER`]), so that
/// it does not hold a copy of Bub's memory for as long as the command runs; returns only when
/// that fails (the keeper then keeps in the forked image).
unsafe fn exec_keeper(command: pid_t, bub: pid_t) {
    let (mut command_buf, mut bub_buf) = ([0u8; 12], [0u8; 12]);
    let argv = [
        KEEPER.as_ptr(),
        c_digits(command, &mut command_buf).as_ptr().cast(),
        c_digits(bub, &mut bub_buf).as_ptr().cast(),
        std::ptr::null(),
    ];
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: every pointer is NUL-terminated and lives on this stack until execve returns.
    unsafe {
        libc::execve(c"/proc/self/exe".as_ptr(), argv.as_ptr(), envp.as_ptr());
    }
}

/// The program name a keeper runs under: `main` hands such a process to [`keeper_main`].
pub(crate) const KEEPER: &CStr = c"bub-keeper";

/// Keepers exec Bub's binary from now on: only `main` calls this, after [`keeper_main`], since
/// only Bub's own binary knows [`KEEPER`] (a test binary keeps in the forked image).
pub fn exec_keepers() {
    EXEC.store(true, Ordering::Relaxed);
}

static EXEC: AtomicBool = AtomicBool::new(false);

/// When this process was started as a keeper (`bub-keeper COMMAND BUB`), keeps; otherwise
/// returns at once. `main` calls it first of all.
pub fn keeper_main() {
    use std::os::unix::ffi::OsStrExt;
    let mut args = std::env::args_os();
    if args
        .next()
        .is_none_or(|a| a.as_bytes() != KEEPER.to_bytes())
    {
        return;
    }
    let mut pid = || -> pid_t {
        args.next()
            .and_then(|a| a.to_str()?.parse().ok())
            .unwrap_or(0)
    };
    let (command, bub) = (pid(), pid());
    if command <= 0 {
        std::process::exit(127);
    }
    // SAFETY: the signal mask and the subreaper flag came through exec; the set is on the stack.
    unsafe {
        let waited = waited();
        watch(command, bub, &waited)
    }
}

/// The keeper's loop (see the module docs).
unsafe fn watch(command: pid_t, bub: pid_t, waited: &libc::sigset_t) -> ! {
    unsafe {
        let me = libc::getpid();
        // The command's wait status once reaped.
        let mut status: Option<c_int> = None;
        let mut ending = false;
        loop {
            // Reap what ended.
            loop {
                let mut st: c_int = 0;
                let pid = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if pid == command {
                    status = Some(st);
                } else if pid <= 0 {
                    // 0: children live, none ended; -1: none left (ECHILD).
                    if pid < 0 {
                        exit_as(status);
                    }
                    break;
                }
            }
            ending |= status.is_some();
            if ending {
                if status.is_none() {
                    // The command lives, so its pid is still its group's.
                    libc::killpg(command, libc::SIGKILL);
                }
                let seen = each_child(me, |pid| {
                    libc::kill(pid, libc::SIGKILL);
                });
                if !seen && status.is_some() {
                    // Without /proc what left the group cannot be found: leave it.
                    exit_as(status);
                }
            }
            let second = libc::timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            match libc::sigtimedwait(waited, std::ptr::null_mut(), &second) {
                libc::SIGUSR1 if status.is_none() => {
                    libc::killpg(command, libc::SIGTERM);
                }
                libc::SIGTERM | libc::SIGINT | libc::SIGHUP => ending = true,
                _ => {}
            }
            if libc::getppid() != bub {
                ending = true;
            }
        }
    }
}

/// Exits as the command did: its exit code, or its signal (without a core dump).
unsafe fn exit_as(status: Option<c_int>) -> ! {
    unsafe {
        let Some(st) = status else { libc::_exit(127) };
        if libc::WIFEXITED(st) {
            libc::_exit(libc::WEXITSTATUS(st));
        }
        let signal = libc::WTERMSIG(st);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(signal, libc::SIG_DFL);
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
        libc::raise(signal);
        libc::_exit(128 + signal)
    }
}

/// Calls `found` with every process whose parent is `parent`, from `/proc`; `false` when
/// `/proc` cannot be read. No allocation: a stack buffer for the directory, one for each stat.
unsafe fn each_child(parent: pid_t, mut found: impl FnMut(pid_t)) -> bool {
    unsafe {
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return false;
        }
        // linux_dirent64 records: d_ino (8 bytes), d_off (8), d_reclen (2), d_type (1), d_name.
        let mut buf = [0u64; 1024];
        let size = std::mem::size_of_val(&buf);
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), size);
            if n <= 0 {
                break;
            }
            let bytes = std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize);
            let mut at = 0;
            while at + 19 < bytes.len() {
                let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
                let end = (at + reclen).min(bytes.len());
                if let Some(pid) = leading_number(&bytes[at + 19..end], 0)
                    && parent_of(pid) == Some(parent)
                {
                    found(pid);
                }
                at += reclen.max(1);
            }
        }
        libc::close(dir);
        true
    }
}

/// The parent of `pid`, from `/proc/<pid>/stat` (`pid (comm) S ppid …`).
unsafe fn parent_of(pid: pid_t) -> Option<pid_t> {
    let mut path = [0u8; 32];
    let mut len = 0;
    let mut pid_buf = [0u8; 12];
    let pid = c_digits(pid, &mut pid_buf);
    for part in [&b"/proc/"[..], &pid[..pid.len() - 1], b"/stat\0"] {
        path[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    let mut stat = [0u8; 512];
    // SAFETY: `path` is NUL-terminated; `stat` is a stack buffer of the length given.
    let read = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        n
    };
    let stat = &stat[..usize::try_from(read).ok()?];
    // The command name may hold `)`: the state follows the last one.
    let after = stat.iter().rposition(|&b| b == b')')? + 1;
    // ") S 123 …": skip the space, the state and the space after it.
    leading_number(stat.get(after + 3..)?, b' ')
}

/// The decimal number at the start of `bytes`, ended by `end` (or the end of `bytes`); `None`
/// when there is none or it is 0.
fn leading_number(bytes: &[u8], end: u8) -> Option<pid_t> {
    let mut value: pid_t = 0;
    let mut any = false;
    for &b in bytes {
        match b {
            b'0'..=b'9' => {
                value = value.checked_mul(10)?.checked_add(pid_t::from(b - b'0'))?;
                any = true;
            }
            _ if b == end => break,
            _ => return None,
        }
    }
    (any && value > 0).then_some(value)
}

/// `n`'s decimal digits followed by a NUL, written into `buf` (a pid has at most 10 digits).
fn c_digits(mut n: pid_t, buf: &mut [u8; 12]) -> &[u8] {
    let mut at = buf.len() - 1;
    buf[at] = 0;
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests;
