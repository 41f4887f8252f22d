//! `send` answers only what is true: nothing typed before the shell can take it, a program
//! waiting on a socket is not waiting for input, `/dev/tty` readers are seen (and named),
//! output printed between two sends is returned, and the exit code of the command that just
//! ended is in the answer.

use serde_json::{Value, json};

use super::{create, post, start};
use ptyhub_test_support::{data, wait_until};

async fn send(client: &ptyhub_client::Client, id: &str, body: Value) -> Value {
    let answer = post(client, &format!("/v2/pty/sessions/{id}/send"), body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    data(&answer).clone()
}

fn output(answer: &Value) -> &str {
    answer["output"].as_str().unwrap_or_default()
}

/// A fresh terminal (even one whose rc file takes a second) is typed into only once its line
/// editor reads: the question is in the answer and the command was echoed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_send_waits_for_the_shell_and_sees_the_question() {
    let hub = start();
    let client = hub.http();
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    std::fs::write(home.path().join(".bashrc"), "sleep 1\n")
        .unwrap_or_else(|e| panic!("bashrc: {e}"));
    let slow_home = home.path().to_string_lossy().into_owned();
    for try_no in 0..6 {
        let body = if try_no % 2 == 0 {
            json!({ "cwd": "/tmp" })
        } else {
            json!({ "cwd": "/tmp", "env": { "HOME": slow_home.clone() } })
        };
        let id = create(&client, body).await;
        let asked = send(
            &client,
            &id,
            json!({ "text": "read -p 'Name: ' nm; echo hello-$nm", "submit": true }),
        )
        .await;
        assert_eq!(asked["wait_reason"], "stdin_read", "try {try_no}: {asked}");
        assert!(output(&asked).contains("Name: "), "try {try_no}: {asked}");
        assert_eq!(
            output(&asked).matches("read -p").count(),
            1,
            "echoed once, try {try_no}: {asked}"
        );
        assert_eq!(asked["is_at_prompt"], false, "{asked}");
        let answered = send(&client, &id, json!({ "text": "ada", "submit": true })).await;
        assert!(output(&answered).contains("hello-ada"), "{answered}");
        assert_eq!(answered["is_at_prompt"], true, "{answered}");
        assert_eq!(answered["command_exit_code"], 0, "{answered}");
    }
}

/// A program blocked on a socket (in `recv`, and in `select`/`poll` on it) does not wait for
/// input: the answer is `inferred_idle` and says it waits on a socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_hung_on_a_socket_is_not_reading_the_terminal() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    // It says when it is about to block: a Python that is still starting (slow on a busy
    // machine) is quiet and reads nothing too, but waits on nothing yet.
    let connect = "import socket, select; a = socket.socket(); a.bind(('127.0.0.1', 0)); \
                   a.listen(); b = socket.create_connection(a.getsockname()); \
                   print('blocking', flush=True); ";
    for wait in [
        "b.recv(1)",
        "select.select([b], [], [])",
        "p = select.poll(); p.register(b, select.POLLIN); p.poll()",
    ] {
        let command = format!("python3 -c \"{connect}{wait}\"");
        let mut hung = send(
            &client,
            &id,
            json!({ "text": command, "submit": true, "idle_window": 1, "deadline": 20 }),
        )
        .await;
        // Quiet for the idle window while it still starts (over a second beside a busy
        // machine), it is idle on nothing yet: wait on until it said it blocks.
        let mut printed = output(&hung).to_owned();
        for _ in 0..10 {
            if printed.contains("blocking") {
                break;
            }
            hung = send(
                &client,
                &id,
                json!({ "text": "", "idle_window": 1, "deadline": 20 }),
            )
            .await;
            printed.push_str(output(&hung));
        }
        assert!(printed.contains("blocking"), "{wait}: {printed:?}");
        assert_eq!(hung["wait_reason"], "inferred_idle", "{wait}: {hung}");
        assert_eq!(hung["waits_on"], "socket", "{wait}: {hung}");
        assert_eq!(hung["foreground_program"], "python3", "{wait}: {hung}");
        let back = send(&client, &id, json!({ "text": "\u{3}" })).await;
        assert_eq!(back["wait_reason"], "stdin_read", "{back}");
        assert_eq!(back["foreground_program"], "bash", "{back}");
    }
}

/// Programs that read `/dev/tty` rather than fd 0 are seen reading and named: a pager at the
/// end of a pipeline, and a passphrase prompt (a password prompt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_dev_tty_wait_for_input_and_are_named() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp", "cols": 100, "rows": 24 })).await;
    let pager = send(
        &client,
        &id,
        json!({ "text": "seq 1 500 | less", "submit": true, "deadline": 20 }),
    )
    .await;
    assert_eq!(pager["wait_reason"], "stdin_read", "{pager}");
    assert_eq!(pager["foreground_program"], "less", "{pager}");
    assert_eq!(pager["waits_on"], "terminal", "{pager}");
    assert_eq!(pager["input_mode"], "raw", "{pager}");
    // The pager's rendered screen, not the bytes it drew.
    assert_eq!(pager["is_alternate_screen"], true, "{pager}");
    assert_eq!(pager["is_full_screen"], true, "{pager}");
    assert!(output(&pager).starts_with("1\n2\n3\n"), "{pager}");
    assert!(!output(&pager).contains('\u{1b}'), "{pager}");
    assert!(
        pager["hint"].as_str().is_some_and(|h| h.contains("\"q\"")),
        "{pager}"
    );
    let quit = send(&client, &id, json!({ "text": "q" })).await;
    assert_eq!(quit["foreground_program"], "bash", "{quit}");
    assert_eq!(quit["is_alternate_screen"], false, "{quit}");
    assert_eq!(quit["hint"], Value::Null, "{quit}");

    let monitor = send(
        &client,
        &id,
        json!({ "text": "top", "submit": true, "deadline": 20 }),
    )
    .await;
    assert_eq!(monitor["wait_reason"], "stdin_read", "{monitor}");
    assert_eq!(monitor["foreground_program"], "top", "{monitor}");
    assert_eq!(monitor["is_full_screen"], true, "{monitor}");
    assert!(output(&monitor).contains("PID"), "{monitor}");
    assert!(
        output(&monitor).lines().count() <= 24,
        "one screen, not the frames drawn: {monitor}"
    );
    assert!(
        !output(&monitor).ends_with('\n'),
        "no trailing empty rows: {monitor}"
    );
    let left = send(&client, &id, json!({ "text": "q" })).await;
    assert_eq!(left["foreground_program"], "bash", "{left}");

    let repl = send(
        &client,
        &id,
        json!({ "text": "python3 -q", "submit": true, "deadline": 20 }),
    )
    .await;
    assert!(
        repl["hint"].as_str().is_some_and(|h| h.contains("exit()")),
        "{repl}"
    );
    send(&client, &id, json!({ "text": "exit()", "submit": true })).await;

    let secret = send(
        &client,
        &id,
        json!({
            "text": "python3 -c \"import getpass; print('got-' + getpass.getpass('Passphrase: '))\" < /dev/null",
            "submit": true,
            "deadline": 20
        }),
    )
    .await;
    assert_eq!(secret["wait_reason"], "stdin_read", "{secret}");
    assert_eq!(secret["is_password_prompt"], true, "{secret}");
    assert_eq!(secret["foreground_program"], "python3", "{secret}");
    let done = send(&client, &id, json!({ "text": "s3cret", "submit": true })).await;
    assert!(output(&done).contains("got-s3cret"), "{done}");
    assert!(!output(&done).contains("\ns3cret"), "not echoed: {done}");
}

/// What a program prints after a send returned is in the caller's next answer, even an empty
/// send's; the exit code of the command that ended is in the answer that saw it end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_between_sends_is_returned_with_the_exit_code() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let early = send(
        &client,
        &id,
        json!({ "text": "sleep 1; echo installed-ok; (exit 3)", "submit": true, "deadline": 0.3 }),
    )
    .await;
    assert_eq!(early["wait_reason"], "timeout", "{early}");
    assert_eq!(early["command_exit_code"], Value::Null, "{early}");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let later = send(&client, &id, json!({ "text": "" })).await;
    assert_eq!(later["wait_reason"], "stdin_read", "{later}");
    assert!(output(&later).contains("installed-ok"), "{later}");
    assert_eq!(later["command_exit_code"], 3, "{later}");
    assert!(later["command_id"].is_u64(), "{later}");
    // Nothing new: the next empty send returns nothing already given, and no exit code.
    let again = send(&client, &id, json!({ "text": "" })).await;
    assert!(!output(&again).contains("installed-ok"), "{again}");
    assert_eq!(again["command_exit_code"], Value::Null, "{again}");

    let failed = send(&client, &id, json!({ "text": "false", "submit": true })).await;
    assert_eq!(failed["command_exit_code"], 1, "{failed}");
    let ok = send(&client, &id, json!({ "text": "echo fine", "submit": true })).await;
    assert_eq!(ok["command_exit_code"], 0, "{ok}");

    // Input to a program that does not read stays queued, and the answer says so (the
    // program sleeps long enough for two short sends on a busy machine).
    let queued = send(
        &client,
        &id,
        json!({ "text": "sleep 4", "submit": true, "deadline": 0.5 }),
    )
    .await;
    assert_eq!(queued["wait_reason"], "timeout", "{queued}");
    let typed = send(
        &client,
        &id,
        json!({ "text": "abc", "submit": true, "deadline": 0.3 }),
    )
    .await;
    assert_eq!(typed["wait_reason"], "timeout", "{typed}");
    assert_eq!(
        typed["input_queued"], 4,
        "abc and Enter wait unread: {typed}"
    );
    assert_eq!(typed["input"]["written"], 4, "{typed}");

    // With on_timeout flush, what is still unread when the deadline passes never runs.
    wait_until("the shell ran abc and is back at its prompt", || async {
        let now = send(&client, &id, json!({ "text": "", "deadline": 1 })).await;
        (now["is_at_prompt"] == true && now["input_queued"] == 0).then_some(())
    })
    .await;
    send(
        &client,
        &id,
        json!({ "text": "sleep 4", "submit": true, "deadline": 0.3 }),
    )
    .await;
    let flushed = send(
        &client,
        &id,
        json!({ "text": "echo SHOULD-NOT-$((6*7))", "submit": true, "deadline": 0.3, "on_timeout": "flush" }),
    )
    .await;
    assert_eq!(flushed["wait_reason"], "timeout", "{flushed}");
    assert_eq!(flushed["input"]["discarded"], 25, "{flushed}");
    assert_eq!(flushed["input_queued"], 0, "{flushed}");
    // Until the shell is back at its prompt (the sleep takes a few idle answers), nothing
    // that was flushed ever runs.
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + ptyhub_test_support::default_timeout();
    loop {
        let after = send(&client, &id, json!({ "text": "", "deadline": 10 })).await;
        seen.push_str(output(&after));
        if after["wait_reason"] == "stdin_read" && after["is_at_prompt"] == true {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{after}");
    }
    assert!(!seen.contains("SHOULD-NOT-42"), "{seen}");
    let typed = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "xyz" }),
    )
    .await;
    assert_eq!(data(&typed)["bytes"], 3, "{}", typed.body);
    assert_eq!(data(&typed)["written"], 3, "{}", typed.body);
    let bad = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({ "text": "", "on_timeout": "later" }),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
}

/// exec answers as soon as its command asks for input (v2), with the question; the answer is a
/// send, whose answer carries the command's end. What printed after an exec answered is in the
/// caller's next send. v1 exec waits as it always did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_answers_when_its_command_asks_and_send_continues() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let exec = |body: Value| {
        let client = client.clone();
        let path = format!("/v2/pty/sessions/{id}/exec");
        async move {
            let answer = post(&client, &path, body).await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            data(&answer).clone()
        }
    };
    let started = std::time::Instant::now();
    let asked =
        exec(json!({ "command": "read -r -p 'Name: ' n; echo hi-$n; (exit 4)", "timeout": 60 }))
            .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{asked}"
    );
    assert_eq!(asked["status"], "running", "{asked}");
    assert_eq!(asked["wait_reason"], "stdin_read", "{asked}");
    assert!(output(&asked).ends_with("Name: "), "{asked}");
    assert_eq!(asked["running"]["input_mode"], "canonical", "{asked}");
    assert_eq!(asked["running"]["is_echo"], true, "{asked}");
    let answered = send(&client, &id, json!({ "text": "bob", "submit": true })).await;
    assert!(output(&answered).contains("hi-bob"), "{answered}");
    assert_eq!(answered["command_exit_code"], 4, "{answered}");
    assert_eq!(answered["command_id"], asked["command_id"], "{answered}");

    let repl = exec(json!({ "command": "python3 -q", "timeout": 60 })).await;
    assert_eq!(repl["wait_reason"], "stdin_read", "{repl}");
    assert_eq!(repl["running"]["foreground_program"], "python3", "{repl}");
    assert!(
        repl["running"]["hint"]
            .as_str()
            .is_some_and(|h| h.contains("exit()")),
        "{repl}"
    );
    let left = send(&client, &id, json!({ "text": "exit()", "submit": true })).await;
    assert_eq!(left["is_at_prompt"], true, "{left}");
    assert_eq!(left["command_exit_code"], 0, "{left}");

    let done = exec(json!({ "command": "(sleep 1; echo LATE-BG) &" })).await;
    assert!(done.get("running").is_none(), "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done.get("wait_reason").is_none(), "{done}");
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let later = send(&client, &id, json!({ "text": "" })).await;
    assert!(output(&later).contains("LATE-BG"), "{later}");
    assert_eq!(
        later["command_exit_code"],
        Value::Null,
        "already given: {later}"
    );

    let v1 = post(
        &client,
        "/v1/shell/exec",
        json!({ "id": id, "command": "read -r -p 'Again: ' n", "timeout": 1.5 }),
    )
    .await;
    assert_eq!(v1.status, 200, "{}", v1.body);
    assert_eq!(data(&v1)["status"], "running", "{}", v1.body);
    assert!(data(&v1).get("wait_reason").is_none(), "{}", v1.body);
    send(&client, &id, json!({ "text": "x", "submit": true })).await;
    let asked_v1 = post(
        &client,
        "/v1/shell/exec",
        json!({ "id": id, "command": "read -r -p 'Once more: ' n", "timeout": 60, "return_on_input": true }),
    )
    .await;
    assert_eq!(
        data(&asked_v1)["wait_reason"],
        "stdin_read",
        "{}",
        asked_v1.body
    );
    send(&client, &id, json!({ "text": "y", "submit": true })).await;
}

/// send takes exec's output windows for its own answer; a bad window types nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_answers_in_the_window_asked_for() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let grepped = send(
        &client,
        &id,
        json!({ "text": "seq 1 50", "submit": true, "grep": "^4[0-9]$" }),
    )
    .await;
    assert_eq!(grepped["wait_reason"], "stdin_read", "{grepped}");
    let lines: Vec<&str> = output(&grepped).lines().collect();
    assert_eq!(
        lines,
        (40..50)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        "{grepped}"
    );
    assert_eq!(grepped["window"]["matches"], 10, "{grepped}");
    let tail = send(
        &client,
        &id,
        json!({ "text": "seq 1 50", "submit": true, "tail": 2 }),
    )
    .await;
    assert!(output(&tail).starts_with("50\n"), "{tail}");
    assert_eq!(output(&tail).lines().count(), 2, "{tail}");
    let bad = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({ "text": "echo SHOULD-NOT-RUN", "submit": true, "head": 1, "tail": 1 }),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.body["error"]["code"], "INVALID_INPUT", "{}", bad.body);
    let after = send(&client, &id, json!({ "text": "" })).await;
    assert!(!output(&after).contains("SHOULD-NOT-RUN"), "{after}");
}
