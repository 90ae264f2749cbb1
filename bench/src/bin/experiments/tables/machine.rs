//! Where a campaign's figures were measured: the machine, as the report
//! states it.

use serde::Serialize;

/// Where the figures were measured.
#[derive(Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores_online: usize,
    pub cores_used: usize,
    pub memory_gib: f64,
    pub kernel: String,
    /// The 1-minute load average when the campaign started.
    pub load_at_start: f64,
    pub date_utc: String,
    pub tandem_version: &'static str,
}

fn first_line_of(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

impl Machine {
    pub fn describe(cores: Option<usize>) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let online = tandem::sys::affinity::available_cores().len();
        Machine {
            cpu,
            cores_online: online,
            cores_used: cores.unwrap_or(online),
            memory_gib: mem_total_bytes() as f64 / (1u64 << 30) as f64,
            kernel: first_line_of("uname", &["-sr"]),
            load_at_start: load_average(),
            date_utc: first_line_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            tandem_version: env!("CARGO_PKG_VERSION"),
        }
    }
}

pub fn mem_total_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let kb = l
                    .strip_prefix("MemTotal:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim();
                kb.parse::<u64>().ok()
            })
        })
        .map_or(0, |kb| kb * 1024)
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}
