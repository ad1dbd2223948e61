//! The ledger's file format. One line per daemon and device with what its trials hold back
//! there (`PID START DEVICE UNCLAIMED RUNNING IDLE WANT SEEN TRIALS`, `TRIALS` being `-` or
//! `PGID:BOUND,...`; lines of the first formats, without the last four fields or the last one,
//! read with them 0 and without trials); after it, where the daemon started trials there or
//! holds memory for one, `PID START DEVICE + STARTED HOLD SINCE`; and one line per daemon with
//! its heartbeat, `PID START beat MS`. Daemons of the formats before the heartbeat skip the
//! lines they do not know, so they still count the claims of those that write them; those
//! that write heartbeats drop the entries of daemons that do not (`docs/gpu-memory-model.md`).

use super::entry::{Claim, Entry, Held, Owner, Sheet};

/// The file's bytes, read: the sheet, and how many lines did not read (not UTF-8, not an entry
/// of a format this daemon knows, a start line without its claims line, a second line for one
/// daemon's device, a last line without its newline). `#` comments and empty lines are
/// neither.
pub(super) fn parse(bytes: &[u8]) -> (Sheet, usize) {
    let mut sheet = Sheet::default();
    let mut bad = 0;
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // What follows the last newline: nothing, or a line not written whole.
    if lines.pop().is_some_and(|rest| !rest.is_empty()) {
        bad += 1;
    }
    for line in lines {
        let Ok(line) = std::str::from_utf8(line) else {
            bad += 1;
            continue;
        };
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if let Some((owner, beat)) = parse_beat(line) {
            let b = sheet.beats.entry(owner).or_default();
            *b = (*b).max(beat);
        } else if let Some((owner, device, [started, hold, since])) = parse_standing(line) {
            // It follows its claims line; alone it does not read.
            match sheet
                .entries
                .iter_mut()
                .find(|e| e.owner == owner && e.device == device)
            {
                Some(e) => {
                    e.claim.started = started;
                    e.claim.hold = hold;
                    e.claim.hold_since = since;
                }
                None => bad += 1,
            }
        } else if let Some(e) = parse_claims(line) {
            if sheet
                .entries
                .iter()
                .any(|x| x.owner == e.owner && x.device == e.device)
            {
                bad += 1;
            } else {
                sheet.entries.push(e);
            }
        } else {
            bad += 1;
        }
    }
    (sheet, bad)
}

/// `PID START beat MS`: the daemon's heartbeat (a line that daemons of the formats before
/// skip, its third field not being a device).
fn parse_beat(line: &str) -> Option<(Owner, u64)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [pid, start, "beat", ms] = f[..] else {
        return None;
    };
    let owner = Owner {
        pid: pid.parse().ok()?,
        start: start.parse().ok()?,
    };
    Some((owner, ms.parse().ok()?))
}

/// `PID START DEVICE + STARTED HOLD SINCE`.
fn parse_standing(line: &str) -> Option<(Owner, u32, [u64; 3])> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [pid, start, device, "+", started, hold, since] = f[..] else {
        return None;
    };
    let owner = Owner {
        pid: pid.parse().ok()?,
        start: start.parse().ok()?,
    };
    Some((
        owner,
        device.parse().ok()?,
        [
            started.parse().ok()?,
            hold.parse().ok()?,
            since.parse().ok()?,
        ],
    ))
}

/// `PID START DEVICE UNCLAIMED RUNNING [IDLE WANT SEEN [TRIALS]]`.
fn parse_claims(l: &str) -> Option<Entry> {
    let mut f = l.split_whitespace();
    let mut entry = Entry {
        owner: Owner {
            pid: f.next()?.parse().ok()?,
            start: f.next()?.parse().ok()?,
        },
        device: f.next()?.parse().ok()?,
        claim: Claim {
            unclaimed: f.next()?.parse().ok()?,
            running: f.next()?.parse().ok()?,
            ..Claim::default()
        },
    };
    let rest = f.collect::<Vec<&str>>();
    match rest[..] {
        [] => {}
        [idle, want, seen, ..] if rest.len() <= 4 => {
            entry.claim.idle = idle.parse().ok()?;
            entry.claim.want = want.parse().ok()?;
            entry.claim.seen = seen.parse().ok()?;
        }
        _ => return None,
    }
    if let Some(trials) = rest.get(3) {
        entry.claim.trials = Some(parse_trials(trials)?);
    }
    Some(entry)
}

/// `-` or `PGID:BOUND,...`.
fn parse_trials(text: &str) -> Option<Vec<Held>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|t| {
            let (pgid, bound) = t.split_once(':')?;
            Some(Held {
                pgid: pgid.parse().ok().filter(|g| *g >= 0)?,
                bound: bound.parse().ok()?,
            })
        })
        .collect()
}

/// The file's text for `sheet`: each daemon's heartbeat line, then its entries.
pub(super) fn format(sheet: &Sheet) -> String {
    let mut out = String::from(
        "# sweepd GPU ledger (docs/gpu-memory-model.md): pid start_time device unclaimed_bytes running idle_bytes want_bytes seen_free_bytes trials(pgid:bound_bytes,...)\n\
         # and: pid start_time device + trials_started hold_bytes hold_since_ms\n\
         # and: pid start_time beat heartbeat_ms (of the boot clock; an entry whose heartbeat is old is dropped)\n",
    );
    for (owner, beat) in &sheet.beats {
        out.push_str(&format!("{} {} beat {beat}\n", owner.pid, owner.start));
    }
    for e in &sheet.entries {
        let c = &e.claim;
        out.push_str(&format!(
            "{} {} {} {} {} {} {} {}",
            e.owner.pid, e.owner.start, e.device, c.unclaimed, c.running, c.idle, c.want, c.seen
        ));
        match c.trials.as_deref() {
            None => {}
            Some([]) => out.push_str(" -"),
            Some(trials) => {
                let list: Vec<String> = trials
                    .iter()
                    .map(|t| format!("{}:{}", t.pgid, t.bound))
                    .collect();
                out.push(' ');
                out.push_str(&list.join(","));
            }
        }
        out.push('\n');
        if c.started > 0 || c.hold > 0 {
            out.push_str(&format!(
                "{} {} {} + {} {} {}\n",
                e.owner.pid, e.owner.start, e.device, c.started, c.hold, c.hold_since
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::entry::{
        holds, others, replace_mine, requests, Claim, Claims, Hold, Request,
    };
    use super::*;

    const G: u64 = 1 << 30;

    /// The entries `text` reads as (heartbeats aside).
    fn parse(text: &str) -> Vec<Entry> {
        super::parse(text.as_bytes()).0.entries
    }

    /// The file's text for `entries` (no heartbeat lines).
    fn format(entries: &[Entry]) -> String {
        super::format(&Sheet {
            beats: Default::default(),
            entries: entries.to_vec(),
        })
    }

    fn claims(list: &[(u32, u64, usize)]) -> Claims {
        list.iter()
            .map(|&(d, unclaimed, running)| {
                (
                    d,
                    Claim {
                        unclaimed,
                        running,
                        ..Claim::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_file_reads_back_what_was_written_and_skips_what_is_not_an_entry() {
        let a = Owner { pid: 10, start: 5 };
        let entries = replace_mine(&[], a, &claims(&[(0, 6 * G, 2), (1, 0, 0)]));
        // A device with nothing claimed and nothing running is not written.
        assert_eq!(entries.len(), 1);
        let text = format!("{}garbage line\n1 2 3\n1 2 3 4 5 6\n", format(&entries));
        assert_eq!(parse(&text), entries);
    }

    #[test]
    fn a_daemon_sees_the_others_claims_summed_and_not_its_own() {
        let (a, b, c) = (
            Owner { pid: 1, start: 1 },
            Owner { pid: 2, start: 1 },
            Owner { pid: 3, start: 1 },
        );
        let mut e = replace_mine(&[], a, &claims(&[(0, 6 * G, 1)]));
        e = replace_mine(&e, b, &claims(&[(0, 2 * G, 1), (1, G, 1)]));
        e = replace_mine(&e, c, &claims(&[(0, 0, 3)]));
        assert_eq!(others(&e, a), claims(&[(0, 2 * G, 4), (1, G, 1)]));
        // Rewriting one's own entry replaces it, whatever it was.
        e = replace_mine(&e, b, &claims(&[]));
        assert_eq!(others(&e, a), claims(&[(0, 0, 3)]));
        // The same pid started at another time is another daemon.
        let a_again = Owner { pid: 1, start: 2 };
        assert_eq!(others(&e, a_again), claims(&[(0, 6 * G, 4)]));
    }

    #[test]
    fn idle_memory_and_requests_travel_to_the_other_daemons() {
        let (a, b) = (Owner { pid: 1, start: 1 }, Owner { pid: 2, start: 1 });
        let holding = Claim {
            running: 1,
            idle: 6 * G,
            ..Claim::default()
        };
        let asking = Claim {
            want: 4 * G,
            seen: 10 * G,
            ..Claim::default()
        };
        let mut e = replace_mine(&[], a, &[(0, holding)].into());
        // A daemon with nothing running that asks for memory is written all the same.
        e = replace_mine(&e, b, &[(0, asking)].into());
        let e = parse(&format(&e));
        assert_eq!(others(&e, b)[&0].idle, 6 * G);
        assert_eq!(
            requests(&e, a),
            vec![Request {
                device: 0,
                want: 4 * G,
                seen: 10 * G
            }]
        );
        // One's own request is not one to answer.
        assert!(requests(&e, b).is_empty());
        // What was freed since the request was made counts against it.
        let r = requests(&e, a)[0];
        assert_eq!(r.outstanding(10 * G), 4 * G);
        assert_eq!(r.outstanding(13 * G), G);
        assert_eq!(r.outstanding(15 * G), 0);
        assert_eq!(r.outstanding(8 * G), 4 * G);
        // A line of the first format (no idle, want, seen) still reads.
        let old = parse("7 1 0 1024 2\n");
        assert_eq!(old[0].claim.unclaimed, 1024);
        assert_eq!(old[0].claim.idle, 0);
    }

    #[test]
    fn starts_and_holds_travel_on_a_line_that_earlier_daemons_skip() {
        let (a, b, c) = (
            Owner { pid: 1, start: 1 },
            Owner { pid: 2, start: 1 },
            Owner { pid: 3, start: 1 },
        );
        let holding = |started, hold, hold_since| Claim {
            running: 1,
            started,
            hold,
            hold_since,
            ..Claim::default()
        };
        let mut e = replace_mine(&[], a, &[(0, holding(9, 12 * G, 500))].into());
        e = replace_mine(
            &e,
            b,
            &[(0, holding(4, 0, 0)), (1, holding(2, G, 700))].into(),
        );
        // A daemon that started nothing and holds nothing writes no such line.
        e = replace_mine(&e, c, &claims(&[(0, G, 1)]));
        let text = format(&e);
        assert_eq!(
            text.lines()
                .filter(|l| !l.starts_with('#') && l.contains(" + "))
                .count(),
            3
        );
        let back = parse(&text);
        assert_eq!(back, e);
        assert_eq!(others(&back, c)[&0].started, 13);
        assert_eq!(
            holds(&back, c),
            vec![
                Hold {
                    device: 0,
                    bytes: 12 * G,
                    since: (500, a)
                },
                Hold {
                    device: 1,
                    bytes: G,
                    since: (700, b)
                },
            ]
        );
        assert!(holds(&back, a).iter().all(|h| h.since.1 != a));
        // A daemon of the format before reads the claims lines as they were and skips these:
        // their fourth field is not a number.
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains(" + "))
        {
            assert!(line
                .split_whitespace()
                .nth(3)
                .unwrap()
                .parse::<u64>()
                .is_err());
        }
        // Alone, without its claims line, such a line is left out.
        assert!(parse("5 1 0 + 3 1024 9\n").is_empty());
    }

    #[test]
    fn the_older_hold_is_honoured_so_two_never_wait_for_each_other() {
        let (a, b) = (Owner { pid: 1, start: 1 }, Owner { pid: 2, start: 1 });
        let theirs = Hold {
            device: 0,
            bytes: G,
            since: (500, a),
        };
        // Without a hold of ours there, theirs counts.
        assert!(theirs.before(None));
        // Ours is younger: theirs counts; ours is older: it does not.
        assert!(theirs.before(Some((600, b))));
        assert!(!theirs.before(Some((400, b))));
        // The same millisecond: the daemons' order decides, the same way for both.
        assert!(theirs.before(Some((500, b))));
        let ours = Hold {
            device: 0,
            bytes: G,
            since: (500, b),
        };
        assert!(!ours.before(Some((500, a))));
    }

    /// Two daemons on one card: the other's trial allocated 5 of its 6 GiB after it last
    /// wrote the ledger (by its reading, 6 GiB yet to claim), and our reading, newer, shows it.
    #[test]
    fn the_others_trials_are_counted_against_our_reading_not_the_one_they_wrote_by() {
        let (a, b, old) = (
            Owner { pid: 1, start: 1 },
            Owner { pid: 2, start: 1 },
            Owner { pid: 3, start: 1 },
        );
        let theirs = Claim {
            unclaimed: 6 * G + 3 * G,
            running: 2,
            trials: Some(vec![
                Held {
                    pgid: 40,
                    bound: 6 * G,
                },
                // Admitted, no worker yet: its whole bound.
                Held {
                    pgid: 0,
                    bound: 3 * G,
                },
            ]),
            ..Claim::default()
        };
        let mut e = replace_mine(&[], b, &[(0, theirs)].into());
        // A daemon of the format before trials: its own figure is all there is.
        e = replace_mine(&e, old, &claims(&[(0, G, 1)]));
        let e = parse(&format(&e));
        let seen = &others(&e, a)[&0];
        assert_eq!(seen.running, 3);
        // Group 40 uses 5 GiB in our reading: 1 GiB left to claim, not 6.
        let ours = |g: i32| if g == 40 { 5 * G } else { 0 };
        assert_eq!(seen.against(ours), G + 3 * G + G);
        // A reading older than their trial's allocation: the whole bound, not what it wrote.
        assert_eq!(seen.against(|_| 0), 6 * G + 3 * G + G);
        // Using more than its bound leaves nothing to claim, and takes nothing from the others.
        assert_eq!(seen.against(|g| if g == 40 { 9 * G } else { 0 }), 3 * G + G);
        // What they use, free once they end: group 40's 5 GiB, at most its 6 GiB bound; the
        // trial without a worker and the old-format entry add nothing.
        assert_eq!(seen.used_by(ours), 5 * G);
        assert_eq!(seen.used_by(|g| if g == 40 { 9 * G } else { 0 }), 6 * G);
        assert_eq!(seen.used_by(|_| 0), 0);
        // A daemon with nothing running writes an empty list, which reads back as one.
        let idle = Claim {
            idle: G,
            trials: Some(Vec::new()),
            ..Claim::default()
        };
        let e = parse(&format(&replace_mine(&[], b, &[(0, idle.clone())].into())));
        assert_eq!(e[0].claim, idle);
        // A list that does not read leaves the line out.
        assert!(parse("2 1 0 0 1 0 0 0 40:x\n").is_empty());
        assert!(parse("2 1 0 0 1 0 0 0 -5:100\n").is_empty());
    }

    #[test]
    fn heartbeats_travel_on_lines_of_their_own_and_what_does_not_read_is_counted() {
        let (a, b) = (Owner { pid: 1, start: 5 }, Owner { pid: 2, start: 5 });
        let mut s = Sheet::default().with_mine(a, &claims(&[(0, G, 1)]), 700);
        s = s.with_mine(b, &Claims::new(), 900);
        let text = super::format(&s);
        // A daemon with nothing written still beats.
        assert!(text.contains("\n2 5 beat 900\n"), "{text}");
        assert_eq!(super::parse(text.as_bytes()), (s.clone(), 0));
        // A daemon of the format before reads the claims as they were: the beat line's
        // third field is not a device.
        for line in text.lines().filter(|l| l.contains(" beat ")) {
            assert!(line
                .split_whitespace()
                .nth(2)
                .unwrap()
                .parse::<u32>()
                .is_err());
        }
        let mut bytes = text.clone().into_bytes();
        bytes.extend_from_slice(
            b"\xff\xfe\n1 5 0 + 1 2 3\n3 5 9 + 1 2 3\n1 5 0 0 1\n\n# note\n7 7 0 1",
        );
        let (back, bad) = super::parse(&bytes);
        // Not UTF-8; a start line without its claims line; a second claims line for daemon 1's
        // device 0 (its start line went to the first); a last line without its newline.
        assert_eq!(bad, 4);
        assert_eq!(back.beats, s.beats);
        assert_eq!(back.entries[0].claim.started, 1);
    }
}
