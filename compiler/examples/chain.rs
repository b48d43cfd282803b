//! Writes a synthetic chain model, for `scripts/bench-compile-scaling`:
//! `chain onnx|tflite OP LENGTH OUT` (OP: relu, add, identity, maxpool; TFLite: relu only).

use nnc_compiler::synthetic::{ChainOp, onnx_chain, tflite_chain};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: chain onnx|tflite relu|add|identity|maxpool LENGTH OUT";
    if args.len() != 5 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let Some(op) = ChainOp::from_name(&args[2]) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let Ok(length) = args[3].parse::<usize>() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let bytes = match args[1].as_str() {
        "onnx" => onnx_chain(op, length),
        "tflite" if op == ChainOp::Relu => tflite_chain(length),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::write(&args[4], bytes) {
        eprintln!("cannot write {}: {e}", args[4]);
        std::process::exit(1);
    }
}
