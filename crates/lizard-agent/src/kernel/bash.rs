//! The Bash kernel: a persistent `bash --noprofile --norc` that speaks the runner protocol through a
//! few shell functions.
//!
//! Each cell is written to a file and `source`d in the shell itself (so `cd`, variables, functions and
//! aliases persist), with stdin from `/dev/null` (so a command reading stdin cannot swallow the command
//! stream). A `done` line with the cell's exit status goes to the event fd afterwards. SIGINT is trapped: it
//! returns from the sourced cell instead of ending the shell. `exit` (or `set -e` meeting a failure)
//! ends the shell like it would end a terminal; the context layer reports that as a kernel death.

use std::collections::BTreeMap;
use std::path::Path;

/// Sent once after spawn. Ends with the `ready` event. The event fd moves from 3 to 62, out of the way
/// of user code that opens low fds (`exec 3<>/dev/tcp/...` is common in shell scripts).
pub const PRELUDE: &str = r#"
exec 62>&3 3>&-
shopt -s expand_aliases
set +o history +o monitor 2>/dev/null
PS1= PS2= PS4='+ '
__lz_int=0
__lz_restore=()
__lz_trap_int() { trap '__lz_int=1; return 130 2>/dev/null' INT; }
__lz_env_set() {
  if [[ -v $1 ]]; then __lz_restore+=("export $1=$(printf %q "${!1}")"); else __lz_restore+=("unset $1"); fi
  export "$1=$2"
}
__lz_env_restore() { local c; for c in "${__lz_restore[@]}"; do eval "$c"; done; __lz_restore=(); }
__lz_done() {
  local st=ok
  if [ "$__lz_int" = 1 ]; then st=interrupted; elif [ "$2" != 0 ]; then st=error; fi
  printf '{"ev":"done","id":%s,"status":"%s","exit_code":%s}\n' "$1" "$st" "$2" >&62
}
__lz_json() { local __lz_s=${1//\\/\\\\}; __lz_s=${__lz_s//\"/\\\"}; __lz_s=${__lz_s//$'\n'/\\n}; __lz_s=${__lz_s//$'\t'/\\t}; printf '"%s"' "$__lz_s"; }
__lz_report() {
  local __lz_k __lz_v __lz_sep= __lz_out='{"ev":"report","id":'$1',"items":['
  while IFS=' ' read -r __lz_k __lz_v; do
    __lz_out+="$__lz_sep{\"kind\":$(__lz_json "$__lz_k"),\"name\":$(__lz_json "$__lz_v")}"; __lz_sep=,
  done < "$2"
  __lz_out+='],"lost":['; __lz_sep=
  while IFS=$'\t' read -r __lz_k __lz_v; do
    __lz_out+="$__lz_sep{\"name\":$(__lz_json "$__lz_k"),\"reason\":$(__lz_json "$__lz_v")}"; __lz_sep=,
  done < "$3"
  printf '%s]}\n' "$__lz_out" >&62
}
__lz_special='^(BASH.*|BASHOPTS|SHELLOPTS|EUID|UID|PPID|GROUPS|FUNCNAME|RANDOM|SRANDOM|SECONDS|LINENO|HISTCMD|PIPESTATUS|DIRSTACK|EPOCHREALTIME|EPOCHSECONDS|COMP_.*|PWD|OLDPWD|SHLVL|_|__lz_.*|PS[0-4]|IFS|OPTIND|OPTARG|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|COLUMNS|LINES|LIZARD_.*)$'
__lz_snapshot() {
  local __lz_id=$1 __lz_d=$2 __lz_n __lz_f
  if ! { mkdir -p "$__lz_d" && : > "$__lz_d/vars.sh" && : > "$__lz_d/funcs.sh" && : > "$__lz_d/items" && : > "$__lz_d/lost"; }; then
    __lz_done "$__lz_id" 1; return
  fi
  for __lz_n in $(compgen -v); do
    [[ $__lz_n =~ $__lz_special ]] && continue
    __lz_f=$(declare -p "$__lz_n" 2>/dev/null) || continue
    [[ ${__lz_f#declare -} =~ ^[a-zA-Z-]*r ]] && continue
    printf '%s\n' "declare -g ${__lz_f#declare }" >> "$__lz_d/vars.sh"
    printf 'variable %s\n' "$__lz_n" >> "$__lz_d/items"
  done
  for __lz_n in $(compgen -A function); do
    [[ $__lz_n == __lz_* ]] && continue
    declare -f "$__lz_n" >> "$__lz_d/funcs.sh"
    printf 'function %s\n' "$__lz_n" >> "$__lz_d/items"
  done
  alias -p > "$__lz_d/aliases.sh"
  for __lz_n in $(compgen -a); do printf 'alias %s\n' "$__lz_n" >> "$__lz_d/items"; done
  printf '%s' "$PWD" > "$__lz_d/cwd"
  printf 'cwd %s\n' "$PWD" >> "$__lz_d/items"
  __lz_n=$(jobs -p | wc -l)
  [ "$__lz_n" != 0 ] && printf 'jobs\t%s background job(s): processes do not survive hibernation\n' "$__lz_n" >> "$__lz_d/lost"
  cp "$__lz_d/items" "$__lz_d/saved-items"
  __lz_report "$__lz_id" "$__lz_d/items" "$__lz_d/lost"
  __lz_done "$__lz_id" 0
}
__lz_restore_state() {
  local __lz_id=$1 __lz_d=$2
  : > "$__lz_d/restore-lost"
  source "$__lz_d/funcs.sh" || printf 'functions\tsome function definitions failed to load\n' >> "$__lz_d/restore-lost"
  source "$__lz_d/vars.sh" || printf 'variables\tsome variables failed to load\n' >> "$__lz_d/restore-lost"
  source "$__lz_d/aliases.sh" || printf 'aliases\tsome aliases failed to load\n' >> "$__lz_d/restore-lost"
  cd -- "$(cat "$__lz_d/cwd")" || printf 'cwd\tthe saved working directory is gone\n' >> "$__lz_d/restore-lost"
  __lz_report "$__lz_id" "$__lz_d/saved-items" "$__lz_d/restore-lost"
  __lz_done "$__lz_id" 0
}
__lz_trap_int
printf '{"ev":"ready"}\n' >&62
"#;

/// The command line that runs one cell: set the run's env, source the cell, report, restore.
pub fn exec_line(id: u64, cell_file: &Path, env: &BTreeMap<String, String>) -> String {
    let mut line = String::from("__lz_int=0; ");
    for (k, v) in env {
        // Names were validated by the API layer; values are quoted here.
        line.push_str(&format!("__lz_env_set {k} {}; ", single_quote(v)));
    }
    line.push_str(&format!(
        "if [ \"$__lz_int\" = 0 ]; then source {} </dev/null; __lz_s=$?; else __lz_s=130; fi; \
         trap '' INT; __lz_env_restore; __lz_done {id} $__lz_s; __lz_trap_int\n",
        single_quote(&cell_file.display().to_string())
    ));
    line
}

/// The command line that saves (`snapshot`) or loads (`restore`) the shell's state in `dir`; answered
/// with one `report` event and `done` like a cell.
pub fn hibernate_line(op: &str, id: u64, dir: &Path) -> String {
    let f = if op == "snapshot" {
        "__lz_snapshot"
    } else {
        "__lz_restore_state"
    };
    format!(
        "__lz_int=0; {f} {id} {} </dev/null\n",
        single_quote(&dir.display().to_string())
    )
}

/// The command line that forks the shell into a new kernel whose channels are the FIFOs in `dir`
/// (`kernels/PROTOCOL.md`, "Fork of a live kernel"). It runs at the shell's top level, so the new
/// kernel's read-eval loop is not inside a function (a cell's `declare` stays global). The
/// subshell is the intermediate: with `set -m` its background job (the new kernel) leads a
/// process group of its own and keeps SIGINT (a job without job control ignores it); it says
/// `forked` with that job's pid and exits, so the new kernel's parent is the agent. Those are
/// the only forks: the source's jobs and traps are read in the shell itself (bash ≥ 5.3's
/// `${ cmd; }`; older ones pay one command substitution each) and the jobs counted without `wc`.
/// The new kernel
/// opens its channels, writes `0` into each `tasks` file of `procs` (its new cgroup), sets the
/// source's traps again (a subshell resets them; `trap -p` in a command substitution still shows
/// the shell's own), then the prelude's SIGINT trap, turns job control off again and reads one command line at a time on its new stdin (`eval`: every line the
/// agent sends is one line), surviving a SIGINT while it waits.
pub fn fork_line(id: u64, dir: &Path, procs: &[std::path::PathBuf]) -> String {
    let d = |name: &str| single_quote(&dir.join(name).display().to_string());
    let joins: String = procs
        .iter()
        .map(|p| {
            format!(
                "printf 0 > {} || exit 72; ",
                single_quote(&p.display().to_string())
            )
        })
        .collect();
    format!(
        "__lz_int=0; if (( BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 503 )); \
         then __lz_j=${{ jobs -p; }}; __lz_traps=${{ trap -p; }}; \
         else __lz_j=$(jobs -p); __lz_traps=$(trap -p); fi; __lz_nj=0; \
         if [ -n \"$__lz_j\" ]; then __lz_j=${{__lz_j//[!$'\\n']/}}; __lz_nj=$(( ${{#__lz_j}} + 1 )); fi; \
         ( set -m; {{ exec 0<{c} 1>{o} 2>{e} 62>{v} || exit 71; {joins}\
         eval \"$__lz_traps\"; __lz_trap_int; set +m; printf '{{\"ev\":\"ready\"}}\\n' >&62; \
         while :; do if IFS= read -r __lz_line; then eval \"$__lz_line\"; \
         elif (( $? > 128 )); then continue; else break; fi; done; exit 0; }} & \
         if [ \"$__lz_nj\" != 0 ]; then __lz_l='{{\"name\":\"jobs\",\"reason\":\"'$__lz_nj' background job(s): they stay with the source context\"}}'; else __lz_l=; fi; \
         printf '{{\"ev\":\"forked\",\"id\":{id},\"pid\":%s,\"lost\":[%s]}}\\n' \"$!\" \"$__lz_l\" >&62 ) </dev/null 2>/dev/null; \
         __lz_done {id} $?\n",
        c = d("control"),
        o = d("stdout"),
        e = d("stderr"),
        v = d("events"),
    )
}

/// Quote `s` for bash: inside single quotes everything is literal except `'` itself.
fn single_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_newlines() {
        assert_eq!(single_quote("it's\n$x"), "'it'\\''s\n$x'");
    }

    #[test]
    fn hibernate_lines_call_the_prelude_functions_with_a_quoted_dir() {
        let l = hibernate_line("snapshot", 0, Path::new("/run/lizard/hib it's"));
        assert_eq!(
            l,
            "__lz_int=0; __lz_snapshot 0 '/run/lizard/hib it'\\''s' </dev/null\n"
        );
        assert!(hibernate_line("restore", 0, Path::new("/d")).contains("__lz_restore_state 0 '/d'"));
    }

    #[test]
    fn the_fork_line_is_one_line_that_quotes_its_paths() {
        let l = fork_line(
            0,
            Path::new("/run/x it's.fork"),
            &[std::path::PathBuf::from(
                "/sys/fs/cgroup/memory/ctx-a/tasks",
            )],
        );
        assert!(l.ends_with('\n'));
        assert_eq!(l.matches('\n').count(), 1, "{l}");
        assert!(l.contains("exec 0<'/run/x it'\\''s.fork/control'"), "{l}");
        assert!(l.contains("printf 0 > '/sys/fs/cgroup/memory/ctx-a/tasks' || exit 72"));
        assert!(l.contains("__lz_done 0 $?"));
    }

    #[test]
    fn exec_line_sets_and_restores_env() {
        let env = [("A".to_string(), "1 2".to_string())].into();
        let l = exec_line(7, Path::new("/tmp/c.sh"), &env);
        assert!(l.contains("__lz_env_set A '1 2'"));
        assert!(l.contains("source '/tmp/c.sh' </dev/null"));
        assert!(l.contains("__lz_done 7 $__lz_s"));
        assert!(l.ends_with('\n'));
    }
}
