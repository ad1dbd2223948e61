//! The protocol channel: what a worker may say (`Message`), what sweepd makes of each line
//! (`Event`), and the parsing of one line. The wire format is documented in `docs/protocol.md`;
//! every line is bounded ([`MAX_LINE`]) and anything that is not a protocol message becomes
//! [`Event::Garbage`] for the caller to judge, never an error that stops the daemon.

use super::clip;
use serde_json::Value;
use std::process::ExitStatus;

/// The fd number the channel has in every worker (`SWEEPD_FD`).
pub const CHANNEL_FD: i32 = 3;
/// The longest protocol line accepted; a longer one is a protocol error.
pub const MAX_LINE: usize = 1 << 20;

/// A message from a worker (see docs/protocol.md).
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Ready,
    Report {
        trial_id: i64,
        step: i64,
        value: f64,
    },
    Result {
        trial_id: i64,
        value: Result<f64, String>,
    },
    Pruned {
        trial_id: i64,
    },
    Error {
        trial_id: i64,
        exc_type: String,
        message: String,
        traceback: String,
    },
    Heartbeat,
    /// A well-formed message of a type this version does not know: ignored.
    Other(String),
}

/// What happened next on a worker.
#[derive(Debug)]
pub enum Event {
    Msg(Message),
    /// A line that is not a protocol message; the text says why.
    Garbage(String),
    /// The worker closed its end of the channel but its process has not exited (yet). Said
    /// once; after it, only `Exited` follows. What it means is the caller's to decide: a
    /// persistent worker that keeps running without a channel can never finish its trial.
    Closed,
    Exited(ExitStatus),
}

/// Parses one protocol line.
pub fn parse_line(line: &str) -> Event {
    let v: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Event::Garbage(format!("not a JSON object: {}", clip(line, 200))),
    };
    let trial_id = v["trial_id"].as_i64();
    let ty = v["type"].as_str().unwrap_or_default();
    let need_id = |m: fn(i64) -> Message| match trial_id {
        Some(id) => Event::Msg(m(id)),
        None => Event::Garbage(format!("`{ty}` without trial_id: {}", clip(line, 200))),
    };
    match ty {
        "ready" => Event::Msg(Message::Ready),
        "heartbeat" => Event::Msg(Message::Heartbeat),
        "pruned" => need_id(|trial_id| Message::Pruned { trial_id }),
        "report" => match (trial_id, v["step"].as_i64(), number(&v["value"])) {
            (Some(trial_id), Some(step), Ok(value)) => Event::Msg(Message::Report {
                trial_id,
                step,
                value,
            }),
            _ => Event::Garbage(format!("malformed report: {}", clip(line, 200))),
        },
        "result" => match trial_id {
            Some(trial_id) => Event::Msg(Message::Result {
                trial_id,
                value: number(&v["value"]),
            }),
            None => Event::Garbage(format!("result without trial_id: {}", clip(line, 200))),
        },
        "error" => match trial_id {
            Some(trial_id) => Event::Msg(Message::Error {
                trial_id,
                exc_type: v["exc_type"].as_str().unwrap_or("Exception").to_owned(),
                message: v["message"].as_str().unwrap_or_default().to_owned(),
                traceback: v["traceback"].as_str().unwrap_or_default().to_owned(),
            }),
            None => Event::Garbage(format!("error without trial_id: {}", clip(line, 200))),
        },
        "" => Event::Garbage(format!("message without a type: {}", clip(line, 200))),
        other => Event::Msg(Message::Other(other.to_owned())),
    }
}

/// A protocol number: JSON number, or "nan"/"inf"/"-inf" (JSON has no non-finite numbers).
fn number(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| n.to_string()),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "nan" => Ok(f64::NAN),
            "inf" | "+inf" | "infinity" => Ok(f64::INFINITY),
            "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(clip(s, 200)),
        },
        other => Err(clip(&other.to_string(), 200)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_message_kind() {
        assert!(matches!(
            parse_line(r#"{"type":"ready","pid":1,"protocol":1}"#),
            Event::Msg(Message::Ready)
        ));
        match parse_line(r#"{"type":"report","trial_id":3,"step":2,"value":"nan"}"#) {
            Event::Msg(Message::Report {
                trial_id: 3,
                step: 2,
                value,
            }) => assert!(value.is_nan()),
            e => panic!("{e:?}"),
        }
        match parse_line(r#"{"type":"result","trial_id":3,"value":"abc"}"#) {
            Event::Msg(Message::Result { value: Err(s), .. }) => assert_eq!(s, "abc"),
            e => panic!("{e:?}"),
        }
        assert!(matches!(
            parse_line(r#"{"type":"result","trial_id":3,"value":"-inf"}"#),
            Event::Msg(Message::Result { value: Ok(v), .. }) if v == f64::NEG_INFINITY
        ));
        assert!(matches!(
            parse_line(r#"{"type":"future_thing"}"#),
            Event::Msg(Message::Other(_))
        ));
    }

    #[test]
    fn garbage_is_reported_not_fatal() {
        assert!(matches!(parse_line("this is not json"), Event::Garbage(_)));
        assert!(matches!(parse_line("[1,2]"), Event::Garbage(_)));
        assert!(matches!(
            parse_line(r#"{"type":"result"}"#),
            Event::Garbage(_)
        ));
        assert!(matches!(
            parse_line(r#"{"type":"report","trial_id":1}"#),
            Event::Garbage(_)
        ));
    }
}
