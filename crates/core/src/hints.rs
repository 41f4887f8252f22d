//! What an agent needs to get out of a program that holds the terminal: the key or line that
//! leaves a known pager, editor, monitor or REPL, by the foreground program's name. A program
//! not listed gets no hint (never a guess).

/// How to leave the program named `program` (as `/proc/<pid>/comm` names it), for a model to
/// act on; `None` for a program not known here, or the shell.
pub fn leave_hint(program: &str) -> Option<&'static str> {
    let hint = match program {
        "less" | "more" | "most" | "man" | "pager" => "a pager: send \"q\" to leave it",
        "vim" | "vi" | "nvim" | "view" | "vim.basic" | "vim.tiny" => {
            "an editor: send Escape then \":q!\" and Enter to leave without saving"
        }
        "nano" => "an editor: send Ctrl-X (\"\\u0018\") to leave it",
        "emacs" => "an editor: send Ctrl-X Ctrl-C (\"\\u0018\\u0003\") to leave it",
        "top" | "htop" | "btop" | "atop" | "iotop" => "a monitor: send \"q\" to leave it",
        "watch" | "tail" => "it runs until interrupted: send Ctrl-C (\"\\u0003\") to stop it",
        "python" | "python3" | "ipython" | "ipython3" => {
            "a Python REPL: send \"exit()\" with submit to leave it"
        }
        "node" => "a Node.js REPL: send \".exit\" with submit to leave it",
        "irb" | "pry" => "a Ruby REPL: send \"exit\" with submit to leave it",
        "psql" => "a PostgreSQL shell: send \"\\\\q\" with submit to leave it",
        "mysql" | "mariadb" => "a SQL shell: send \"exit\" with submit to leave it",
        "sqlite3" => "an SQLite shell: send \".quit\" with submit to leave it",
        "ghci" => "a Haskell REPL: send \":quit\" with submit to leave it",
        "bc" | "gdb" | "lldb" => "an interactive program: send \"quit\" with submit to leave it",
        "ssh" => "a remote shell: send \"exit\" with submit to end it",
        _ => return None,
    };
    Some(hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_programs_have_a_way_out_and_shells_none() {
        assert!(leave_hint("less").is_some_and(|h| h.contains("\"q\"")));
        assert!(leave_hint("vim").is_some_and(|h| h.contains(":q!")));
        assert!(leave_hint("python3").is_some_and(|h| h.contains("exit()")));
        assert_eq!(leave_hint("bash"), None);
        assert_eq!(leave_hint("make"), None);
    }
}
