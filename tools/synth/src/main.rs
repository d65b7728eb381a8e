use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: tally-synth --stats PATH --out DIR [--seed N] [--rows N]

Generates a synthetic dataset shaped like 行政手続等の棚卸調査結果 from the
published column statistics (JSON) at PATH, writing data.parquet and
dataset.yaml into DIR. --rows makes a table of N rows of the same shape (for
benchmarks at scale; memory stays at one chunk of the published size).";

struct Args {
    stats: PathBuf,
    out: PathBuf,
    seed: u64,
    rows: Option<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut stats = None;
    let mut out = None;
    let mut seed = tally_synth::DEFAULT_SEED;
    let mut rows = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.as_str() {
            "--stats" => stats = Some(PathBuf::from(value("--stats")?)),
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--seed" => {
                let v = value("--seed")?;
                seed = v
                    .parse()
                    .map_err(|_| format!("--seed: not a number: {v}"))?;
            }
            "--rows" => {
                let v = value("--rows")?;
                let n: usize = v
                    .replace('_', "")
                    .parse()
                    .map_err(|_| format!("--rows: not a whole number: {v}"))?;
                if n == 0 {
                    return Err("--rows must be at least 1".into());
                }
                rows = Some(n);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(Args {
        stats: stats.ok_or("--stats is required")?,
        out: out.ok_or("--out is required")?,
        seed,
        rows,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}\n");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    let start = Instant::now();
    match tally_synth::run(&args.stats, &args.out, args.seed, args.rows) {
        Ok(out) => {
            let size = std::fs::metadata(&out.data).map(|m| m.len()).unwrap_or(0);
            println!(
                "wrote {} rows to {} ({size} bytes) and {} in {:.2}s",
                out.rows,
                out.data.display(),
                out.definition.display(),
                start.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
