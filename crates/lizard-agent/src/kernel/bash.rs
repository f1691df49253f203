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
    fn exec_line_sets_and_restores_env() {
        let env = [("A".to_string(), "1 2".to_string())].into();
        let l = exec_line(7, Path::new("/tmp/c.sh"), &env);
        assert!(l.contains("__lz_env_set A '1 2'"));
        assert!(l.contains("source '/tmp/c.sh' </dev/null"));
        assert!(l.contains("__lz_done 7 $__lz_s"));
        assert!(l.ends_with('\n'));
    }
}
