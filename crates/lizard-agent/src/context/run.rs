//! One run of a cell, as a small state machine.
//!
//! [`Run`] is pure: no I/O and no clock (the caller passes `now`). `Contexts::run_task` is its
//! driver: it turns what happens (a kernel message, the timeout, an interrupt, the client going
//! away, the next SIGINT being due) into an [`Input`], feeds it to [`Run::step`] and performs the
//! [`Action`]s it returns (send an event, signal the kernel's process group, log a warning). It
//! asks [`Run::wants`] what to wait for, and ends the loop once [`Run::is_over`]; [`Run::finish`]
//! then says how the run ended, and [`Death::report`] what to tell about a kernel that died.
//!
//! States ([`Phase`]):
//! - `Running`: the cell was sent; the driver waits for the kernel, the timeout, an interrupt and
//!   the client going away.
//! - `Stopping { reason, grace_until, next_sigint }`: SIGINT was sent (for an interrupt, the
//!   timeout or a client that went away); it is repeated every [`SIGINT_REPEAT`] until the cell
//!   reports or the grace period is over. Only the kernel and the next SIGINT are waited for: a
//!   second interrupt, the timeout and the client leaving change nothing now.
//! - `Killed { reason }`: the grace period ended with the cell still running; the kernel's group
//!   got SIGKILL once, and the driver waits for the kernel to exit.
//! - `Over`: the kernel answered `done` for this cell, or died.
//!
//! Paths, each unit-tested below on its own:
//! 1. Normal run: `done ok` ends the run `ok`, without an error event.
//! 2. Output then result: stdout / stderr are forwarded in order, a `result` too (empty metadata,
//!    `null` or `{}`, is dropped); an `error` event is forwarded with its traceback joined.
//! 3. Output limit: output beyond `max_output_bytes` is cut (on a character boundary) and dropped;
//!    the cell keeps running; at the end one notice on stderr (before a kernel-died error).
//!    Results and errors are never cut.
//! 4. A failed cell without an `error` event: `done error` with an exit code (Bash) gives an
//!    `ExitCode` error, without one an `Error` "the cell failed"; after an `error` event nothing
//!    more is added.
//! 5. `done interrupted` with no stop asked for (the cell got SIGINT from elsewhere): a
//!    `KeyboardInterrupt` error, status `interrupted`.
//! 6. `done` for another cell id: logged, ignored; the run goes on. A runner `protocol_error` is
//!    logged; other runner events (ready, report, forked, framed stdout/stderr, unknown) are
//!    ignored.
//! 7. Interrupt: SIGINT at once, then again every 250 ms (a SIGINT that arrives before the
//!    runner entered the cell is ignored by it) until the kernel answers; its error is forwarded
//!    as is; status `interrupted` (also when the kernel answers `done error`).
//! 8. Interrupt during the grace period (a second interrupt, the timeout, the client leaving):
//!    ignored, the first reason stays.
//! 9. Timeout: at `timeout_ms` SIGINT (repeated as for an interrupt); the kernel's error becomes
//!    `Timeout` "the cell ran longer than timeout_ms (N ms) and was interrupted" (added if the
//!    kernel sent none); status `timeout` whatever the kernel's `done` says.
//! 10. Client disconnect: as an interrupt (events go on, the emitter drops them), status
//!     `interrupted`.
//! 11. Grace over: the last SIGINT repeat is at the end of the grace period, where SIGKILL is
//!     sent instead, once; no more SIGINT. A grace period shorter than the cadence kills at the
//!     first repeat (250 ms after the stop).
//! 12. Kernel crash mid-run (the kernel exited, or its pump ended: unknown exit): status
//!     `kernel_died`, a `KernelDied` error saying why ([`Death::report`]): killed for not stopping
//!     within the grace period, the OOM killer, or the exit status; the driver starts a
//!     replacement kernel and notes the restart.
//! 13. Restart / delete during the run (they kill the kernel): `ContextRestarted` /
//!     `ContextDeleted`, and no replacement kernel is started by the run.
//! 14. The cell could not be sent: SIGKILL to the kernel (the driver, [`Run::send_failed`]); its
//!     exit then ends the run as 12.
//! 15. No kernel and none can be started (driver only): `start`, a `KernelUnavailable` error,
//!     `end` with `kernel_died`; not recorded in the run log.
//!
//! Usage (cpu, peak RSS) is measured by the driver only when the kernel did not die.

use crate::kernel::{ExitInfo, KernelMsg, RunnerEvent, RunnerStatus};
use lizard_jail::Signal;
use lizard_proto::{ExecutionError, ExecutionEvent, ExecutionResult, ExecutionStatus, Language};
use std::time::Duration;
use tokio::time::Instant;

use super::Replace;

/// How often SIGINT is repeated while an interrupted cell has not stopped.
pub(super) const SIGINT_REPEAT: Duration = Duration::from_millis(250);

/// Why a cell is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    Interrupt,
    Timeout,
    ClientGone,
}

/// Where a run is (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    Running,
    Stopping {
        reason: StopReason,
        grace_until: Instant,
        next_sigint: Instant,
    },
    Killed {
        reason: StopReason,
    },
    Over {
        stop: Option<StopReason>,
        killed: bool,
        died: Option<ExitInfo>,
    },
}

/// What happened, as the driver saw it.
#[derive(Debug)]
pub(super) enum Input {
    /// A message from the kernel's pump (its exit included).
    Kernel(KernelMsg),
    /// The pump ended without telling how the kernel exited.
    PumpEnded,
    /// `timeout_ms` elapsed.
    Deadline,
    /// Someone asked to interrupt the cell.
    Interrupt,
    /// The client's receiver went away.
    ClientGone,
    /// The time [`Wants::sigint_at`] came.
    SigintDue,
}

/// What the driver should do, in order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Action {
    Emit(ExecutionEvent),
    /// Signal the kernel's process group.
    Signal(Signal),
    Warn(Warning),
}

/// Something to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Warning {
    /// A `done` for another cell than this run's.
    StrayDone { id: u64, count: u64 },
    /// The runner reported a protocol error.
    Protocol { message: String },
}

/// What the driver waits for besides the kernel (which it always waits for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wants {
    pub deadline: Option<Instant>,
    pub interrupt: bool,
    pub client_gone: bool,
    pub sigint_at: Option<Instant>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Ending {
    /// The output truncation notice, to send on stderr.
    pub notice: Option<String>,
    pub status: ExecutionStatus,
    /// The kernel died (then the status is `kernel_died`).
    pub death: Option<Death>,
}

/// A kernel that died during a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Death {
    pub exit: ExitInfo,
    /// It got SIGKILL for not stopping within the grace period.
    pub unresponsive: bool,
}

/// What to tell about a kernel that died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DeathReport {
    pub name: &'static str,
    pub message: String,
    /// Start a replacement kernel (and note the restart with `message`): not when a restart or a
    /// delete killed it.
    pub replace: bool,
}

impl Death {
    /// What to tell. `replacing`: what a restart or delete in flight set; `oom`: whether the OOM
    /// killer struck since last asked, called only when neither that nor `unresponsive` explains
    /// the death.
    pub fn report(
        &self,
        replacing: Option<Replace>,
        oom: impl FnOnce() -> bool,
        language: Language,
        grace: Duration,
        memory_limit_mb: Option<u64>,
    ) -> DeathReport {
        let (name, message) = match replacing {
            Some(Replace::Delete) => ("ContextDeleted", "the context was deleted".to_string()),
            Some(Replace::Restart) => (
                "ContextRestarted",
                "the context was restarted; its state was cleared".to_string(),
            ),
            None if self.unresponsive => (
                "KernelDied",
                format!(
                    "the {} kernel did not stop within {} ms of an interrupt and was killed; \
                     the context was restarted and its state was lost",
                    language,
                    grace.as_millis()
                ),
            ),
            None if oom() => (
                "KernelDied",
                format!(
                    "the {} kernel was killed by the out-of-memory killer ({}); the context \
                     was restarted and its state was lost",
                    language,
                    match memory_limit_mb {
                        Some(mb) => format!("the context's memory limit is {mb} MiB"),
                        None => "the sandbox's memory limit was reached".to_string(),
                    }
                ),
            ),
            None => (
                "KernelDied",
                format!(
                    "the {} kernel exited ({}); the context was restarted and its state \
                     was lost",
                    language, self.exit
                ),
            ),
        };
        DeathReport {
            name,
            message,
            replace: replacing.is_none(),
        }
    }
}

/// One run of cell number `count` (see the module docs).
#[derive(Debug)]
pub(super) struct Run {
    count: u64,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    grace: Duration,
    phase: Phase,
    budget: OutputBudget,
    /// The kernel's `done` status (until then `ok`).
    status: ExecutionStatus,
    saw_error: bool,
}

impl Run {
    /// A run whose cell was just sent at `now`.
    pub fn new(
        count: u64,
        timeout: Option<Duration>,
        grace: Duration,
        max_output_bytes: u64,
        now: Instant,
    ) -> Run {
        Run {
            count,
            timeout,
            deadline: timeout.map(|t| now + t),
            grace,
            phase: Phase::Running,
            budget: OutputBudget::new(max_output_bytes),
            status: ExecutionStatus::Ok,
            saw_error: false,
        }
    }

    #[cfg(test)]
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The cell could not be sent: kill the kernel (its exit then ends the run).
    pub fn send_failed(&mut self) -> Vec<Action> {
        vec![Action::Signal(Signal::SIGKILL)]
    }

    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over { .. })
    }

    pub fn wants(&self) -> Wants {
        match &self.phase {
            Phase::Running => Wants {
                deadline: self.deadline,
                interrupt: true,
                client_gone: true,
                sigint_at: None,
            },
            Phase::Stopping { next_sigint, .. } => Wants {
                deadline: None,
                interrupt: false,
                client_gone: false,
                sigint_at: Some(*next_sigint),
            },
            Phase::Killed { .. } | Phase::Over { .. } => Wants {
                deadline: None,
                interrupt: false,
                client_gone: false,
                sigint_at: None,
            },
        }
    }

    fn stop_reason(&self) -> Option<StopReason> {
        match &self.phase {
            Phase::Running => None,
            Phase::Stopping { reason, .. } | Phase::Killed { reason } => Some(*reason),
            Phase::Over { stop, .. } => *stop,
        }
    }

    fn killed(&self) -> bool {
        match &self.phase {
            Phase::Killed { .. } => true,
            Phase::Over { killed, .. } => *killed,
            Phase::Running | Phase::Stopping { .. } => false,
        }
    }

    /// The `Timeout` error's value, when the cell is being stopped for its timeout.
    fn timeout_value(&self) -> Option<String> {
        match (self.stop_reason(), self.timeout) {
            (Some(StopReason::Timeout), Some(t)) => Some(format!(
                "the cell ran longer than timeout_ms ({} ms) and was interrupted",
                t.as_millis()
            )),
            _ => None,
        }
    }

    fn end(&mut self, died: Option<ExitInfo>) {
        self.phase = Phase::Over {
            stop: self.stop_reason(),
            killed: self.killed(),
            died,
        };
    }

    /// Feed one input (at `now`); returns what to do, in order.
    pub fn step(&mut self, now: Instant, input: Input) -> Vec<Action> {
        if self.is_over() {
            return Vec::new();
        }
        match input {
            Input::Kernel(msg) => self.kernel_msg(msg),
            Input::PumpEnded => {
                self.end(Some(ExitInfo::Unknown));
                Vec::new()
            }
            Input::Deadline if self.deadline.is_some() => self.stop(StopReason::Timeout, now),
            Input::Interrupt => self.stop(StopReason::Interrupt, now),
            Input::ClientGone => self.stop(StopReason::ClientGone, now),
            Input::Deadline => Vec::new(),
            Input::SigintDue => self.sigint_due(now),
        }
    }

    fn stop(&mut self, reason: StopReason, now: Instant) -> Vec<Action> {
        if self.phase != Phase::Running {
            return Vec::new();
        }
        self.phase = Phase::Stopping {
            reason,
            grace_until: now + self.grace,
            next_sigint: now + SIGINT_REPEAT,
        };
        vec![Action::Signal(Signal::SIGINT)]
    }

    fn sigint_due(&mut self, now: Instant) -> Vec<Action> {
        let Phase::Stopping {
            reason,
            grace_until,
            next_sigint,
        } = &mut self.phase
        else {
            return Vec::new();
        };
        if now >= *grace_until {
            self.phase = Phase::Killed { reason: *reason };
            vec![Action::Signal(Signal::SIGKILL)]
        } else {
            *next_sigint = (now + SIGINT_REPEAT).min(*grace_until);
            vec![Action::Signal(Signal::SIGINT)]
        }
    }

    fn kernel_msg(&mut self, msg: KernelMsg) -> Vec<Action> {
        let emit = |event| vec![Action::Emit(event)];
        match msg {
            KernelMsg::Stdout(text) => self
                .budget
                .take(text)
                .map(|text| emit(ExecutionEvent::Stdout { text }))
                .unwrap_or_default(),
            KernelMsg::Stderr(text) => self
                .budget
                .take(text)
                .map(|text| emit(ExecutionEvent::Stderr { text }))
                .unwrap_or_default(),
            KernelMsg::Event(RunnerEvent::Result {
                main,
                data,
                metadata,
            }) => emit(ExecutionEvent::Result(ExecutionResult {
                is_main_result: main,
                data,
                metadata: metadata.filter(|m| !is_empty_json(m)),
            })),
            KernelMsg::Event(RunnerEvent::Error {
                name,
                value,
                traceback,
            }) => {
                self.saw_error = true;
                // The kernel reports the SIGINT sent for `timeout_ms` as an interrupt; the
                // client should learn why.
                let (name, value) = match self.timeout_value() {
                    Some(v) => ("Timeout".to_string(), v),
                    None => (name, value),
                };
                emit(ExecutionEvent::Error(ExecutionError {
                    name,
                    value,
                    traceback: traceback.into_text(),
                }))
            }
            KernelMsg::Event(RunnerEvent::Done {
                id,
                status,
                exit_code,
            }) => self.done(id, status, exit_code),
            KernelMsg::Event(RunnerEvent::ProtocolError { message }) => {
                vec![Action::Warn(Warning::Protocol { message })]
            }
            KernelMsg::Event(
                RunnerEvent::Ready
                | RunnerEvent::Report { .. }
                | RunnerEvent::Forked { .. }
                | RunnerEvent::Unknown
                | RunnerEvent::Stdout { .. }
                | RunnerEvent::Stderr { .. },
            ) => Vec::new(),
            KernelMsg::Exited(exit) => {
                self.end(Some(exit));
                Vec::new()
            }
        }
    }

    fn done(&mut self, id: u64, s: RunnerStatus, exit_code: Option<i32>) -> Vec<Action> {
        if id != self.count {
            return vec![Action::Warn(Warning::StrayDone {
                id,
                count: self.count,
            })];
        }
        self.status = match s {
            RunnerStatus::Ok => ExecutionStatus::Ok,
            RunnerStatus::Error => ExecutionStatus::Error,
            RunnerStatus::Interrupted => ExecutionStatus::Interrupted,
        };
        let error = |name: &str, value: String| {
            vec![Action::Emit(ExecutionEvent::Error(ExecutionError {
                name: name.to_string(),
                value,
                traceback: String::new(),
            }))]
        };
        let actions = if self.saw_error {
            Vec::new()
        } else {
            match (s, exit_code) {
                (RunnerStatus::Error, Some(code)) => error("ExitCode", code.to_string()),
                (RunnerStatus::Interrupted, _) => match self.timeout_value() {
                    Some(v) => error("Timeout", v),
                    None => error("KeyboardInterrupt", "interrupted".into()),
                },
                (RunnerStatus::Error, None) => error("Error", "the cell failed".into()),
                _ => Vec::new(),
            }
        };
        self.end(None);
        actions
    }

    /// How the run ended (once [`Run::is_over`]; before, as if the kernel had said nothing more).
    pub fn finish(self) -> Ending {
        let stop = self.stop_reason();
        let killed = self.killed();
        let died = match self.phase {
            Phase::Over { died, .. } => died,
            _ => None,
        };
        let mut status = self.status;
        match stop {
            Some(StopReason::Timeout) => status = ExecutionStatus::Timeout,
            Some(StopReason::Interrupt | StopReason::ClientGone)
                if status == ExecutionStatus::Error =>
            {
                status = ExecutionStatus::Interrupted
            }
            _ => {}
        }
        let death = died.map(|exit| Death {
            exit,
            unresponsive: killed,
        });
        if death.is_some() {
            status = ExecutionStatus::KernelDied;
        }
        Ending {
            notice: self.budget.notice(),
            status,
            death,
        }
    }
}

fn is_empty_json(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Caps the output of one run.
#[derive(Debug)]
struct OutputBudget {
    left: u64,
    limit: u64,
    dropped: u64,
}

impl OutputBudget {
    fn new(limit: u64) -> Self {
        OutputBudget {
            left: limit,
            limit,
            dropped: 0,
        }
    }

    /// The part of `text` that still fits (cut on a character boundary), if any.
    fn take(&mut self, mut text: String) -> Option<String> {
        let len = text.len() as u64;
        if len <= self.left {
            self.left -= len;
            return Some(text);
        }
        let mut cut = self.left as usize;
        while cut > 0 && !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.dropped += len - cut as u64;
        self.left = 0;
        text.truncate(cut);
        (!text.is_empty()).then_some(text)
    }

    fn notice(&self) -> Option<String> {
        (self.dropped > 0).then(|| {
            format!(
                "\n[lizard: output truncated: this run wrote more than {} bytes; {} bytes were dropped]\n",
                self.limit, self.dropped
            )
        })
    }
}

#[cfg(test)]
mod budget_tests {
    use super::OutputBudget;

    #[test]
    fn output_is_cut_on_a_character_boundary_and_counted() {
        let mut b = OutputBudget::new(5);
        assert_eq!(b.take("abc".into()).as_deref(), Some("abc"));
        assert_eq!(b.take("déf".into()).as_deref(), Some("d"));
        assert_eq!(b.take("more".into()), None);
        assert!(b.notice().unwrap().contains("7 bytes were dropped"));
        assert!(OutputBudget::new(10).notice().is_none());
    }
}

#[cfg(test)]
mod tests;
