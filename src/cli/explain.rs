//! `slotbridge explain [--addr HOST:PORT] <command> [args...]`: asks a running proxy how
//! it would carry out a command (`SLOTBRIDGE EXPLAIN`, in-band) and prints its lines.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use slotbridge::protocol::encode::encode_request;

/// Flags of `explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The proxy's client address (its `listen`).
    #[arg(
        long,
        env = "SLOTBRIDGE_LISTEN",
        default_value = "127.0.0.1:6380",
        value_name = "HOST:PORT"
    )]
    pub addr: String,
    /// The proxy user to authenticate as (with `--password`).
    #[arg(long, env = "REDIS_USERNAME")]
    pub user: Option<String>,
    /// The password to AUTH with.
    #[arg(long, env = "REDIS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The command to explain and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// A reply as far as `explain` reads one.
enum Reply {
    Lines(Vec<String>),
    Error(String),
}

/// `slotbridge explain ...`: exit 0 with the lines printed, 1 when the proxy answers an
/// error (printed to stderr) or cannot be reached.
pub fn explain(args: ExplainArgs) -> ExitCode {
    match ask(&args) {
        Ok(Reply::Lines(lines)) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Ok(Reply::Error(text)) => {
            eprintln!("slotbridge: {text}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("slotbridge: {}: {e}", args.addr);
            ExitCode::FAILURE
        }
    }
}

fn ask(args: &ExplainArgs) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(&args.addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    if let Some(password) = &args.password {
        let mut auth: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(user) = &args.user {
            auth.push(user.as_bytes());
        }
        auth.push(password.as_bytes());
        stream.write_all(&encode_request(&auth))?;
        if let Reply::Error(text) = read_reply(&mut reader)? {
            return Ok(Reply::Error(text));
        }
    }
    let mut request: Vec<&[u8]> = vec![b"SLOTBRIDGE", b"EXPLAIN"];
    request.extend(args.command.iter().map(|arg| arg.as_bytes()));
    stream.write_all(&encode_request(&request))?;
    read_reply(&mut reader)
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// One RESP2 reply: an error, a status, or an array of bulk strings (the explanation).
fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let header = read_line(reader)?;
    let (kind, rest) = header.split_at(1.min(header.len()));
    match kind {
        "-" => Ok(Reply::Error(rest.to_string())),
        "+" => Ok(Reply::Lines(vec![rest.to_string()])),
        "*" => {
            let count: usize = rest.parse().map_err(|_| invalid("bad array length"))?;
            let mut lines = Vec::with_capacity(count);
            for _ in 0..count {
                lines.push(read_bulk(reader)?);
            }
            Ok(Reply::Lines(lines))
        }
        _ => Err(invalid("unexpected reply")),
    }
}

fn read_bulk(reader: &mut impl BufRead) -> std::io::Result<String> {
    let header = read_line(reader)?;
    let Some(len) = header.strip_prefix('$') else {
        return Err(invalid("expected a bulk string"));
    };
    let len: usize = len.parse().map_err(|_| invalid("bad bulk length"))?;
    let mut data = vec![0; len + 2];
    reader.read_exact(&mut data)?;
    data.truncate(len);
    Ok(String::from_utf8_lossy(&data).into_owned())
}

fn read_line(reader: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(invalid("connection closed"));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}
