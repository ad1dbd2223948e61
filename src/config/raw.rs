//! The raw layer: `supervisor.toml` as written, in serde structs that keep every value's span
//! (`toml::Spanned`), and an index of every key's span for the problems that have no value to
//! point at (a missing key, an error toml reports without naming its table).
//!
//! Nothing here decides what is valid. Every field is optional, so that a missing required key
//! is reported alongside all other problems rather than ending the parse, and integers are read
//! as `i64` (TOML's integer type) so that range errors become validation's problems too. The
//! structs never use `#[serde(tag)]`, `untagged` or `flatten`: those buffer values and so lose
//! spans and silently disable `deny_unknown_fields`. That is why a param is one flat struct with
//! every field optional, checked by its `type` afterwards.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use toml::Spanned;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    // Tables are not wrapped in `Spanned`: an implicit table (`params` in `[params.lr]`) has no
    // span, and `Spanned` then fails with a confusing error. Key spans locate them instead.
    pub(crate) study: Option<Table<RawStudy>>,
    pub(crate) storage: Option<Table<RawStorage>>,
    pub(crate) worker: Option<Table<RawWorker>>,
    pub(crate) params: Option<Entries<Table<RawParam>>>,
    pub(crate) gpu: Option<Table<RawGpu>>,
    pub(crate) retry: Option<Table<RawRetry>>,
    pub(crate) sampler: Option<Table<RawSampler>>,
    pub(crate) pruner: Option<Table<RawPruner>>,
    pub(crate) metrics: Option<Table<RawMetrics>>,
    pub(crate) notify: Option<Table<RawNotify>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStudy {
    pub(crate) name: Option<Spanned<String>>,
    pub(crate) direction: Option<Spanned<String>>,
    pub(crate) directions: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) metric_names: Option<Spanned<Vec<Spanned<String>>>>,
    // Integers are read as i64 (TOML's integer type) so that range errors become our own
    // problems, collected with the rest, instead of serde errors that stop the parse.
    pub(crate) n_trials: Option<Spanned<i64>>,
    pub(crate) timeout: Option<Spanned<String>>,
    // A number of hours, a float or an integer, so it is taken untyped.
    pub(crate) gpu_hours: Option<Spanned<toml::Value>>,
    pub(crate) patience: Option<Spanned<i64>>,
    pub(crate) min_delta: Option<Spanned<toml::Value>>,
    pub(crate) sampler: Option<Spanned<String>>,
    pub(crate) seed: Option<Spanned<i64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStorage {
    pub(crate) url: Option<Spanned<String>>,
    pub(crate) host_timeout: Option<Spanned<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorker {
    pub(crate) command: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) mode: Option<Spanned<String>>,
    pub(crate) recycle_after: Option<Spanned<i64>>,
    pub(crate) max_par: Option<Spanned<i64>>,
    pub(crate) trial_timeout: Option<Spanned<String>>,
    pub(crate) startup_timeout: Option<Spanned<String>>,
    pub(crate) shutdown_grace: Option<Spanned<String>>,
    pub(crate) log_dir: Option<Spanned<String>>,
    pub(crate) cwd: Option<Spanned<String>>,
    pub(crate) env: Option<Entries<Spanned<toml::Value>>>,
    pub(crate) heartbeat_timeout: Option<Spanned<String>>,
    // Sizes are an integer of bytes or a string with a unit, so they are taken untyped.
    pub(crate) recycle_on_growth: Option<Spanned<toml::Value>>,
    pub(crate) log_max_bytes: Option<Spanned<toml::Value>>,
    pub(crate) log_max_total: Option<Spanned<toml::Value>>,
    pub(crate) allocator: Option<Table<RawAllocator>>,
    pub(crate) checkpoint_dir: Option<Spanned<String>>,
    pub(crate) keep_checkpoints: Option<Spanned<bool>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAllocator {
    pub(crate) preset: Option<Spanned<String>>,
    pub(crate) pytorch: Option<Spanned<String>>,
    pub(crate) jax_preallocate: Option<Spanned<bool>>,
    pub(crate) tf_allow_growth: Option<Spanned<bool>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGpu {
    pub(crate) devices: Option<Spanned<RawDevices>>,
    pub(crate) headroom: Option<Spanned<toml::Value>>,
    pub(crate) trial_memory: Option<Spanned<toml::Value>>,
    pub(crate) max_par_per_device: Option<Spanned<i64>>,
    pub(crate) gpus_per_trial: Option<Spanned<i64>>,
    pub(crate) poll_interval: Option<Spanned<String>>,
    pub(crate) nvml_lib: Option<Spanned<String>>,
    pub(crate) idle_worker_timeout: Option<Spanned<String>>,
    pub(crate) memory_group: Option<Spanned<String>>,
    pub(crate) caps: Option<Spanned<bool>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    pub(crate) oom: Option<Spanned<i64>>,
    pub(crate) cuda_fatal: Option<Spanned<i64>>,
    pub(crate) crash: Option<Spanned<i64>>,
    pub(crate) breaker_threshold: Option<Spanned<i64>>,
    pub(crate) breaker_backoff: Option<Spanned<String>>,
    pub(crate) breaker_max_backoff: Option<Spanned<String>>,
    pub(crate) oom_admission_factor: Option<Spanned<toml::Value>>,
    pub(crate) oom_recovery: Option<Spanned<String>>,
    pub(crate) stop_after_same_error: Option<Spanned<i64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSampler {
    pub(crate) n_startup_trials: Option<Spanned<i64>>,
    pub(crate) n_ei_candidates: Option<Spanned<i64>>,
    pub(crate) multivariate: Option<Spanned<bool>>,
    pub(crate) group: Option<Spanned<bool>>,
    pub(crate) constant_liar: Option<Spanned<bool>>,
    pub(crate) deterministic_objective: Option<Spanned<bool>>,
    pub(crate) seed: Option<Spanned<i64>>,
    pub(crate) population_size: Option<Spanned<i64>>,
    // Probabilities are a float or an integer (0, 1), so they are taken untyped.
    pub(crate) crossover_prob: Option<Spanned<toml::Value>>,
    pub(crate) swapping_prob: Option<Spanned<toml::Value>>,
    pub(crate) mutation_prob: Option<Spanned<toml::Value>>,
}

/// Every pruner type's fields in one struct, like [`RawParam`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPruner {
    #[serde(rename = "type")]
    pub(crate) kind: Option<Spanned<String>>,
    pub(crate) n_startup_trials: Option<Spanned<i64>>,
    pub(crate) n_warmup_steps: Option<Spanned<i64>>,
    pub(crate) interval_steps: Option<Spanned<i64>>,
    pub(crate) min_resource: Option<Spanned<i64>>,
    pub(crate) reduction_factor: Option<Spanned<i64>>,
    pub(crate) min_early_stopping_rate: Option<Spanned<i64>>,
    // An integer or "auto", so it is taken untyped.
    pub(crate) max_resource: Option<Spanned<toml::Value>>,
    pub(crate) bootstrap_count: Option<Spanned<i64>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    pub(crate) listen: Option<Spanned<String>>,
    pub(crate) allow_remote: Option<Spanned<bool>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNotify {
    pub(crate) command: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) events: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) summary_every: Option<Spanned<String>>,
    pub(crate) timeout: Option<Spanned<String>>,
}

/// `devices`: a keyword or a list of indices, each index keeping its span. A hand-written
/// visitor rather than `untagged`, which would buffer the value and lose the spans.
pub(crate) enum RawDevices {
    Word(String),
    List(Vec<Spanned<i64>>),
}

impl<'de> Deserialize<'de> for RawDevices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DevicesVisitor;
        impl<'de> Visitor<'de> for DevicesVisitor {
            type Value = RawDevices;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"all\", \"none\" or a list of device indices such as [0, 1]")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawDevices, E> {
                Ok(RawDevices::Word(s.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawDevices, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(RawDevices::List(items))
            }
        }
        d.deserialize_any(DevicesVisitor)
    }
}

/// Every param type's fields in one struct; see the module docs for why.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawParam {
    #[serde(rename = "type")]
    pub(crate) kind: Option<Spanned<String>>,
    // Bounds may be written as TOML integers or floats, so they are taken untyped.
    pub(crate) low: Option<Spanned<toml::Value>>,
    pub(crate) high: Option<Spanned<toml::Value>>,
    pub(crate) step: Option<Spanned<toml::Value>>,
    pub(crate) log: Option<Spanned<bool>>,
    pub(crate) choices: Option<Spanned<Vec<Spanned<toml::Value>>>>,
}

/// A struct that must be written as a table. Serde's derived structs also accept a sequence
/// (fields by position), which would let `study = ["x"]` pass as a study named "x".
pub(crate) struct Table<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TableVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for TableVisitor<T> {
            type Value = Table<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Table<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Table)
            }
        }
        d.deserialize_map(TableVisitor(PhantomData))
    }
}

/// A table read in document order (params must keep theirs), with each key's span.
pub(crate) struct Entries<T>(pub(crate) Vec<(Spanned<String>, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entries<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for EntriesVisitor<T> {
            type Value = Entries<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<T>, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(EntriesVisitor(PhantomData))
    }
}

// ---------------------------------------------------------------------------------------------
// Naming keys and locating them.

/// Characters of one key shown in a dotted path; the rest is elided.
pub(crate) const MAX_KEY_SHOWN: usize = 64;

/// A dotted key path as TOML would write it: bare keys as is, others quoted (keys longer than
/// [`MAX_KEY_SHOWN`] characters are cut, with an ellipsis).
pub(crate) fn dotted(parts: &[&str]) -> String {
    let mut out = String::new();
    for part in parts {
        push_key(&mut out, part);
    }
    out
}

pub(crate) fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    // A key megabytes long (rejected as such) is named by its start, not copied into every
    // message about it.
    let (key, cut) = match key.char_indices().nth(MAX_KEY_SHOWN) {
        Some((i, _)) => (&key[..i], "…"),
        None => (key, ""),
    };
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        path.push_str(key);
    } else {
        path.push_str(&format!("{key:?}"));
    }
    path.push_str(cut);
}

/// 1-based line and column (in characters) of byte `offset`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

// ---------------------------------------------------------------------------------------------
// Naming the key a span falls on. toml's errors carry a span and say "unknown field `x`" or
// "invalid type", but not which table they are in; re-reading the document into a tree of keys
// with their spans recovers the full dotted path.

/// Every key in a document, as (dotted path, span of the key itself).
pub(crate) struct KeyIndex(Vec<(String, Range<usize>)>);

impl KeyIndex {
    /// Empty if the text does not parse as TOML (a syntax error has no key to name).
    pub(crate) fn build(text: &str) -> KeyIndex {
        let mut keys = Vec::new();
        if let Ok(root) = toml::from_str::<Node>(text) {
            root.collect_keys("", &mut keys);
        }
        KeyIndex(keys)
    }

    /// The dotted path of the key an error span points at.
    pub(crate) fn key_at(&self, text: &str, span: Range<usize>) -> Option<&str> {
        // Unknown fields: toml points at the key itself.
        if let Some((path, _)) = self.0.iter().find(|(_, k)| *k == span) {
            return Some(path);
        }
        // A table defined by a header (e.g. `[[study]]` where a table is expected): the span
        // starts at the header, which names the table last.
        let start = span.start;
        if !text.is_char_boundary(start) {
            return None;
        }
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let header = text[start..].starts_with('[') && text[line_start..start].trim().is_empty();
        if header {
            let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
            if let Some((path, _)) = self
                .0
                .iter()
                .filter(|(_, k)| k.start >= start && k.end <= line_end)
                .max_by_key(|(_, k)| k.start)
            {
                return Some(path);
            }
        }
        // A value of the wrong type: the last key written before it is the one it belongs to.
        self.0
            .iter()
            .filter(|(_, k)| k.end <= start)
            .max_by_key(|(_, k)| k.start)
            .map(|(path, _)| path.as_str())
    }

    /// Span of the longest prefix of `key` the document has, e.g. the `[study]` header for a
    /// missing `study.name`.
    pub(crate) fn nearest_ancestor(&self, key: &str) -> Option<Range<usize>> {
        let mut candidate = key;
        loop {
            if let Some((_, span)) = self.0.iter().find(|(p, _)| p == candidate) {
                return Some(span.clone());
            }
            candidate = &candidate[..candidate.rfind('.')?];
        }
    }
}

/// A TOML document reduced to its keys.
pub(crate) enum Node {
    Table(Vec<(Spanned<String>, Node)>),
    Array(Vec<Node>),
    Leaf,
}

impl Node {
    fn collect_keys(&self, path: &str, out: &mut Vec<(String, Range<usize>)>) {
        match self {
            Node::Table(entries) => {
                for (key, value) in entries {
                    let mut p = path.to_owned();
                    push_key(&mut p, key.get_ref());
                    out.push((p.clone(), key.span()));
                    value.collect_keys(&p, out);
                }
            }
            Node::Array(items) => {
                for item in items {
                    item.collect_keys(path, out);
                }
            }
            Node::Leaf => {}
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

pub(crate) struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        loop {
            match map.next_key::<Spanned<String>>() {
                Ok(Some(key)) => {
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(None) => return Ok(Node::Table(entries)),
                // toml hands a datetime to visitors as a one-entry map whose key has no span;
                // it holds no keys to index, so it is a leaf.
                Err(_) if entries.is_empty() => return Ok(Node::Leaf),
                Err(e) => return Err(e),
            }
        }
    }
}
