use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::CommandTable;
use crate::protocol::Request;
use crate::reply;

use super::{copy_target, renamed, request_of};

fn request(words: &[&str]) -> Request {
    let args: SmallVec<[Bytes; 4]> = words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect();
    request_of(args)
}

fn renamed_in_db3(words: &[&str]) -> Vec<String> {
    let table = CommandTable::builtin();
    let request = request(words);
    let spec = table.lookup(&request.args).expect("a known command");
    let out = renamed(spec, &request, b"__db3:");
    out.args
        .iter()
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

#[test]
fn every_key_position_gets_the_prefix_and_nothing_else() {
    assert_eq!(renamed_in_db3(&["SET", "k", "v"]), ["SET", "__db3:k", "v"]);
    assert_eq!(
        renamed_in_db3(&["MSET", "{t}a", "1", "{t}b", "2"]),
        ["MSET", "__db3:{t}a", "1", "__db3:{t}b", "2"]
    );
    assert_eq!(
        renamed_in_db3(&["EVAL", "return 1", "2", "a", "b", "argv"]),
        ["EVAL", "return 1", "2", "__db3:a", "__db3:b", "argv"]
    );
    assert_eq!(
        renamed_in_db3(&["XREAD", "COUNT", "1", "STREAMS", "s1", "s2", "0", "0"]),
        ["XREAD", "COUNT", "1", "STREAMS", "__db3:s1", "__db3:s2", "0", "0"]
    );
    assert_eq!(
        renamed_in_db3(&["BLMPOP", "0", "2", "a", "b", "LEFT"]),
        ["BLMPOP", "0", "2", "__db3:a", "__db3:b", "LEFT"]
    );
    assert_eq!(
        renamed_in_db3(&["PUBLISH", "ch", "m"]),
        ["PUBLISH", "ch", "m"]
    );
}

#[test]
fn the_renamed_frame_is_the_renamed_arguments() {
    let table = CommandTable::builtin();
    let original = request(&["GET", "k"]);
    let spec = table.lookup(&original.args).unwrap();
    let out = renamed(spec, &original, b"__db3:");
    assert_eq!(&out.raw[..], b"*2\r\n$3\r\nGET\r\n$7\r\n__db3:k\r\n");
}

#[test]
fn sort_patterns_are_the_databases_but_get_hash_and_limit_are_not() {
    assert_eq!(
        renamed_in_db3(&[
            "SORT", "l", "LIMIT", "0", "5", "BY", "w_*", "GET", "#", "GET", "o_*->f", "STORE", "d"
        ]),
        [
            "SORT",
            "__db3:l",
            "LIMIT",
            "0",
            "5",
            "BY",
            "__db3:w_*",
            "GET",
            "#",
            "GET",
            "__db3:o_*->f",
            "STORE",
            "__db3:d"
        ]
    );
}

#[test]
fn copy_db_names_a_database_within_range() {
    let args = request(&["COPY", "a", "b", "DB", "5", "REPLACE"]).args;
    assert_eq!(copy_target(&args, 16), Ok(Some(5)));
    let args = request(&["COPY", "a", "b", "REPLACE"]).args;
    assert_eq!(copy_target(&args, 16), Ok(None));
    let args = request(&["COPY", "a", "b", "DB", "16"]).args;
    assert_eq!(copy_target(&args, 16), Err(reply::text::SELECT_RANGE));
    let args = request(&["COPY", "a", "b", "DB", "-1"]).args;
    assert_eq!(copy_target(&args, 16), Err(reply::text::SELECT_RANGE));
    let args = request(&["COPY", "a", "b", "DB", "x"]).args;
    assert_eq!(copy_target(&args, 16), Err(reply::text::NOT_AN_INTEGER));
}
