//! XREAD over streams in several slots, with and without BLOCK, through the proxy in front
//! of a 3-master cluster, each stream on another master: with entries present (or none, or
//! a wrong type, or bad arguments) every reply equals what one redis-server 7.0 gives for
//! the same sequence, in RESP2 and RESP3; a blocked client is served by the first XADD to
//! any of its streams with only what is new after its IDs (`$` fixed when it called);
//! CLIENT UNBLOCK ends the wait; a client that goes away leaves no wait behind; more than
//! 16 streams are polled; in a selected database the reply names the client's key; and
//! `refuse` answers `-CROSSSLOT` naming the setting of each form.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use common::{replay_on_both, shared_cluster, wait_until, Proxy, Raw, Standalone};

fn proxy() -> &'static Proxy {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    PROXY.get_or_init(|| Proxy::start(&["--cluster", &shared_cluster().seeds_arg()]))
}

/// The tests count blocked connections on the shared masters: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sequences run on one redis-server and through the proxy, `{a}` `{b}` `{c}` the streams.
const SEQUENCES: &[&str] = &[
    // Entries in two of three streams: both, in the client's order, whatever BLOCK says.
    "XADD {c} 1-1 f v|XADD {a} 2-1 g w|XADD {a} 2-2 h x|XREAD STREAMS {a} {b} {c} 0 0 0|XREAD STREAMS {c} {b} {a} 0 0 2-1|XREAD COUNT 1 STREAMS {a} {b} {c} 0 0 0|XREAD BLOCK 100 STREAMS {b} {a} 0 0|XREAD COUNT -3 BLOCK 0 STREAMS {a} {c} 1 0-0",
    // Nothing after the IDs: the null array, at once without BLOCK, at the timeout's end
    // with it; `$` never serves at once.
    "XADD {a} 5-1 f v|XREAD STREAMS {a} {b} 5-1 0|XREAD STREAMS {a} {b} $ $|XREAD BLOCK 200 STREAMS {a} {b} {c} 5-1 0 $|XREAD BLOCK 200 STREAMS {a} {c} $ 0",
    // The first error in stream order: a key's type before its ID, before any entries.
    "XADD {a} 1-1 f v|SET {b} str|XREAD STREAMS {a} {b} 0 0|XREAD STREAMS {a} {b} x 0|XREAD STREAMS {a} {b} 0 x|XREAD STREAMS {a} {c} 0 >|XREAD BLOCK 10 STREAMS {c} {b} $ $",
    // Errors before any stream is looked at.
    "XREAD STREAMS {a} {b} 0|XREAD BLOCK x STREAMS {a} {b} 0 0|XREAD BLOCK -1 STREAMS {a} {b} 0 0|XREAD COUNT x STREAMS {a} {b} 0 0|XREAD FOO STREAMS {a} {b} 0 0|XREAD GROUP g c STREAMS {a} {b} 0 0|XREAD NOACK STREAMS {a} {b} 0 0",
];

#[test]
fn replies_with_entries_present_or_none_equal_one_redis() {
    let _serial = serial();
    let standalone = Standalone::start();
    let keys = shared_cluster().keys_on_three_masters("xread:same");
    replay_on_both(
        standalone.addr(),
        proxy().addr(),
        SEQUENCES,
        &keys,
        |step, _| step.contains("BLOCK 200"),
    );
}

/// Connections on every master blocked in XREAD (the probes run XREAD on shared
/// connections too, which are not blocked).
fn waits_on_masters() -> usize {
    shared_cluster().connections_on_masters(&[" cmd=xread ", " flags=b "])
}

#[test]
fn an_xadd_to_any_stream_serves_the_blocked_client_with_what_is_new() {
    let _serial = serial();
    let [a, b, c] = shared_cluster().keys_on_three_masters("xread:push");
    let mut admin = Raw::connect_in(proxy().addr(), false);
    let fill = |text: &str| {
        text.replace("{a}", &a)
            .replace("{b}", &b)
            .replace("{c}", &c)
            .replace("{n}", &a.len().to_string())
    };
    for (resp3, blocking, before, push, served) in [
        // `$` is the last entry when the client called: the older entry is not new.
        (
            false,
            "XREAD BLOCK 0 STREAMS {a} {b} {c} $ $ $",
            "XADD {b} 1-1 old x",
            "XADD {b} 2-1 new y",
            "*1\r\n*2\r\n${n}\r\n{b}\r\n*1\r\n*2\r\n$3\r\n2-1\r\n*2\r\n$3\r\nnew\r\n$1\r\ny\r\n",
        ),
        // Explicit IDs, COUNT, RESP3's map, a timeout that does not end first.
        (
            true,
            "XREAD COUNT 1 BLOCK 5000 STREAMS {a} {b} {c} 3-0 0 0",
            "XADD {a} 3-0 old x",
            "XADD {c} 4-1 f 1 g 2",
            "%1\r\n${n}\r\n{c}\r\n*1\r\n*2\r\n$3\r\n4-1\r\n*4\r\n$1\r\nf\r\n$1\r\n1\r\n$1\r\ng\r\n$1\r\n2\r\n",
        ),
    ] {
        admin.call_line(&fill("DEL {a} {b} {c}"));
        admin.call_line(&fill(before));
        let mut blocked = Raw::connect_in(proxy().addr(), resp3);
        let id = blocked.client_id();
        blocked.send_line(&fill(blocking));
        wait_until("the client blocked", Duration::from_secs(5), || {
            admin.shows_blocked(&id)
        });
        assert_eq!(blocked.reply_within(Duration::from_millis(300)), None);
        admin.call_line(&fill(push));
        let reply = blocked.reply_within(Duration::from_secs(3)).expect("served");
        assert_eq!(reply, fill(served), "{blocking}");
        wait_until("the other waits ended", Duration::from_secs(5), || {
            waits_on_masters() == 0
        });
    }
}

#[test]
fn client_unblock_ends_the_wait_and_a_disconnect_leaves_none() {
    let _serial = serial();
    let [a, b, c] = shared_cluster().keys_on_three_masters("xread:unblock");
    let mut admin = Raw::connect_in(proxy().addr(), false);
    admin.call_line(&format!("DEL {a} {b} {c}"));
    for (mode, answer) in [
        ("TIMEOUT", "*-1\r\n"),
        (
            "ERROR",
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n",
        ),
    ] {
        let mut blocked = Raw::connect_in(proxy().addr(), false);
        let id = blocked.client_id();
        blocked.send_line(&format!("XREAD BLOCK 0 STREAMS {a} {b} {c} $ $ $"));
        wait_until("unblocked", Duration::from_secs(5), || {
            admin.call(&["CLIENT", "UNBLOCK", &id, mode]) == ":1\r\n"
        });
        let reply = blocked
            .reply_within(Duration::from_secs(3))
            .expect("answered");
        assert_eq!(reply, answer, "{mode}");
    }
    wait_until("no wait left", Duration::from_secs(5), || {
        waits_on_masters() == 0
    });
    // A client that goes away ends its waits on every master.
    let mut leaving = Raw::connect_in(proxy().addr(), false);
    let id = leaving.client_id();
    leaving.send_line(&format!("XREAD BLOCK 0 STREAMS {a} {b} {c} 0 0 0"));
    wait_until("waits on every master", Duration::from_secs(5), || {
        admin.shows_blocked(&id) && waits_on_masters() == 3
    });
    drop(leaving);
    wait_until("no wait left", Duration::from_secs(5), || {
        waits_on_masters() == 0
    });
}

#[test]
fn more_than_sixteen_streams_are_polled() {
    let _serial = serial();
    let keys: Vec<String> = (0..20).map(|n| format!("xread:many:{{{n}}}")).collect();
    let mut admin = Raw::connect_in(proxy().addr(), false);
    admin.call(
        &[
            &["DEL"],
            &keys.iter().map(String::as_str).collect::<Vec<_>>()[..],
        ]
        .concat(),
    );
    let mut blocked = Raw::connect_in(proxy().addr(), false);
    let dollars = vec!["$"; keys.len()];
    let command = [
        &["XREAD", "BLOCK", "0", "STREAMS"][..],
        &keys.iter().map(String::as_str).collect::<Vec<_>>(),
        &dollars,
    ]
    .concat();
    blocked.send(&command);
    assert_eq!(blocked.reply_within(Duration::from_millis(300)), None);
    // At most one wait per polling client, on its first stream.
    assert!(waits_on_masters() <= 1, "{}", waits_on_masters());
    let last = &keys[19];
    let started = Instant::now();
    admin.call(&["XADD", last, "9-9", "f", "v"]);
    let reply = blocked
        .reply_within(Duration::from_secs(3))
        .expect("served");
    assert_eq!(
        reply,
        format!(
            "*1\r\n*2\r\n${}\r\n{last}\r\n*1\r\n*2\r\n$3\r\n9-9\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
            last.len()
        )
    );
    // Polled: served within the longest interval, and some slack.
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn in_a_selected_database_the_reply_names_the_clients_key() {
    let [a, b, _] = shared_cluster().keys_on_three_masters("xread:db");
    let mut conn = Raw::connect_in(proxy().addr(), false);
    assert_eq!(conn.call_line("SELECT 5"), "+OK\r\n");
    conn.call_line(&format!("DEL {a} {b}"));
    conn.call_line(&format!("XADD {b} 1-1 f v"));
    assert_eq!(
        conn.call_line(&format!("XREAD STREAMS {a} {b} 0 0")),
        format!(
            "*1\r\n*2\r\n${}\r\n{b}\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
            b.len()
        )
    );
    // Database 0 does not see it.
    assert_eq!(conn.call_line("SELECT 0"), "+OK\r\n");
    assert_eq!(
        conn.call_line(&format!("XREAD STREAMS {a} {b} 0 0")),
        "*-1\r\n"
    );
}

#[test]
fn refused_forms_name_their_setting() {
    let [a, b, _] = shared_cluster().keys_on_three_masters("xread:off");
    let refusal = |setting: &str| {
        format!(
            "-CROSSSLOT Keys in request don't hash to the same slot (emulation off: {setting})\r\n"
        )
    };
    let no_blocking = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "cross_slot.blocking=refuse",
    ]);
    let mut conn = Raw::connect_in(no_blocking.addr(), false);
    assert_eq!(
        conn.call_line(&format!("XREAD BLOCK 10 STREAMS {a} {b} 0 0")),
        refusal("cross_slot.blocking")
    );
    assert_eq!(
        conn.call_line(&format!("XREAD STREAMS {a} {b} 0 0")),
        "*-1\r\n"
    );
    let no_reads = Proxy::start(&[
        "--cluster",
        &shared_cluster().seeds_arg(),
        "--set",
        "cross_slot.reads=refuse",
    ]);
    let mut conn = Raw::connect_in(no_reads.addr(), false);
    assert_eq!(
        conn.call_line(&format!("XREAD COUNT 1 STREAMS {a} {b} 0 0")),
        refusal("cross_slot.reads")
    );
    // XREADGROUP is not emulated across slots.
    assert!(conn
        .call_line(&format!("XREADGROUP GROUP g c STREAMS {a} {b} > >"))
        .starts_with("-CROSSSLOT Keys in request don't hash to the same slot"));
}
