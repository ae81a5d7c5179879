//! How busy the host was while something ran: other processes' CPU share (all CPUs' busy time from /proc/stat
//! minus this process's and its waited-for children's from /proc/self/stat), steal time, load average and CPU
//! frequency. Linux only; elsewhere every figure is absent and the host is never called busy.

use serde::{Deserialize, Serialize};

/// Other processes' share of the machine's CPU time above which a run is flagged as on a busy host.
pub const BUSY_OTHER_SHARE: f64 = 0.10;
/// Steal share (time the hypervisor gave to other guests) above which a run is flagged.
pub const BUSY_STEAL_SHARE: f64 = 0.02;

/// The host over one interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSample {
    pub seconds: f64,
    /// Share of all CPUs' time used by other processes (0..1), this process and its children left out.
    pub other_cpu_share: Option<f64>,
    /// Share of all CPUs' time stolen by the hypervisor (0..1).
    pub steal_share: Option<f64>,
    /// 1-minute load average at the end (it counts this process too).
    pub load_avg_1m: Option<f64>,
    /// Mean current frequency of the CPUs at the end, in MHz, where readable.
    pub cpu_mhz: Option<f64>,
    pub cpus: usize,
    /// `other_cpu_share` or `steal_share` above their bounds.
    pub busy: bool,
}

/// Jiffies from /proc/stat's `cpu` line: (busy, steal, total).
fn system_jiffies() -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_proc_stat(&text)
}

fn parse_proc_stat(text: &str) -> Option<(u64, u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice: already inside user and nice]
    let field = |i: usize| v.get(i).copied().unwrap_or(0);
    let total: u64 = (0..8).map(field).sum();
    let idle = field(3) + field(4);
    let steal = field(7);
    Some((total.saturating_sub(idle + steal), steal, total))
}

/// utime + stime + cutime + cstime of this process, in jiffies.
fn own_jiffies() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_self_stat(&text)
}

fn parse_self_stat(text: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields are counted after its closing one.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) is index 11, stime 12, cutime 13, cstime 14.
    let sum = (11..15)
        .map(|i| f.get(i).and_then(|x| x.parse::<i64>().ok()).unwrap_or(0))
        .sum::<i64>();
    u64::try_from(sum).ok()
}

fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn cpu_mhz() -> Option<f64> {
    let mut khz = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu") {
        for entry in dir.flatten() {
            let p = entry.path().join("cpufreq/scaling_cur_freq");
            if let Some(v) = std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
            {
                khz.push(v / 1000.0);
            }
        }
    }
    if khz.is_empty() {
        let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
        khz = info
            .lines()
            .filter(|l| l.starts_with("cpu MHz"))
            .filter_map(|l| l.split(':').nth(1)?.trim().parse().ok())
            .collect();
    }
    (!khz.is_empty()).then(|| khz.iter().sum::<f64>() / khz.len() as f64)
}

/// Started before a run, finished after it (and after its child processes were waited for).
pub struct Sampler {
    start: std::time::Instant,
    system: Option<(u64, u64, u64)>,
    own: Option<u64>,
}

impl Sampler {
    pub fn start() -> Sampler {
        Sampler {
            start: std::time::Instant::now(),
            system: system_jiffies(),
            own: own_jiffies(),
        }
    }

    pub fn finish(&self) -> HostSample {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (other, steal) = match (self.system, system_jiffies(), self.own, own_jiffies()) {
            (Some((b0, s0, t0)), Some((b1, s1, t1)), Some(o0), Some(o1)) if t1 > t0 => {
                let total = (t1 - t0) as f64;
                let others = (b1.saturating_sub(b0)).saturating_sub(o1.saturating_sub(o0));
                (
                    Some((others as f64 / total).clamp(0.0, 1.0)),
                    Some((s1.saturating_sub(s0) as f64 / total).clamp(0.0, 1.0)),
                )
            }
            _ => (None, None),
        };
        let busy = other.is_some_and(|o| o > BUSY_OTHER_SHARE)
            || steal.is_some_and(|s| s > BUSY_STEAL_SHARE);
        HostSample {
            seconds: self.start.elapsed().as_secs_f64(),
            other_cpu_share: other,
            steal_share: steal,
            load_avg_1m: load_avg(),
            cpu_mhz: cpu_mhz(),
            cpus,
            busy,
        }
    }
}

/// The host over the next `seconds` (this process idle meanwhile).
pub fn sample_for(seconds: f64) -> HostSample {
    let s = Sampler::start();
    std::thread::sleep(std::time::Duration::from_secs_f64(seconds.max(0.05)));
    s.finish()
}

impl HostSample {
    pub fn describe(&self) -> String {
        let pct = |x: Option<f64>| x.map_or("?".into(), |v| format!("{:.0}%", v * 100.0));
        format!(
            "others {} of {} CPUs, steal {}, load {}, {} MHz{}",
            pct(self.other_cpu_share),
            self.cpus,
            pct(self.steal_share),
            self.load_avg_1m.map_or("?".into(), |l| format!("{l:.2}")),
            self.cpu_mhz.map_or("?".into(), |m| format!("{m:.0}")),
            if self.busy { " (BUSY)" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "cpu  100 5 50 800 20 1 2 10 0 0\ncpu0 1 2 3 4\n";
        assert_eq!(parse_proc_stat(stat), Some((158, 10, 988)));
        let me = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 30 20 7 3 20 0 1 0";
        assert_eq!(parse_self_stat(me), Some(60));
        assert_eq!(parse_self_stat("garbage"), None);
    }

    #[test]
    fn results_written_before_the_host_field_still_read() {
        let old = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../results/20261203-082447-sweep-online/result.json");
        let r = crate::results::read(&old).expect("an older result.json reads");
        assert_eq!(r.host, None);
    }

    #[test]
    fn a_sample_is_in_range() {
        let s = sample_for(0.05);
        if let Some(o) = s.other_cpu_share {
            assert!((0.0..=1.0).contains(&o));
        }
        assert!(s.cpus >= 1);
    }
}
