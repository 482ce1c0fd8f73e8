//! The coordinator process a benchmark tool starts: spawned with its stdout piped, reaped with
//! `wait4` for its resource use (peak RSS, CPU seconds), and killed on every exit path of the
//! tool: when its handle is dropped, when the tool panics, and on Ctrl-C.

use anyhow::{Context, Result};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

/// The pid of the coordinator running now (0: none), for the panic hook and Ctrl-C.
static RUNNING: AtomicI32 = AtomicI32::new(0);

/// Kills the coordinator running now, if any.
fn kill_running() {
    let pid = RUNNING.swap(0, Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) on a pid this process spawned and has not reaped.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Installs, once, a panic hook and a Ctrl-C handler that kill the running coordinator.
fn guard_exits() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            kill_running();
            previous(info);
        }));
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                kill_running();
                std::process::exit(130);
            }
        });
    });
}

/// What a coordinator process used, summed over the processes of a run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Usage {
    /// The largest peak resident set of them, KiB.
    pub max_rss_kib: u64,
    /// User plus system CPU seconds, summed.
    pub cpu_seconds: f64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.max_rss_kib = self.max_rss_kib.max(other.max_rss_kib);
        self.cpu_seconds += other.cpu_seconds;
    }
}

/// How a coordinator process ended.
#[derive(Debug)]
pub struct Ended {
    /// Its exit code (-1 when killed by a signal).
    pub code: i32,
    pub usage: Usage,
}

/// A running coordinator process.
pub struct Coordinator {
    child: Option<Child>,
}

impl Coordinator {
    /// Starts `nqueens-coordinator ARGS` (the binary beside this tool), quiet but for warnings.
    pub fn spawn(args: &[String]) -> Result<Coordinator> {
        guard_exits();
        let bin = crate::coordinator_binary()?;
        let child = Command::new(&bin)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        RUNNING.store(child.id() as i32, Ordering::SeqCst);
        Ok(Coordinator { child: Some(child) })
    }

    /// SIGKILLs it and reaps it.
    pub fn kill(&mut self) -> Result<Usage> {
        let child = self.child.take().context("no coordinator")?;
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        RUNNING.store(0, Ordering::SeqCst);
        Ok(reap(child)?.0.usage)
    }

    /// SIGTERMs it and waits for its graceful end.
    pub async fn terminate(&mut self) -> Result<()> {
        let child = self.child.take().context("no coordinator")?;
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        tokio::task::spawn_blocking(move || reap(child)).await??;
        RUNNING.store(0, Ordering::SeqCst);
        Ok(())
    }

    /// Waits for it to exit by itself; how it ended, and what it printed.
    pub async fn wait_output(&mut self) -> Result<(Ended, String)> {
        let child = self.child.take().context("no coordinator")?;
        let ended = tokio::task::spawn_blocking(move || reap(child)).await??;
        RUNNING.store(0, Ordering::SeqCst);
        Ok(ended)
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            RUNNING.store(0, Ordering::SeqCst);
            let _ = reap(child);
        }
    }
}

/// Reads the child's stdout to its end and reaps it with `wait4`, for its resource use.
fn reap(mut child: Child) -> Result<(Ended, String)> {
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out)?;
    }
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with valid pointers.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        return Err(std::io::Error::last_os_error()).context("wait4 on the coordinator");
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    let usage = Usage {
        max_rss_kib: usage.ru_maxrss as u64,
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
    };
    Ok((Ended { code, usage }, out))
}

/// Raises this process's soft descriptor limit to its hard one (thousands of connections).
pub fn raise_nofile() {
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
