//! Each path of a run (see the module docs of `context::run`), one at a time, with a fake clock:
//! `t0` plus offsets, no kernel, no sleeping.

use super::*;
use crate::kernel::Traceback;
use lizard_proto::MimeBundle;

const GRACE: Duration = Duration::from_millis(2000);
const BIG: u64 = 1 << 20;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn new_run(timeout: Option<Duration>, grace: Duration, max_output: u64) -> (Run, Instant) {
    let t0 = Instant::now();
    (Run::new(1, timeout, grace, max_output, t0), t0)
}

fn plain() -> (Run, Instant) {
    new_run(None, GRACE, BIG)
}

fn stdout(s: &str) -> Input {
    Input::Kernel(KernelMsg::Stdout(s.into()))
}

fn stderr(s: &str) -> Input {
    Input::Kernel(KernelMsg::Stderr(s.into()))
}

fn event(e: RunnerEvent) -> Input {
    Input::Kernel(KernelMsg::Event(e))
}

fn done_as(id: u64, status: RunnerStatus, exit_code: Option<i32>) -> Input {
    event(RunnerEvent::Done {
        id,
        status,
        exit_code,
    })
}

fn done(status: RunnerStatus) -> Input {
    done_as(1, status, None)
}

fn kernel_error(name: &str, value: &str, traceback: &[&str]) -> Input {
    event(RunnerEvent::Error {
        name: name.into(),
        value: value.into(),
        traceback: Traceback::Lines(traceback.iter().map(|l| l.to_string()).collect()),
    })
}

fn exited(exit: ExitInfo) -> Input {
    Input::Kernel(KernelMsg::Exited(exit))
}

fn emit(e: ExecutionEvent) -> Action {
    Action::Emit(e)
}

fn out(text: &str) -> Action {
    emit(ExecutionEvent::Stdout { text: text.into() })
}

fn err_out(text: &str) -> Action {
    emit(ExecutionEvent::Stderr { text: text.into() })
}

fn error(name: &str, value: &str, traceback: &str) -> Action {
    emit(ExecutionEvent::Error(ExecutionError {
        name: name.into(),
        value: value.into(),
        traceback: traceback.into(),
    }))
}

fn sigint() -> Action {
    Action::Signal(Signal::SIGINT)
}

fn sigkill() -> Action {
    Action::Signal(Signal::SIGKILL)
}

fn bundle(mime: &str, v: serde_json::Value) -> MimeBundle {
    [(mime.to_string(), v)].into_iter().collect()
}

fn stopping(run: &Run) -> (StopReason, Instant, Instant) {
    match run.phase() {
        Phase::Stopping {
            reason,
            grace_until,
            next_sigint,
        } => (*reason, *grace_until, *next_sigint),
        p => panic!("not stopping: {p:?}"),
    }
}

/// What a run wants once it stops asking for anything but, maybe, its next SIGINT.
fn wants_only_sigint_at(sigint_at: Option<Instant>) -> Wants {
    Wants {
        deadline: None,
        interrupt: false,
        client_gone: false,
        sigint_at,
    }
}

/// A plain run given `inputs` in turn, each at `t0` plus its offset in ms: what it emits for the
/// last one, and the status it ends with.
fn emitted_and_status(inputs: Vec<(u64, Input)>) -> (Vec<Action>, ExecutionStatus) {
    let (mut run, t0) = plain();
    let mut emitted = Vec::new();
    for (at, input) in inputs {
        emitted = run.step(t0 + ms(at), input);
    }
    (emitted, run.finish().status)
}

const TIMEOUT_VALUE: &str = "the cell ran longer than timeout_ms (1500 ms) and was interrupted";

// 1. Normal run.

#[test]
fn a_normal_run_waits_for_everything_and_ends_ok() {
    let (mut run, t0) = new_run(Some(ms(1500)), GRACE, BIG);
    assert_eq!(
        run.wants(),
        Wants {
            deadline: Some(t0 + ms(1500)),
            interrupt: true,
            client_gone: true,
            sigint_at: None,
        }
    );
    assert!(!run.is_over());
    assert_eq!(run.step(t0 + ms(10), done(RunnerStatus::Ok)), vec![]);
    assert!(run.is_over());
    assert_eq!(
        run.finish(),
        Ending {
            notice: None,
            status: ExecutionStatus::Ok,
            death: None,
        }
    );
}

#[test]
fn without_a_timeout_there_is_no_deadline_and_a_stray_deadline_input_changes_nothing() {
    let (mut run, t0) = plain();
    assert_eq!(run.wants().deadline, None);
    assert_eq!(run.step(t0 + ms(5), Input::Deadline), vec![]);
    assert_eq!(run.phase(), &Phase::Running);
    run.step(t0 + ms(6), done(RunnerStatus::Ok));
    assert_eq!(run.finish().status, ExecutionStatus::Ok);
}

// 2. Output then result.

#[test]
fn output_then_results_are_forwarded_in_order_and_empty_metadata_dropped() {
    let (mut run, t0) = plain();
    let mut actions = Vec::new();
    actions.extend(run.step(t0, stdout("hello\n")));
    actions.extend(run.step(t0, stderr("warn\n")));
    for (metadata, main) in [
        (None, false),
        (Some(serde_json::Value::Null), false),
        (Some(serde_json::json!({})), false),
        (Some(serde_json::json!({"w": 3})), true),
    ] {
        actions.extend(run.step(
            t0,
            event(RunnerEvent::Result {
                main,
                data: bundle("text/plain", "2".into()),
                metadata,
            }),
        ));
    }
    let result = |main, metadata| {
        emit(ExecutionEvent::Result(ExecutionResult {
            is_main_result: main,
            data: bundle("text/plain", "2".into()),
            metadata,
        }))
    };
    assert_eq!(
        actions,
        vec![
            out("hello\n"),
            err_out("warn\n"),
            result(false, None),
            result(false, None),
            result(false, None),
            result(true, Some(serde_json::json!({"w": 3}))),
        ]
    );
    assert!(!run.is_over());
    assert_eq!(run.step(t0, done(RunnerStatus::Ok)), vec![]);
    assert_eq!(run.finish().status, ExecutionStatus::Ok);
}

#[test]
fn a_kernel_error_is_forwarded_with_its_traceback_and_not_doubled() {
    let (mut run, t0) = plain();
    assert_eq!(
        run.step(
            t0,
            kernel_error("ZeroDivisionError", "division by zero", &["a", "b"])
        ),
        vec![error("ZeroDivisionError", "division by zero", "a\nb")]
    );
    let text = event(RunnerEvent::Error {
        name: "E".into(),
        value: "v".into(),
        traceback: Traceback::Text("as is".into()),
    });
    assert_eq!(run.step(t0, text), vec![error("E", "v", "as is")]);
    // After an error event, `done error` adds nothing, even with an exit code.
    assert_eq!(
        run.step(t0, done_as(1, RunnerStatus::Error, Some(2))),
        vec![]
    );
    assert_eq!(run.finish().status, ExecutionStatus::Error);
}

// 3. Output limit.

#[test]
fn output_beyond_the_limit_is_cut_the_cell_goes_on_and_one_notice_ends_it() {
    let (mut run, t0) = new_run(None, GRACE, 5);
    assert_eq!(run.step(t0, stdout("abc")), vec![out("abc")]);
    assert_eq!(run.step(t0, stderr("déf")), vec![err_out("d")]);
    assert_eq!(run.step(t0, stdout("more")), vec![]);
    assert_eq!(run.step(t0, stderr("more")), vec![]);
    // Results and errors are never cut.
    assert_eq!(
        run.step(t0, kernel_error("ValueError", "long value", &[])),
        vec![error("ValueError", "long value", "")]
    );
    assert!(!run.is_over());
    run.step(t0, done(RunnerStatus::Error));
    let ending = run.finish();
    assert_eq!(ending.status, ExecutionStatus::Error);
    let notice = ending.notice.expect("a truncation notice");
    assert!(notice.contains("more than 5 bytes"), "{notice}");
    assert!(notice.contains("11 bytes were dropped"), "{notice}");
}

// 4. A failed cell without an error event.

#[test]
fn done_error_without_an_error_event_says_why() {
    for (case, done, emitted, status) in [
        (
            "an exit code",
            done_as(1, RunnerStatus::Error, Some(3)),
            vec![error("ExitCode", "3", "")],
            ExecutionStatus::Error,
        ),
        (
            "no exit code",
            done(RunnerStatus::Error),
            vec![error("Error", "the cell failed", "")],
            ExecutionStatus::Error,
        ),
        // A successful Bash cell reports exit code 0: nothing to add.
        (
            "a success with exit code 0",
            done_as(1, RunnerStatus::Ok, Some(0)),
            vec![],
            ExecutionStatus::Ok,
        ),
    ] {
        assert_eq!(
            emitted_and_status(vec![(0, done)]),
            (emitted, status),
            "{case}"
        );
    }
}

// 5. Interrupted with no stop asked for.

#[test]
fn an_interrupted_done_nobody_asked_for_is_a_keyboard_interrupt() {
    assert_eq!(
        emitted_and_status(vec![(0, done(RunnerStatus::Interrupted))]),
        (
            vec![error("KeyboardInterrupt", "interrupted", "")],
            ExecutionStatus::Interrupted
        )
    );
}

// 6. Stray done, protocol errors, other runner events.

#[test]
fn a_done_for_another_cell_is_logged_and_the_run_goes_on() {
    let (mut run, t0) = plain();
    assert_eq!(
        run.step(t0, done_as(7, RunnerStatus::Error, Some(1))),
        vec![Action::Warn(Warning::StrayDone { id: 7, count: 1 })]
    );
    assert!(!run.is_over());
    assert_eq!(run.phase(), &Phase::Running);
    run.step(t0, done(RunnerStatus::Ok));
    assert!(run.is_over());
    assert_eq!(run.finish().status, ExecutionStatus::Ok);
}

#[test]
fn protocol_errors_are_logged_and_other_runner_events_ignored() {
    let (mut run, t0) = plain();
    assert_eq!(
        run.step(
            t0,
            event(RunnerEvent::ProtocolError {
                message: "bad line".into()
            })
        ),
        vec![Action::Warn(Warning::Protocol {
            message: "bad line".into()
        })]
    );
    for e in [
        RunnerEvent::Ready,
        RunnerEvent::Unknown,
        RunnerEvent::Stdout { text: "x".into() },
        RunnerEvent::Stderr { text: "y".into() },
        RunnerEvent::Forked {
            pid: 3,
            lost: vec![],
        },
        RunnerEvent::Report {
            items: vec![],
            lost: vec![],
        },
    ] {
        assert_eq!(run.step(t0, event(e)), vec![]);
    }
    assert_eq!(run.phase(), &Phase::Running);
    assert!(run.wants().interrupt);
}

// 7. Interrupt.

#[test]
fn an_interrupt_repeats_sigint_every_250_ms_until_the_kernel_answers() {
    let (mut run, t0) = plain();
    assert_eq!(run.step(t0 + ms(100), Input::Interrupt), vec![sigint()]);
    assert_eq!(run.wants(), wants_only_sigint_at(Some(t0 + ms(350))));
    assert_eq!(
        stopping(&run),
        (StopReason::Interrupt, t0 + ms(2100), t0 + ms(350))
    );
    for (at, next) in [(350, 600), (600, 850), (850, 1100)] {
        assert_eq!(run.step(t0 + ms(at), Input::SigintDue), vec![sigint()]);
        assert_eq!(run.wants().sigint_at, Some(t0 + ms(next)));
    }
    // Output still flows while stopping.
    assert_eq!(run.step(t0 + ms(900), stdout("bye")), vec![out("bye")]);
    assert_eq!(
        run.step(
            t0 + ms(950),
            kernel_error("KeyboardInterrupt", "", &["Traceback", "KeyboardInterrupt"])
        ),
        vec![error(
            "KeyboardInterrupt",
            "",
            "Traceback\nKeyboardInterrupt"
        )]
    );
    assert_eq!(
        run.step(t0 + ms(960), done(RunnerStatus::Interrupted)),
        vec![]
    );
    assert!(run.is_over());
    assert_eq!(
        run.finish(),
        Ending {
            notice: None,
            status: ExecutionStatus::Interrupted,
            death: None,
        }
    );
}

/// What an interrupted cell's `done` (without an error event before it) emits, and how the run
/// ends: an error counts as interrupted, an interrupted done is a keyboard interrupt, an ok one
/// stays ok.
#[test]
fn an_interrupted_cells_done_decides_how_it_ends() {
    for (case, status, emitted, ending) in [
        (
            "done error counts as interrupted",
            RunnerStatus::Error,
            vec![error("Error", "the cell failed", "")],
            ExecutionStatus::Interrupted,
        ),
        (
            "done interrupted without an error event is a keyboard interrupt",
            RunnerStatus::Interrupted,
            vec![error("KeyboardInterrupt", "interrupted", "")],
            ExecutionStatus::Interrupted,
        ),
        (
            "done ok despite the interrupt is ok",
            RunnerStatus::Ok,
            vec![],
            ExecutionStatus::Ok,
        ),
    ] {
        assert_eq!(
            emitted_and_status(vec![(0, Input::Interrupt), (1, done(status))]),
            (emitted, ending),
            "{case}"
        );
    }
}

// 8. Interrupt during grace.

#[test]
fn interrupt_timeout_and_disconnect_during_the_grace_period_change_nothing() {
    let (mut run, t0) = new_run(Some(ms(1500)), GRACE, BIG);
    run.step(t0 + ms(100), Input::Interrupt);
    let before = run.phase().clone();
    for input in [Input::Interrupt, Input::ClientGone, Input::Deadline] {
        assert_eq!(run.step(t0 + ms(1600), input), vec![]);
        assert_eq!(run.phase(), &before);
    }
    // Still an interrupt, not a timeout: the kernel's error is not renamed.
    assert_eq!(
        run.step(t0 + ms(1700), kernel_error("KeyboardInterrupt", "", &[])),
        vec![error("KeyboardInterrupt", "", "")]
    );
    run.step(t0 + ms(1701), done(RunnerStatus::Interrupted));
    assert_eq!(run.finish().status, ExecutionStatus::Interrupted);
}

#[test]
fn an_interrupt_during_a_timeouts_grace_period_keeps_it_a_timeout() {
    let (mut run, t0) = new_run(Some(ms(1500)), GRACE, BIG);
    assert_eq!(run.step(t0 + ms(1500), Input::Deadline), vec![sigint()]);
    assert_eq!(run.step(t0 + ms(1600), Input::Interrupt), vec![]);
    assert_eq!(stopping(&run).0, StopReason::Timeout);
    run.step(t0 + ms(1700), done(RunnerStatus::Interrupted));
    assert_eq!(run.finish().status, ExecutionStatus::Timeout);
}

// 9. Timeout.

#[test]
fn a_timeout_interrupts_and_the_kernels_error_says_timeout() {
    let (mut run, t0) = new_run(Some(ms(1500)), GRACE, BIG);
    assert_eq!(run.step(t0 + ms(1500), Input::Deadline), vec![sigint()]);
    assert_eq!(
        stopping(&run),
        (StopReason::Timeout, t0 + ms(3500), t0 + ms(1750))
    );
    assert_eq!(run.wants().deadline, None);
    assert_eq!(run.step(t0 + ms(1750), Input::SigintDue), vec![sigint()]);
    assert_eq!(
        run.step(
            t0 + ms(1800),
            kernel_error("KeyboardInterrupt", "", &["Traceback", "KeyboardInterrupt"])
        ),
        vec![error(
            "Timeout",
            TIMEOUT_VALUE,
            "Traceback\nKeyboardInterrupt"
        )]
    );
    assert_eq!(
        run.step(t0 + ms(1801), done(RunnerStatus::Interrupted)),
        vec![]
    );
    assert_eq!(run.finish().status, ExecutionStatus::Timeout);
}

#[test]
fn a_timeout_without_an_error_event_adds_the_timeout_error() {
    let (mut run, t0) = new_run(Some(ms(1500)), GRACE, BIG);
    run.step(t0 + ms(1500), Input::Deadline);
    assert_eq!(
        run.step(t0 + ms(1600), done(RunnerStatus::Interrupted)),
        vec![error("Timeout", TIMEOUT_VALUE, "")]
    );
    assert_eq!(run.finish().status, ExecutionStatus::Timeout);
}

#[test]
fn a_timed_out_cell_is_a_timeout_whatever_done_says() {
    for status in [RunnerStatus::Ok, RunnerStatus::Error] {
        let (mut run, t0) = new_run(Some(ms(1500)), GRACE, BIG);
        run.step(t0 + ms(1500), Input::Deadline);
        run.step(t0 + ms(1501), done(status));
        assert_eq!(run.finish().status, ExecutionStatus::Timeout, "{status:?}");
    }
}

// 10. Client disconnect.

#[test]
fn a_client_that_goes_away_interrupts_the_cell() {
    let (mut run, t0) = plain();
    assert_eq!(run.step(t0 + ms(20), Input::ClientGone), vec![sigint()]);
    assert_eq!(
        stopping(&run),
        (StopReason::ClientGone, t0 + ms(2020), t0 + ms(270))
    );
    assert!(!run.wants().client_gone);
    assert_eq!(run.step(t0 + ms(270), Input::SigintDue), vec![sigint()]);
    // Events go on (the emitter drops them).
    assert_eq!(run.step(t0 + ms(300), stdout("x")), vec![out("x")]);
    assert_eq!(
        run.step(t0 + ms(301), kernel_error("KeyboardInterrupt", "", &[])),
        vec![error("KeyboardInterrupt", "", "")]
    );
    run.step(t0 + ms(302), done(RunnerStatus::Error));
    assert_eq!(run.finish().status, ExecutionStatus::Interrupted);
}

// 11. Grace over.

#[test]
fn a_cell_that_does_not_stop_within_the_grace_period_is_killed_once() {
    let (mut run, t0) = new_run(None, ms(600), BIG);
    run.step(t0, Input::Interrupt);
    assert_eq!(run.step(t0 + ms(250), Input::SigintDue), vec![sigint()]);
    assert_eq!(run.wants().sigint_at, Some(t0 + ms(500)));
    assert_eq!(run.step(t0 + ms(500), Input::SigintDue), vec![sigint()]);
    // The last repeat falls on the end of the grace period.
    assert_eq!(run.wants().sigint_at, Some(t0 + ms(600)));
    assert_eq!(run.step(t0 + ms(600), Input::SigintDue), vec![sigkill()]);
    assert_eq!(
        run.phase(),
        &Phase::Killed {
            reason: StopReason::Interrupt
        }
    );
    assert_eq!(run.wants(), wants_only_sigint_at(None));
    assert_eq!(run.step(t0 + ms(900), Input::SigintDue), vec![]);
    assert_eq!(run.step(t0 + ms(900), Input::Interrupt), vec![]);
    assert_eq!(run.step(t0 + ms(950), exited(ExitInfo::Signal(9))), vec![]);
    assert!(run.is_over());
    assert_eq!(
        run.finish(),
        Ending {
            notice: None,
            status: ExecutionStatus::KernelDied,
            death: Some(Death {
                exit: ExitInfo::Signal(9),
                unresponsive: true,
            }),
        }
    );
}

#[test]
fn a_grace_period_shorter_than_the_cadence_kills_at_the_first_repeat() {
    let (mut run, t0) = new_run(None, ms(100), BIG);
    run.step(t0, Input::ClientGone);
    assert_eq!(run.wants().sigint_at, Some(t0 + ms(250)));
    assert_eq!(run.step(t0 + ms(250), Input::SigintDue), vec![sigkill()]);
    assert!(matches!(run.phase(), Phase::Killed { .. }));
}

#[test]
fn a_killed_kernel_that_still_answers_done_ends_the_run_without_a_death() {
    let (mut run, t0) = new_run(Some(ms(1500)), ms(100), BIG);
    run.step(t0 + ms(1500), Input::Deadline);
    assert_eq!(run.step(t0 + ms(1750), Input::SigintDue), vec![sigkill()]);
    // The timeout's renaming still applies after the kill.
    assert_eq!(
        run.step(t0 + ms(1760), kernel_error("KeyboardInterrupt", "", &[])),
        vec![error("Timeout", TIMEOUT_VALUE, "")]
    );
    run.step(t0 + ms(1761), done(RunnerStatus::Interrupted));
    let ending = run.finish();
    assert_eq!(ending.status, ExecutionStatus::Timeout);
    assert_eq!(ending.death, None);
}

// 12. Kernel crash.

#[test]
fn a_kernel_crash_mid_run_ends_it_as_kernel_died() {
    let (mut run, t0) = new_run(None, GRACE, 3);
    assert_eq!(run.step(t0, stdout("abcdef")), vec![out("abc")]);
    assert_eq!(run.step(t0 + ms(5), exited(ExitInfo::Code(1))), vec![]);
    assert!(run.is_over());
    // Nothing after the exit counts.
    assert_eq!(run.step(t0 + ms(6), done(RunnerStatus::Ok)), vec![]);
    assert_eq!(run.step(t0 + ms(6), Input::Interrupt), vec![]);
    let ending = run.finish();
    assert_eq!(ending.status, ExecutionStatus::KernelDied);
    assert!(ending.notice.unwrap().contains("3 bytes were dropped"));
    let death = ending.death.unwrap();
    assert_eq!(
        death,
        Death {
            exit: ExitInfo::Code(1),
            unresponsive: false,
        }
    );
    assert_eq!(
        death.report(None, || false, Language::Python, GRACE, None),
        DeathReport {
            name: "KernelDied",
            message: "the python kernel exited (exit code 1); the context was restarted and its \
                      state was lost"
                .into(),
            replace: true,
        }
    );
}

#[test]
fn a_pump_that_ends_is_a_death_with_an_unknown_exit() {
    let (mut run, t0) = plain();
    assert_eq!(run.step(t0, Input::PumpEnded), vec![]);
    let ending = run.finish();
    assert_eq!(ending.status, ExecutionStatus::KernelDied);
    assert_eq!(
        ending.death,
        Some(Death {
            exit: ExitInfo::Unknown,
            unresponsive: false,
        })
    );
}

#[test]
fn a_kernel_that_dies_while_stopping_but_before_the_kill_is_not_unresponsive() {
    let (mut run, t0) = new_run(Some(ms(1500)), GRACE, BIG);
    run.step(t0 + ms(1500), Input::Deadline);
    run.step(t0 + ms(1600), exited(ExitInfo::Signal(11)));
    let ending = run.finish();
    // Kernel death wins over the timeout.
    assert_eq!(ending.status, ExecutionStatus::KernelDied);
    let death = ending.death.unwrap();
    assert!(!death.unresponsive);
    assert_eq!(
        death
            .report(None, || false, Language::Javascript, GRACE, None)
            .message,
        "the javascript kernel exited (killed by signal 11); the context was restarted and its \
         state was lost"
    );
}

#[test]
fn an_unresponsive_kernel_is_reported_with_the_grace_period_and_oom_is_not_asked() {
    let death = Death {
        exit: ExitInfo::Signal(9),
        unresponsive: true,
    };
    assert_eq!(
        death.report(
            None,
            || panic!("oom asked"),
            Language::Python,
            ms(2000),
            None
        ),
        DeathReport {
            name: "KernelDied",
            message: "the python kernel did not stop within 2000 ms of an interrupt and was \
                      killed; the context was restarted and its state was lost"
                .into(),
            replace: true,
        }
    );
}

#[test]
fn an_oom_kill_is_reported_with_the_limit_that_applies() {
    let death = Death {
        exit: ExitInfo::Signal(9),
        unresponsive: false,
    };
    let with_limit = death.report(None, || true, Language::Python, GRACE, Some(256));
    assert_eq!(with_limit.name, "KernelDied");
    assert_eq!(
        with_limit.message,
        "the python kernel was killed by the out-of-memory killer (the context's memory limit \
         is 256 MiB); the context was restarted and its state was lost"
    );
    assert!(with_limit.replace);
    let sandbox = death.report(None, || true, Language::Bash, GRACE, None);
    assert_eq!(
        sandbox.message,
        "the bash kernel was killed by the out-of-memory killer (the sandbox's memory limit was \
         reached); the context was restarted and its state was lost"
    );
    let not_oom = death.report(None, || false, Language::Bash, GRACE, Some(256));
    assert_eq!(
        not_oom.message,
        "the bash kernel exited (killed by SIGKILL, e.g. out of memory); the context was \
         restarted and its state was lost"
    );
}

// 13. Restart / delete during the run.

#[test]
fn a_restart_or_delete_during_the_run_is_reported_as_such_and_not_replaced() {
    for unresponsive in [false, true] {
        let death = Death {
            exit: ExitInfo::Signal(9),
            unresponsive,
        };
        let oom = || -> bool { panic!("oom asked") };
        assert_eq!(
            death.report(Some(Replace::Restart), oom, Language::Python, GRACE, None),
            DeathReport {
                name: "ContextRestarted",
                message: "the context was restarted; its state was cleared".into(),
                replace: false,
            }
        );
        assert_eq!(
            death.report(Some(Replace::Delete), oom, Language::Python, GRACE, None),
            DeathReport {
                name: "ContextDeleted",
                message: "the context was deleted".into(),
                replace: false,
            }
        );
    }
}

// 14. The cell could not be sent.

#[test]
fn a_cell_that_cannot_be_sent_kills_the_kernel_and_its_exit_ends_the_run() {
    let (mut run, t0) = plain();
    assert_eq!(run.send_failed(), vec![sigkill()]);
    assert!(!run.is_over());
    run.step(t0 + ms(1), exited(ExitInfo::Signal(9)));
    let ending = run.finish();
    assert_eq!(ending.status, ExecutionStatus::KernelDied);
    assert_eq!(
        ending.death,
        Some(Death {
            exit: ExitInfo::Signal(9),
            unresponsive: false,
        })
    );
}
