//! How busy the rest of the machine was while a case ran: this 2-core machine is shared, and
//! a paired ratio measured next to another busy process is suspect (the tables say so).

use std::time::Instant;

/// CPU used by other processes while we measure, from `/proc/stat` minus our own
/// `/proc/self/stat` (both in clock ticks of 1/100 s, Linux's USER_HZ).
#[derive(Debug, Clone, Copy)]
pub struct Load {
    wall: Instant,
    busy: u64,
    steal: u64,
    own: u64,
}

const USER_HZ: f64 = 100.0;

fn system_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let get = |i: usize| cpu.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = get(0) + get(1) + get(2) + get(5) + get(6);
    (busy, get(7))
}

fn own_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime, stime, cutime, cstime are 14–17.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // `rest` starts at field 3 (state), so field k is at index k − 3.
    (11..=14).map(|i| f.get(i).copied().unwrap_or(0)).sum()
}

impl Load {
    pub fn start() -> Self {
        let (busy, steal) = system_ticks();
        Self {
            wall: Instant::now(),
            busy,
            steal,
            own: own_ticks(),
        }
    }

    /// Average number of cores other processes kept busy since `start`.
    pub fn other_cores(&self) -> f64 {
        let (busy, _) = system_ticks();
        let others = busy
            .saturating_sub(self.busy)
            .saturating_sub(own_ticks() - self.own);
        others as f64 / USER_HZ / self.wall.elapsed().as_secs_f64()
    }

    pub fn summary(&self) -> String {
        let (busy, steal) = system_ticks();
        let own = own_ticks() - self.own;
        let others = busy.saturating_sub(self.busy).saturating_sub(own);
        let wall = self.wall.elapsed().as_secs_f64();
        let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        format!(
            "CPU during this run: {wall:.1} s wall; this process {:.1} core-s; other processes \
             {:.1} core-s (average {:.2} of {} cores); hypervisor steal {:.1} core-s; loadavg \
             at the end: {}",
            own as f64 / USER_HZ,
            others as f64 / USER_HZ,
            others as f64 / USER_HZ / wall,
            std::thread::available_parallelism().map_or(1, usize::from),
            (steal - self.steal) as f64 / USER_HZ,
            loadavg.trim()
        )
    }
}
