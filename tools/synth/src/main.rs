use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: tally-synth --stats PATH --out DIR [--seed N]

Generates a synthetic dataset shaped like 行政手続等の棚卸調査結果 from the
published column statistics (JSON) at PATH, writing data.parquet and
dataset.yaml into DIR.";

struct Args {
    stats: PathBuf,
    out: PathBuf,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut stats = None;
    let mut out = None;
    let mut seed = tally_synth::DEFAULT_SEED;
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
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(Args {
        stats: stats.ok_or("--stats is required")?,
        out: out.ok_or("--out is required")?,
        seed,
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
    match tally_synth::run(&args.stats, &args.out, args.seed) {
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
