//! The protocol channel: sweepd's end of the worker's socket (JSON lines each way), what a worker
//! may say (`Message`), and what sweepd makes of each line (`Event`). The wire format is
//! documented in `docs/protocol.md`; every line is bounded ([`MAX_LINE`]) and anything that is not
//! a protocol message becomes [`Event::Garbage`] for the caller to judge, never an error that
//! stops the daemon. Nothing a worker does (or fails to do) with its end can wedge sweepd's:
//! reads end at end of file, sends are bounded in time.

use super::clip;
use futures::StreamExt;
use serde_json::Value;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// The fd number the channel has in every worker (`SWEEPD_FD`).
pub const CHANNEL_FD: i32 = 3;
/// The longest protocol line accepted; a longer one is a protocol error.
pub const MAX_LINE: usize = 1 << 20;
/// How long a send may wait for a worker that does not read its channel.
const SEND_LIMIT: Duration = Duration::from_secs(10);
/// The most a drain after a worker's exit reads (a grandchild may keep the channel open and
/// write to it): what a worker says as it exits is a few messages, not megabytes.
const MAX_DRAIN_BYTES: usize = 4 * MAX_LINE;
/// The deepest nesting serde_json reads (its recursion limit): the message's own object and
/// 126 levels of arrays and objects inside it.
pub const MAX_DEPTH: usize = 127;

/// A message from a worker (see docs/protocol.md).
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The worker is ready for trials, with what its framework says of its process's memory
    /// where it has initialised one.
    Ready {
        memory: Option<WorkerMemory>,
    },
    Report {
        trial_id: i64,
        step: i64,
        value: f64,
    },
    Result {
        trial_id: i64,
        /// The objective's values: a number is one value, an array one per objective. `Err`:
        /// the text of what is not a number.
        value: Result<Vec<f64>, String>,
        memory: Option<FrameworkMemory>,
    },
    Pruned {
        trial_id: i64,
        memory: Option<FrameworkMemory>,
    },
    Error {
        trial_id: i64,
        exc_type: String,
        message: String,
        traceback: String,
        memory: Option<FrameworkMemory>,
    },
    Heartbeat,
    /// What the worker's framework holds on its device now (`docs/protocol.md`): while a trial
    /// runs (`trial_id`), the allocator's figures; once the framework is initialised after
    /// `ready`, the process's own (`worker`). How sweepd attributes memory to a trial where
    /// NVML cannot name the process.
    Memory {
        trial_id: Option<i64>,
        /// What the allocator reserves now, and the most it reserved in the trial.
        reserved: Option<u64>,
        peak_reserved: Option<u64>,
        worker: WorkerMemory,
    },
    /// Protocol 2: the objective asks for a param's value (`distribution` in Optuna's JSON
    /// form, checked by whoever answers).
    Suggest {
        trial_id: i64,
        name: String,
        distribution: Value,
        /// An integer in the message that JSON reading here cannot hold exactly (beyond 64
        /// bits), which would come back as a float: the message is to be refused.
        inexact: Option<String>,
    },
    /// Protocol 2: Optuna's `trial.set_user_attr(key, value)`.
    UserAttr {
        trial_id: i64,
        key: String,
        value: Value,
        /// As in `Suggest`.
        inexact: Option<String>,
    },
    /// Optuna 5's `trial.set_constraint(key, value)` (a protocol number; NaN is refused by
    /// whoever records it).
    Constraint {
        trial_id: i64,
        key: String,
        value: f64,
    },
    /// A well-formed message of a type this version does not know: ignored.
    Other(String),
}

impl Message {
    /// Its `type` on the wire, for log lines.
    pub fn kind(&self) -> &str {
        match self {
            Message::Ready { .. } => "ready",
            Message::Report { .. } => "report",
            Message::Result { .. } => "result",
            Message::Pruned { .. } => "pruned",
            Message::Error { .. } => "error",
            Message::Heartbeat => "heartbeat",
            Message::Memory { .. } => "memory",
            Message::Suggest { .. } => "suggest",
            Message::UserAttr { .. } => "user_attr",
            Message::Constraint { .. } => "constraint",
            Message::Other(ty) => ty,
        }
    }
}

/// What the worker's framework (PyTorch's caching allocator) saw of the trial that just ended,
/// sent with its final message by the helper in persistent mode (docs/protocol.md). NVML stays
/// the authority; these fill in a peak that readings seconds apart missed in a short trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameworkMemory {
    /// The most the allocator reserved during the trial (`torch.cuda.max_memory_reserved()`).
    pub peak_reserved: u64,
    /// What it still reserved once the helper had emptied its caches, just before the message
    /// (`torch.cuda.memory_reserved()`).
    pub reserved: u64,
    /// The memory cap the helper enforced for the trial, and the allocation that failed where
    /// the framework's out-of-memory message named it (`error` messages).
    pub cap: Option<u64>,
    pub requested: Option<u64>,
}

impl FrameworkMemory {
    /// The `memory` field of a final message; `None` where it is absent or lacks either figure
    /// (advisory: a malformed one is ignored, never an error).
    fn parse(v: &Value) -> Option<FrameworkMemory> {
        let m = v.get("memory")?;
        Some(FrameworkMemory {
            peak_reserved: m.get("peak_reserved")?.as_u64()?,
            reserved: m.get("reserved")?.as_u64()?,
            cap: m.get("cap").and_then(Value::as_u64),
            requested: m.get("requested").and_then(Value::as_u64),
        })
    }
}

/// What a worker's framework says of its process, outside any trial's allocations: which
/// framework, the bytes the process holds on its device outside the allocator once the
/// framework is initialised (its CUDA context, library workspaces), and the device's total as
/// the framework sees it. Advisory: a figure that is missing or not a byte count is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerMemory {
    pub framework: Option<String>,
    pub context: Option<u64>,
    pub total: Option<u64>,
}

impl WorkerMemory {
    /// The figures in `m` (`ready`'s `memory` object, or a `memory` message itself).
    fn parse(m: &Value) -> WorkerMemory {
        WorkerMemory {
            framework: m
                .get("framework")
                .and_then(Value::as_str)
                .map(|f| clip(f, 40)),
            context: m.get("context").and_then(Value::as_u64),
            total: m.get("total").and_then(Value::as_u64),
        }
    }

    /// Whether it says anything.
    pub fn is_empty(&self) -> bool {
        *self == WorkerMemory::default()
    }

    /// `later`'s figures where it has them, these elsewhere.
    pub fn update(&mut self, later: &WorkerMemory) {
        if later.framework.is_some() {
            self.framework.clone_from(&later.framework);
        }
        self.context = later.context.or(self.context);
        self.total = later.total.or(self.total);
    }
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

/// sweepd's end of a worker's channel.
pub(super) struct Channel {
    reader: FramedRead<OwnedReadHalf, LinesCodec>,
    writer: OwnedWriteHalf,
    /// Reading reached its end (end of file): nothing more can be read.
    closed: bool,
}

impl Channel {
    pub(super) fn new(ours: std::os::unix::net::UnixStream) -> std::io::Result<Channel> {
        ours.set_nonblocking(true)?;
        let (r, w) = tokio::net::UnixStream::from_std(ours)?.into_split();
        Ok(Channel {
            reader: FramedRead::new(r, LinesCodec::new_with_max_length(MAX_LINE)),
            writer: w,
            closed: false,
        })
    }

    /// The next line as an event; `None` once the worker has closed its end, and from then on.
    /// (A line past [`MAX_LINE`] comes as garbage, and the codec reads nothing after it: the same
    /// `None` follows.) Cancel-safe: dropping the future loses no line.
    pub(super) async fn recv(&mut self) -> Option<Event> {
        self.recv_sized().await.map(|(event, _)| event)
    }

    /// [`Channel::recv`], with the length of the line the event came from.
    async fn recv_sized(&mut self) -> Option<(Event, usize)> {
        if self.closed {
            return None;
        }
        match self.reader.next().await {
            Some(Ok(line)) => Some((parse_line(&line), line.len())),
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => Some((
                Event::Garbage(format!("a protocol line longer than {MAX_LINE} bytes")),
                MAX_LINE,
            )),
            // The worker's end went away with our messages unread in it (killed while it
            // had not read a reply yet): the kernel resets the connection rather than ending
            // it. The peer is gone as surely as at end of file, and its exit says how;
            // taken for garbage, a worker killed with -9 was failed `protocol`, never retried.
            Some(Err(LinesCodecError::Io(e)))
                if e.kind() == std::io::ErrorKind::ConnectionReset =>
            {
                self.closed = true;
                None
            }
            Some(Err(e)) => Some((Event::Garbage(e.to_string()), 0)),
            None => {
                self.closed = true;
                None
            }
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// What is still in the socket, read for at most `limit` and at most [`MAX_DRAIN_BYTES`]
    /// of lines (a forked grandchild may hold the channel open forever, and write to it).
    pub(super) async fn drain(&mut self, limit: Duration) -> Vec<Event> {
        let mut events = Vec::new();
        let mut read = 0;
        let _ = tokio::time::timeout(limit, async {
            while read < MAX_DRAIN_BYTES {
                let Some((event, len)) = self.recv_sized().await else {
                    break;
                };
                events.push(event);
                read += len + 1;
            }
        })
        .await;
        events
    }

    /// Sends one message. Bounded: a worker that stops reading must not wedge the supervisor.
    pub(super) async fn send(&mut self, msg: &Value) -> std::io::Result<()> {
        let mut line = msg.to_string();
        line.push('\n');
        match tokio::time::timeout(SEND_LIMIT, self.writer.write_all(line.as_bytes())).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "worker does not read its channel",
            )),
        }
    }
}

/// Parses one protocol line.
pub fn parse_line(line: &str) -> Event {
    let v: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            return Event::Garbage(format!(
                "a message nested too deep: sweepd reads JSON nested at most {MAX_DEPTH} \
                 levels (the message's object and {} levels of arrays and objects in it): {}",
                MAX_DEPTH - 1,
                clip(line, 200)
            ))
        }
        _ => return Event::Garbage(format!("not a JSON object: {}", clip(line, 200))),
    };
    let trial_id = v["trial_id"].as_i64();
    let ty = v["type"].as_str().unwrap_or_default();
    match ty {
        "ready" => Event::Msg(Message::Ready {
            memory: v
                .get("memory")
                .map(WorkerMemory::parse)
                .filter(|m| !m.is_empty()),
        }),
        "memory" => {
            // The process's own figures, at the top level or (as in `ready`) in `memory`.
            let mut worker = WorkerMemory::parse(&v);
            if let Some(m) = v.get("memory") {
                worker.update(&WorkerMemory::parse(m));
            }
            Event::Msg(Message::Memory {
                trial_id,
                reserved: v["reserved"].as_u64(),
                peak_reserved: v["peak_reserved"].as_u64(),
                worker,
            })
        }
        "heartbeat" => Event::Msg(Message::Heartbeat),
        "pruned" => match trial_id {
            Some(trial_id) => Event::Msg(Message::Pruned {
                trial_id,
                memory: FrameworkMemory::parse(&v),
            }),
            None => Event::Garbage(format!("`{ty}` without trial_id: {}", clip(line, 200))),
        },
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
                value: numbers(match v.get("values") {
                    Some(values) => values,
                    None => &v["value"],
                }),
                memory: FrameworkMemory::parse(&v),
            }),
            None => Event::Garbage(format!("result without trial_id: {}", clip(line, 200))),
        },
        "error" => match trial_id {
            Some(trial_id) => Event::Msg(Message::Error {
                trial_id,
                exc_type: v["exc_type"].as_str().unwrap_or("Exception").to_owned(),
                message: v["message"].as_str().unwrap_or_default().to_owned(),
                traceback: v["traceback"].as_str().unwrap_or_default().to_owned(),
                memory: FrameworkMemory::parse(&v),
            }),
            None => Event::Garbage(format!("error without trial_id: {}", clip(line, 200))),
        },
        "suggest" => match (trial_id, v["name"].as_str(), v.get("distribution")) {
            (Some(trial_id), Some(name), Some(d @ Value::Object(_))) => {
                Event::Msg(Message::Suggest {
                    trial_id,
                    name: name.to_owned(),
                    distribution: d.clone(),
                    inexact: inexact_integer(line).map(str::to_owned),
                })
            }
            _ => Event::Garbage(format!("malformed suggest: {}", clip(line, 200))),
        },
        "user_attr" => match (trial_id, v["key"].as_str(), v.get("value")) {
            (Some(trial_id), Some(key), Some(value)) => Event::Msg(Message::UserAttr {
                trial_id,
                key: key.to_owned(),
                value: value.clone(),
                inexact: inexact_integer(line).map(str::to_owned),
            }),
            _ => Event::Garbage(format!("malformed user_attr: {}", clip(line, 200))),
        },
        "constraint" => match (trial_id, v["key"].as_str(), number(&v["value"])) {
            (Some(trial_id), Some(key), Ok(value)) => Event::Msg(Message::Constraint {
                trial_id,
                key: key.to_owned(),
                value,
            }),
            _ => Event::Garbage(format!("malformed constraint: {}", clip(line, 200))),
        },
        "" => Event::Garbage(format!("message without a type: {}", clip(line, 200))),
        other => Event::Msg(Message::Other(other.to_owned())),
    }
}

/// The first integer of a JSON text (outside its strings) that serde_json cannot hold exactly:
/// one past i64 and u64, which it reads as the nearest float. Python's json reads any integer
/// exactly, and Optuna stores it so.
fn inexact_integer(json: &str) -> Option<&str> {
    let bytes = json.as_bytes();
    let (mut i, mut in_string) = (0, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if b == b'-' || b.is_ascii_digit() {
            let start = i;
            while i < bytes.len()
                && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
            {
                i += 1;
            }
            let token = &json[start..i];
            let integral = !token.contains(['.', 'e', 'E']);
            if integral && token.parse::<i64>().is_err() && token.parse::<u64>().is_err() {
                return Some(token);
            }
            continue;
        }
        i += 1;
    }
    None
}

/// An objective's values: one protocol number, or an array of them (one per objective).
pub fn numbers(v: &Value) -> Result<Vec<f64>, String> {
    match v {
        Value::Array(items) => items.iter().map(number).collect(),
        one => number(one).map(|x| vec![x]),
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
            Event::Msg(Message::Ready { memory: None })
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
            Event::Msg(Message::Result { value: Ok(v), .. }) if v == [f64::NEG_INFINITY]
        ));
    }

    #[test]
    fn ready_and_memory_messages_carry_what_the_framework_says_of_the_process() {
        let ready = parse_line(
            r#"{"type":"ready","pid":1,"protocol":2,"memory":{"framework":"torch","context":536870912,"total":25769803776}}"#,
        );
        let torch = WorkerMemory {
            framework: Some("torch".into()),
            context: Some(512 << 20),
            total: Some(24 << 30),
        };
        assert!(
            matches!(&ready, Event::Msg(Message::Ready { memory: Some(m) }) if *m == torch),
            "{ready:?}"
        );
        // Figures that are not byte counts are left out; nothing at all is no memory.
        let odd = parse_line(r#"{"type":"ready","memory":{"context":-1,"total":"lots"}}"#);
        assert!(
            matches!(odd, Event::Msg(Message::Ready { memory: None })),
            "{odd:?}"
        );
        match parse_line(
            r#"{"type":"memory","trial_id":7,"reserved":1048576,"peak_reserved":2097152,"context":3}"#,
        ) {
            Event::Msg(Message::Memory {
                trial_id: Some(7),
                reserved: Some(1048576),
                peak_reserved: Some(2097152),
                worker,
            }) => assert_eq!(worker.context, Some(3)),
            e => panic!("{e:?}"),
        }
        // A framework initialised after `ready`: its figures as `ready` would have carried them.
        match parse_line(r#"{"type":"memory","memory":{"framework":"jax","context":9}}"#) {
            Event::Msg(Message::Memory {
                trial_id: None,
                reserved: None,
                worker,
                ..
            }) => {
                assert_eq!(worker.framework.as_deref(), Some("jax"));
                assert_eq!(worker.context, Some(9));
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_final_message_carries_the_frameworks_memory_figures_when_both_are_there() {
        let memory = |line: &str| match parse_line(line) {
            Event::Msg(
                Message::Result { memory, .. }
                | Message::Pruned { memory, .. }
                | Message::Error { memory, .. },
            ) => memory,
            e => panic!("{e:?}"),
        };
        let both = Some(FrameworkMemory {
            peak_reserved: 6 << 30,
            reserved: 0,
            cap: None,
            requested: None,
        });
        let m = r#""memory":{"framework":"torch","peak_allocated":5,"peak_reserved":6442450944,"reserved":0}"#;
        assert_eq!(
            memory(&format!(
                r#"{{"type":"result","trial_id":1,"value":1,{m}}}"#
            )),
            both
        );
        assert_eq!(
            memory(&format!(r#"{{"type":"pruned","trial_id":1,{m}}}"#)),
            both
        );
        assert_eq!(
            memory(&format!(
                r#"{{"type":"error","trial_id":1,"message":"x",{m}}}"#
            )),
            both
        );
        // A trial at its cap: the cap the helper enforced and the allocation that failed.
        let capped = r#""memory":{"peak_reserved":6442450944,"reserved":0,"cap":7,"requested":8}"#;
        assert_eq!(
            memory(&format!(
                r#"{{"type":"error","trial_id":1,"message":"x",{capped}}}"#
            )),
            Some(FrameworkMemory {
                cap: Some(7),
                requested: Some(8),
                peak_reserved: 6 << 30,
                reserved: 0,
            })
        );
        // Advisory: absent, partial or malformed figures are none, and the message still counts.
        for bad in [
            "",
            r#","memory":{"peak_reserved":6442450944}"#,
            r#","memory":{"peak_reserved":-1,"reserved":0}"#,
            r#","memory":"lots""#,
        ] {
            let line = format!(r#"{{"type":"result","trial_id":1,"value":1{bad}}}"#);
            assert_eq!(memory(&line), None, "{line}");
        }
    }

    #[test]
    fn a_result_carries_one_value_per_objective() {
        let values = |line: &str| match parse_line(line) {
            Event::Msg(Message::Result { value, .. }) => value,
            e => panic!("{e:?}"),
        };
        assert_eq!(
            values(r#"{"type":"result","trial_id":1,"value":[1.5,"inf",-2]}"#),
            Ok(vec![1.5, f64::INFINITY, -2.0])
        );
        assert_eq!(
            values(r#"{"type":"result","trial_id":1,"values":[0.5, 3]}"#),
            Ok(vec![0.5, 3.0])
        );
        assert_eq!(
            values(r#"{"type":"result","trial_id":1,"value":[]}"#),
            Ok(vec![])
        );
        assert_eq!(
            values(r#"{"type":"result","trial_id":1,"value":[1.0, "x"]}"#),
            Err("x".into())
        );
        assert_eq!(
            values(r#"{"type":"result","trial_id":1,"value":[1.0, [2.0]]}"#),
            Err("[2.0]".into())
        );
        let nan = values(r#"{"type":"result","trial_id":1,"value":[1.0, "nan"]}"#).unwrap();
        assert!(nan[1].is_nan());
        assert!(matches!(
            parse_line(r#"{"type":"future_thing"}"#),
            Event::Msg(Message::Other(_))
        ));
        match parse_line(
            r#"{"type":"suggest","trial_id":7,"name":"lr","distribution":{"name":"FloatDistribution","attributes":{"step":null,"low":1e-05,"high":0.1,"log":true}}}"#,
        ) {
            Event::Msg(Message::Suggest {
                trial_id: 7,
                name,
                distribution,
                inexact: None,
            }) => {
                assert_eq!(name, "lr");
                assert_eq!(distribution["attributes"]["low"], 1e-5);
            }
            e => panic!("{e:?}"),
        }
        match parse_line(r#"{"type":"user_attr","trial_id":7,"key":"k","value":{"a":[1,null]}}"#) {
            Event::Msg(Message::UserAttr {
                trial_id: 7,
                key,
                value,
                inexact: None,
            }) => assert_eq!(
                (key.as_str(), value),
                ("k", serde_json::json!({"a": [1, null]}))
            ),
            e => panic!("{e:?}"),
        }
        for (line, want) in [
            (
                r#"{"type":"constraint","trial_id":7,"key":"mem","value":-0.5}"#,
                -0.5,
            ),
            (
                r#"{"type":"constraint","trial_id":7,"key":"mem","value":"inf"}"#,
                f64::INFINITY,
            ),
        ] {
            match parse_line(line) {
                Event::Msg(m) => assert_eq!(
                    m,
                    Message::Constraint {
                        trial_id: 7,
                        key: "mem".into(),
                        value: want
                    },
                    "{line}"
                ),
                e => panic!("{line}: {e:?}"),
            }
        }
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
        for bad in [
            r#"{"type":"suggest","trial_id":1,"name":"x"}"#,
            r#"{"type":"suggest","trial_id":1,"name":3,"distribution":{}}"#,
            r#"{"type":"suggest","name":"x","distribution":{}}"#,
            r#"{"type":"user_attr","trial_id":1,"key":"k"}"#,
            r#"{"type":"constraint","trial_id":1,"key":"k"}"#,
            r#"{"type":"constraint","trial_id":1,"key":"k","value":"high"}"#,
            r#"{"type":"constraint","key":"k","value":1.0}"#,
        ] {
            assert!(matches!(parse_line(bad), Event::Garbage(_)), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_closed_channel_says_so_once_the_lines_before_it_are_read_and_stays_closed() {
        use std::io::Write;
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut ch = Channel::new(ours).unwrap();
        writeln!(theirs, "{{\"type\":\"heartbeat\"}}\nnot json").unwrap();
        drop(theirs);
        let e = ch.recv().await;
        assert!(matches!(e, Some(Event::Msg(Message::Heartbeat))), "{e:?}");
        assert!(matches!(ch.recv().await, Some(Event::Garbage(_))));
        assert!(!ch.is_closed());
        assert!(ch.recv().await.is_none());
        assert!(ch.is_closed());
        assert!(ch.recv().await.is_none());
        assert!(ch.drain(Duration::from_millis(50)).await.is_empty());
    }

    #[tokio::test]
    async fn a_line_past_max_line_is_garbage_and_ends_the_reading() {
        use std::io::Write;
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut ch = Channel::new(ours).unwrap();
        // More than a socket buffer holds: written from a thread while the channel reads.
        let writer = std::thread::spawn(move || {
            let long = "x".repeat(MAX_LINE + 1);
            let _ = writeln!(theirs, "{long}\n{{\"type\":\"ready\"}}");
        });
        match ch.recv().await {
            Some(Event::Garbage(why)) => assert!(why.contains("longer than"), "{why}"),
            e => panic!("{e:?}"),
        }
        // The codec gives up on the stream after that error: what follows is never read.
        assert!(ch.recv().await.is_none());
        drop(ch);
        writer.join().unwrap();
    }

    #[test]
    fn integers_past_64_bits_are_found_outside_strings() {
        for (json, want) in [
            (
                r#"{"choices":[18446744073709551616, 1]}"#,
                Some("18446744073709551616"),
            ),
            (
                r#"{"choices":[-9223372036854775809]}"#,
                Some("-9223372036854775809"),
            ),
            (
                r#"{"choices":[18446744073709551615, -9223372036854775808]}"#,
                None,
            ),
            (r#"{"v":[1e400, 1.5, -0.0, 12345678901234567890.5]}"#, None),
            (
                r#"{"k":"99999999999999999999999","\"99999999999999999999\"":1}"#,
                None,
            ),
            (
                r#"{"k":"a\\","v":99999999999999999999999}"#,
                Some("99999999999999999999999"),
            ),
        ] {
            assert_eq!(inexact_integer(json), want, "{json}");
        }
        match parse_line(
            r#"{"type":"suggest","trial_id":1,"name":"c","distribution":{"name":"CategoricalDistribution","attributes":{"choices":[18446744073709551616]}}}"#,
        ) {
            Event::Msg(Message::Suggest { inexact, .. }) => {
                assert_eq!(inexact.as_deref(), Some("18446744073709551616"))
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn json_nested_too_deep_says_so() {
        let line = |depth: usize| {
            format!(
                r#"{{"type":"user_attr","trial_id":1,"key":"k","value":{}{}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            )
        };
        assert!(matches!(
            parse_line(&line(MAX_DEPTH - 1)),
            Event::Msg(Message::UserAttr { .. })
        ));
        match parse_line(&line(200)) {
            Event::Garbage(why) => assert!(why.contains("nested too deep"), "{why}"),
            e => panic!("{e:?}"),
        }
    }

    #[tokio::test]
    async fn a_drain_reads_a_bounded_amount() {
        use std::io::Write;
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut ch = Channel::new(ours).unwrap();
        // Lines of almost MAX_LINE, for as long as the channel takes them.
        let writer = std::thread::spawn(move || {
            let line = format!(
                "{{\"type\":\"heartbeat\",\"pad\":\"{}\"}}\n",
                "x".repeat(MAX_LINE - 64)
            );
            for _ in 0..64 {
                if theirs.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
        });
        let events = ch.drain(Duration::from_secs(30)).await;
        assert!(!events.is_empty());
        // The bound, and the one line read across it.
        let most = MAX_DRAIN_BYTES / (MAX_LINE - 64) + 1;
        assert!(events.len() <= most, "{} events", events.len());
        drop(ch);
        writer.join().unwrap();
    }

    /// Regression: a worker killed with -9 while our reply to its report sat unread in its
    /// socket made our read fail with ECONNRESET, and the trial failed `protocol` ("worker sent
    /// garbage on the protocol channel: Connection reset by peer"), not retried as a killed
    /// worker is (tests/resume.rs, about one run in ten under load).
    #[tokio::test]
    async fn a_peer_gone_with_our_message_unread_ends_the_channel_not_garbage() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut ch = Channel::new(ours).unwrap();
        ch.send(&serde_json::json!({"type": "prune", "trial_id": 1, "prune": false}))
            .await
            .unwrap();
        drop(theirs);
        assert!(ch.recv().await.is_none());
        assert!(ch.is_closed());
    }
}
