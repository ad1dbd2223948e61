//! Where a device's memory per trial comes from: NVML's list of processes, or the workers'
//! frameworks.
//!
//! sweepd charges device memory to a trial by its worker's process group, from the pids NVML
//! lists. That fails where NVML cannot name our processes: in a container without the host's
//! PID namespace (Docker, Kubernetes without `--pid=host`) it lists them under host pids that
//! match nothing sweepd sees, and on MIG, or a driver that hides it, it lists no memory per
//! process at all. There, what each trial holds comes from its framework (the helper's
//! `memory` messages: what the allocator reserves now and at most, the process's context),
//! and NVML stays the authority for what the device has free. Pure: the monitor hands the
//! facts of each reading in and says which source it uses, and why, in `sweepd gpus`.

use std::fmt;

/// Why NVML cannot say what our trials hold on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Blind {
    /// Our workers' frameworks report memory on the device, and NVML lists none of their
    /// processes there.
    NoProcessOfOurs,
    /// NVML lists processes without the memory each holds.
    NoMemoryPerProcess,
}

/// Where a device's memory per trial comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Source {
    /// NVML lists our processes and what each holds.
    #[default]
    Processes,
    /// The workers' frameworks say what each trial holds; NVML says what the device has free.
    Frameworks(Blind),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Processes => write!(f, "memory by process (NVML)"),
            Source::Frameworks(Blind::NoProcessOfOurs) => write!(
                f,
                "memory from the workers' frameworks: NVML lists no process of ours \
                 (container PID namespace?)"
            ),
            Source::Frameworks(Blind::NoMemoryPerProcess) => write!(
                f,
                "memory from the workers' frameworks: NVML gives no memory per process \
                 (MIG, or a driver that hides it)"
            ),
        }
    }
}

/// What one reading of a device shows about NVML's view of our processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// NVML listed a process without the memory it holds.
    pub no_memory_per_process: bool,
    /// A trial of ours whose framework reported memory on the device has no process that NVML
    /// lists there.
    pub reported_but_unlisted: bool,
}

/// The source for a device after a reading, from the one before (`was`): once NVML has been
/// found blind there it stays so for the daemon's life (a trial that has not allocated yet is
/// unlisted for a reason of its own, and a source that flips would count a trial twice or not
/// at all); NVML without memory per process, or without the processes our frameworks report,
/// is blind.
pub fn source(was: Source, seen: Seen) -> Source {
    match was {
        Source::Frameworks(_) => was,
        Source::Processes if seen.no_memory_per_process => {
            Source::Frameworks(Blind::NoMemoryPerProcess)
        }
        Source::Processes if seen.reported_but_unlisted => {
            Source::Frameworks(Blind::NoProcessOfOurs)
        }
        Source::Processes => Source::Processes,
    }
}

/// What a trial holds by its framework's figures: its worker's context and what the
/// allocator reserves (now, or at most). `None` before its first report.
pub fn by_framework(context: u64, reserved: Option<u64>) -> Option<u64> {
    reserved.map(|r| r.saturating_add(context))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const CONTAINER: Source = Source::Frameworks(Blind::NoProcessOfOurs);
    const MIG: Source = Source::Frameworks(Blind::NoMemoryPerProcess);

    #[rstest]
    #[case::nvml_names_our_processes(Source::Processes, false, false, Source::Processes)]
    #[case::our_frameworks_report_processes_nvml_does_not_list(
        Source::Processes,
        false,
        true,
        CONTAINER
    )]
    #[case::no_memory_per_process(Source::Processes, true, false, MIG)]
    #[case::both(Source::Processes, true, true, MIG)]
    #[case::blind_stays_blind(CONTAINER, false, false, CONTAINER)]
    #[case::blind_for_the_first_reason(MIG, false, true, MIG)]
    fn nvml_is_the_source_until_it_cannot_name_our_processes(
        #[case] was: Source,
        #[case] no_memory_per_process: bool,
        #[case] reported_but_unlisted: bool,
        #[case] want: Source,
    ) {
        let seen = Seen {
            no_memory_per_process,
            reported_but_unlisted,
        };
        assert_eq!(source(was, seen), want);
    }

    #[test]
    fn the_source_says_which_and_why() {
        assert_eq!(Source::Processes.to_string(), "memory by process (NVML)");
        assert_eq!(
            CONTAINER.to_string(),
            "memory from the workers' frameworks: NVML lists no process of ours (container PID \
             namespace?)"
        );
        assert!(MIG.to_string().contains("no memory per process"));
    }

    #[test]
    fn a_trial_by_its_framework_is_its_context_and_what_its_allocator_reserves() {
        assert_eq!(by_framework(512, Some(1024)), Some(1536));
        assert_eq!(by_framework(512, None), None);
        assert_eq!(by_framework(u64::MAX, Some(1)), Some(u64::MAX));
    }
}
