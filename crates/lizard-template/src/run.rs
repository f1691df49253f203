//! Running the build's external commands (debootstrap, chroot, npm, tar, mount): output is forwarded
//! line by line to [`Progress::message`] as it comes, the last lines are kept for the error, and the
//! stdout can be returned to the caller.
//!
//! It does not retry, time out or kill commands: a stuck download is the user's to interrupt.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use crate::error::{Result, TemplateError};
use crate::Progress;

/// Lines of output kept for a failed command's error.
const TAIL_LINES: usize = 30;
/// Bytes of stdout kept for the caller.
const STDOUT_LIMIT: usize = 64 * 1024;

/// A command line for messages: the program and its arguments, shortened.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    if s.len() > 300 {
        let mut cut = 300;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Runs `cmd` (stdin from /dev/null), forwarding each output line to `progress.message`; returns
/// its stdout (at most 64 KiB). A non-zero exit is a [`TemplateError::Command`] with the last lines.
pub(crate) fn run(
    step: &'static str,
    cmd: &mut Command,
    progress: &mut dyn Progress,
) -> Result<String> {
    let command = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| TemplateError::Spawn {
            step,
            command: command.clone(),
            source,
        })?;
    let (tx, rx) = mpsc::channel::<(bool, String)>();
    let readers = [
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .enumerate()
    .filter_map(|(i, r)| r.map(|r| (i == 0, r)))
    .map(|(is_stdout, r)| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(r);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end_matches(['\n', '\r']).to_owned();
                        if tx.send((is_stdout, line)).is_err() {
                            break;
                        }
                    }
                }
            }
        })
    })
    .collect::<Vec<_>>();
    drop(tx);
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let mut stdout = String::new();
    for (is_stdout, line) in rx {
        if is_stdout && stdout.len() + line.len() < STDOUT_LIMIT {
            stdout.push_str(&line);
            stdout.push('\n');
        }
        if !line.trim().is_empty() {
            progress.message(&line);
        }
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    for r in readers {
        let _ = r.join();
    }
    let status = child.wait().map_err(|source| TemplateError::Spawn {
        step,
        command: command.clone(),
        source,
    })?;
    if status.success() {
        Ok(stdout)
    } else {
        Err(TemplateError::Command {
            step,
            command,
            status,
            tail: Vec::from(tail).join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Lines(Vec<String>);
    impl Progress for Lines {
        fn step(&mut self, _: usize, _: usize, _: &str) {}
        fn message(&mut self, line: &str) {
            self.0.push(line.to_owned());
        }
    }

    #[test]
    fn forwards_lines_and_returns_stdout() {
        let mut p = Lines::default();
        let out = run(
            "test",
            Command::new("sh").args(["-c", "echo one; echo two >&2; printf three"]),
            &mut p,
        )
        .unwrap();
        assert_eq!(out, "one\nthree\n");
        p.0.sort();
        assert_eq!(p.0, vec!["one", "three", "two"]);
    }

    #[test]
    fn failure_carries_step_command_and_tail() {
        let mut p = Lines::default();
        let err = run(
            "npm",
            Command::new("sh").args([
                "-c",
                "for i in $(seq 1 40); do echo line$i >&2; done; exit 3",
            ]),
            &mut p,
        )
        .unwrap_err();
        let TemplateError::Command {
            step,
            command,
            status,
            tail,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(*step, "npm");
        assert!(command.starts_with("sh -c for i"));
        assert_eq!(status.code(), Some(3));
        assert!(
            tail.starts_with("line11\n") && tail.ends_with("line40"),
            "{tail}"
        );
        assert!(err.to_string().contains("step npm"));
        let missing = run("x", &mut Command::new("/nonexistent/prog"), &mut p).unwrap_err();
        assert!(matches!(missing, TemplateError::Spawn { .. }));
    }
}
