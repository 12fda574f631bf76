//! Stopping on a signal: SIGTERM (Slurm at a job's time limit, `scancel`, `kill`), SIGINT
//! (Ctrl-C) and SIGUSR1 (Slurm's `--signal=B:USR1@120` warning) request a stop the commands
//! honour where they can stop cleanly; a second signal ends the process at once.
//!
//! What each command does with the request: `train`/`finetune` finish the step under way, write
//! `last.ckpt` with the loader position and exit with [`EXIT_STOPPED`]; `preprocess` keeps the
//! input files it finished (a rerun continues the build); `predict`/`evaluate` stop between
//! batches and write nothing.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gnn4c_training::StopFlag;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

/// The exit code of a command a signal stopped cleanly (`EX_TEMPFAIL`: run it again to
/// continue; a Slurm script requeues the job on it).
pub const EXIT_STOPPED: u8 = 75;

/// A command ended by a stop request: what it left and how to continue.
#[derive(Debug)]
pub struct Stopped(pub String);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stopped {}

/// A stop flag that SIGTERM, SIGINT and SIGUSR1 set, with a note on standard error; a second
/// of any of them exits at once with 128 + the signal's number (files are written atomically,
/// so that loses the work since the last checkpoint, never a file). Installs the handlers once
/// per process; later calls return the same flag.
pub fn stop_on_signals() -> std::io::Result<StopFlag> {
    static INSTALLED: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    if let Some(flag) = INSTALLED.get() {
        return Ok(StopFlag::from_shared(flag.clone()));
    }
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT, SIGUSR1] {
        // In this order: the first signal finds the flag unset (no exit), then sets it.
        signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, flag.clone())?;
        signal_hook::flag::register(signal, flag.clone())?;
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGUSR1])?;
    std::thread::Builder::new()
        .name("stop-note".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                eprintln!(
                    "gnn4colliders: {} received: stopping where the command can (train: after \
                     the step under way, with last.ckpt); send it again to stop at once",
                    signal_name(signal)
                );
            }
        })?;
    Ok(StopFlag::from_shared(
        INSTALLED.get_or_init(|| flag).clone(),
    ))
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGTERM => "SIGTERM",
        SIGINT => "SIGINT",
        _ => "SIGUSR1",
    }
}
