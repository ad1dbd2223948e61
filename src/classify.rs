//! How a trial or a worker ended, decided from what the worker said (its protocol `error`
//! message) and/or how its process ended (exit status, the tail of its stderr).
//!
//! Pure functions, no I/O. The supervisor calls [`classify_report`] when a live worker reports
//! an exception, and [`classify_exit`] when a worker process ends while a trial runs. The kinds
//! `timeout`, `hang`, `protocol`, `bad_value` and `interrupted` are the supervisor's own
//! decisions: these functions never return them.
//!
//! # Precedence
//!
//! The exception type, its message, the traceback and the stderr tail are all searched (the text
//! of all of them, Python source lines of tracebacks left out, `[rankN]: ` prefixes stripped).
//!
//! 1. `cuda_fatal`: a CUDA error that leaves the context unusable (device-side assert, illegal
//!    memory access, misaligned address, launch failure, cuDNN/cuBLAS execution failure, NCCL,
//!    `torch.AcceleratorError`, any other `CUDA error: ...`). It wins over an out-of-memory text
//!    in the same report/log (an OOM that turned into an assert still poisons the context); the
//!    reason then says so: `CUDA fatal error: device-side assert (after CUDA OOM: ...)`.
//! 2. `oom`: PyTorch/JAX/TensorFlow out-of-memory texts, `CUDA error: out of memory`, cuBLAS and
//!    cuDNN `*_ALLOC_FAILED`, and Python's `MemoryError` (host memory).
//! 3. `killed` (only from [`classify_exit`]): a signal sweepd did not send.
//! 4. `user_error`: any other reported exception (also when the process then exited, as a
//!    oneshot worker does after an error), or a Python traceback on the stderr of a process
//!    that exited with an error code (a script that does not use the helper). Its
//!    [`UserError`] says where the user's code raised it.
//! 5. `killed` by a signal sweepd sent (the supervisor normally relabels this `timeout`, `hang`
//!    or `interrupted`), then `worker_died` for any other exit.

use crate::study::FailureKind;
use crate::units::{allocator_unit, format_allocator_size, parse_allocator_size};
use std::fmt;

/// What the worker said (protocol `error` message), if anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Report<'a> {
    pub exc_type: &'a str,
    pub message: &'a str,
    pub traceback: &'a str,
}

/// How a process ended, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// sweepd itself sent the signal (timeout, hang, shutdown).
    pub signalled_by_us: bool,
}

/// The decision: a kind, and one line for a person.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub kind: FailureKind,
    /// One line for a person, at most [`REASON_MAX_CHARS`] characters.
    pub reason: String,
    /// For a `user_error`: the exception's type and where the user's code raised it, which is
    /// what makes two failures "the same error".
    pub error: Option<UserError>,
}

/// An exception from the user's code, as far as a traceback tells.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserError {
    /// The exception type, as Python names it (`TypeError`, `torch.cuda.OutOfMemoryError`).
    pub exc_type: String,
    /// The innermost frame of the traceback in the user's own code, if any.
    pub at: Option<Frame>,
}

/// One frame of a Python traceback: `File "train.py", line 42, in objective`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub file: String,
    pub line: u32,
    pub function: String,
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}, in {}", self.file, self.line, self.function)
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Some(at) => write!(f, "{} raised at {at}", self.exc_type),
            None => write!(
                f,
                "{} (no frame of user code in the traceback)",
                self.exc_type
            ),
        }
    }
}

/// The frames of the Python tracebacks in `text`, outermost first (the last traceback's
/// frames if there are several, e.g. "During handling of the above exception").
pub fn traceback_frames(text: &str) -> Vec<Frame> {
    let mut frames = Vec::new();
    for line in text.lines().map(strip_rank_prefix) {
        let t = line.trim();
        if t.starts_with("Traceback (most recent call last)") {
            frames.clear();
            continue;
        }
        let Some(rest) = t.strip_prefix("File \"") else {
            continue;
        };
        let Some((file, rest)) = rest.split_once("\", line ") else {
            continue;
        };
        let (number, function) = match rest.split_once(", in ") {
            Some((n, f)) => (n, f.trim()),
            None => (rest, ""),
        };
        if let Ok(line) = number.trim().parse() {
            frames.push(Frame {
                file: file.to_owned(),
                line,
                function: function.to_owned(),
            });
        }
    }
    frames
}

/// The innermost frame in the user's own code: not in sweepd's helper, the standard library or
/// installed packages (an exception raised inside a library is the user's call into it).
pub fn user_frame(traceback: &str) -> Option<Frame> {
    let frames = traceback_frames(traceback);
    let foreign = |f: &Frame| {
        let path = f.file.as_str();
        path.ends_with("sweepd_worker.py")
            || path.ends_with("sweepd_memory.py")
            || path.contains("/site-packages/")
            || path.contains("/dist-packages/")
            || path.starts_with('<')
            || path.contains("/lib/python3")
    };
    frames
        .iter()
        .rev()
        .find(|f| !foreign(f))
        .or(frames.last())
        .cloned()
}

/// The exception at the end of a Python traceback printed to stderr ("ValueError: message"),
/// for a process that died without reporting it (a oneshot script that does not use the
/// helper): `(type, message)`.
fn traceback_exception(stderr: &str) -> Option<(String, String)> {
    let start = stderr.rfind("Traceback (most recent call last)")?;
    let after = &stderr[start..];
    let last = after
        .lines()
        .map(strip_rank_prefix)
        .filter(|l| !l.trim().is_empty())
        .rfind(|l| !l.starts_with(char::is_whitespace))?;
    if last.starts_with("Traceback") {
        return None;
    }
    let (ty, msg) = last.split_once(':').unwrap_or((last, ""));
    let ty = ty.trim();
    // A Python exception type: dotted identifiers only.
    let is_type = !ty.is_empty()
        && ty
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
    is_type.then(|| (ty.to_owned(), msg.trim().to_owned()))
}

/// The longest a [`Verdict::reason`] gets, in characters.
pub const REASON_MAX_CHARS: usize = 300;

/// The figures of an out-of-memory message, in bytes, where the message has them.
#[derive(Debug, Clone, PartialEq)]
pub struct OomFigures {
    /// The allocation that failed.
    pub tried: Option<u64>,
    /// The device's total memory (or the allocator's limit).
    pub total: Option<u64>,
    /// The device's free memory at the time.
    pub free: Option<u64>,
    /// Memory PyTorch's caching allocator held but had not handed out (fragmentation).
    pub reserved_unallocated: Option<u64>,
    /// What the failing process held on the device, all of it ("Including non-PyTorch memory,
    /// this process has X memory in use").
    pub process_used: Option<u64>,
    /// What the process's tensors held ("X is allocated by PyTorch", older "X already
    /// allocated").
    pub allocated: Option<u64>,
}

impl OomFigures {
    /// The least the process needed at the moment it failed: what it held apart from the
    /// allocator's free cache (that cache could have served the request had it been in one
    /// piece), plus the allocation that failed. Where the message does not say what the process
    /// held, what its tensors held; where it says neither, the allocation alone. `None` without
    /// the allocation's size.
    pub fn demand(&self) -> Option<u64> {
        let tried = self.tried?;
        let held = match (self.process_used, self.allocated) {
            (Some(used), _) => used.saturating_sub(self.reserved_unallocated.unwrap_or(0)),
            (None, Some(allocated)) => allocated,
            (None, None) => 0,
        };
        Some(tried.saturating_add(held))
    }

    /// What the process would have held with the allocation that failed: all it held (its
    /// context, its tensors and its allocator's cache) plus that allocation. `None` unless the
    /// message says both; unlike [`OomFigures::demand`], never guessed from the tensors alone.
    pub fn footprint(&self) -> Option<u64> {
        Some(self.process_used?.saturating_add(self.tried?))
    }
}

/// Classifies an exception the objective raised (persistent worker still alive).
pub fn classify_report(r: &Report) -> Verdict {
    let exc_line = exception_line(r);
    let mut lines = vec![exc_line.as_str()];
    searchable_lines(r.message, &mut lines);
    searchable_lines(r.traceback, &mut lines);
    if let Some(v) = classify_cuda(&lines) {
        return v;
    }
    user_error(r)
}

/// Classifies a process that died during a trial (no report, or a report plus death): uses the
/// exit status and the stderr tail (last lines), because a CUDA error often kills the process
/// with only a traceback on stderr.
///
/// A CUDA/OOM text anywhere wins; then a signal sweepd did not send (`killed`); then a report
/// (`user_error`, e.g. a oneshot worker exiting 1 after its error); then a signal sweepd sent
/// (`killed`, which the supervisor relabels); then `worker_died`.
pub fn classify_exit(exit: &Exit, stderr_tail: &str, report: Option<&Report>) -> Verdict {
    let exc_line = report.map(exception_line).unwrap_or_default();
    let mut lines = Vec::new();
    if let Some(r) = report {
        lines.push(exc_line.as_str());
        searchable_lines(r.message, &mut lines);
        searchable_lines(r.traceback, &mut lines);
    }
    searchable_lines(stderr_tail, &mut lines);
    if let Some(v) = classify_cuda(&lines) {
        return v;
    }

    let last = last_stderr_line(stderr_tail);
    if let Some(sig) = exit.signal {
        if !exit.signalled_by_us {
            let mut reason = format!("killed by {}", signal_words(sig));
            if let Some(r) = report {
                reason.push_str("; after ");
                reason.push_str(&exception_summary(r));
            }
            if let Some(l) = last {
                reason.push_str("; stderr: ");
                reason.push_str(&clip_chars(l, 160));
            }
            return verdict(FailureKind::Killed, reason);
        }
    }
    // A report, or else a Python traceback on stderr (a script that does not use the helper
    // and died of an exception).
    let printed = traceback_exception(stderr_tail);
    let printed = printed.as_ref().map(|(ty, msg)| Report {
        exc_type: ty,
        message: msg,
        traceback: stderr_tail,
    });
    if let Some(r) = report.or(printed.as_ref()) {
        let mut v = user_error(r);
        if let Some(code) = exit.code.filter(|&c| c != 0) {
            v.reason = one_line(
                &format!("{} (worker exited with code {code})", v.reason),
                REASON_MAX_CHARS,
            );
        }
        return v;
    }
    if let Some(sig) = exit.signal {
        return verdict(
            FailureKind::Killed,
            format!("killed by {} (sent by sweepd)", signal_name(sig)),
        );
    }
    let mut reason = match exit.code {
        Some(0) => "worker died: exited with code 0 in the middle of a trial".to_owned(),
        Some(code) => format!("worker died: exit code {code}{}", exit_code_hint(code)),
        None => "worker died: no exit status".to_owned(),
    };
    match last {
        Some(l) => {
            reason.push_str("; stderr: ");
            reason.push_str(&clip_chars(l, 200));
        }
        None => reason.push_str(" (stderr empty)"),
    }
    verdict(FailureKind::WorkerDied, reason)
}

/// Parses PyTorch's OOM message for the numbers a person needs: "Tried to allocate 7.45 GiB.
/// GPU 0 has a total capacity of 15.48 GiB of which 4.10 GiB is free." → (tried, total, free)
/// in bytes when present; also "X is reserved by PyTorch but unallocated", the older
/// "(GPU 0; 15.78 GiB total capacity; ... 7.88 MiB free; ...)" form, cudaMallocAsync's
/// "Requested / Device limit / Free (according to CUDA)" lines and JAX's "trying to allocate N
/// bytes". Units: bytes/B, KiB, MiB, GiB, TiB (KB/MB/GB/TB are read as binary too, as the GPU
/// allocators that print them mean: [`crate::units::parse_allocator_size`]). `None` when no
/// figure is found.
pub fn oom_figures(text: &str) -> Option<OomFigures> {
    let tried = size_after(text, "Tried to allocate")
        .or_else(|| size_after(text, "tried to allocate"))
        .or_else(|| size_after(text, "trying to allocate"))
        .or_else(|| size_after(text, "Out of memory allocating"))
        .or_else(|| size_after(text, "Failed to allocate request for"))
        .or_else(|| labelled_size(text, "Requested"));
    let total = size_after(text, "total capacity of")
        .or_else(|| size_before(text, " total capacity"))
        .or_else(|| labelled_size(text, "Device limit"));
    let free = size_after(text, "of which")
        .or_else(|| size_before(text, " free;"))
        .or_else(|| size_before(text, " free)"))
        .or_else(|| labelled_size(text, "Free (according to CUDA)"));
    let reserved_unallocated = size_before(text, " is reserved by PyTorch but unallocated")
        .or_else(|| {
            // Older PyTorch: "14.26 GiB already allocated; ... 14.45 GiB reserved in total".
            let reserved = size_before(text, " reserved in total by PyTorch")?;
            let allocated = size_before(text, " already allocated")?;
            Some(reserved.saturating_sub(allocated))
        });
    let process_used = size_after(text, "this process has");
    let allocated = size_before(text, " is allocated by PyTorch")
        .or_else(|| size_before(text, " already allocated"));
    let f = OomFigures {
        tried,
        total,
        free,
        reserved_unallocated,
        process_used,
        allocated,
    };
    if f.tried.is_none()
        && f.total.is_none()
        && f.free.is_none()
        && f.reserved_unallocated.is_none()
    {
        None
    } else {
        Some(f)
    }
}

// ---------------------------------------------------------------------------------------------
// Text search.

/// Out-of-memory texts, most specific first: (needles, reason label, short name for
/// "(after ...)").
const OOM_PATTERNS: &[(&[&str], &str, &str)] = &[
    (&["CUDA out of memory"], "CUDA out of memory", "CUDA OOM"),
    (
        &["would exceed allowed memory"],
        "CUDA out of memory (cudaMallocAsync)",
        "CUDA OOM",
    ),
    (&["HIP out of memory"], "HIP out of memory", "HIP OOM"),
    (
        &["MPS backend out of memory"],
        "MPS out of memory",
        "MPS OOM",
    ),
    (&["XPU out of memory"], "XPU out of memory", "XPU OOM"),
    (
        &[
            "CUDA error: out of memory",
            "CUDA_ERROR_OUT_OF_MEMORY",
            "cudaErrorMemoryAllocation",
            "Cuda failure 'out of memory'",
        ],
        "CUDA out of memory (CUDA error: out of memory)",
        "CUDA OOM",
    ),
    (
        &["CUBLAS_STATUS_ALLOC_FAILED"],
        "CUDA out of memory (cuBLAS: CUBLAS_STATUS_ALLOC_FAILED)",
        "CUDA OOM",
    ),
    (
        &["CUDNN_STATUS_ALLOC_FAILED"],
        "CUDA out of memory (cuDNN: CUDNN_STATUS_ALLOC_FAILED)",
        "CUDA OOM",
    ),
    (
        &[
            "RESOURCE_EXHAUSTED: Out of memory",
            "RESOURCE_EXHAUSTED: Failed to allocate",
        ],
        "GPU out of memory (XLA RESOURCE_EXHAUSTED)",
        "XLA OOM",
    ),
    (
        &["OOM when allocating tensor", "ResourceExhaustedError"],
        "out of memory (TensorFlow ResourceExhaustedError)",
        "TensorFlow OOM",
    ),
    (
        &["OutOfMemoryError"],
        "out of memory (OutOfMemoryError)",
        "OOM",
    ),
];

/// Fatal CUDA texts with a fixed label, most informative first.
const FATAL_PATTERNS: &[(&[&str], &str)] = &[
    (
        &[
            "device-side assert triggered",
            "cudaErrorAssert",
            "CUDA_ERROR_ASSERT",
        ],
        "device-side assert",
    ),
    (
        &[
            "an illegal memory access was encountered",
            "CUDA_ERROR_ILLEGAL_ADDRESS",
            "cudaErrorIllegalAddress",
        ],
        "illegal memory access",
    ),
    (
        &["misaligned address", "CUDA_ERROR_MISALIGNED_ADDRESS"],
        "misaligned address",
    ),
    (
        &[
            "an illegal instruction was encountered",
            "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        ],
        "illegal instruction",
    ),
    (
        &["unspecified launch failure", "CUDA_ERROR_LAUNCH_FAILED"],
        "unspecified launch failure",
    ),
    (
        &["CUDNN_STATUS_EXECUTION_FAILED"],
        "cuDNN execution failed (CUDNN_STATUS_EXECUTION_FAILED)",
    ),
    (
        &["CUBLAS_STATUS_EXECUTION_FAILED"],
        "cuBLAS execution failed (CUBLAS_STATUS_EXECUTION_FAILED)",
    ),
    (
        &["CUDNN_STATUS_MAPPING_ERROR"],
        "cuDNN mapping error (CUDNN_STATUS_MAPPING_ERROR)",
    ),
];

/// NCCL failures (the collective's CUDA work is in an unknown state).
const NCCL_NEEDLES: &[&str] = &[
    "NCCL error",
    "ncclUnhandledCudaError",
    "ncclInternalError",
    "ncclSystemError",
    "ncclRemoteError",
    "NCCL communicator was aborted",
    "Watchdog caught collective operation timeout",
];

struct Oom {
    label: &'static str,
    short: &'static str,
    figures: Option<OomFigures>,
    /// A text excerpt to show when there are no figures (TensorFlow's tensor shape).
    excerpt: Option<String>,
}

impl Oom {
    fn reason(&self) -> String {
        let figs = self.figures.as_ref().map(figures_words).unwrap_or_default();
        match (figs.is_empty(), &self.excerpt) {
            (false, _) => format!("{}: {figs}", self.label),
            (true, Some(e)) => format!("{}: {e}", self.label),
            (true, None) => self.label.to_owned(),
        }
    }

    fn after_note(&self) -> String {
        let figs = self.figures.as_ref().map(figures_words).unwrap_or_default();
        if figs.is_empty() {
            format!(" (after {})", self.short)
        } else {
            format!(" (after {}: {figs})", self.short)
        }
    }
}

/// `cuda_fatal` (maybe after an OOM) or `oom`, if the text says so.
fn classify_cuda(lines: &[&str]) -> Option<Verdict> {
    let fatal = find_fatal(lines);
    let oom = find_oom(lines);
    match (fatal, oom) {
        (Some(f), Some(o)) => Some(verdict(
            FailureKind::CudaFatal,
            format!("CUDA fatal error: {}{}", f.label, o.after_note()) + &f.detail,
        )),
        (Some(f), None) => Some(verdict(
            FailureKind::CudaFatal,
            format!("CUDA fatal error: {}{}", f.label, f.detail),
        )),
        (None, Some(o)) => Some(verdict(FailureKind::Oom, o.reason())),
        (None, None) => None,
    }
}

struct Fatal {
    label: String,
    /// Appended after the "(after ...)" note: the failed assertion, for instance.
    detail: String,
}

fn find_fatal(lines: &[&str]) -> Option<Fatal> {
    for (needles, label) in FATAL_PATTERNS {
        if find_line(lines, needles).is_some() {
            let detail = if *label == "device-side assert" {
                assertion_detail(lines).unwrap_or_default()
            } else {
                String::new()
            };
            return Some(Fatal {
                label: (*label).to_owned(),
                detail,
            });
        }
    }
    for line in lines {
        for needle in NCCL_NEEDLES {
            if let Some(p) = line.find(needle) {
                let text = line[p..].trim();
                let text = match text.strip_prefix("NCCL error in: ") {
                    // "NCCL error in: /long/path/ProcessGroupNCCL.cpp:1970, unhandled cuda error"
                    Some(rest) => match rest.split_once(", ") {
                        Some((_, what)) => format!("NCCL error: {what}"),
                        None => text.to_owned(),
                    },
                    None => text.to_owned(),
                };
                return Some(Fatal {
                    label: clip_chars(&text, 160),
                    detail: String::new(),
                });
            }
        }
    }
    for line in lines {
        for (prefix, words) in [
            ("CUDA error: ", ""),
            ("CUDA driver error: ", "driver error: "),
        ] {
            let mut from = 0;
            while let Some(p) = line[from..].find(prefix) {
                let rest = line[from + p + prefix.len()..].trim();
                from += p + prefix.len();
                if rest.is_empty() || is_oom_text(rest) {
                    continue;
                }
                return Some(Fatal {
                    label: format!("{words}{}", clip_chars(rest, 160)),
                    detail: String::new(),
                });
            }
        }
    }
    for line in lines {
        if let Some(p) = line.find("AcceleratorError") {
            let rest = line[p + "AcceleratorError".len()..]
                .trim_start_matches(':')
                .trim();
            if is_oom_text(rest) {
                continue;
            }
            let label = if rest.is_empty() {
                "torch.AcceleratorError".to_owned()
            } else {
                format!("torch.AcceleratorError: {}", clip_chars(rest, 160))
            };
            return Some(Fatal {
                label,
                detail: String::new(),
            });
        }
    }
    None
}

/// The text of a `CUDA error: ...` that is an allocation failure, not a broken context.
fn is_oom_text(rest: &str) -> bool {
    rest.contains("out of memory")
        || rest.contains("ALLOC_FAILED")
        || rest.contains("OUT_OF_MEMORY")
        || rest.contains("MemoryAllocation")
        || rest.contains("would exceed allowed memory")
}

fn find_oom(lines: &[&str]) -> Option<Oom> {
    for (needles, label, short) in OOM_PATTERNS {
        if let Some(i) = find_line(lines, needles) {
            // The figures follow the match, on its line or the next few (cudaMallocAsync).
            let end = (i + 8).min(lines.len());
            let figures = oom_figures(&lines[i..end].join("\n"));
            let excerpt = if figures.is_none() {
                lines.iter().find_map(|l| {
                    l.find("OOM when allocating tensor")
                        .map(|p| clip_chars(l[p..].trim(), 160))
                })
            } else {
                None
            };
            let label = if excerpt.is_some() {
                "out of memory (TensorFlow)"
            } else {
                label
            };
            return Some(Oom {
                label,
                short,
                figures,
                excerpt,
            });
        }
    }
    // Python's own MemoryError (host memory), as the exception line of a traceback.
    let host = lines.iter().any(|l| {
        let l = l.trim();
        l == "MemoryError" || l.starts_with("MemoryError:")
    });
    host.then_some(Oom {
        label: "host out of memory (Python MemoryError)",
        short: "host OOM",
        figures: None,
        excerpt: None,
    })
}

fn find_line(lines: &[&str], needles: &[&str]) -> Option<usize> {
    lines
        .iter()
        .position(|l| needles.iter().any(|n| l.contains(n)))
}

/// ": Assertion `x < n` failed (IndexKernel.cu:92)" from the first kernel assertion line.
fn assertion_detail(lines: &[&str]) -> Option<String> {
    const OPEN: &str = "Assertion `";
    let line = lines.iter().find(|l| l.contains(OPEN))?;
    let start = line.find(OPEN)? + OPEN.len();
    let body = &line[start..];
    let cond = match body.rfind("` failed") {
        Some(end) => &body[..end],
        None => body,
    };
    let mut out = format!(": Assertion `{}` failed", clip_chars(cond.trim(), 120));
    // "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: ..."
    let head = line[..start - OPEN.len()].split_whitespace().next();
    if let Some(tok) = head {
        let tok = tok.trim_end_matches(':');
        let base = tok.rsplit('/').next().unwrap_or(tok);
        if base.contains(".cu:") || base.contains(".cuh:") {
            out.push_str(&format!(" ({base})"));
        }
    }
    Some(out)
}

/// The lines of `text` worth searching: `[rankN]: ` prefixes (torchrun) stripped, and the
/// Python source lines (and `^^^^` markers) under a traceback's `File "..."` lines left out, so
/// that code which merely mentions an error text does not count as that error.
fn searchable_lines<'a>(text: &'a str, out: &mut Vec<&'a str>) {
    let mut in_frame = false;
    for raw in text.lines() {
        let line = strip_rank_prefix(raw);
        let trimmed = line.trim_start();
        if trimmed.starts_with("File \"") {
            in_frame = true;
            out.push(line);
        } else if in_frame && line.starts_with(char::is_whitespace) {
            // Source line or marker line of the frame above.
        } else {
            in_frame = false;
            out.push(line);
        }
    }
}

fn strip_rank_prefix(line: &str) -> &str {
    if let Some(rest) = line.strip_prefix("[rank") {
        if let Some((n, after)) = rest.split_once("]:") {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                return after.strip_prefix(' ').unwrap_or(after);
            }
        }
    }
    line
}

/// "Type: first line of message", as Python prints an exception's last line; searched along
/// with the texts so that the exception type counts (`OutOfMemoryError`, `AcceleratorError`).
fn exception_line(r: &Report) -> String {
    let ty = r.exc_type.trim();
    let ty = ty.rsplit('.').next().unwrap_or(ty);
    if ty.is_empty() {
        return String::new();
    }
    format!("{ty}: {}", first_line(r.message))
}

fn first_line(s: &str) -> &str {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

fn last_stderr_line(s: &str) -> Option<&str> {
    s.lines().map(str::trim).rfind(|l| !l.is_empty())
}

/// "ValueError: message first line".
fn exception_summary(r: &Report) -> String {
    let ty = r.exc_type.trim();
    let msg = first_line(r.message);
    match (ty.is_empty(), msg.is_empty()) {
        (false, false) => format!("{ty}: {msg}"),
        (false, true) => ty.to_owned(),
        (true, false) => format!("exception: {msg}"),
        (true, true) => "exception (no type, no message)".to_owned(),
    }
}

fn user_error(r: &Report) -> Verdict {
    let mut v = verdict(FailureKind::UserError, exception_summary(r));
    v.error = Some(UserError {
        exc_type: r.exc_type.trim().to_owned(),
        at: user_frame(r.traceback),
    });
    v
}

// ---------------------------------------------------------------------------------------------
// Exit status words.

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

/// "SIGKILL (the kernel OOM killer? check `dmesg`)".
fn signal_words(sig: i32) -> String {
    let hint = match sig {
        libc::SIGKILL => " (the kernel OOM killer? check `dmesg`)",
        libc::SIGSEGV => " (segmentation fault)",
        libc::SIGABRT => " (abort)",
        libc::SIGBUS => " (bus error: shared memory /dev/shm exhausted?)",
        libc::SIGFPE => " (arithmetic exception)",
        libc::SIGILL => " (illegal instruction)",
        libc::SIGXCPU => " (CPU time limit)",
        libc::SIGPIPE => " (broken pipe)",
        _ => "",
    };
    format!("{}{hint}", signal_name(sig))
}

/// Shells and container runtimes report a child killed by signal N as exit code 128+N.
fn exit_code_hint(code: i32) -> String {
    if code == 128 + libc::SIGKILL {
        return " (128+SIGKILL: killed by SIGKILL under a wrapper? the kernel OOM killer? check `dmesg`)"
            .to_owned();
    }
    if (129..=159).contains(&code) {
        return format!(" (128+{}?)", signal_name(code - 128));
    }
    String::new()
}

// ---------------------------------------------------------------------------------------------
// Sizes.

/// "tried to allocate 7.45 GiB, 4.10 GiB free of 15.48 GiB, 1.41 GiB reserved but unallocated".
fn figures_words(f: &OomFigures) -> String {
    let mut parts = Vec::new();
    if let Some(t) = f.tried {
        parts.push(format!("tried to allocate {}", format_allocator_size(t)));
    }
    match (f.free, f.total) {
        (Some(free), Some(total)) => parts.push(format!(
            "{} free of {}",
            format_allocator_size(free),
            format_allocator_size(total)
        )),
        (Some(free), None) => parts.push(format!("{} free", format_allocator_size(free))),
        (None, Some(total)) => parts.push(format!("{} total", format_allocator_size(total))),
        (None, None) => {}
    }
    if let Some(r) = f.reserved_unallocated {
        let mut s = format!("{} reserved but unallocated", format_allocator_size(r));
        // The request would have fit in the cached memory: fragmentation.
        if f.tried.is_some_and(|t| t > 0 && r >= t) {
            s.push_str(" (fragmentation: try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)");
        }
        parts.push(s);
    }
    parts.join(", ")
}

/// The size written right after `needle` ("Tried to allocate 7.45 GiB").
fn size_after(text: &str, needle: &str) -> Option<u64> {
    let p = text.find(needle)?;
    parse_allocator_size(&text[p + needle.len()..])
}

/// The size written right before `needle` ("15.78 GiB total capacity").
fn size_before(text: &str, needle: &str) -> Option<u64> {
    let p = text.find(needle)?;
    let mut toks = text[..p].split_whitespace().rev();
    let last = toks.next()?;
    let unit_bytes = allocator_unit(last);
    match unit_bytes {
        Some(_) => {
            let num = toks.next()?;
            parse_allocator_size(&format!("{num} {last}"))
        }
        // "1.00GiB" in one token.
        None => parse_allocator_size(last),
    }
}

/// A "Label   : 2.00 GiB" line (cudaMallocAsync's report).
fn labelled_size(text: &str, label: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix(label)?;
        let rest = rest.trim_start().strip_prefix(':')?;
        parse_allocator_size(rest)
    })
}

// ---------------------------------------------------------------------------------------------
// Reasons.

fn verdict(kind: FailureKind, reason: String) -> Verdict {
    Verdict {
        kind,
        reason: one_line(&reason, REASON_MAX_CHARS),
        error: None,
    }
}

/// Control characters (newlines, tabs) become spaces, runs of blanks one space, and the text is
/// clipped to `max` characters ending in "…".
fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4));
    let mut blank = false;
    for c in s.trim().chars() {
        if c.is_control() || c.is_whitespace() {
            if !blank {
                out.push(' ');
            }
            blank = true;
        } else {
            out.push(c);
            blank = false;
        }
    }
    clip_chars(&out, max)
}

/// At most `max` characters; "…" marks a cut.
fn clip_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    const KIB: f64 = 1024.0;

    fn report<'a>(exc_type: &'a str, message: &'a str, traceback: &'a str) -> Report<'a> {
        Report {
            exc_type,
            message,
            traceback,
        }
    }

    fn died(code: i32) -> Exit {
        Exit {
            code: Some(code),
            signal: None,
            signalled_by_us: false,
        }
    }

    fn signalled(sig: i32) -> Exit {
        Exit {
            code: None,
            signal: Some(sig),
            signalled_by_us: false,
        }
    }

    fn approx(got: Option<u64>, want: f64) {
        let got = got.expect("figure missing") as f64;
        assert!((got - want).abs() <= want * 1e-9 + 1.0, "{got} != {want}");
    }

    fn assert_one_line(v: &Verdict) {
        assert!(!v.reason.contains('\n'), "{:?}", v.reason);
        assert!(
            v.reason.chars().count() <= REASON_MAX_CHARS,
            "{:?}",
            v.reason
        );
        assert!(!v.reason.is_empty());
    }

    const TORCH_OOM_MSG: &str = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.56 GiB of which 33.56 MiB is free. Process 1234 has 23.52 GiB memory in use. Of the allocated memory 21.13 GiB is allocated by PyTorch, and 1.41 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

    const TORCH_OOM_TB: &str = r#"Traceback (most recent call last):
  File "/home/me/sweep/worker.py", line 41, in main
    value = objective(msg["params"])
            ^^^^^^^^^^^^^^^^^^^^^^^^
  File "/home/me/sweep/train.py", line 88, in objective
    loss = model(x).logsumexp(-1).mean()
           ^^^^^^^^
  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1751, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.56 GiB of which 33.56 MiB is free. Process 1234 has 23.52 GiB memory in use. Of the allocated memory 21.13 GiB is allocated by PyTorch, and 1.41 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"#;

    const DEVICE_ASSERT_STDERR: &str = r#"/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [32,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.
/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [33,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.
Traceback (most recent call last):
  File "/home/me/sweep/train.py", line 90, in objective
    emb = table[idx]
          ~~~~~^^^^^
torch.AcceleratorError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
"#;

    // ---- oom ------------------------------------------------------------------------------

    #[test]
    fn oom_pytorch_native_allocator_full_text() {
        let v = classify_report(&report(
            "torch.OutOfMemoryError",
            TORCH_OOM_MSG,
            TORCH_OOM_TB,
        ));
        assert_eq!(v.kind, FailureKind::Oom);
        assert!(
            v.reason.starts_with(
                "CUDA out of memory: tried to allocate 2.00 GiB, 33.56 MiB free of 23.56 GiB, 1.41 GiB reserved but unallocated"
            ),
            "{}",
            v.reason
        );
        assert!(!v.kind.poisons_context());
        assert_one_line(&v);
    }

    #[test]
    fn oom_reason_carries_figures_from_spec_example() {
        let msg = "CUDA out of memory. Tried to allocate 7.45 GiB. GPU 0 has a total capacity of 15.48 GiB of which 4.10 GiB is free. Including non-PyTorch memory, this process has 11.37 GiB memory in use.";
        let v = classify_report(&report("torch.OutOfMemoryError", msg, ""));
        assert_eq!(
            v.reason,
            "CUDA out of memory: tried to allocate 7.45 GiB, 4.10 GiB free of 15.48 GiB"
        );
    }

    #[test]
    fn oom_fragmentation_hint_when_cached_memory_would_have_fit() {
        let msg = "CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 301.25 MiB is free. Of the allocated memory 70.02 GiB is allocated by PyTorch, and 8.40 GiB is reserved by PyTorch but unallocated.";
        let v = classify_report(&report("torch.OutOfMemoryError", msg, ""));
        assert_eq!(v.kind, FailureKind::Oom);
        assert!(
            v.reason.contains("expandable_segments:True"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn oom_torch_cuda_out_of_memory_error_old_message_format() {
        let msg = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.26 GiB already allocated; 7.88 MiB free; 14.45 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF";
        let v = classify_report(&report("torch.cuda.OutOfMemoryError", msg, ""));
        assert_eq!(v.kind, FailureKind::Oom);
        assert!(
            v.reason.starts_with(
                "CUDA out of memory: tried to allocate 20.00 MiB, 7.88 MiB free of 15.78 GiB"
            ),
            "{}",
            v.reason
        );
    }

    #[test]
    fn oom_exc_type_alone_is_oom() {
        let v = classify_report(&report("torch.OutOfMemoryError", "", ""));
        assert_eq!(v.kind, FailureKind::Oom);
        assert_eq!(v.reason, "out of memory (OutOfMemoryError)");
    }

    #[test]
    fn oom_cuda_malloc_async_exceeds_allowed_memory() {
        let msg = "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 21.91 GiB\nRequested               : 2.00 GiB\nDevice limit            : 23.68 GiB\nFree (according to CUDA): 15.31 MiB\nPyTorch limit (set by user-supplied memory fraction)\n                        : 17179869184.00 GiB";
        let tb = format!(
            "Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n    y = x @ w\ntorch.OutOfMemoryError: {msg}\n"
        );
        let v = classify_report(&report("torch.OutOfMemoryError", msg, &tb));
        assert_eq!(v.kind, FailureKind::Oom);
        assert_eq!(
            v.reason,
            "CUDA out of memory (cudaMallocAsync): tried to allocate 2.00 GiB, 15.31 MiB free of 23.68 GiB"
        );
    }

    #[test]
    fn oom_cuda_error_out_of_memory_is_not_cuda_fatal() {
        // The boilerplate mentions "device-side assertions": that is not an assert.
        let msg = "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n";
        let v = classify_report(&report("RuntimeError", msg, ""));
        assert_eq!(v.kind, FailureKind::Oom);
        assert_eq!(v.reason, "CUDA out of memory (CUDA error: out of memory)");
    }

    #[test]
    fn oom_cublas_alloc_failed() {
        let msg = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`";
        let v = classify_report(&report("RuntimeError", msg, ""));
        assert_eq!(v.kind, FailureKind::Oom);
        assert!(
            v.reason.contains("CUBLAS_STATUS_ALLOC_FAILED"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn oom_cudnn_alloc_failed() {
        let v = classify_report(&report(
            "RuntimeError",
            "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
            "",
        ));
        assert_eq!(v.kind, FailureKind::Oom);
        assert!(
            v.reason.contains("CUDNN_STATUS_ALLOC_FAILED"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn oom_jax_resource_exhausted() {
        let msg = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n             parameter allocation:    1.00GiB\n              constant allocation:         0B";
        let tb = format!(
            "Traceback (most recent call last):\n  File \"train_jax.py\", line 30, in <module>\n    state, loss = step(state, batch)\njaxlib.xla_extension.XlaRuntimeError: {msg}\n"
        );
        let v = classify_report(&report("jaxlib.xla_extension.XlaRuntimeError", msg, &tb));
        assert_eq!(v.kind, FailureKind::Oom);
        assert_eq!(
            v.reason,
            "GPU out of memory (XLA RESOURCE_EXHAUSTED): tried to allocate 16.00 GiB"
        );
    }

    #[test]
    fn oom_tensorflow_resource_exhausted() {
        let msg = "OOM when allocating tensor with shape[8192,8192,16] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:RandomStandardNormal]";
        let v = classify_report(&report(
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError",
            msg,
            "",
        ));
        assert_eq!(v.kind, FailureKind::Oom);
        assert!(
            v.reason.starts_with(
                "out of memory (TensorFlow): OOM when allocating tensor with shape[8192,8192,16]"
            ),
            "{}",
            v.reason
        );
        let v = classify_report(&report(
            "ResourceExhaustedError",
            "Graph execution error:",
            "",
        ));
        assert_eq!(v.kind, FailureKind::Oom);
    }

    #[test]
    fn oom_host_python_memory_error() {
        let v = classify_report(&report("MemoryError", "", ""));
        assert_eq!(v.kind, FailureKind::Oom);
        assert_eq!(v.reason, "host out of memory (Python MemoryError)");
        let v = classify_exit(
            &died(1),
            "Traceback (most recent call last):\n  File \"prep.py\", line 3, in <module>\n    x = [0] * 10**12\nMemoryError\n",
            None,
        );
        assert_eq!(v.kind, FailureKind::Oom);
    }

    #[test]
    fn oom_on_torchrun_rank_prefixed_stderr() {
        let stderr = "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"train.py\", line 9, in <module>\n[rank0]:     out = model(x)\n[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 11.06 MiB is free.\n";
        let v = classify_exit(&died(1), stderr, None);
        assert_eq!(v.kind, FailureKind::Oom);
        assert_eq!(
            v.reason,
            "CUDA out of memory: tried to allocate 64.00 MiB, 11.06 MiB free of 79.19 GiB"
        );
    }

    // ---- cuda_fatal -----------------------------------------------------------------------

    #[test]
    fn cuda_fatal_device_side_assert_names_the_assertion() {
        let v = classify_exit(&died(1), DEVICE_ASSERT_STDERR, None);
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert!(
            v.reason
                .starts_with("CUDA fatal error: device-side assert: Assertion `"),
            "{}",
            v.reason
        );
        assert!(v.reason.contains("index out of bounds"), "{}", v.reason);
        assert!(v.reason.contains("(IndexKernel.cu:92)"), "{}", v.reason);
        assert!(v.kind.poisons_context());
        assert_one_line(&v);
    }

    #[test]
    fn cuda_fatal_device_side_assert_report() {
        let msg = "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n";
        let v = classify_report(&report("RuntimeError", msg, ""));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(v.reason, "CUDA fatal error: device-side assert");
    }

    #[test]
    fn cuda_fatal_assert_after_oom_wins_and_mentions_the_oom() {
        // The seeds' log: an OOM turned into a device-side assert; both texts in one log.
        let stderr = format!(
            "{DEVICE_ASSERT_STDERR}Traceback (most recent call last):\n  File \"train.py\", line 70, in objective\n    out = model(x)\n{}",
            TORCH_OOM_TB.lines().last().unwrap()
        );
        let r = report(
            "torch.AcceleratorError",
            "CUDA error: device-side assert triggered",
            "",
        );
        for v in [
            classify_exit(&died(1), &stderr, None),
            classify_exit(&signalled(libc::SIGABRT), &stderr, Some(&r)),
            classify_report(&report("torch.AcceleratorError", &stderr, "")),
        ] {
            assert_eq!(v.kind, FailureKind::CudaFatal, "{}", v.reason);
            assert!(
                v.reason.starts_with(
                    "CUDA fatal error: device-side assert (after CUDA OOM: tried to allocate 2.00 GiB, 33.56 MiB free of 23.56 GiB"
                ),
                "{}",
                v.reason
            );
            assert!(v.kind.poisons_context());
            assert_one_line(&v);
        }
    }

    #[test]
    fn cuda_fatal_illegal_memory_access() {
        let msg = "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n";
        let v = classify_report(&report("RuntimeError", msg, ""));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(v.reason, "CUDA fatal error: illegal memory access");
    }

    #[test]
    fn cuda_fatal_jax_illegal_address() {
        let msg = "INTERNAL: Failed to execute XLA Runtime executable: run time error: custom call 'xla.gpu.func.launch' failed: Failed to launch CUDA kernel: fusion_12 with block dimensions: 256x1x1 and grid dimensions: 64x1x1: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered.";
        let v = classify_report(&report("jaxlib.xla_extension.XlaRuntimeError", msg, ""));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(v.reason, "CUDA fatal error: illegal memory access");
    }

    #[test]
    fn cuda_fatal_misaligned_address() {
        let v = classify_report(&report(
            "RuntimeError",
            "CUDA error: misaligned address",
            "",
        ));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(v.reason, "CUDA fatal error: misaligned address");
    }

    #[test]
    fn cuda_fatal_unspecified_launch_failure() {
        let v = classify_report(&report(
            "RuntimeError",
            "CUDA error: unspecified launch failure\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
            "",
        ));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(v.reason, "CUDA fatal error: unspecified launch failure");
    }

    #[test]
    fn cuda_fatal_other_cuda_error_text() {
        let v = classify_report(&report(
            "RuntimeError",
            "CUDA error: the launch timed out and was terminated\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
            "",
        ));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(
            v.reason,
            "CUDA fatal error: the launch timed out and was terminated"
        );
    }

    #[test]
    fn cuda_fatal_accelerator_error_type() {
        let v = classify_report(&report(
            "torch.AcceleratorError",
            "something went wrong",
            "",
        ));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(
            v.reason,
            "CUDA fatal error: torch.AcceleratorError: something went wrong"
        );
    }

    #[test]
    fn accelerator_error_carrying_out_of_memory_is_oom() {
        let v = classify_report(&report(
            "torch.AcceleratorError",
            "CUDA error: out of memory",
            "",
        ));
        assert_eq!(v.kind, FailureKind::Oom, "{}", v.reason);
    }

    #[test]
    fn cuda_fatal_cudnn_execution_failed() {
        let v = classify_report(&report(
            "RuntimeError",
            "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
            "",
        ));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert!(v.reason.contains("CUDNN_STATUS_EXECUTION_FAILED"));
    }

    #[test]
    fn cuda_fatal_cublas_execution_failed() {
        let v = classify_report(&report(
            "RuntimeError",
            "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
            "",
        ));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(
            v.reason,
            "CUDA fatal error: cuBLAS execution failed (CUBLAS_STATUS_EXECUTION_FAILED)"
        );
    }

    #[test]
    fn cuda_fatal_nccl_error() {
        let msg = "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'invalid device ordinal'";
        let v = classify_report(&report("torch.distributed.DistBackendError", msg, ""));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(
            v.reason,
            "CUDA fatal error: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
        );
    }

    #[test]
    fn cuda_fatal_nccl_after_cuda_oom() {
        let msg = "NCCL error in: /opt/pytorch/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'out of memory'";
        let v = classify_report(&report("DistBackendError", msg, ""));
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert!(v.reason.contains("(after CUDA OOM)"), "{}", v.reason);
    }

    // ---- killed ---------------------------------------------------------------------------

    #[test]
    fn killed_sigkill_points_at_the_kernel_oom_killer() {
        let v = classify_exit(&signalled(libc::SIGKILL), "epoch 3: loss 0.412\n", None);
        assert_eq!(v.kind, FailureKind::Killed);
        assert_eq!(
            v.reason,
            "killed by SIGKILL (the kernel OOM killer? check `dmesg`); stderr: epoch 3: loss 0.412"
        );
        assert!(v.kind.poisons_context());
    }

    #[test]
    fn killed_sigsegv() {
        let stderr = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3a (most recent call first):\n  File \"/usr/lib/python3.11/site-packages/torch/nn/functional.py\", line 2233 in embedding\n";
        let v = classify_exit(&signalled(libc::SIGSEGV), stderr, None);
        assert_eq!(v.kind, FailureKind::Killed);
        assert!(
            v.reason
                .starts_with("killed by SIGSEGV (segmentation fault); stderr: "),
            "{}",
            v.reason
        );
    }

    #[test]
    fn killed_sigabrt_without_cuda_text() {
        let stderr = "terminate called after throwing an instance of 'std::runtime_error'\n  what():  tokenizer vocabulary file is corrupt\n";
        let v = classify_exit(&signalled(libc::SIGABRT), stderr, None);
        assert_eq!(v.kind, FailureKind::Killed);
        assert!(
            v.reason.starts_with("killed by SIGABRT (abort)"),
            "{}",
            v.reason
        );
        assert!(v.reason.contains("tokenizer vocabulary file is corrupt"));
    }

    #[test]
    fn killed_sigbus_hints_at_shared_memory() {
        let v = classify_exit(&signalled(libc::SIGBUS), "", None);
        assert_eq!(v.kind, FailureKind::Killed);
        assert_eq!(
            v.reason,
            "killed by SIGBUS (bus error: shared memory /dev/shm exhausted?)"
        );
    }

    #[test]
    fn sigabrt_after_device_side_assert_is_cuda_fatal() {
        let stderr = "terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n\nException raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):\nframe #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f0b8d3e1446 in /usr/lib/python3.11/site-packages/torch/lib/libc10.so)\n";
        let v = classify_exit(&signalled(libc::SIGABRT), stderr, None);
        assert_eq!(v.kind, FailureKind::CudaFatal);
        assert_eq!(v.reason, "CUDA fatal error: device-side assert");
    }

    #[test]
    fn sigkill_with_cuda_oom_on_stderr_is_oom() {
        let v = classify_exit(&signalled(libc::SIGKILL), TORCH_OOM_TB, None);
        assert_eq!(v.kind, FailureKind::Oom);
    }

    #[test]
    fn killed_by_foreign_signal_after_a_report_mentions_the_report() {
        let r = report("ValueError", "lr must be positive", "");
        let v = classify_exit(&signalled(libc::SIGSEGV), "", Some(&r));
        assert_eq!(v.kind, FailureKind::Killed);
        assert_eq!(
            v.reason,
            "killed by SIGSEGV (segmentation fault); after ValueError: lr must be positive"
        );
    }

    #[test]
    fn signal_sent_by_sweepd_is_killed_sent_by_sweepd() {
        let e = Exit {
            code: None,
            signal: Some(libc::SIGTERM),
            signalled_by_us: true,
        };
        let v = classify_exit(&e, "step 10\n", None);
        assert_eq!(v.kind, FailureKind::Killed);
        assert_eq!(v.reason, "killed by SIGTERM (sent by sweepd)");
    }

    // ---- worker_died ----------------------------------------------------------------------

    #[test]
    fn worker_died_nonzero_exit_with_garbage_stderr() {
        let junk = "\u{fffd}\u{fffd}\x01\x02 ~~~ ".repeat(100);
        let stderr = format!("some noise\n{junk}\n\n   \n");
        let v = classify_exit(&died(3), &stderr, None);
        assert_eq!(v.kind, FailureKind::WorkerDied);
        assert!(
            v.reason.starts_with("worker died: exit code 3; stderr: "),
            "{}",
            v.reason
        );
        assert!(v.reason.ends_with('…'));
        assert!(v.kind.poisons_context());
        assert_one_line(&v);
    }

    #[test]
    fn uncaught_python_exception_without_report_is_a_user_error_where_it_was_raised() {
        let stderr = "Traceback (most recent call last):\n  File \"train.py\", line 5, in <module>\n    raise KeyError('batch_size')\nKeyError: 'batch_size'\n";
        let v = classify_exit(&died(1), stderr, None);
        assert_eq!(v.kind, FailureKind::UserError);
        assert_eq!(
            v.reason,
            "KeyError: 'batch_size' (worker exited with code 1)"
        );
        let e = v.error.expect("the exception");
        assert_eq!(e.exc_type, "KeyError");
        assert_eq!(e.at.expect("frame").to_string(), "train.py:5, in <module>");
    }

    #[test]
    fn the_users_frame_is_the_innermost_outside_libraries_and_the_helper() {
        let tb = "Traceback (most recent call last):
  File \"/opt/sweepd/python/sweepd_worker.py\", line 300, in _run_objective
    value = objective(trial)
  File \"/home/me/train.py\", line 42, in objective
    trial.report(loss, epoch)
  File \"/opt/sweepd/python/sweepd_worker.py\", line 180, in _as_step
    raise TypeError(...)
TypeError: Trial.report(step, value): step must be an int, got 0.5
";
        let at = user_frame(tb).expect("a frame");
        assert_eq!(at.file, "/home/me/train.py");
        assert_eq!(at.line, 42);
        assert_eq!(at.function, "objective");
        let in_torch = "Traceback (most recent call last):
  File \"/home/me/train.py\", line 7, in objective
    model(x)
  File \"/venv/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1736, in _call_impl
    return forward_call(*args)
RuntimeError: shapes cannot be multiplied
";
        assert_eq!(user_frame(in_torch).unwrap().line, 7);
        // Only library frames: the innermost one, rather than nothing.
        let lib_only = "  File \"/usr/lib/python3.11/json/decoder.py\", line 355, in raw_decode\n";
        assert_eq!(user_frame(lib_only).unwrap().line, 355);
        assert_eq!(user_frame("no traceback here"), None);
    }

    #[test]
    fn a_failed_import_under_the_helpers_cap_hook_names_the_users_import_line() {
        // sweepd_memory.py runs torch's import to cap it right after (issue 41): its frame is
        // the helper's, not the user's.
        let tb = "Traceback (most recent call last):
  File \"/home/me/train.py\", line 3, in <module>
    import torch
  File \"<frozen importlib._bootstrap>\", line 1360, in _find_and_load
  File \"/opt/sweepd/python/sweepd_memory.py\", line 450, in exec_module
    run(module)
  File \"/venv/lib/python3.11/site-packages/torch/__init__.py\", line 237, in <module>
    from torch._C import *
ImportError: libcudnn.so.9: cannot open shared object file
";
        assert_eq!(
            user_frame(tb).unwrap().to_string(),
            "/home/me/train.py:3, in <module>"
        );
    }

    #[test]
    fn a_reported_exception_carries_its_type_and_frame() {
        let r = Report {
            exc_type: "ValueError",
            message: "bad lr",
            traceback: "Traceback (most recent call last):\n  File \"w.py\", line 3, in objective\n    raise ValueError('bad lr')\nValueError: bad lr\n",
        };
        let e = classify_report(&r).error.expect("the exception");
        assert_eq!(e.to_string(), "ValueError raised at w.py:3, in objective");
    }

    #[test]
    fn worker_died_exit_137_hints_at_sigkill() {
        let v = classify_exit(&died(137), "", None);
        assert_eq!(v.kind, FailureKind::WorkerDied);
        assert!(
            v.reason
                .starts_with("worker died: exit code 137 (128+SIGKILL"),
            "{}",
            v.reason
        );
        assert!(v.reason.ends_with("(stderr empty)"));
    }

    #[test]
    fn worker_died_exit_zero_mid_trial() {
        let v = classify_exit(&died(0), "", None);
        assert_eq!(v.kind, FailureKind::WorkerDied);
        assert_eq!(
            v.reason,
            "worker died: exited with code 0 in the middle of a trial (stderr empty)"
        );
        let v = classify_exit(&Exit::default(), "", None);
        assert_eq!(v.reason, "worker died: no exit status (stderr empty)");
    }

    // ---- user_error -----------------------------------------------------------------------

    #[test]
    fn user_error_plain_value_error() {
        let tb = "Traceback (most recent call last):\n  File \"train.py\", line 14, in objective\n    raise ValueError(\"lr must be positive\")\nValueError: lr must be positive\n";
        let v = classify_report(&report("ValueError", "lr must be positive", tb));
        assert_eq!(v.kind, FailureKind::UserError);
        assert_eq!(v.reason, "ValueError: lr must be positive");
        assert!(!v.kind.poisons_context());
    }

    #[test]
    fn user_error_whose_message_mentions_memory_stays_user_error() {
        let msg = "model needs more memory than allowed: 48 GiB of memory for hidden_size=8192; lower it (out of memory budget)";
        let v = classify_report(&report("ValueError", msg, ""));
        assert_eq!(v.kind, FailureKind::UserError);
        let v = classify_report(&report(
            "RuntimeError",
            "not enough GPU memory for batch_size=512",
            "",
        ));
        assert_eq!(v.kind, FailureKind::UserError);
    }

    #[test]
    fn user_error_when_source_line_merely_mentions_cuda_texts() {
        let tb = "Traceback (most recent call last):\n  File \"train.py\", line 20, in objective\n    if \"CUDA out of memory\" in str(e) or \"device-side assert triggered\" in str(e):\n  File \"train.py\", line 22, in objective\n    raise ValueError(\"bad batch\")  # not a CUDA error: just data\nValueError: bad batch\n";
        let v = classify_report(&report("ValueError", "bad batch", tb));
        assert_eq!(v.kind, FailureKind::UserError, "{}", v.reason);
    }

    #[test]
    fn user_error_report_then_exit_code_one_oneshot() {
        let r = report("ValueError", "lr must be positive\nsecond line", "");
        let v = classify_exit(
            &died(1),
            "Traceback ...\nValueError: lr must be positive\n",
            Some(&r),
        );
        assert_eq!(v.kind, FailureKind::UserError);
        assert_eq!(
            v.reason,
            "ValueError: lr must be positive (worker exited with code 1)"
        );
    }

    #[test]
    fn user_error_reason_is_one_clipped_line() {
        let long = format!("\n\n  {}\nsecond line", "x".repeat(1000));
        let v = classify_report(&report("mypkg.errors.ConfigError", &long, ""));
        assert_eq!(v.kind, FailureKind::UserError);
        assert!(v.reason.starts_with("mypkg.errors.ConfigError: xxx"));
        assert_eq!(v.reason.chars().count(), REASON_MAX_CHARS);
        assert_one_line(&v);
        let v = classify_report(&report("", "", ""));
        assert_eq!(v.reason, "exception (no type, no message)");
    }

    // ---- oom_figures ----------------------------------------------------------------------

    #[test]
    fn oom_figures_gib_and_mib() {
        let f = oom_figures(TORCH_OOM_MSG).unwrap();
        approx(f.tried, 2.00 * GIB);
        approx(f.total, 23.56 * GIB);
        approx(f.free, 33.56 * MIB);
        approx(f.reserved_unallocated, 1.41 * GIB);
    }

    #[test]
    fn oom_figures_spec_example() {
        let f = oom_figures("Tried to allocate 7.45 GiB. GPU 0 has a total capacity of 15.48 GiB of which 4.10 GiB is free.").unwrap();
        approx(f.tried, 7.45 * GIB);
        approx(f.total, 15.48 * GIB);
        approx(f.free, 4.10 * GIB);
        assert_eq!(f.reserved_unallocated, None);
    }

    #[test]
    fn oom_figures_kib_and_bytes() {
        let f = oom_figures("CUDA out of memory. Tried to allocate 512.00 KiB. GPU 1 has a total capacity of 7.79 GiB of which 768 bytes is free. Of the allocated memory 7.01 GiB is allocated by PyTorch, and 20.50 KiB is reserved by PyTorch but unallocated.").unwrap();
        approx(f.tried, 512.0 * KIB);
        approx(f.total, 7.79 * GIB);
        assert_eq!(f.free, Some(768));
        approx(f.reserved_unallocated, 20.5 * KIB);
    }

    #[test]
    fn oom_figures_old_pytorch_format() {
        let f = oom_figures("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.26 GiB already allocated; 7.88 MiB free; 14.45 GiB reserved in total by PyTorch)").unwrap();
        approx(f.tried, 20.0 * MIB);
        approx(f.total, 15.78 * GIB);
        approx(f.free, 7.88 * MIB);
        approx(f.reserved_unallocated, 14.45 * GIB - 14.26 * GIB);
    }

    #[test]
    fn oom_figures_jax_bytes_and_attached_units() {
        let f = oom_figures(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        )
        .unwrap();
        assert_eq!(f.tried, Some(17179869184));
        let f = oom_figures("RESOURCE_EXHAUSTED: Failed to allocate request for 1.00GiB (1073741824B) on device ordinal 0").unwrap();
        assert_eq!(f.tried, Some(1 << 30));
    }

    #[test]
    fn oom_figures_say_what_the_process_held_and_needed() {
        // PyTorch 2.x, as printed (the process's own line, not another process's).
        let text = "CUDA out of memory. Tried to allocate 170.00 MiB. GPU 0 has a total capacity \
                    of 31.37 GiB of which 73.81 MiB is free. Process 99 has 2.00 GiB memory in use. \
                    Including non-PyTorch memory, this process has 31.29 GiB memory in use. Of the \
                    allocated memory 30.80 GiB is allocated by PyTorch, and 2.80 MiB is reserved \
                    by PyTorch but unallocated.";
        let f = oom_figures(text).unwrap();
        approx(f.process_used, 31.29 * GIB);
        approx(f.allocated, 30.80 * GIB);
        // Held minus the free cache, plus the request.
        let want = 31.29 * GIB - 2.80 * MIB + 170.0 * MIB;
        assert!((f.demand().unwrap() as f64 - want).abs() < 0.01 * MIB);
        // All it held, the free cache included, plus the request.
        let all = 31.29 * GIB + 170.0 * MIB;
        assert!((f.footprint().unwrap() as f64 - all).abs() < 0.01 * MIB);
        // Older PyTorch: what the tensors held.
        let f = oom_figures("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.26 GiB already allocated; 7.88 MiB free; 14.45 GiB reserved in total by PyTorch)").unwrap();
        assert_eq!(f.process_used, None);
        approx(f.allocated, 14.26 * GIB);
        assert!((f.demand().unwrap() as f64 - (14.26 * GIB + 20.0 * MIB)).abs() < 0.01 * MIB);
        assert_eq!(f.footprint(), None);
        // JAX says only what it tried; without that there is no demand.
        let f = oom_figures(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        )
        .unwrap();
        assert_eq!(f.demand(), Some(17179869184));
        let f = oom_figures("GPU 0 has a total capacity of 15.48 GiB of which 4.10 GiB is free.")
            .unwrap();
        assert_eq!(f.demand(), None);
    }

    #[test]
    fn oom_figures_absent() {
        assert_eq!(oom_figures("CUDA error: out of memory"), None);
        assert_eq!(oom_figures("Tried to allocate lots"), None);
        assert_eq!(oom_figures(""), None);
    }
}
