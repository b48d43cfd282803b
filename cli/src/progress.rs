//! A progress indicator on standard error: shown only when standard error is a terminal,
//! `--json` is off, and the work has already taken half a second (quick commands print
//! nothing extra). It says which stage is running and for how long.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Shown after this much time, if the work is still going.
const DELAY: Duration = Duration::from_millis(500);

pub struct Progress {
    bar: Option<ProgressBar>,
    done: Arc<AtomicBool>,
}

impl Progress {
    /// A progress indicator, or a silent one when `wanted` is false or standard error is
    /// not a terminal.
    pub fn new(wanted: bool) -> Progress {
        use std::io::IsTerminal;
        let done = Arc::new(AtomicBool::new(false));
        if !wanted || !std::io::stderr().is_terminal() {
            return Progress { bar: None, done };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template("{spinner} nnc: {msg} [{elapsed}]") {
            bar.set_style(style);
        }
        let shown = bar.clone();
        let finished = Arc::clone(&done);
        std::thread::spawn(move || {
            std::thread::sleep(DELAY);
            if !finished.load(Ordering::Acquire) {
                shown.set_draw_target(ProgressDrawTarget::stderr());
                shown.enable_steady_tick(Duration::from_millis(120));
            }
        });
        Progress {
            bar: Some(bar),
            done,
        }
    }

    /// Names the stage now running.
    pub fn stage(&self, what: impl Into<String>) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.into());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
