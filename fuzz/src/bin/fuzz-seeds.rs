//! Writes the generated seeds of the fuzz targets that cannot be seeded from files in the
//! repository: compiled `.nnc` files in every protection and mode (`nnc_file`), filled
//! compilation-cache directories (`cache_dir`), and `.npy` files of every element type
//! (`npy`). `scripts/fuzz` runs it before a fuzzing run.
//!
//! Usage: `fuzz-seeds TARGET DIR`

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: fuzz-seeds TARGET DIR");
        std::process::exit(2);
    }
    let dir = std::path::Path::new(&args[2]);
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    let seeds = nnc_fuzz::generated_seeds(&args[1]);
    for (name, bytes) in &seeds {
        if let Err(e) = std::fs::write(dir.join(name), bytes) {
            eprintln!("cannot write {name}: {e}");
            std::process::exit(1);
        }
    }
    eprintln!("{} generated seeds for {}", seeds.len(), args[1]);
}
